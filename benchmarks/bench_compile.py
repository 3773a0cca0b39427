"""Where a cold Numba cache's time goes: exclusive compile CPU seconds per kernel of a command.

Runs a diptych command in this process with a fresh, empty ``NUMBA_CACHE_DIR`` and a listener
on Numba's ``numba:compile`` events; prints the process CPU seconds, the compile CPU seconds
(each kernel's own, its callees' compiles subtracted) and the kernels in decreasing order,
with the number of type signatures compiled for each (more than one is usually a literal or
a dtype that could be unified). The default command is the headline of bench_cli.py.

    python benchmarks/bench_compile.py [--top N] [-- diptych arguments]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import sys
import tempfile
import time

#: Issue 27 item 1: the first run of the headline, CPU seconds on 2 cores.
FIRST_RUN_TARGET_S = 10.0
HEADLINE = ["--no-cache", "compare", "train-2026", "infer-2026", "--model", "llama-3-70b",
            "--json"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("args", nargs="*", help="diptych arguments (default: the headline)")
    a = ap.parse_args()
    cache = tempfile.TemporaryDirectory()
    os.environ["NUMBA_CACHE_DIR"] = cache.name     # before Numba is imported
    t0 = time.process_time()
    from numba.core import event

    own: dict = collections.defaultdict(float)
    sigs: collections.Counter = collections.Counter()
    stack: list = []

    class Listener(event.Listener):
        def on_start(self, ev):
            stack.append([time.process_time(), 0.0])

        def on_end(self, ev):
            start, children = stack.pop()
            spent = time.process_time() - start
            disp = ev.data["dispatcher"]
            fn = getattr(disp, "py_func", None)
            name = (f"{fn.__module__.split('.')[-1]}.{fn.__qualname__}" if fn is not None
                    else str(disp))
            own[name] += spent - children
            sigs[name] += 1
            if stack:
                stack[-1][1] += spent

    event.register("numba:compile", Listener())
    sys.argv = ["diptych", *(a.args or HEADLINE)]
    from diptych.tools.cli import main as cli

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli()
        except SystemExit:
            pass
    total = time.process_time() - t0
    print(f"diptych {' '.join(sys.argv[1:])}  (cold Numba cache; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print(f"process CPU {total:.2f} s, of which compiling {sum(own.values()):.2f} s "
          "(the kernels' own type inference, lowering and LLVM; a cfunc's wrapper, "
          "dram_counts.count_c, counts in the process time only)")
    if not a.args:
        print(f"first run of the headline with an empty Numba cache: {total:.2f} s CPU "
              f"(target < {FIRST_RUN_TARGET_S:g} s, issue 27 item 1: "
              f"{'OK' if total < FIRST_RUN_TARGET_S else 'MISSED'})")
    for name, s in sorted(own.items(), key=lambda x: -x[1])[:a.top]:
        print(f"  {s:6.2f} s  {sigs[name]:2d} signature(s)  {name}")


if __name__ == "__main__":
    main()

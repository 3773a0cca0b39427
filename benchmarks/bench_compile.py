"""Where a cold Numba cache's time goes: exclusive compile CPU seconds per kernel of a command.

Runs a diptych command in this process with a fresh, empty ``NUMBA_CACHE_DIR`` and a listener
on Numba's ``numba:compile`` events; prints the process CPU seconds, the compile CPU seconds
(each kernel's own, its callees' compiles subtracted) and the kernels in decreasing order,
with the number of type signatures compiled for each (more than one is usually a literal or
a dtype that could be unified; Numba's own overloads also compile once per caller's flags)
and the LLVM part of each (function and module passes and machine code of the kernel's code
library, which holds a copy of every non-inlined kernel it calls: a kernel that exists only
to be called by one other kernel costs its callees' LLVM once more, plus a CPython wrapper).
The counting cfunc ``dram_counts.count_c`` compiles at import and fires no compile event: its
row is the import less the kernels compiled meanwhile. The default command is the headline of
bench_cli.py.

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


def _time_llvm() -> dict:
    """CPU seconds of LLVM work per code library (named after its kernel), summed; empty when
    this Numba's codegen internals differ (then the column is left out)."""
    from numba.core import codegen

    spent: dict = collections.defaultdict(float)

    def timed(cls, name):
        f = getattr(cls, name, None)
        if f is None:
            return

        def wrapper(self, *args, **kw):
            t0 = time.process_time()
            try:
                return f(self, *args, **kw)
            finally:
                spent[self.name] += time.process_time() - t0
        setattr(cls, name, wrapper)

    timed(codegen.CPUCodeLibrary, "_optimize_functions")
    timed(codegen.CPUCodeLibrary, "_optimize_final_module")
    timed(codegen.JITCodeLibrary, "_finalize_specific")
    return spent


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
    llvm = _time_llvm()
    # the counting cfunc (count_transfer's body) compiles when its module is imported and
    # fires no compile event of its own: its row is the import less the kernels compiled
    # meanwhile
    t_imp, before = time.process_time(), sum(own.values())
    import diptych.sim.dram_counts  # noqa: F401
    cfunc_own = [time.process_time() - t_imp - (sum(own.values()) - before)]
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
    own["dram_counts._count_c (cfunc)"] = cfunc_own[0]
    sigs["dram_counts._count_c (cfunc)"] = 1
    print(f"process CPU {total:.2f} s, of which compiling {sum(own.values()):.2f} s "
          "(each kernel's own type inference, lowering and LLVM)")
    if not a.args:
        print(f"first run of the headline with an empty Numba cache: {total:.2f} s CPU "
              f"(target < {FIRST_RUN_TARGET_S:g} s, issue 27 item 1: "
              f"{'OK' if total < FIRST_RUN_TARGET_S else 'MISSED'})")
        print("  (this is the lazy path: an editable install or a wheel built elsewhere; "
              "`pip install .` compiles the kernels into the wheel, measured by "
              "bench_cli.py --only install)")
    lv = {k.rsplit(".", 1)[-1]: v for k, v in llvm.items()}
    print(f"  own s   LLVM s  signatures  kernel   (LLVM: Numba's function and module passes "
          f"and machine code, {sum(llvm.values()):.2f} s in all)")
    for name, s in sorted(own.items(), key=lambda x: -x[1])[:a.top]:
        short = name.split(" ")[0].rsplit(".", 1)[-1]
        lcol = f"{lv[short]:6.2f}" if short in lv and "<locals>" not in name else "     -"
        print(f"  {s:6.2f}  {lcol}  {sigs[name]:2d}          {name}")


if __name__ == "__main__":
    main()

"""The whole fuzz corpus of the command line (issue 22 item 9), with its counts.

Runs every case of ``tests/fuzz_corpus.py`` (mutants of every file kind, the serve, plan,
run --cluster and gemm flags at 1e-300, 1e308, huge counts and NaN, a FIFO, /dev/zero, a
directory and a name twice for every file-taking flag, and the result cache's entries
forged, corrupt, truncated, wrong-typed, as links, FIFOs and directories) in one process,
each under an alarm, and prints per family and in all how many ended

* ``clean``: as a correct diptych ends (exit 0, or exit 2 with one ``Error:`` line where an
  error is due, a bad cache entry recomputed with a warning and the sound output);
* ``internal``: exit 1 (the internal-error net) or a traceback;
* ``hang``: no exit within ``--timeout`` seconds (a FIFO read, a loop without end);
* ``silent``: exit 0 where an error, a warning or the sound output was due, an empty
  output, or ``--json`` that is not strict JSON or holds a non-finite or negative metric;
* ``unclean``: any other exit, or an error that is not one line;

then each case that was not clean. Exit status 1 when any was not. The fast test tier runs a
sample of the same corpus (``tests/test_fuzz_cli.py``).

    python benchmarks/bench_fuzz.py [--scale 4] [--families cache,trace] [--timeout 60]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "dse"))   # fake_eval, as the tests


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=4.0,
                    help="mutants per family, as a multiple of the counts the fast test tier "
                         "draws (default 4: the families the tests sample, four times over)")
    ap.add_argument("--families", default=None, help="comma-separated families (default: all)")
    ap.add_argument("--timeout", type=int, default=60, help="seconds a case may take")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    # the user's result cache is never touched: a fresh one (the cache family has its own)
    os.environ["DIPTYCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="diptych-fuzz-cache-")
    import fuzz_corpus as F

    families = a.families.split(",") if a.families else None
    unknown = set(families or ()) - set(F.FAMILIES)
    if unknown:
        ap.error(f"unknown families {sorted(unknown)}; known: {', '.join(F.FAMILIES)}")
    counts: dict[str, Counter] = {}
    bad: list[tuple[str, str, str, str]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="diptych-fuzz-") as d:
        ws = F.workspace(Path(d))
        for case in F.corpus(ws, families, a.scale, a.seed or F.SEED):
            outcome, detail = F.run_case(case, a.timeout)
            c = counts.setdefault(case.family, Counter())
            c[outcome] += 1
            c["exit 0"] += outcome == "clean" and detail.startswith("exit 0")
            if outcome != "clean":
                bad.append((case.family, case.what, " ".join(case.args)[:160],
                            f"{outcome}: {detail}"))
    total = sum(counts.values(), Counter())
    width = max(len(f) for f in counts) + 2
    head = "".join(f"{o:>10}" for o in F.OUTCOMES)
    print(f"{'family':<{width}}{'cases':>7}{head}")
    for fam, c in [*counts.items(), ("all", total)]:
        print(f"{fam:<{width}}{sum(c[o] for o in F.OUTCOMES):>7}"
              + "".join(f"{c[o]:>10}" for o in F.OUTCOMES))
    n = sum(total[o] for o in F.OUTCOMES)
    print(f"\n{n} cases in {time.perf_counter() - t0:.0f} s: "
          f"{total['clean']} clean exits ({total['exit 0']} exit 0, the rest refused in one "
          f"line), {total['internal']} internal errors, "
          f"{total['hang']} hangs, {total['silent']} silent results, "
          f"{total['unclean']} unclean exits")
    for fam, what, args, why in bad:
        print(f"\n[{fam}] {what}\n  diptych {args}\n  {why}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Cross-check diptych's array compute cycles against SCALE-Sim v3; writes the table of
docs/validation.md.

    python benchmarks/scalesim_crosscheck.py [--scalesim-python /tmp/ss/bin/python] [--out FILE]

SCALE-Sim is not a dependency. Install it in a scratch venv (it needs NumPy < 2, hence a
pandas built for it): ``python -m venv /tmp/ss && /tmp/ss/bin/pip install scalesim "numpy<2"
"pandas<2.3"``. Each GEMM is one SCALE-Sim run of its own, timed (``bench_gemm.py`` reads the
times). With
``--scalesim-python`` (or ``scalesim`` importable here) its "Total Cycles" (COMPUTE_REPORT.csv,
ideal memory) are measured; without it the SCALE-Sim column is filled from its closed form and
marked as such. Either way every row checks ``ours − scalesim == closed-form difference``:

* OS, folds ``f = ⌈M/R⌉·⌈N/C⌉``: ours ``K + 2R + C − 2 + (f − 1)·max(K, R)``;
  SCALE-Sim ``f·(K + R + C − 2) − 1``;
  difference ``R + 1 + (f − 1)·(max(K, R) − (K + R + C − 2))``.
* WS, ``f = ⌈K/R⌉·⌈N/C⌉``: ours ``2R + C + M − 1 + (f − 1)·max(M, 2R + C − 2)``; SCALE-Sim
  ``f·(2R + C + M − 2) − 1``; difference ``2 + (f − 1)·(max(M, 2R + C − 2) − (2R + C + M − 2))``.
* IS: WS with M and N exchanged (``f = ⌈K/R⌉·⌈M/C⌉``, N streamed).

The "ours" column is the engine itself (memory-free run, one block holding the whole GEMM on
one R×C array), not the formula.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile

SHAPES = [(256, 256, 256), (100, 300, 40), (1, 4096, 1024), (8, 512, 512), (64, 64, 64),
          (33, 65, 17), (512, 128, 96), (1, 64, 1000), (70, 7, 70), (128, 1024, 1),
          (16, 16, 16), (200, 50, 300)]   # (M, K, N): square, GEMV-like, ragged edges
R, C = 16, 8   # a non-square array shows which dimension maps where

_CHILD = r'''
import csv, json, os, shutil, sys, time
from scalesim.scale_sim import scalesim
R, C, shapes, work = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
cfg = """[general]
run_name = diptych
[architecture_presets]
ArrayHeight: {R}
ArrayWidth: {C}
IfmapSramSzkB: 65536
FilterSramSzkB: 65536
OfmapSramSzkB: 65536
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Dataflow: {df}
Bandwidth: 10000
ReadRequestBuffer: 32
WriteRequestBuffer: 32
[layout]
IfmapCustomLayout: False
FilterCustomLayout: False
IfmapSRAMBankBandwidth: 10000
IfmapSRAMBankNum: 1
IfmapSRAMBankPort: 2
FilterSRAMBankBandwidth: 10000
FilterSRAMBankNum: 1
FilterSRAMBankPort: 2
[sparsity]
SparsitySupport: false
SparseRep: ellpack_block
OptimizedMapping: false
BlockSize: 8
RandomNumberGeneratorSeed: 40
[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""
os.chdir(work)
open("layout.csv", "w").write("Layer name, x,\n")
out, seconds = {}, {}
for df in ("os", "ws", "is"):
    open("c.cfg", "w").write(cfg.format(R=R, C=C, df=df))
    out[df], seconds[df] = [], []
    for i, (m, k, n) in enumerate(shapes):     # one run per GEMM, so each is timed on its own
        with open("topo.csv", "w") as fh:
            fh.write("Layer, M, N, K,\n")
            fh.write(f"l{i}, {m}, {n}, {k},\n")
        shutil.rmtree("out", ignore_errors=True)
        t = time.perf_counter()
        s = scalesim(save_disk_space=True, verbose=False, config="c.cfg", topology="topo.csv",
                     input_type_gemm=True, layout="layout.csv")
        s.run_scale(top_path="out")
        seconds[df].append(time.perf_counter() - t)
        rep = os.listdir("out")[0]
        rows = list(csv.reader(open(f"out/{rep}/COMPUTE_REPORT.csv")))[1:]
        out[df].append(int(rows[0][2]))
out["seconds"] = seconds
print("RESULT" + json.dumps(out))
'''


def cdiv(a, b):
    return -(-a // b)


def folds(df, m, k, n):
    if df == "os":
        return cdiv(m, R) * cdiv(n, C)
    if df == "ws":
        return cdiv(k, R) * cdiv(n, C)
    return cdiv(k, R) * cdiv(m, C)


def scalesim_formula(df, m, k, n):
    f = folds(df, m, k, n)
    if df == "os":
        return f * (k + R + C - 2) - 1
    x = m if df == "ws" else n
    return f * (2 * R + C + x - 2) - 1


def difference(df, m, k, n):
    f = folds(df, m, k, n)
    if df == "os":
        return R + 1 + (f - 1) * (max(k, R) - (k + R + C - 2))
    x = m if df == "ws" else n
    return 2 + (f - 1) * (max(x, 2 * R + C - 2) - (2 * R + C + x - 2))


def ours(df, m, k, n):
    from diptych.arch import load_chip
    from diptych.sim import engine as E
    from diptych.sim import mapper as MP
    from diptych.sim.array import array_rates
    from diptych.sim.gemm import run_engine

    c = load_chip("tpu-v4")
    arr = dataclasses.replace(c.core.array, rows=R, cols=C, dataflows=("os", "ws", "is"))
    chip = dataclasses.replace(c, tensor_cores=1, area_budget_mm2=0.0,
                               core=dataclasses.replace(c.core, arrays=1, array=arr))
    split = MP.Split(pb=1, pm=1, pn=1, batch=1, m=m, n=n, active=1, arrays_per_core=1)

    class View:
        a_dtype = b_dtype = c_dtype = "bf16"
        acc_dtype = "fp32"
        b_is_weight = True
        batch = 1
    v = View()
    v.m, v.k, v.n = m, k, n
    pb = MP.orient(v, df, split, m)
    out, _, _ = run_engine(chip, pb, MP.Blocks(pb.m, pb.k, pb.n, 0), array_rates(chip, "bf16"),
                           split, False)
    return int(out[E.O_CYCLES])


def measure_scalesim(python):
    with tempfile.TemporaryDirectory() as work:
        r = subprocess.run([python, "-c", _CHILD, str(R), str(C), json.dumps(SHAPES), work],
                           capture_output=True, text=True, check=False)
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT")]
    if r.returncode or not line:
        raise SystemExit(f"SCALE-Sim run failed:\n{r.stderr[-2000:]}")
    return json.loads(line[0][6:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scalesim-python", default=os.environ.get("SCALESIM_PYTHON"),
                    help="a Python interpreter with scalesim installed")
    ap.add_argument("--out", default=None, help="write the Markdown table here")
    a = ap.parse_args(argv)
    python = a.scalesim_python
    if python is None:
        try:
            import scalesim  # noqa: F401
            python = sys.executable
        except ImportError:
            python = None
    measured = measure_scalesim(python) if python else None
    src = "SCALE-Sim v3 (measured)" if measured else "SCALE-Sim v3 (closed form; not installed)"
    lines = [f"| M | K | N | dataflow | folds | diptych compute cycles | {src} | "
             "difference | closed-form difference |",
             "|---:|---:|---:|:---:|---:|---:|---:|---:|---:|"]
    bad = 0
    for df in ("os", "ws", "is"):
        for i, (m, k, n) in enumerate(SHAPES):
            o = ours(df, m, k, n)
            s = measured[df][i] if measured else scalesim_formula(df, m, k, n)
            d = difference(df, m, k, n)
            ok = (o - s == d) and (not measured or s == scalesim_formula(df, m, k, n))
            bad += not ok
            lines.append(f"| {m} | {k} | {n} | {df.upper()} | {folds(df, m, k, n)} | {o:,} | {s:,} "
                         f"| {o - s:+,} | {d:+,}{'' if ok else ' MISMATCH'} |")
    table = "\n".join(lines)
    print(f"array {R}x{C}\n{table}")
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(table + "\n")
    if bad:
        raise SystemExit(f"{bad} rows do not match the closed form")


if __name__ == "__main__":
    main()

"""The GEMM shapes of the system rows (``benchmarks/validate_system.py``), as diptych's lowering
gives them, written for ``measure_gemms.py`` to time on a GPU (``shapes.json``). Runs on the
CPU with diptych installed; no GPU needed.

    python benchmarks/gpu/system_gemm_shapes.py [--out benchmarks/gpu/shapes.json]

Every GEMM each row's cluster step times on the h100 (one record per (M, N, K, dtype, kind);
``kind`` from the op's name: ``fprop``, ``dgrad`` or ``wgrad``; ``uses`` says which rows and
ops), without the attention's batched products (they run inside the fused kernels) and the
tiny router GEMMs; the 2048-GPU Grok rows add no shape to the 512-GPU ones. The list measured
on 2026-12-04 (``shapes.json``, 126 records) was taken before this script by the same rule
except that a shape used by two kinds was listed once, under its first op's kind (six
shapes: GPT-3's 2048 x 12288 x 12288 and 2048 x 3072 x 12288, Llama-3.1-8B's 4096³, BF16 and
FP8); this script lists them apart (132).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

#: GEMMs below this many MACs (Grok's 8-wide router) are left out
MIN_MACS = 2 ** 26


def shapes() -> list[dict]:
    import diptych.sim as simpkg
    import diptych.sim.api as api
    import validate_system as vs
    from diptych.workloads.ops import Gemm

    seen: dict[tuple, set] = {}
    row = [""]
    orig = api.simulate

    def record(op, chip, *, dataflow=None):
        if (isinstance(op, Gemm) and op.batch == 1 and getattr(chip, "name", "") == "h100"
                and op.m * op.n * op.k >= MIN_MACS):
            kind = next((k for k in ("wgrad", "dgrad") if op.name.endswith(k)), "fprop")
            key = (op.m, op.n, op.k, "fp8" if op.a_dtype == "fp8" else "bf16", kind)
            seen.setdefault(key, set()).add(f"{row[0]}:{op.name}")
        return orig(op, chip, dataflow=dataflow)

    api.simulate = simpkg.simulate = record
    try:
        for r in vs._rows():
            if "2048 GPUs" in r.name:
                continue
            row[0] = r.name.split(",")[0]
            vs.run_row(r)
    finally:
        api.simulate = simpkg.simulate = orig
    return [dict(m=k[0], n=k[1], k=k[2], dtype=k[3], kind=k[4], uses=sorted(v))
            for k, v in sorted(seen.items())]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "shapes.json"))
    args = ap.parse_args(argv)
    out = shapes()
    Path(args.out).write_text(json.dumps(out, indent=0))
    print(f"{len(out)} shapes -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

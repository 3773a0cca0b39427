"""The golden set: simulated numbers pinned so that speed work cannot move them (issue 14, item 7).

``tests/sim/golden_set.json`` holds, for the cases listed here, every field of the
:class:`~diptych.sim.OpStats` of 51 GEMMs and 31 vector ops over all presets, dtypes and
dataflows, the full ``to_dict()`` of a few small ``run_workload`` runs (with the default
execution, the schedule, and two with ``execution="sum"``) and the JSON of a small
``compare``. It was written by this script from the code *before* the speed work, its
workload and compare parts regenerated when the default execution became the schedule (the
commit is recorded in the file); ``tests/sim/test_golden_set.py`` requires bit-identical
results.

Regenerate only when the model changes on purpose (and say so in the commit):

    python tests/sim/golden_set.py --write

``--check`` compares without writing and prints the differences.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
from pathlib import Path

PATH = Path(__file__).with_name("golden_set.json")

#: (chip, m, k, n, batch, b_is_weight, (a, b, c dtypes) or None for the chip's default, dataflow)
GEMMS = [
    # h100: 528 small OS arrays, a shared L2
    ("h100", 1, 8192, 8192, 1, True, None, None),
    ("h100", 512, 512, 512, 1, True, None, None),
    ("h100", 2048, 8192, 1024, 1, True, ("fp8", "fp8", "bf16"), None),
    ("h100", 33, 65, 17, 1, True, ("fp32", "fp32", "fp32"), None),
    ("h100", 128, 128, 2048, 8, False, None, "os"),
    ("h100", 4, 131001, 128, 8, False, None, None),
    ("h100", 64, 4096, 4096, 4, True, ("int8", "int8", "int8"), None),
    ("h100", 1000, 300, 777, 1, True, ("fp16", "fp16", "fp16"), None),
    ("h100", 8192, 8192, 8192, 1, True, None, None),
    ("h100", 3, 5, 7, 1, True, ("fp8", "bf16", "bf16"), None),
    # infer-2026: 128x128 OS/WS/IS, int4..bf16 at four rates
    ("infer-2026", 1, 8192, 8192, 1, True, None, None),
    ("infer-2026", 8, 8192, 28672, 1, True, None, "ws"),
    ("infer-2026", 8, 8192, 28672, 1, True, None, "is"),
    ("infer-2026", 8, 8192, 28672, 1, True, None, "os"),
    ("infer-2026", 2048, 8192, 1024, 1, True, ("int4", "int4", "int8"), None),
    ("infer-2026", 300, 200, 100, 1, True, ("bf16", "bf16", "bf16"), None),
    ("infer-2026", 512, 128, 4096, 16, False, ("fp8", "fp8", "bf16"), None),
    ("infer-2026", 4096, 4096, 4096, 1, True, ("int8", "fp8", "fp8"), None),
    ("infer-2026", 17, 4097, 129, 3, False, None, "ws"),
    ("infer-2026", 77, 3001, 2999, 1, True, None, "os"),
    ("infer-2026", 2999, 3001, 77, 1, True, ("int8", "int8", "int8"), "is"),
    # tpu-v1: one 256x256 WS array, DDR3
    ("tpu-v1", 1, 256, 256, 1, True, None, None),
    ("tpu-v1", 200, 2048, 256, 1, True, None, None),
    ("tpu-v1", 1024, 1024, 1024, 1, True, None, None),
    ("tpu-v1", 64, 100, 3000, 2, False, None, "ws"),
    ("tpu-v1", 1, 1, 1, 1, True, None, None),
    ("tpu-v1", 4096, 600, 4096, 1, True, None, None),
    # tpu-v4: 8 128x128 WS arrays, HBM2, CMEM
    ("tpu-v4", 8192, 8192, 28672, 1, True, None, None),
    ("tpu-v4", 256, 256, 256, 1, True, None, None),
    ("tpu-v4", 64, 512, 256, 1, True, ("int8", "int8", "int8"), None),
    ("tpu-v4", 1, 4096, 11008, 1, True, None, None),
    ("tpu-v4", 96, 1024, 96, 32, False, None, None),
    ("tpu-v4", 333, 555, 777, 2, True, None, None),
    # tpu-v5e: 4 128x128 WS arrays
    ("tpu-v5e", 1, 4096, 4096, 1, True, None, None),
    ("tpu-v5e", 2048, 2048, 2048, 1, True, None, None),
    ("tpu-v5e", 512, 1024, 2048, 1, True, ("int8", "int8", "bf16"), None),
    ("tpu-v5e", 7, 9, 11, 5, False, None, None),
    # train-2026: 8 256x256 OS/WS/IS, fp8/bf16/fp16
    ("train-2026", 4096, 8192, 8192, 1, True, None, None),
    ("train-2026", 4096, 8192, 8192, 1, True, None, "os"),
    ("train-2026", 4096, 8192, 8192, 1, True, None, "ws"),
    ("train-2026", 4096, 8192, 8192, 1, True, None, "is"),
    ("train-2026", 8192, 1024, 8192, 1, True, ("fp8", "fp8", "bf16"), None),
    ("train-2026", 1, 8192, 1024, 1, True, None, None),
    ("train-2026", 4096, 128, 4096, 64, False, None, None),
    ("train-2026", 4096, 4096, 128, 64, False, ("fp16", "fp16", "fp16"), None),
    ("train-2026", 100, 100, 100, 1, True, None, "is"),
    # trainium2: 8 128x128 WS, fp32 at 1/4 rate
    ("trainium2", 1024, 4096, 14336, 1, True, None, None),
    ("trainium2", 64, 64, 64, 1, True, ("fp32", "fp32", "fp32"), None),
    ("trainium2", 2048, 512, 2048, 1, True, ("fp8", "fp8", "bf16"), None),
    ("trainium2", 1, 14336, 4096, 4, True, None, None),
    ("trainium2", 257, 129, 65, 3, False, None, None),
]

#: (chip, helper, args) of vector ops (helpers of diptych.sim.vector)
VECTORS = [
    (chip, kind, args)
    for chip in ("h100", "infer-2026", "tpu-v1", "tpu-v4", "tpu-v5e", "train-2026", "trainium2")
    for kind, args in (("softmax", (64, 4096)), ("rmsnorm", (2048, 8192)),
                       ("add", (1 << 20,)), ("silu", (12345,)))
] + [
    ("train-2026", "softmax", (64 * 32768, 128)),      # a long-context fused-softmax part
    ("infer-2026", "layernorm", (1, 7)),
    ("h100", "copy", (1 << 24,)),
]

#: small run_workload cases: (chip, model, kwargs)
_TINY_HF = {"architectures": ["LlamaForCausalLM"], "hidden_size": 512,
            "intermediate_size": 1536, "num_attention_heads": 8, "num_key_value_heads": 2,
            "num_hidden_layers": 4, "vocab_size": 8192, "max_position_embeddings": 4096}
WORKLOADS = [
    ("train-2026", "tiny", dict(phase="prefill", batch=2, prompt=256)),
    ("train-2026", "tiny", dict(phase="decode", batch=4, prompt=256, gen=16)),
    ("train-2026", "tiny", dict(phase="train", batch=2, seq=256)),
    ("infer-2026", "llama-3-8b", dict(phase="decode", batch=8, prompt=1024, gen=8)),
    ("infer-2026", "llama-3-8b", dict(phase="prefill", batch=1, prompt=512)),
    ("h100", "tiny", dict(phase="train", batch=4, seq=512, attention="unfused")),
    ("tpu-v4", "mixtral-8x7b", dict(phase="decode", batch=16, prompt=512, gen=4, tp=4)),
    # the summed run (execution="sum", the default before issue 9): two cases above again,
    # pinned to their pre-switch numbers
    ("infer-2026", "llama-3-8b", dict(phase="decode", batch=8, prompt=1024, gen=8,
                                      execution="sum")),
    ("h100", "tiny", dict(phase="train", batch=4, seq=512, attention="unfused",
                          execution="sum")),
    # an all-SRAM chip (schedule only)
    ("groq-lpu", "tiny", dict(phase="decode", batch=4, prompt=256, gen=16)),
]

#: the small compare: (chips, model, CompareSettings kwargs)
COMPARE = (("train-2026", "infer-2026"), "tiny",
           dict(train_tp=1, train_batch=2, train_seq=512, prompts=(256,), batches=(1, 8),
                contexts=(512,), ref_batch=8))


def _model(name):
    from diptych.workloads import load_model, model_from_hf
    return model_from_hf(_TINY_HF, name="tiny-llama") if name == "tiny" else load_model(name)


def gemm_op(case):
    from diptych.arch import load_chip
    from diptych.workloads.ops import Gemm
    chip, m, k, n, batch, shared, dts, df = case
    c = load_chip(chip)
    a, b, o = dts or (c.default_dtype,) * 3
    return c, Gemm(name="g", m=m, k=k, n=n, batch=batch, b_is_weight=shared, a_dtype=a,
                   b_dtype=b, c_dtype=o, acc_dtype="fp32"), df


def vector_op(case):
    from diptych.arch import load_chip
    from diptych.sim import vector as V
    chip, kind, args = case
    if kind == "softmax":
        op = V.softmax_op("v", *args)
    elif kind in ("rmsnorm", "layernorm"):
        op = V.norm_op("v", *args, kind=kind)
    else:
        op = V.elementwise_op("v", *args, kind=kind, inputs=2 if kind == "add" else 1)
    return load_chip(chip), op


def _plain(x):
    """JSON round trip (tuples become lists, float keys strings) so comparisons are exact."""
    return json.loads(json.dumps(x))


def compute(parts=("gemms", "vectors", "workloads", "compare")) -> dict:
    """Every pinned number, recomputed by the current code (the persistent result cache off,
    so that the engine itself is checked)."""
    from diptych.sim import cache
    with cache.disabled():
        return _compute(parts)


def _compute(parts) -> dict:
    import warnings

    from diptych.sim import simulate
    out = {}
    if "gemms" in parts:
        out["gemms"] = []
        for case in GEMMS:
            chip, op, df = gemm_op(case)
            out["gemms"].append(_plain(simulate(op, chip, dataflow=df).to_dict()))
    if "vectors" in parts:
        out["vectors"] = [_plain(simulate(op, chip).to_dict())
                          for chip, op in map(vector_op, VECTORS)]
    if "workloads" in parts:
        from diptych.sim.run import Scenario, run_workload
        out["workloads"] = []
        for chip, model, kw in WORKLOADS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                r = run_workload(chip, _model(model), Scenario.of(**kw))
                out["workloads"].append(_plain(r.to_dict()))
    if "compare" in parts:
        from diptych.tools.dse.compare import CompareSettings, compare
        chips, model, kw = COMPARE
        out["compare"] = _plain(compare(list(chips), _model(model), CompareSettings(**kw)).to_json())
    return out


def diff(a, b, path="") -> list[str]:
    """Paths where the pinned value ``a`` differs from ``b`` (exact comparison; NaN equals
    NaN). Keys that ``b`` adds are not differences: outputs may grow (a new metric), pinned
    numbers may not move or disappear."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: missing" for k in sorted(set(a) - set(b))]
        for k in a:
            if k in b:
                out += diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if (a == b and type(a) is type(b)) else [f"{path}: {a!r} != {b!r}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="recompute and write golden_set.json")
    g.add_argument("--check", action="store_true", help="recompute and compare")
    args = ap.parse_args()
    got = compute()
    if args.write:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=PATH.parent).stdout.strip()
        PATH.write_text(json.dumps({"commit": commit, **got}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {PATH} (commit {commit})")
    else:
        want = json.loads(PATH.read_text())
        want.pop("commit")
        d = diff(want, got)
        print("\n".join(d[:50]) if d else "bit-identical")
        raise SystemExit(1 if d else 0)


if __name__ == "__main__":
    main()

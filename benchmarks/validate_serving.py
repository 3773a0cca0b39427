"""Compare ``diptych serve`` with published serving measurements; prints a Markdown table.

    python benchmarks/validate_serving.py [--out FILE] [--quick] [--execution sum|schedule]
                                          [--only TEXT ...] [--requests N]

Every row is one published, measured number next to what ``diptych serve`` predicts for the
same setup (model, GPU count and parallelism, precision, request lengths, arrival rate,
request count, the engine's documented batch and KV settings), the ratio
``diptych ÷ published`` and the row's source. Nothing is tuned: the h100 preset and the
built-in llama-3-8b / llama-3-70b configs (Llama 3.1 has the same shapes) are used as
shipped, with the serving defaults of docs/serving.md except where the published setup
states its own (then the row says so). docs/validation-serving.md holds the table and an
account of every deviation.

Sources (TensorRT-LLM's performance overview, docs/source/performance/perf-overview.md, at
the commit below):

* "Online Serving Measurements": TensorRT-LLM 0.14.0 behind Triton, BF16, 500 requests of
  467 input / 256 output tokens at a given QPS (``INF``: all at once); mean TTFT, mean ITL,
  output tokens/s.
* "Throughput Measurements": TensorRT-LLM 0.17, FP8 weights and KV cache, ``trtllm-bench
  throughput`` (requests queued at an infinite rate; 3000 requests of 1000/1000 and 2048/128,
  max batch 4096 sequences, max 8192 tokens per step, 95 % of free memory for the KV cache).

Each row runs with the serving runtime its measurement used (docs/serving.md, "Runtime host
costs"): ``trtllm-triton`` for the Online rows (TensorRT-LLM 0.14 behind Triton),
``trtllm-bench`` for the Throughput rows; the table also gives each row with ``ideal`` (no
host costs: the chip alone), the shared step grid making that second run cheap.
``--runtime NAME`` runs every row with one profile instead.

``--quick`` runs the low-load rows only; ``--only TEXT`` the rows whose name holds TEXT;
``--requests N`` caps each row's request count (for the long full-load rows: check that the
result has converged by comparing two counts).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.requests import LengthDist
from diptych.arch.runtime import load_runtime, runtime_names
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve

SRC = ("TensorRT-LLM docs/source/performance/perf-overview.md, "
       "https://github.com/NVIDIA/TensorRT-LLM/blob/258c7540c03517def55d9a5aadfa9288af474e1b/"
       "docs/source/performance/perf-overview.md")
ONLINE = SRC + ", Online Serving Measurements (v0.14.0, BF16, 500 requests, 467/256)"
OFFLINE = SRC + ", Throughput Measurements (v0.17, FP8, H100 80GB HBM3)"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    model: str
    tp: int
    isl: int
    osl: int
    qps: float | None          # None: all requests at once (an infinite rate)
    requests: int
    metric: str                # ttft_ms | itl_ms | out_tok_s
    published: float
    source: str
    fp8: bool = False
    cfg: dict = dataclasses.field(default_factory=dict)
    low_load: bool = False
    runtime: str = "trtllm-triton"       # the serving runtime the measurement used


#: trtllm-bench's run (perf-overview.md "Running the Benchmark"): max batch 4096, 8192 tokens
#: per step, --kv_cache_free_gpu_mem_fraction 0.95
TRTLLM_BENCH = {"max_batch": 4096, "max_batched_tokens": 8192, "kv_reserve_fraction": 0.05}
#: the runtime of the Throughput rows: trtllm-bench feeds the C++ executor in-process
BENCH = "trtllm-bench"

CASES = [
    Case("Llama-3.1-8B, 1x H100, 467/256, QPS 2: mean TTFT", "llama-3-8b", 1, 467, 256, 2.0,
         500, "ttft_ms", 23, ONLINE, low_load=True),
    Case("Llama-3.1-8B, 1x H100, 467/256, QPS 2: mean ITL", "llama-3-8b", 1, 467, 256, 2.0,
         500, "itl_ms", 8, ONLINE, low_load=True),
    Case("Llama-3.1-8B, 1x H100, 467/256, QPS 16: mean TTFT", "llama-3-8b", 1, 467, 256, 16.0,
         500, "ttft_ms", 30, ONLINE),
    Case("Llama-3.1-8B, 1x H100, 467/256, QPS 16: mean ITL", "llama-3-8b", 1, 467, 256, 16.0,
         500, "itl_ms", 11, ONLINE),
    Case("Llama-3.1-8B, 1x H100, 467/256, all at once: output tok/s", "llama-3-8b", 1, 467,
         256, None, 500, "out_tok_s", 9420, ONLINE),
    Case("Llama-3.1-8B, 1x H100, 467/256, all at once: mean ITL", "llama-3-8b", 1, 467, 256,
         None, 500, "itl_ms", 39, ONLINE),
    Case("Llama-3.1-70B, 4x H100 TP4, 467/256, QPS 2: mean TTFT", "llama-3-70b", 4, 467, 256,
         2.0, 500, "ttft_ms", 62, ONLINE, low_load=True),
    Case("Llama-3.1-70B, 4x H100 TP4, 467/256, QPS 2: mean ITL", "llama-3-70b", 4, 467, 256,
         2.0, 500, "itl_ms", 21, ONLINE, low_load=True),
    Case("Llama-3.1-70B, 4x H100 TP4, 467/256, QPS 8: mean TTFT", "llama-3-70b", 4, 467, 256,
         8.0, 500, "ttft_ms", 92, ONLINE),
    Case("Llama-3.1-70B, 4x H100 TP4, 467/256, QPS 8: mean ITL", "llama-3-70b", 4, 467, 256,
         8.0, 500, "itl_ms", 32, ONLINE),
    Case("Llama-3.1-70B, 4x H100 TP4, 467/256, all at once: output tok/s", "llama-3-70b", 4,
         467, 256, None, 500, "out_tok_s", 4103, ONLINE),
    Case("Llama-3.1-8B FP8, 1x H100, 1000/1000, max load: output tok/s", "llama-3-8b", 1, 1000,
         1000, None, 3000, "out_tok_s", 15244.78, OFFLINE, fp8=True, cfg=TRTLLM_BENCH,
         runtime=BENCH),
    Case("Llama-3.1-8B FP8, 1x H100, 2048/128, max load: output tok/s", "llama-3-8b", 1, 2048,
         128, None, 3000, "out_tok_s", 3556.73, OFFLINE, fp8=True, cfg=TRTLLM_BENCH,
         runtime=BENCH),
    Case("Llama-3.1-70B FP8, 2x H100 TP2, 1000/1000, max load: output tok/s", "llama-3-70b", 2,
         1000, 1000, None, 3000, "out_tok_s", 4390.53, OFFLINE, fp8=True, cfg=TRTLLM_BENCH,
         runtime=BENCH),
]

#: an arrival rate standing for "all at once" (the requests arrive within microseconds)
ALL_AT_ONCE_QPS = 1e9


def _run(case: Case, oracles: StepTimerCache, execution: str | None = None,
         runtime: str | None = None):
    dt = {"weights_dtype": "fp8", "act_dtype": "fp8", "kv_dtype": "fp8"} if case.fp8 else \
        {"weights_dtype": "bf16", "act_dtype": "bf16", "kv_dtype": "bf16"}
    dep = colocated("h100", case.model, tp=case.tp, execution=execution, **dt)
    load = Load(qps=case.qps or ALL_AT_ONCE_QPS, prompt=LengthDist("fixed", case.isl),
                gen=LengthDist("fixed", case.osl), requests=case.requests)
    cfg = ServeConfig(**case.cfg, runtime=load_runtime(runtime or case.runtime))
    return serve(dep, load, cfg, oracles=oracles)


def value(case: Case, res) -> float:
    if case.metric == "ttft_ms":
        return res.ttft_s["mean"] * 1e3
    if case.metric == "itl_ms":
        return res.itl_s["mean"] * 1e3
    return res.tokens_per_s


UNITS = {"ttft_ms": "ms", "itl_ms": "ms", "out_tok_s": "output tok/s"}


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--quick", action="store_true", help="low-load rows only")
    ap.add_argument("--execution", choices=["sum", "schedule"],
                    help="how steps are timed (default: as `diptych run`)")
    ap.add_argument("--only", metavar="TEXT", action="append",
                    help="only the rows whose name contains TEXT (repeatable)")
    ap.add_argument("--requests", type=int, metavar="N",
                    help="cap every row's request count at N (the row then says so)")
    ap.add_argument("--runtime", choices=runtime_names(),
                    help="run every row with this serving runtime (default: each row's own)")
    args = ap.parse_args(argv)
    if args.requests is not None and args.requests < 1:
        ap.error(f"--requests must be a positive integer, not {args.requests}")
    oracles = StepTimerCache("grid")
    lines = ["| case | published | runtime | diptych | ratio (diptych ÷ published) | "
             "ideal runtime (ratio) | source |", "|---|---|---|---|---|---|---|"]
    cache: dict = {}
    t0 = time.perf_counter()
    for c in CASES:
        if args.quick and not c.low_load:
            continue
        if args.only and not any(t in c.name for t in args.only):
            continue
        if args.requests is not None and args.requests < c.requests:
            c = dataclasses.replace(c, name=f"{c.name} ({args.requests} of {c.requests} "
                                    f"requests)", requests=args.requests)
        rt = args.runtime or c.runtime
        key = (c.model, c.tp, c.isl, c.osl, c.qps, c.requests, c.fp8, tuple(c.cfg.items()))
        t1, n1 = time.perf_counter(), oracles.simulations
        for r in dict.fromkeys((rt, "ideal")):
            if key + (r,) not in cache:
                cache[key + (r,)] = _run(c, oracles, args.execution, r)
        v, v0 = value(c, cache[key + (rt,)]), value(c, cache[key + ("ideal",)])
        lines.append(f"| {c.name} | {_fmt(c.published)} {UNITS[c.metric]} | {rt} | {_fmt(v)} "
                     f"| {v / c.published:.2f} | {_fmt(v0)} ({v0 / c.published:.2f}) | "
                     f"{c.source} |")
        print(f"{lines[-1]}  [{time.perf_counter() - t1:.0f} s, "
              f"{oracles.simulations - n1} simulations]", file=sys.stderr, flush=True)
    text = "\n".join(lines)
    print(text)
    print(f"\n({oracles.simulations} step-piece simulations, "
          f"{time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

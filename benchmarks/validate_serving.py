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
  throughput`` (requests queued at an infinite rate, the request count by lengths as the page
  lists it, 95 % of free memory for the KV cache) on an engine built by ``trtllm-bench build
  --dataset``, whose tuning sets the engine's max batch and max tokens per step from the
  dataset's lengths (:func:`trtllm_bench_engine`); output tokens/s. Three rows by default;
  ``--grid`` adds every H100 row of Llama 3.1 8B (TP1) and 70B (TP1, 2, 4, 8) on the page.

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
import math
import sys
import time

from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.requests import LengthDist
from diptych.arch.runtime import load_runtime, runtime_names
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
from diptych.workloads import load_model

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


#: Llama 3.1's context (its config.json ``max_position_embeddings``)
LLAMA_31_CONTEXT = 131072
#: the runtime of the Throughput rows: trtllm-bench feeds the C++ executor in-process
BENCH = "trtllm-bench"
#: what NVML reports as an H100 80GB HBM3's memory (``nvidia-smi``: 81,559 MiB), GiB: what
#: ``trtllm-bench build`` sizes the engine with (tensorrt_llm/bench/build/utils.py
#: ``get_device_memory``: ``nvmlDeviceGetMemoryInfo(...).total / 1024**3``)
H100_NVML_GIB = 81559 / 1024


#: tokens per KV block of the Throughput rows' engines: [S] NVIDIA/TensorRT-LLM
#: tensorrt_llm/plugin/plugin.py ``PluginConfig._tokens_per_block`` default 32 ("Define how
#: many tokens are contained in each paged kv cache block"), in the version whose GEMM plugin
#: already offers nvfp4 [assumption: 0.17's; an earlier one, with ``_enable_xqa`` still a
#: plugin option, defaults to 64]. The Online rows (0.14) keep ServeConfig's 16.
TRTLLM_BLOCK_TOKENS = 32


def trtllm_bench_engine(model: str, tp: int, isl: int, osl: int, fp8: bool = True,
                        device_gib: float = H100_NVML_GIB) -> dict:
    """The serving settings of a ``trtllm-bench throughput`` run on an engine built by
    ``trtllm-bench build --tp_size TP --quantization FP8 --dataset ...`` (the page's
    "Commands"): the build's tuning heuristics set the engine's max batch and max tokens per
    step from the dataset's lengths, and ``throughput`` runs the engine's own settings
    (``runtime_max_bs = engine_bs``, ``max_num_tokens`` the engine's) with
    ``--kv_cache_free_gpu_mem_fraction 0.95`` ("In majority of cases, we also use a higher KV
    cache percentage by setting ... 0.95"). [S: NVIDIA/TensorRT-LLM
    tensorrt_llm/bench/build/tuning.py ``calc_engine_setting`` / ``finetune_setting`` in the
    version without the NVFP4 and hybrid-model branches, which sizes the engine as
    ``params / 1000**3`` bytes (later versions divide by ``1024**3``, which would change seven
    of the 70B grid rows' settings; which one 0.17 shipped is an [assumption]: the earlier);
    tensorrt_llm/bench/benchmark/throughput.py.] Returns
    ``ServeConfig`` keywords. diptych keeps its own KV sizing (HBM less weights, a step's
    activations, the engine's logits buffers for this max batch and ``kv_reserve_fraction``
    0.05 of HBM, where TensorRT-LLM takes 0.95 of what the loaded engine leaves free), which
    is not the heuristic's estimate either."""
    from diptych.workloads.params import params_per_chip
    m = load_model(model)
    byte = 1 if fp8 else 2
    # every rank holds at least one KV head; bytes per token in GiB, as the heuristic counts
    per_token = 2 * m.layers * max(tp, m.kv_heads) * m.head_dim * byte / 1024 ** 3
    engine_gb = params_per_chip(m, 1, 1) / 1000 ** 3 * byte    # (its GB against GiB)
    cache = (device_gib * tp - engine_gb) * 0.95
    requests = cache / per_token / (isl + osl)
    raw_bs = min(requests, 4096)                    # (pp 1)
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    return {"max_batch": bs, "max_batched_tokens": tokens, "kv_reserve_fraction": 0.05,
            "kv_block_tokens": TRTLLM_BLOCK_TOKENS}


#: trtllm-bench's request counts by lengths (perf-overview.md, "Preparing a Dataset")
BENCH_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (2048, 128): 3000,
                  (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000,
                  (500, 2000): 3000, (20000, 2000): 1000}


def _bench(model: str, tp: int, isl: int, osl: int, published: float) -> Case:
    name = "8B" if model == "llama-3-8b" else "70B"
    par = f"{tp}x H100" + (f" TP{tp}" if tp > 1 else "")
    return Case(f"Llama-3.1-{name} FP8, {par}, {isl}/{osl}, max load: output tok/s", model,
                tp, isl, osl, None, BENCH_REQUESTS[(isl, osl)], "out_tok_s", published,
                OFFLINE, fp8=True, cfg=trtllm_bench_engine(model, tp, isl, osl),
                runtime=BENCH)


#: every H100 80GB HBM3 row of Llama 3.1 8B and 70B on the page (tokens/s; the 70B TP1
#: 2048/2048 and 20000/2000 cells are empty there)
GRID = {("llama-3-8b", 1): {(128, 128): 28836.77, (128, 2048): 21109.38, (128, 4096): 13593.65,
                            (500, 2000): 16500.69, (1000, 1000): 15244.78, (2048, 128): 3556.73,
                            (2048, 2048): 9488.42, (5000, 500): 3559.36,
                            (20000, 2000): 1401.31},
        ("llama-3-70b", 1): {(128, 128): 3378.03, (128, 2048): 911.62, (128, 4096): 426.32,
                             (500, 2000): 775.57, (1000, 1000): 839.97, (2048, 128): 343.29,
                             (5000, 500): 245.34},
        ("llama-3-70b", 2): {(128, 128): 6645.12, (128, 2048): 6169.58, (128, 4096): 3897.06,
                             (500, 2000): 4972.57, (1000, 1000): 4390.53, (2048, 128): 772.66,
                             (2048, 2048): 2898.16, (5000, 500): 919.73,
                             (20000, 2000): 443.01},
        ("llama-3-70b", 4): {(128, 128): 11127.53, (128, 2048): 11511.93,
                             (128, 4096): 7439.41, (500, 2000): 9836.7, (1000, 1000): 7430.99,
                             (2048, 128): 1302.6, (2048, 2048): 5480.03, (5000, 500): 1602.78,
                             (20000, 2000): 920.19},
        ("llama-3-70b", 8): {(128, 128): 14730.69, (128, 2048): 17061.82,
                             (128, 4096): 14171.43, (500, 2000): 14679.33,
                             (1000, 1000): 11451.16, (2048, 128): 1923.41,
                             (2048, 2048): 8801.95, (5000, 500): 2457.42,
                             (20000, 2000): 1512.6}}
#: the grid's rows run by default (one per kind of step: KV-streaming decode, compute-bound
#: mixed steps, a two-GPU group)
DEFAULT_BENCH = (("llama-3-8b", 1, 1000, 1000), ("llama-3-8b", 1, 2048, 128),
                 ("llama-3-70b", 2, 1000, 1000))

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
] + [_bench(m, tp, i, o, GRID[(m, tp)][(i, o)]) for m, tp, i, o in DEFAULT_BENCH]
#: the rest of the grid (``--grid``)
GRID_CASES = [_bench(m, tp, i, o, v) for (m, tp), row in GRID.items() for (i, o), v in row.items()
              if (m, tp, i, o) not in DEFAULT_BENCH]

#: an arrival rate standing for "all at once" (the requests arrive within microseconds)
ALL_AT_ONCE_QPS = 1e9


def _run(case: Case, oracles: StepTimerCache, execution: str | None = None,
         runtime: str | None = None):
    # an FP8 row: TensorRT-LLM's FP8 engine (the fp8-static recipe, FP8 KV cache)
    dt = {"recipe": "fp8-static", "kv_dtype": "fp8"} if case.fp8 else \
        {"weights_dtype": "bf16", "act_dtype": "bf16", "kv_dtype": "bf16"}
    model = load_model(case.model)
    if case.isl + case.osl > model.max_position_embeddings:
        # the built-in Llama 3 configs hold 8,192 positions; Llama 3.1, which the rows ran,
        # the same shapes with 131,072 (meta-llama/Llama-3.1-8B and -70B config.json
        # "max_position_embeddings": 131072): its 20000/2000 rows need that context
        model = dataclasses.replace(model, max_position_embeddings=LLAMA_31_CONTEXT)
    dep = colocated("h100", model, tp=case.tp, execution=execution, **dt)
    load = Load(qps=case.qps or ALL_AT_ONCE_QPS, prompt=LengthDist("fixed", case.isl),
                gen=LengthDist("fixed", case.osl), requests=case.requests)
    # the `ideal` column is the row without host costs: it keeps the row's own engine's
    # scheduling, its KV admission (trtllm-*: reserve) and batch-size tuning (trtllm-bench),
    # which `ideal`, naming no engine, leaves off
    own = load_runtime(case.runtime)
    rt = load_runtime(runtime or case.runtime)
    if runtime == "ideal":
        rt = dataclasses.replace(rt, batch_size_tuning=own.batch_size_tuning)
    cfg = ServeConfig(**case.cfg, runtime=rt,
                      kv_admission=own.kv_admission if runtime in (None, "ideal") else None)
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
    ap.add_argument("--grid", action="store_true",
                    help="also every other H100 Throughput row of Llama 3.1 8B and 70B")
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
    for c in CASES + (GRID_CASES if args.grid else []):
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

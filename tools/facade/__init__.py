"""diptych: a cycle-approximate AI-accelerator simulator. The Python API.

A notebook starts here::

    import diptych

    chip = diptych.load_chip("infer-2026")              # a preset, a TOML/JSON file or a Chip
    model = diptych.load_model("llama-3-8b")            # built-in or a HuggingFace config.json
    st = diptych.simulate_gemm(4096, 4096, 4096, chip)  # one GEMM: cycles, stalls, bytes, energy
    r = diptych.run(chip, model, phase="decode", batch=8, prompt=2048)
    r.tpot_s, r.bound, r.to_dict()                       # to_dict() is `diptych run --json`
    cmp = diptych.compare(["train-2026", "infer-2026"], "llama-3-8b")
    cmp.to_json()                                        # `diptych compare --json`
    diptych.write_report(cmp, "out/report")             # the HTML report of `--report`

Each function is a thin layer over the library the ``diptych`` command uses, so it returns
the same numbers; see docs/api.md. Importing ``diptych`` is light: the simulation engine (Numba)
loads when a function first needs it. The packages underneath are ``diptych.arch`` (chips),
``diptych.workloads`` (models, lowering, runs), ``diptych.sim`` (the engine), ``diptych.rtl``
and ``diptych.tools`` (CLI, design-space exploration).

This module is ``tools/facade/`` in the source tree, mapped to ``diptych`` by pyproject.toml.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from diptych.arch import Chip
    from diptych.sim import OpStats
    from diptych.tools.dse.compare import Comparison
    from diptych.workloads import ModelConfig
    from diptych.sim.run import RunResult

__all__ = ["__version__", "load_chip", "load_model", "simulate_gemm", "run", "compare",
           "write_report", "serve", "serve_plan", "plan", "sweep", "floorplan", "Chip",
           "ModelConfig",
           "OpStats", "RunResult", "Comparison", "CompareSettings"]

#: Types re-exported lazily: name → module that defines it.
_TYPES = {"Chip": "diptych.arch", "ModelConfig": "diptych.workloads",
          "OpStats": "diptych.sim", "RunResult": "diptych.sim.run",
          "Comparison": "diptych.tools.dse.compare",
          "CompareSettings": "diptych.tools.dse.compare"}


def __getattr__(name: str) -> Any:
    if name == "__version__":    # on first use: importlib.metadata is slow to import
        from diptych.tools import installed_version
        globals()["__version__"] = v = installed_version()
        return v
    if name in _TYPES:
        return getattr(import_module(_TYPES[name]), name)
    raise AttributeError(f"module 'diptych' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_TYPES) | {"__version__"})


def load_chip(chip: "str | Chip") -> "Chip":
    """A chip: a preset name (``"tpu-v4"``; ``diptych chips list``), a path to a TOML file (or
    the JSON of ``diptych chips show --json``), or a :class:`Chip` (returned as is). Raises
    ``ValueError`` (a ``ConfigError``) naming the file, key, value and what was expected."""
    from diptych.arch import load_chip as _load
    return _load(chip)


def load_model(model: "str | ModelConfig") -> "ModelConfig":
    """A model: a built-in name (``"llama-3-70b"``; ``diptych models list``), a path to a
    HuggingFace ``config.json``, or a :class:`ModelConfig` (returned as is)."""
    from diptych.workloads import load_model as _load
    return _load(model)


def simulate_gemm(m: int, k: int, n: int, chip: "str | Chip", *, dtype: str | None = None,
                  dataflow: str | None = None, batch: int = 1) -> "OpStats":
    """Time ``C[m×n] = A[m×k]·B[k×n]`` (``batch`` independent products) on ``chip``, every
    operand in ``dtype`` (default: the chip's), FP32 accumulation; ``dataflow`` ``"os"``,
    ``"ws"``, ``"is"`` or None for the best the chip supports. Returns :class:`OpStats`
    (``cycles``, ``seconds``, ``utilization``, ``bound``, ``stall_breakdown``, DRAM/SRAM bytes,
    ``energy_j``, ``mapping``); ``.to_dict()`` is ``diptych gemm --json``."""
    from diptych.sim import simulate_gemm as _sim
    return _sim(m, k, n, load_chip(chip), dtype=dtype, dataflow=dataflow, batch=batch)


def run(chip: "str | Chip", model: "str | ModelConfig", *, phase: str, batch: int = 1,
        prompt: int | None = None, gen: int | None = None, seq: int | None = None,
        tp: int | None = None, dp: int | None = None, chips: int | None = None,
        precision: str | None = None, weights_dtype: str | None = None,
        act_dtype: str | None = None, kv_dtype: str | None = None, recipe: str | None = None,
        overlap: bool = True, recompute: bool | str = False, micro_batch: int | None = None,
        attention: str = "fused", cluster=None, plan=None, execution: str | None = None,
        fusion: bool = True, moe_skew: float | None = None,
        moe_capacity_factor: float | None = None, moe_pad: bool | None = None,
        moe_dispatcher: str | None = None,
        attention_kernel: str = "default", nvls: bool = True, tp_comm_overlap: bool = True,
        offload: str = "none", collective_algorithms: str | None = None,
        elementwise_kernels: str = "default", kernel_order: str = "default",
        tp_overlap_config: str | None = None, ideal: bool = False,
        waterfall: bool = True, sequence_parallel: bool | None = None) -> "RunResult":
    """Simulate one phase of ``model`` on ``chip``, as ``diptych run`` does for one batch size.

    ``phase``: ``"prefill"`` (needs ``prompt``: the time to first token), ``"decode"`` (needs
    ``prompt``: the context before generation; ``gen`` generated tokens, default 1: the time per
    output token) or ``"train"`` (needs ``seq``: one optimizer step over ``batch`` sequences).
    ``tp``/``dp``/``chips``: parallelism. ``precision``: a spec as ``--precision`` (``"bf16"``,
    ``"w=fp8,a=fp8,kv=fp8"``) or the per-tensor dtypes; default inference in the chip's default
    dtype, training in bf16; ``recipe``: a training recipe (``"fp8-delayed"``, ``"fp8-current"``,
    ``"mxfp8"``; docs/precision.md). Returns a :class:`RunResult` whose ``to_dict()`` is exactly
    ``diptych run --json``; contexts beyond the model's window warn (``warnings``) and are listed in
    ``result.warnings``. ``cluster`` (a preset such as ``"dgx-h100"``, a path or a Cluster) and/or
    ``plan`` (a ``diptych.sim.cluster.Plan``) run a parallel plan's step instead (``diptych run
    --cluster``; docs/cluster.md) and return its ``ClusterResult``; ``recompute``: ``"none"``,
    ``"selective"`` (a plan only), ``"full"`` or a bool. ``execution``: ``"schedule"`` (default: the
    program's list schedule, docs/program.md) or ``"sum"`` (every op alone from DRAM, as
    ``--execution sum``); ``fusion``: as ``--fusion/--no-fusion``. ``moe_skew``,
    ``moe_capacity_factor``, ``moe_pad``, ``moe_dispatcher``: a MoE model's routing
    (docs/workloads.md, "Mixture of experts"). ``attention_kernel``, ``nvls``,
    ``tp_comm_overlap``, ``collective_algorithms``, ``elementwise_kernels``, ``kernel_order``,
    ``tp_overlap_config``: the software stack's settings, as ``--attention-kernel``,
    ``--no-nvls``, ``--no-tp-comm-overlap``, ``--collective-algorithms``,
    ``--elementwise-kernels``, ``--kernel-order``, ``--tp-overlap-config``
    (sim/run/stack.py).
    ``offload``: training state in the chip's second memory tier, ``"none"``, ``"optimizer"``
    or ``"params"`` (``--offload``; docs/chips.md, "Training state in the second tier").
    ``sequence_parallel``: Megatron-Core's sequence parallelism in training (None: on at
    ``tp > 1``; ``--sequence-parallel/--no-sequence-parallel``; docs/workloads.md).
    ``ideal``: every overhead left out (``--ideal``); ``waterfall``: the efficiency waterfall in the
    result (``result.waterfall``). Either result carries ``energy_j`` and ``energy_breakdown_j``,
    the same joules by component (MAC arrays, vector units, SRAM, DRAM, NoC, D2D, links, static;
    they sum to it: :mod:`diptych.sim.energy_parts`).
    """
    from diptych.sim.run import Scenario, run_workload
    from diptych.sim.run.variant import IDEAL
    from diptych.tools.precision_spec import run_dtypes

    w, a, kv, r = run_dtypes(precision, phase, weights_dtype, act_dtype, kv_dtype, recipe)
    s = Scenario.of(phase=phase, batch=batch, prompt=prompt, gen=gen, seq=seq, tp=tp, dp=dp,
                    chips=chips, weights_dtype=w, act_dtype=a, kv_dtype=kv, recipe=r,
                    overlap=overlap, recompute=recompute, micro_batch=micro_batch,
                    attention=attention, execution=execution, fusion=fusion,
                    moe_skew=moe_skew, moe_capacity_factor=moe_capacity_factor, moe_pad=moe_pad,
                    moe_dispatcher=moe_dispatcher, attention_kernel=attention_kernel, nvls=nvls,
                    tp_comm_overlap=tp_comm_overlap, offload=offload,
                    collective_algorithms=collective_algorithms,
                    elementwise_kernels=elementwise_kernels, kernel_order=kernel_order,
                    tp_overlap_config=tp_overlap_config, sequence_parallel=sequence_parallel)
    if ideal and r:
        raise ValueError(f"ideal=True leaves every precision recipe's overheads out; recipe "
                         f"{r!r} names one's: give one of them")
    v = IDEAL if ideal else None
    if cluster is None and plan is None:
        return run_workload(load_chip(chip), load_model(model), s, variant=v,
                            waterfall=waterfall)
    from diptych.sim.cluster.run import run_cluster_step
    return run_cluster_step(load_chip(chip), load_model(model), s, cluster=cluster, plan=plan,
                            variant=v, waterfall=waterfall)


def compare(chips: Sequence["str | Chip"], model: "str | ModelConfig", *,
            precision: str | Sequence[str] | None = None,
            prompts: Sequence[int] | None = None, contexts: Sequence[int] | None = None,
            batches: Sequence[int] | None = None, ref_batch: int | None = None,
            train_tp: int | None = None, train_dp: int | None = None,
            train_batch: int | None = None, train_seq: int | None = None,
            infer_tp: int | None = None, cluster_chips: int | None = None,
            cluster: str | None = None, cluster_batch: int | None = None,
            execution: str | None = None, fusion: bool = True, waterfall: bool = False,
            ideal: bool = False,
            progress: Callable[[int, int, str], None] | None = None) -> "Comparison":
    """The headline study of ``diptych compare``: ``model`` trained, prefilled and decoded on
    each of ``chips``. Every setting left out keeps :class:`CompareSettings`' default (the
    command's): prompts and contexts a short and a long one within the model's window,
    decode batches 1-256, training at TP=8 on one node, or with ``cluster_chips`` the best
    parallel plan for that many chips of ``cluster`` (default ``dgx-h100``);
    ``precision`` pins the precision for every chip (specs as ``--precision``: ``"bf16"``,
    or a list such as ``["train:bf16", "infer:fp8"]``); ``execution``/``fusion`` as
    :func:`run`'s, for every single-node run; ``waterfall``: each chip's efficiency
    waterfall at the reference points (``--waterfall``); ``ideal``: every run's bound, every
    overhead left out (``--ideal``). ``progress(done, total, label)`` is
    called before every run. Returns a :class:`Comparison`: ``to_json()`` (``--json``),
    ``rows()`` (one dict per run), ``summary(name)``, ``warnings()``; :func:`write_report`
    writes its HTML report."""
    from diptych.tools.dse.compare import CompareSettings
    from diptych.tools.dse.compare import compare as _compare
    from diptych.tools.precision_spec import parse_precision

    given = dict(train_tp=train_tp, train_dp=train_dp, train_batch=train_batch,
                 train_seq=train_seq, infer_tp=infer_tp, ref_batch=ref_batch,
                 cluster_chips=cluster_chips, cluster=cluster, cluster_batch=cluster_batch,
                 prompts=tuple(prompts) if prompts else None,
                 contexts=tuple(contexts) if contexts else None,
                 batches=tuple(batches) if batches is not None else None)
    s = CompareSettings(**{k: v for k, v in given.items() if v is not None},
                        precision=parse_precision(precision or []), execution=execution,
                        fusion=fusion, waterfall=waterfall, ideal=ideal)
    return _compare(list(chips), load_model(model), s, progress=progress)


def write_report(comparison: "Comparison", directory) -> list:
    """Write the report of a :func:`compare` result to ``directory`` (created if missing):
    ``index.html`` with the summary, warnings and plots, ``compare.csv``, ``compare.json``,
    ``roofline.svg``, ``decode.svg``, ``floorplan.svg``. Returns the paths written."""
    from diptych.tools.dse.report import write_report as _write
    return _write(comparison, directory)


def serve(chip: "str | Chip", model: "str | ModelConfig", *, tp: int | None = None,
          replicas: int = 1, qps: float | None = None, concurrency: int | None = None,
          trace: str | None = None, prompt: str = "1000", gen: str = "200",
          requests: int | None = None, duration: float | None = None,
          precision: str | None = None, runtime: str | None = None, seed: int = 0,
          oracle: str = "grid", waterfall: bool = False, ideal: bool = False, **config):
    """Serve ``model`` on ``replicas`` × ``tp`` chips of ``chip`` under one load, as ``diptych
    serve`` does (colocated): exactly one of ``qps`` (open loop), ``concurrency`` (closed
    loop) or ``trace`` (a CSV); ``prompt``/``gen`` length specs as ``--prompt``/``--gen``
    (``"1000"``, ``"uniform:lo=100,hi=900"``, ``"lognormal:mean=500,sigma=0.5"``); ``tp``
    None: the fewest chips whose memory holds the model and a step's KV cache;
    ``precision`` a spec as ``--precision``; ``runtime`` a profile name or path (None: the
    chip's). ``config``: any :class:`~diptych.sim.serving.config.ServeConfig` field
    (``max_batch``, ``chunked_prefill``, ``scheduler``, ``slo_ttft_s`` ...). ``waterfall``:
    the serving waterfall (``result.waterfall``); ``ideal``: the deployment's bound, every
    overhead left out (``--ideal``, :func:`diptych.sim.serving.ideal.ideal`). Returns the
    ``ServeResult`` whose ``to_dict()`` is ``diptych serve --json`` (its ``energy_breakdown_j`` and
    ``energy_breakdown_j_per_token``: the energy by component, in all and per output
    token)."""
    from diptych.arch.runtime import load_runtime
    from diptych.sim.run import Scenario
    from diptych.sim.serving.config import ServeConfig
    from diptych.sim.serving.requests import Load, parse_length
    from diptych.sim.serving.serve import Deployment, Pool, fit_tp
    from diptych.sim.serving.serve import serve as _serve
    from diptych.sim.serving.step_time import make_replica
    from diptych.tools.precision_spec import run_dtypes

    w, a, kv, r = run_dtypes(precision, "decode", None, None, None, None)
    dtypes = {"weights_dtype": w, "act_dtype": a, "kv_dtype": kv, **({"recipe": r} if r else {})}
    cfg = ServeConfig(**config, seed=seed,
                      runtime=load_runtime(runtime) if runtime else None)
    c, m = load_chip(chip), load_model(model)
    if tp is None:
        tp = fit_tp(c, m, cfg, precision=dtypes)
    dep = Deployment(pool=Pool(make_replica(c, m, Scenario.of(phase="decode", tp=tp, **dtypes)),
                               replicas))
    load = Load(qps=qps, concurrency=concurrency, trace=trace,
                prompt=parse_length(prompt, "prompt"), gen=parse_length(gen, "gen"),
                requests=requests, duration_s=duration)
    if ideal:
        from diptych.sim.serving.ideal import ideal as ideal_of
        dep, cfg = ideal_of(dep, cfg)
    return _serve(dep, load, cfg, oracle=oracle, waterfall=waterfall)


def serve_plan(chips: "Sequence[str]", model: "str | ModelConfig", *, max_chips: int,
               qps: float, prompt: str = "1024", gen: str = "128", requests: int = 500,
               slo_ttft_s: float = 2.0, slo_tpot_s: float = 0.2, tp: Sequence[int] | None = None,
               max_batched_tokens: Sequence[int] = (2048, 8192),
               chunked_prefill: Sequence[bool] = (True, False), disaggregated: bool = True,
               seed: int = 0, progress: Callable | None = None) -> dict:
    """The deployment search of ``diptych serve-plan``: each design of ``chips`` deployed at
    its best (pool sizes up to ``max_chips``, prefill:decode split, TP per pool, batch-token
    limit, prompt policy) for ``model`` under the p99 SLOs at ``qps``; ``prompt``/``gen``
    length specs as ``--prompt``/``--gen``. Returns the search result (``best``,
    ``best_per_design``, ``pareto``, ``evaluated``: every plan's row), which is
    ``diptych serve-plan --json``; ValueError naming the binding constraint when no plan
    meets the SLOs (docs/serving.md, "Deployment search")."""
    from diptych.sim.serving.config import ServeConfig
    from diptych.sim.serving.requests import Load, parse_length
    from diptych.sim.serving.search import SearchSpace, search

    space = SearchSpace(designs=tuple(chips), chips=max_chips,
                        tp=tuple(tp) if tp else None,
                        max_batched_tokens=tuple(max_batched_tokens),
                        chunked_prefill=tuple(chunked_prefill), disaggregated=disaggregated)
    load = Load(qps=qps, prompt=parse_length(prompt, "prompt"), gen=parse_length(gen, "gen"),
                requests=requests)
    return search(model, space, load, ServeConfig(slo_ttft_s=slo_ttft_s,
                                                  slo_tpot_s=slo_tpot_s, seed=seed),
                  progress=progress)


def plan(chip: "str | Chip", model: "str | ModelConfig", cluster: str, *, chips: int,
         batch: int, seq: int, refine: int = 8, precision: str | None = None,
         recipe: str | None = None, progress: Callable | None = None, **space):
    """The plan search of ``diptych plan``: the best parallel plans (tp × pp × dp × cp × ep,
    ZeRO, schedule, micro-batch, recomputation) for training ``model`` on ``chips`` chips of
    ``cluster`` (a preset such as ``"dgx-h100"`` or a path), ``batch`` sequences of ``seq``
    tokens; ``refine`` plans re-simulated with the engine; ``space`` narrows the search as
    the command's flags do (``tp=[4, 8]``, ``zero=[1]``, ``schedules=["interleaved"]``,
    ``offload=["none", "optimizer"]`` ...).
    Returns the search result: ``plans`` (best first, each a ``ClusterResult``),
    ``candidates``, ``fitting``; ``to_dict(top)`` is ``diptych plan --json``."""
    from diptych.sim.cluster.search import search_plans
    from diptych.sim.run import Scenario
    from diptych.tools.precision_spec import run_dtypes

    w, a, kv, r = run_dtypes(precision, "train", None, None, None, recipe)
    s = Scenario.of(phase="train", chips=chips, batch=batch, seq=seq, weights_dtype=w,
                    act_dtype=a, kv_dtype=kv, recipe=r)
    return search_plans(load_model(model), load_chip(chip), cluster, s, refine=refine,
                        progress=progress, **space)


def sweep(spec, out, *, jobs: int | None = None, evaluate=None, progress: bool = False):
    """Run a design-space sweep (``diptych sweep``): ``spec`` a TOML path or a parsed spec,
    results written incrementally to the directory ``out`` (Parquet parts; rerun to resume);
    ``jobs`` local workers (default one per CPU, capped at them). Returns the summary
    (``total``, ``ran``, ``failed``, ``skipped``, ``seconds``); read the rows with
    ``diptych.tools.dse.sweep.read_results(out)`` (a pyarrow Table)."""
    from diptych.tools.dse.spec import SweepSpec, load_spec
    from diptych.tools.dse.sweep import run_sweep

    s = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    return run_sweep(s, out, evaluate=evaluate, jobs=jobs, progress=progress)


def floorplan(chips: "str | Chip | Sequence[str | Chip]", output=None):
    """The floorplans of ``diptych floorplan``: each chip's dies, arrays, SRAM, DRAM and
    SerDes beachfront drawn to scale. Returns ``(figure, [(chip, floorplan summary)])``;
    with ``output`` (PNG/SVG/PDF by extension) the figure is also written there, atomically."""
    from diptych.tools.dse.floorplan import draw_floorplans, floorplan as _plan, save_figure

    many = chips if isinstance(chips, (list, tuple)) else [chips]
    loaded = [load_chip(c) for c in many]
    fig = draw_floorplans(loaded)
    if output is not None:
        save_figure(fig, output)
    return fig, [(c.name, _plan(c)) for c in loaded]

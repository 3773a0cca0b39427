"""The default sweep evaluator: one workload phase on one chip, through ``run_workload``.

Returns the scalar metrics of :meth:`RunResult.to_dict` (per-op ``layers`` and other tables
dropped, warnings joined into one string) plus average power per chip (energy ÷ chips ÷
time), whether it exceeds the chip's TDP, tokens per joule, and ``energy_j`` by component as
one column each (``energy_mac_j``, ``energy_vector_j``, ``energy_sram_j``, ``energy_dram_j``,
``energy_noc_j``, ``energy_d2d_j``, ``energy_link_j``, ``energy_static_j``; they sum to
``energy_j``), and what the run put in a second and a third memory tier (``dram2_state_gib``,
``dram2_traffic_share``, ``dram3_state_gib``, ``dram3_traffic_share``: :func:`tier_metrics`).
"""

from __future__ import annotations

import functools
import types
import warnings
from typing import Any

from ...arch.cost import cost_metrics
from ...arch.energy import power_check
from ...sim import energy_parts as EP

#: Metrics every row of a successful point carries (when the workload reports them).
SCALAR_TYPES = (bool, int, float, str, type(None))


@functools.lru_cache(maxsize=32)
def _model(name: str):
    from ...workloads import load_model
    return load_model(name)


def run_phase(chip, workload: dict[str, Any], *, simulate=None):
    """``run_workload`` for a workload dict (model name, phase, batch, prompt, gen, ...);
    ``simulate`` replaces the engine (tests pass a roofline double)."""
    from ...sim.run import Scenario, run_workload

    from .spec import WORKLOAD_PARAMS

    wl = {k: d for k, (_, _, d) in WORKLOAD_PARAMS.items() if d is not None}
    wl.update(workload)  # the documented defaults (batch 1, prompt 2048, gen 128) when absent
    model = _model(wl.pop("model"))
    phase = wl.pop("phase")
    kwargs = {k: v for k, v in wl.items() if v is not None}
    if phase != "train":
        kwargs.pop("seq", None)
    return run_workload(chip, model, Scenario.of(phase=phase, **kwargs), simulate=simulate)


def power_metrics(chip, energy_j: float | None, seconds: float | None,
                  chips: int = 1) -> dict[str, Any]:
    """Average power per chip (``power_w`` = ``energy_j`` of all ``chips`` ÷ chips ÷
    ``seconds``), ``tdp_fraction`` and ``exceeds_tdp`` against the chip's TDP (None when
    unknown)."""
    if not energy_j or not seconds or seconds <= 0:
        return {"power_w": None, "tdp_fraction": None, "exceeds_tdp": None}
    pc = power_check(chip, energy_j / max(1, chips or 1), seconds)
    return {"power_w": pc.power_w, "tdp_fraction": pc.tdp_fraction,
            "exceeds_tdp": pc.exceeds_tdp}


def result_metrics(chip, res) -> dict[str, Any]:
    """Scalar metrics of a workload result, plus power, tokens per joule and, for a result
    with ``energy_breakdown_j``, its ``energy_j`` by component (``energy_mac_j`` ...
    ``energy_static_j``: :func:`diptych.sim.energy_parts.columns`)."""
    d = res.to_dict() if hasattr(res, "to_dict") else dict(res)
    out = {k: v for k, v in d.items() if isinstance(v, SCALAR_TYPES)}
    if "energy_breakdown_j" in d:
        out.update(EP.columns(d["energy_breakdown_j"]))
    out.update(power_metrics(chip, d.get("energy_j"), d.get("seconds"), d.get("chips", 1)))
    if d.get("warnings"):
        out["warnings"] = "; ".join(map(str, d["warnings"]))
    ej = d.get("energy_j_per_token")
    out["tokens_per_j"] = (1.0 / ej) if ej else None
    out.update(cost_metrics(chip, d))  # cost_usd, usd_per_mtok, tokens_per_s_per_usd ...
    out.update(tier_metrics(d))
    return out


def tier_metrics(d: dict) -> dict[str, float]:
    """What a run put in the second memory tier (docs/chips.md, "Memory tiers"):
    ``dram2_state_gib``, the state it holds (GiB), and ``dram2_traffic_share``, the share of
    the run's DRAM bytes it moved; 0 for a run that fits the first tier (or a chip without
    a second); the third tier's likewise (``dram3_state_gib``, ``dram3_traffic_share``: 0
    without ``[dram3]`` or when the first two hold the run)."""
    tiers = (d.get("info") or {}).get("memory_tiers")
    if not tiers:
        return {"dram2_state_gib": 0.0, "dram2_traffic_share": 0.0,
                "dram3_state_gib": 0.0, "dram3_traffic_share": 0.0}
    moved, total = tiers["dram2_bytes_moved"], d.get("dram_bytes") or 0.0
    moved3 = ((tiers.get("tiers") or {}).get("dram3") or {}).get("bytes_moved", 0.0)
    return {"dram2_state_gib": tiers["bytes"]["dram2"] / 2**30,
            "dram2_traffic_share": moved / total if total else 0.0,
            "dram3_state_gib": tiers["bytes"].get("dram3", 0) / 2**30,
            "dram3_traffic_share": moved3 / total if total else 0.0}


def evaluate_workload(chip, workload: dict[str, Any]) -> dict[str, Any]:
    """The sweep evaluator: run ``workload`` on ``chip`` and return its scalar metrics.

    The run's warnings go into the ``warnings`` column rather than the worker's stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return result_metrics(chip, run_phase(chip, workload))


@functools.lru_cache(maxsize=1)
def metric_types() -> dict[str, type]:
    """Name → Python type (bool, int, float, str) of every metric :func:`evaluate_workload`
    returns, derived without a run: :func:`result_metrics` of a :class:`RunResult` whose
    fields hold sample values of their annotated types. Sweeps declare these columns before
    the first result arrives (one Parquet schema for every part)."""
    import dataclasses
    import typing

    from ...arch import load_chip
    from ...sim.run.node import RunResult

    samples = {bool: True, int: 1, float: 1.0, str: "x"}
    hints = typing.get_type_hints(RunResult)
    kw = {}
    for f in dataclasses.fields(RunResult):
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        base = args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) else tp
        origin = typing.get_origin(base) or base
        kw[f.name] = samples.get(base, origin() if origin in (list, dict) else None)
    res = RunResult(**kw)
    res.warnings = ["x"]
    res.energy_breakdown_j = EP.zero()      # declares the component columns (floats)
    metrics = result_metrics(load_chip("tpu-v4"), res)
    return {k: type(v) for k, v in metrics.items() if type(v) in samples}


evaluate_workload.metric_types = metric_types

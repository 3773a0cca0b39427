"""A plan's training state in the chip's second memory tier (``Plan.offload``,
:mod:`diptych.sim.run.offload`; docs/cluster.md, "Offload"): no offload on a tiered chip is
the chip without the tier; the tier moves the closed form per data-parallel shard; a tier like
the first costs the optimizer nothing more, a slower link never makes a step faster and the
update takes at least its bytes at the link's rate; prefetched weights make each layer the
slower of its compute and its weights' stream; ``plan`` can choose the offload and says
where each tensor lives; bad input exits 2 naming it."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.arch.chip import Dram, MemoryTier  # noqa: E402
from diptych.sim.cluster.run import build_plan, run_cluster_step  # noqa: E402
from diptych.sim.run import Scenario  # noqa: E402
from diptych.sim.run.offload import param_fetch_seconds  # noqa: E402
from diptych.sim.cluster.params import layer_params  # noqa: E402
from diptych.workloads.params import params_per_chip  # noqa: E402
from diptych.workloads.registry import load_model  # noqa: E402
from diptych.tools.cli import main  # noqa: E402

CXL = str(Path(__file__).resolve().parents[2] / "examples" / "chips" / "infer-2026-cxl.toml")
STEP = dict(phase="train", batch=8, seq=256, chips=2, tp=1, dp=2, micro_batch=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


@pytest.fixture(scope="module")
def chip():
    c = load_chip(CXL)
    return dataclasses.replace(c, dram2=dataclasses.replace(c.dram2, mm2_per_phy=0.0))


def step(chip, model, offload="none", zero=1, **kw):
    s = Scenario.of(**{**STEP, **kw}, offload=offload)
    return run_cluster_step(chip, model, s, plan=build_plan(s, zero=zero))


def same_as_first(chip):
    d = {f.name: getattr(chip.dram, f.name) for f in dataclasses.fields(Dram)}
    return dataclasses.replace(chip, dram2=MemoryTier(
        **{**d, "kind": "ddr5", "capacity_gib": 64.0}, pj_per_bit=chip.energy.pj_per_dram_bit))


def test_no_offload_on_a_tiered_chip_is_the_chip_without_the_tier(chip, tiny):
    a, b = step(chip, tiny), step(dataclasses.replace(chip, dram2=None), tiny)
    assert "offload" not in a.info and a.plan.offload == "none"
    assert (a.seconds, a.energy_j, a.memory.breakdown) == (b.seconds, b.energy_j,
                                                           b.memory.breakdown)


def test_the_optimizer_offload_moves_the_closed_form_per_shard(chip, tiny):
    """ZeRO-1 over dp = 2: each rank updates P/2 parameters, reading and writing their 12
    optimizer bytes in the tier: 24·P/2 bytes per step; the memory holds that shard there."""
    r = step(chip, tiny, "optimizer")
    n = params_per_chip(load_model(tiny), 1)
    off = r.info["offload"]
    assert off["tier2_bytes_moved"] == pytest.approx(24.0 * n / 2, rel=1e-12)
    assert off["placement"]["optimizer_state"] == "dram2"
    assert r.memory.tier2_parts == ("optimizer_state",)
    assert r.memory.tier2_bytes == pytest.approx(12.0 * n / 2, rel=1e-12)
    assert r.fits


def test_a_tier_like_the_first_adds_nothing_and_a_slower_link_never_speeds_up(chip, tiny):
    base = step(chip, tiny)
    like = step(same_as_first(chip), tiny, "optimizer")
    opt = [x["optimizer_s"] for x in (base.stage_seconds[0], like.stage_seconds[0])]
    assert opt[1] == pytest.approx(opt[0], rel=1e-9)
    links = [dataclasses.replace(chip, dram2=dataclasses.replace(chip.dram2, link_gb_per_s=g,
                                                                  link_latency_ns=ns))
             for g, ns in ((1e5, 0.0), (8.0, 1000.0))]
    runs = [step(c, tiny, "optimizer") for c in links]
    secs = [r.seconds for r in runs]
    assert like.seconds <= secs[0] < secs[1]
    slow = runs[-1]
    moved = slow.info["offload"]["tier2_bytes_moved"]
    assert slow.stage_seconds[0]["optimizer_s"] >= 0.99 * moved / links[-1].dram2.bytes_per_s


def test_prefetched_weights_take_the_slower_of_compute_and_the_stream(chip, tiny):
    """With ``params``, each layer's forward is max(its compute, its weights at the tier's
    rate): never faster than either, and equal to the compute when the tier keeps up."""
    base = step(chip, tiny)
    slow = dataclasses.replace(chip, dram2=dataclasses.replace(chip.dram2, link_gb_per_s=0.05,
                                                                link_latency_ns=0.0))
    fast, starved = step(chip, tiny, "params"), step(slow, tiny, "params")
    lp = layer_params(load_model(tiny), 1, 1, 1)
    for kind, ls in starved.layers.items():
        fetch = param_fetch_seconds(slow, lp.of(kind, False)[0] * 2.0)   # bf16 weights
        assert ls.fwd_compute == max(base.layers[kind].fwd_compute, fetch)
        assert ls.fwd_compute >= fetch > base.layers[kind].fwd_compute
    for kind, ls in fast.layers.items():
        assert ls.fwd_compute >= base.layers[kind].fwd_compute
    assert starved.seconds > fast.seconds >= base.seconds


def test_plan_chooses_an_offload_and_says_where_the_tensors_live(tiny):
    r = CliRunner().invoke(main, ["plan", "--model", tiny, "--chip", CXL, "--cluster",
                                  "dgx-h100", "--chips", "2", "--batch", "8", "--seq", "256",
                                  "--tp", "1", "--pp", "1", "--cp", "1", "--zero", "1",
                                  "--micro-batch", "1", "--recompute", "none",
                                  "--offload", "none,optimizer",
                                  "--refine", "2", "--top", "2", "--json"])
    assert r.exit_code == 0, r.output
    plans = json.loads(r.output)["plans"]
    assert sorted(p["offload"] for p in plans) == ["none", "optimizer"]
    off = next(p for p in plans if p["offload"] == "optimizer")
    assert off["offload_report"]["placement"]["optimizer_state"] == "dram2"
    assert off["memory_breakdown"]["optimizer_state"] > 0
    assert plans[0]["offload"] == "none"       # the state fits the HBM: the tier only costs


@pytest.mark.parametrize("args, words", [
    (["--chip", "h100", "--offload", "optimizer"], "has no [dram2]"),
    (["--chip", CXL, "--offload", "gradients"], "'gradients' is not one of"),
])
def test_plan_bad_offload_exits_2(tiny, args, words):
    r = CliRunner().invoke(main, ["plan", "--model", tiny, "--cluster", "dgx-h100",
                                  "--chips", "2", "--batch", "8", "--seq", "256", *args])
    assert r.exit_code == 2 and words in r.output, r.output

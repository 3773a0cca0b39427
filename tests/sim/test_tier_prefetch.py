"""Weights in the second memory tier prefetched ahead of their GEMM (docs/chips.md, "Memory
tiers", "Prefetch"): where the residency plan leaves scratchpad room the stream overlaps the
previous ops and the step gets faster than reading the tier inside each op (the reference:
the same run with no tier-2 prefetch), never faster than the tier's bytes at its rate; with no
room nothing changes; a slower link never makes a prefetched step faster; a prefetch's main
phase never undercuts the op's compute."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.sim.program.demand import op_demand  # noqa: E402
from diptych.sim.run import Scenario, run_workload  # noqa: E402
import diptych.sim.run.scheduled as scheduled  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chips" / "infer-2026-lpddr.toml"
DECODE = Scenario.of(phase="decode", batch=16, prompt=64, gen=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


def small(scratchpad_mib: float, link: dict | None = None):
    """infer-2026-lpddr with 300 KB of first tier and ``scratchpad_mib`` per core: the tiny
    model's MLP and head weights live in the LPDDR5X tier."""
    c = load_chip(str(EXAMPLE))
    c = dataclasses.replace(
        c, dram=dataclasses.replace(c.dram, capacity_gib=0.0003),
        core=dataclasses.replace(c.core, scratchpad=dataclasses.replace(
            c.core.scratchpad, capacity_mib=scratchpad_mib)))
    if link:
        c = dataclasses.replace(c, dram2=dataclasses.replace(c.dram2, **link))
    return c


def direct(chip, model):
    """The reference: the same run with every tier-2 byte read inside its op (no prefetch)."""
    keep = scheduled.tier2_weight_bytes
    scheduled.tier2_weight_bytes = lambda *a: 0.0
    try:
        return run_workload(chip, model, DECODE)
    finally:
        scheduled.tier2_weight_bytes = keep


def test_prefetch_overlaps_the_tier_but_never_beats_its_rate(tiny):
    chip = small(0.4)
    pre, ref = run_workload(chip, tiny, DECODE), direct(chip, tiny)
    moved = pre.info["memory_tiers"]["dram2_bytes_moved"]
    assert moved > 0 and pre.info["memory_tiers"] == ref.info["memory_tiers"]
    assert pre.seconds < ref.seconds
    assert pre.seconds >= moved / chip.dram2.bytes_per_s
    assert (pre.dram_bytes, pre.energy_j) == (ref.dram_bytes, ref.energy_j)


def test_without_room_nothing_changes(tiny):
    """The residency plan fills the scratchpad: no prefetch fits, bit-identical."""
    chip = small(0.2)
    a, b = run_workload(chip, tiny, DECODE), direct(chip, tiny)
    assert a.info["memory_tiers"]["dram2_bytes_moved"] > 0
    assert (a.seconds, a.energy_j, a.dram_bytes) == (b.seconds, b.energy_j, b.dram_bytes)


def test_a_slower_link_never_makes_a_prefetched_step_faster(tiny):
    fast = run_workload(small(0.4, dict(attach="cxl", links=2, link_gb_per_s=1e5)), tiny, DECODE)
    slow = run_workload(small(0.4, dict(attach="cxl", links=2, link_gb_per_s=8.0,
                                        link_latency_ns=1000.0)), tiny, DECODE)
    assert slow.seconds > fast.seconds


@pytest.mark.parametrize("pre_s", [1e-7, 5e-6])
def test_a_tier2_prefetch_splits_the_stall_not_the_compute(pre_s):
    """The early phase takes the tier's time for the bytes, at most the op's stall; the main
    phase keeps the rest, at least the compute, and all the first tier's bytes."""
    d = op_demand(seconds=4e-6, unit="array", dram_bytes=1e6, stream_bytes_per_s=1e12,
                  compute_seconds=1e-6, prefetch_bytes=2e6, prefetch_seconds=pre_s)
    early, main = d.phases
    assert early.early and early.seconds == min(pre_s, 3e-6)
    assert main.seconds == pytest.approx(4e-6 - early.seconds)
    assert main.seconds >= 1e-6 * (1 - 1e-12)
    assert dict(main.use)["dram"] == pytest.approx(min(1.0, 1e6 / 1e12 / main.seconds))

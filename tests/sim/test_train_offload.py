"""Training state in the second memory tier (``offload``, :mod:`diptych.sim.run.offload`;
docs/chips.md, "Training state in the second tier"): without an offload a tiered chip trains
bit-identically to the chip without the tier; a tier with the first tier's DRAM equals the run
that keeps the same state in the first tier; a slower or longer link never makes a step
faster and the update costs at least its tier bytes at the link's rate; the bytes the tier
moves equal the closed form; the memory splits by tier; bad input exits 2 naming it."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.arch.chip import TENSOR_KINDS, Dram, MemoryTier, ResidencyPolicy  # noqa: E402
from diptych.sim.run import Scenario, run_workload  # noqa: E402
from diptych.sim.run.node import default_precision  # noqa: E402
from diptych.workloads.params import params_per_chip  # noqa: E402
from diptych.workloads.registry import load_model  # noqa: E402
from diptych.tools.cli import main  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "chips"
TRAIN = dict(phase="train", batch=2, seq=256)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


@pytest.fixture(scope="module")
def chip():
    """infer-2026-cxl without the links' PHY area (the die, and so its static power, as
    without the tier) and with no training state kept on chip: what the first tier holds is
    in its DRAM, as the second tier's is in the tier (so the two can be compared byte for
    byte)."""
    c = load_chip(str(EXAMPLES / "infer-2026-cxl.toml"))
    off_chip = tuple(k for k in TENSOR_KINDS if k not in ("weight", "optimizer_state"))
    return dataclasses.replace(c, dram2=dataclasses.replace(c.dram2, mm2_per_phy=0.0),
                               residency=ResidencyPolicy(scratchpad_kinds=off_chip,
                                                         shared_buffer_kinds=off_chip))


def tier(chip, **kw):
    return dataclasses.replace(chip, dram2=dataclasses.replace(chip.dram2, **kw))


def same_as_first(chip):
    """The chip with a second tier of its first tier's DRAM, energy per bit, and no link."""
    d = {f.name: getattr(chip.dram, f.name) for f in dataclasses.fields(Dram)}
    return dataclasses.replace(chip, dram2=MemoryTier(
        **{**d, "kind": "ddr5", "capacity_gib": 64.0}, pj_per_bit=chip.energy.pj_per_dram_bit))


def run(chip, model, **kw):
    return run_workload(chip, model, Scenario.of(**{**TRAIN, **kw}))


def test_without_offload_a_tiered_chip_trains_as_without_the_tier(chip, tiny):
    """Everything in the first tier: bit-identical time, traffic and energy, no tier record."""
    a, b = run(chip, tiny), run(dataclasses.replace(chip, dram2=None), tiny)
    assert "offload" not in a.info and "memory_tiers" not in a.info
    assert (a.seconds, a.dram_bytes, a.energy_j, a.energy_breakdown_j, a.memory_breakdown) == (
        b.seconds, b.dram_bytes, b.energy_j, b.energy_breakdown_j, b.memory_breakdown)


@pytest.mark.parametrize("offload", ["optimizer", "params"])
def test_a_tier_like_the_first_equals_the_state_in_the_first(chip, tiny, offload):
    """Issue 25 item 6 for training: a tier that streams as the first tier does (its DRAM,
    its energy, no link) gives the step of the same state held in the first tier."""
    a, b = run(same_as_first(chip), tiny, offload=offload), run(chip, tiny)
    assert a.info["offload"]["tier2_bytes_moved"] > 0
    assert a.seconds == pytest.approx(b.seconds, rel=1e-9)
    assert a.energy_j == pytest.approx(b.energy_j, rel=1e-9)
    assert a.dram_bytes == pytest.approx(b.dram_bytes, rel=1e-12)


@pytest.mark.parametrize("offload", ["optimizer"])
def test_a_slower_or_longer_link_never_makes_a_step_faster(chip, tiny, offload):
    """The link's rate and latency only add time: the ideal tier (the first tier's DRAM) ≤
    a link that cannot bind < slow ports with latency; the AdamW update costs at least its
    tier bytes at the link's rate."""
    ref = run(same_as_first(chip), tiny, offload=offload)
    runs = [run(tier(chip, link_gb_per_s=g, link_latency_ns=ns), tiny, offload=offload)
            for g, ns in ((1e5, 0.0), (8.0, 1000.0))]
    secs = [r.seconds for r in runs]
    assert ref.seconds <= secs[0] < secs[1]
    slow = runs[-1]
    rate = tier(chip, link_gb_per_s=8.0).dram2.bytes_per_s
    adamw = [r for r in slow.layers if r["op"] == "adamw"]
    assert adamw and all(r["seconds"] >= 0.99 * r["dram2_bytes"] / rate for r in adamw)


@pytest.mark.parametrize("spec", [None, "fp8"])
def test_the_optimizer_offload_moves_the_closed_form(chip, tiny, spec):
    """The update reads and writes the master copy and both moments in the tier: 2·K·P bytes
    per step for P parameters on the chip and K optimizer bytes per parameter (12: fp32
    master and moments), whatever the working precision (bf16; an FP8 recipe)."""
    kw = dict(weights_dtype=spec, act_dtype=spec) if spec else {}
    r = run(chip, tiny, offload="optimizer", **kw)
    p = default_precision(chip, "train", spec, spec)
    n = params_per_chip(load_model(tiny), 1)
    assert p.optimizer_state_bytes_per_param == 12.0
    assert r.info["offload"]["tier2_bytes_moved"] == pytest.approx(24.0 * n, rel=1e-12)
    assert r.info["offload"]["placement"] == {"weights": "dram", "gradients": "dram",
                                              "optimizer_state": "dram2",
                                              "activations": "dram"}


def test_the_memory_splits_by_tier_and_offload_fits_what_does_not(chip, tiny):
    """Without an offload a step that exceeds the first tier is refused; offloading the
    optimizer state puts exactly that part in the tier, and it fits; a tier too small for
    the offloaded state does not fit."""
    whole = run(chip, tiny)
    bd = whole.memory_breakdown
    small = dataclasses.replace(chip, dram=dataclasses.replace(
        chip.dram, capacity_gib=(whole.memory_bytes - bd["optimizer_state"] / 2) / 2**30))
    with pytest.raises(ValueError, match="--offload optimizer or --offload params"):
        run(small, tiny)
    r = run(small, tiny, offload="optimizer")
    assert r.fits and r.memory["tier2_bytes"] == bd["optimizer_state"]
    assert r.memory["tier1_bytes"] == whole.memory_bytes - bd["optimizer_state"]
    tight = tier(small, capacity_gib=bd["optimizer_state"] / 2 / 2**30)
    assert not run(tight, tiny, offload="optimizer").fits


@pytest.mark.parametrize("args, words", [
    (["--chip", "infer-2026", "--offload", "optimizer"], "has no [dram2]"),
    (["--chip", str(EXAMPLES / "infer-2026-cxl.toml"), "--offload", "optimizer",
      "--execution", "sum"], "--execution schedule"),
    (["--chip", str(EXAMPLES / "infer-2026-cxl.toml"), "--offload", "activations"],
     "'activations' is not one of"),
])
def test_bad_offloads_exit_2_naming_them(tiny, args, words):
    r = CliRunner().invoke(main, ["run", "--model", tiny, "--phase", "train", "--batch", "2",
                                  "--seq", "256", *args])
    assert r.exit_code == 2 and words in r.output, r.output


def test_an_offload_in_decode_or_of_a_kind_that_cannot_live_there_is_refused(tiny):
    r = CliRunner().invoke(main, ["run", "--chip", str(EXAMPLES / "infer-2026-cxl.toml"),
                                  "--model", tiny, "--phase", "decode", "--prompt", "64",
                                  "--offload", "optimizer"])
    assert r.exit_code == 2 and "decode run has no optimizer state" in r.output, r.output
    with pytest.raises(ValueError, match="saved activations are written in the forward"):
        Scenario.of(phase="train", seq=256, offload="activations")


def test_the_host_memory_example_is_a_pcie_tier_at_the_port_rate():
    """examples/chips/h100-host.toml: a socket's DDR5 (1 TiB, 307 GB/s of pins) shared by its
    four GPUs (256 GiB, 76.8 GB/s each) behind each GPU's PCIe 5.0 x16 port: the tier streams
    at the port's 63 GB/s."""
    c = load_chip(str(EXAMPLES / "h100-host.toml"))
    assert (c.dram2.attach, c.dram2.capacity_gib, c.dram2.shared_by) == ("pcie", 1024.0, 4)
    assert c.dram2.capacity_bytes == 256 * 2**30
    assert c.dram2.peak_bytes_per_s == 16 * 32 * 4.8e9 / 8
    assert c.dram2.pin_share_bytes_per_s == 76.8e9 and c.dram2.bytes_per_s == 63e9

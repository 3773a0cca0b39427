"""A second memory tier's PHYs on the die edge (docs/chips.md, "Memory tiers"): placed beside
the HBM PHYs, each where the most edge is free, never overlapping another interface; when the
edge cannot hold them, `chips validate` exits 2 saying how many and how much edge is short."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from click.testing import CliRunner

from diptych.arch import load_chip
from diptych.arch.geometry import check, dies
from diptych.tools.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chips" / "infer-2026-lpddr.toml"


def test_every_tier_phy_of_the_example_is_placed_without_overlap():
    chip = load_chip(str(EXAMPLE))
    ds = dies(chip)
    tier = [s for d in ds for s in d.slots if s.kind == "dram2_phy"]
    assert len(tier) == chip.dram2.stacks == sum(d.tier_phys for d in ds)
    assert all(s.length_mm == chip.dram2.mm_edge_per_phy for s in tier)
    for d in ds:
        for e in {s.edge for s in d.slots}:
            on = sorted((s.start_mm, s.start_mm + s.length_mm) for s in d.slots if s.edge == e)
            assert all(a[1] <= b[0] + 1e-9 for a, b in zip(on, on[1:]))
            assert on[-1][1] <= d.edge_length(e) + 1e-9
    assert check(chip) == []
    # the demand counts them: the same chip without the tier asks for less edge
    alone = dataclasses.replace(chip, dram2=None)
    assert sum(d.demand_mm for d in ds) - sum(d.demand_mm for d in dies(alone)) == \
        chip.dram2.stacks * chip.dram2.mm_edge_per_phy


def test_a_tier_the_edge_cannot_hold_is_refused_naming_the_shortfall(tmp_path):
    text = EXAMPLE.read_text().replace("mm_edge_per_phy = 4.0", "mm_edge_per_phy = 30.0")
    bad = tmp_path / "wide.toml"
    bad.write_text(text)
    chip = load_chip(str(bad))
    v = [x for x in check(chip) if x.kind == "tier_edge"]
    assert v and all(x.excess > 0 and x.excess % 30.0 == 0 for x in v)
    r = CliRunner().invoke(main, ["chips", "validate", str(bad)])
    assert r.exit_code == 2 and "second memory tier" in r.output

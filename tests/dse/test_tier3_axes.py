"""The third memory tier as sweep and compare axes (``[dram3]``; docs/dse.md, "Memory-tier
axes"): the ``dram3`` axis removes the tier, keeps the base chip's or takes another chip
file's ``[dram3]``; ``dram3_packages`` scales it, ``dram3_link_gb_per_s`` sets its links;
rows carry its columns and what each run put there; bad axes name the key and the value."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.tools.dse.compare import tier_summary  # noqa: E402
from diptych.tools.dse.evaluate import evaluate_workload  # noqa: E402
from diptych.tools.dse.spec import parse_spec  # noqa: E402
from diptych.tools.dse.sweep import chip_columns  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SOURCE = str(EXAMPLES / "sweep-tiers.toml")
WL = {"model": "llama-3-8b", "phase": "decode"}
THREE, LPDDR = "chips/infer-2026-3tier.toml", "chips/infer-2026-lpddr.toml"


def spec(chip: dict, base: str = THREE):
    return parse_spec({"base": base, "chip": chip, "workload": WL}, source=SOURCE)


def test_the_axis_removes_keeps_or_takes_a_third_tier_and_its_parameters_edit_it():
    base = load_chip(str(EXAMPLES / THREE))
    s = spec({"dram3": ["none", "base", THREE], "dram3_packages": [2, 8],
              "dram3_link_gb_per_s": [32.0]})
    assert s.count() == 6
    none = s.build_chip({"dram3": "none"})
    assert none.dram3 is None and none.dram2 == base.dram2
    c = s.build_chip({"dram3": "base", "dram3_packages": 8, "dram3_link_gb_per_s": 32.0})
    per = base.dram3.capacity_gib / base.dram3.stacks
    assert (c.dram3.stacks, c.dram3.capacity_gib) == (8, per * 8)
    assert c.dram3.bytes_per_s == base.dram3.links * 32e9      # the links bind
    cols = chip_columns(c)
    assert (cols["dram3_attach"], cols["dram3_gib"], cols["dram3_bytes_per_s"]) == (
        "cxl", per * 8, base.dram3.links * 32e9)
    assert chip_columns(none)["dram3_attach"] == "none" == chip_columns(load_chip(
        str(EXAMPLES / LPDDR)))["dram3_attach"]
    # the axis's tables are part of the ids: a spec without the axis gives other points
    assert not {p.id for p in s.points()} & {p.id for p in spec({}).points()}
    # a third tier without the second: an invalid point, named
    bare = spec({"dram2": ["none"], "dram3": ["base"]})
    with pytest.raises(ValueError, match=r"dram3.*\[dram2\]"):
        bare.build_chip({"dram2": "none", "dram3": "base"})


@pytest.mark.parametrize("chip, base, message", [
    ({"dram3": [LPDDR]}, THREE, "chip.dram3[0]: expected a chip with a [dram3] table "
                                "('infer-2026-lpddr' has none)"),
    ({"dram3": [3]}, THREE, "chip.dram3[0]: expected \"none\", \"base\" or a chip preset or "
                            "TOML with a [dram3] table"),
    ({"dram3_packages": [4]}, LPDDR, "chip.dram3_packages: the base chip 'infer-2026-lpddr' "
                                     "has no third memory tier ([dram3])"),
    ({"dram3_gbps_per_pin": [0.0]}, THREE, "chip.dram3_gbps_per_pin[0]: expected a finite "
                                           "positive number, got 0.0"),
    ({"dram3.kind": ["ddr5"]}, THREE, "chip.dram3.kind: a dotted path must name a numeric "
                                      "field, not a str (a tier of another kind"),
])
def test_bad_third_tier_axes_name_the_key_and_value(chip, base, message):
    with pytest.raises(ValueError) as e:
        spec(chip, base)
    assert message in str(e.value)


def test_a_runs_third_tier_metrics_and_the_compare_summary(tmp_path):
    """A tiny model's decode on the three-tier example with 0.5 GiB of HBM and 0.1 GiB of
    LPDDR5X (too small for the KV cache's class: it spills past it to the CXL tier): the
    run's own memory_tiers record in GiB and as a share of its DRAM bytes."""
    tiny = str(write_config(tmp_path, TINY))
    c = load_chip(str(EXAMPLES / THREE))
    small = dataclasses.replace(c, dram=dataclasses.replace(c.dram, capacity_gib=0.5),
                                dram2=dataclasses.replace(c.dram2, capacity_gib=0.1))
    wl = {"model": tiny, "phase": "decode", "batch": 512, "prompt": 4000, "gen": 1}
    m = evaluate_workload(small, wl)
    assert m["dram3_state_gib"] > 0 and 0 < m["dram3_traffic_share"] < 1
    assert m["dram2_traffic_share"] + m["dram3_traffic_share"] < 1
    assert tier_summary(c, "dram3") == {"attach": "cxl", "kind": c.dram3.kind,
                                        "gib": c.dram3.capacity_gib,
                                        "bytes_per_s": c.dram3.bytes_per_s}
    assert tier_summary(load_chip(str(EXAMPLES / LPDDR)), "dram3") is None

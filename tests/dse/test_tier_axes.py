"""Memory tiers as sweep axes (docs/dse.md, "Memory-tier axes"): the ``dram2`` axis removes
the tier, keeps the base chip's or takes another chip file's ``[dram2]``; ``dram2_packages``
scales its capacity; rows carry the tier's columns and what each run put there; bad axes exit
2 naming the key and the value."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.tools.cli import main  # noqa: E402
from diptych.tools.dse.evaluate import evaluate_workload, tier_metrics  # noqa: E402
from diptych.tools.dse.spec import load_spec, parse_spec  # noqa: E402
from diptych.tools.dse.sweep import chip_columns, count_points, result_columns  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SOURCE = str(EXAMPLES / "sweep-tiers.toml")
WL = {"model": "llama-3-8b", "phase": "decode"}
LPDDR, CXL = "chips/infer-2026-lpddr.toml", "chips/infer-2026-cxl.toml"


def spec(chip: dict, base: str = LPDDR):
    return parse_spec({"base": base, "chip": chip, "workload": WL}, source=SOURCE)


def test_the_example_spec_parses_into_its_nine_chips():
    s = load_spec(SOURCE)
    assert s.count() == 18 and count_points(s) == (18, 0, 0)
    kinds = {(c["hbm_stacks"], c["dram2"]): s.build_chip(c) for c in s.chip_points()}
    assert kinds[(6, "none")].dram2 is None
    assert kinds[(6, "base")].dram2 == load_chip(str(EXAMPLES / LPDDR)).dram2
    assert kinds[(4, CXL)].dram2 == load_chip(str(EXAMPLES / CXL)).dram2
    assert kinds[(4, CXL)].dram.stacks == 4 and kinds[(4, CXL)].dram.capacity_gib == 96.0


def test_packages_scale_the_tier_and_dotted_paths_edit_the_points_tier():
    s = spec({"dram2": [CXL, "base"], "dram2_packages": [2, 10], "dram2.t_rcd_ns": [20.0]})
    c = s.build_chip({"dram2": CXL, "dram2_packages": 2, "dram2.t_rcd_ns": 20.0})
    assert (c.dram2.attach, c.dram2.stacks, c.dram2.capacity_gib) == ("cxl", 2, 256.0)
    assert c.dram2.t_rcd_ns == 20.0
    c = s.build_chip({"dram2": "base", "dram2_packages": 10, "dram2.t_rcd_ns": 20.0})
    assert (c.dram2.kind, c.dram2.capacity_gib, c.dram2.t_rcd_ns) == ("lpddr5x", 320.0, 20.0)
    link = spec({"dram2": [CXL], "dram2_link_gb_per_s": [32.0]})
    assert link.build_chip({"dram2": CXL, "dram2_link_gb_per_s": 32.0}).dram2.bytes_per_s == 64e9


def test_hbm_stacks_traded_at_the_same_edge_are_the_floorplan_studys_designs():
    """infer-2026-lpddr's 6 HBM3E (10 mm each) + 5 LPDDR5X (4 mm): two stacks are five
    packages (benchmarks/memory_tiers.py's designs); eight stacks leave no edge for the tier;
    a tier behind a link has link ports, not packages, on the edge (an invalid point)."""
    s = spec({"dram2": ["base", CXL], "hbm_stacks_at_edge": [8, 6, 4, 2]})
    got = {v: s.build_chip({"dram2": "base", "hbm_stacks_at_edge": v}) for v in (8, 6, 4, 2)}
    assert [(c.dram.stacks, c.dram.capacity_gib) for c in got.values()] == [
        (8, 192.0), (6, 144.0), (4, 96.0), (2, 48.0)]
    assert got[8].dram2 is None
    assert [(c.dram2.stacks, c.dram2.capacity_gib) for c in list(got.values())[1:]] == [
        (5, 160.0), (10, 320.0), (15, 480.0)]
    from diptych.arch.geometry import check
    assert all(check(c) == [] for c in got.values())
    with pytest.raises(ValueError, match="behind a link"):
        s.build_chip({"dram2": CXL, "hbm_stacks_at_edge": 4})
    with pytest.raises(ValueError, match="cannot be combined with dram2_packages"):
        spec({"hbm_stacks_at_edge": [4], "dram2_packages": [5]})


def test_a_point_without_a_tier_to_size_is_an_invalid_chip_not_a_crash():
    s = spec({"dram2": ["none", "base"], "dram2_packages": [5]})
    with pytest.raises(ValueError, match="chip.dram2_packages: this point has no second"):
        s.build_chip({"dram2": "none", "dram2_packages": 5})
    assert count_points(s) == (1, 1, 0)


def test_ids_are_distinct_per_tier_and_follow_the_tier_files_content(tmp_path):
    s = spec({"dram2": ["none", "base", CXL]})
    assert len({p.id for p in s.points()}) == 3
    other = tmp_path / "chips"
    other.mkdir()
    (other / "infer-2026-cxl.toml").write_text(
        (EXAMPLES / CXL).read_text().replace("link_gb_per_s = 63.0", "link_gb_per_s = 32.0"))
    (other / "infer-2026-lpddr.toml").write_text((EXAMPLES / LPDDR).read_text())
    moved = parse_spec({"base": LPDDR, "chip": {"dram2": ["none", "base", CXL]},
                        "workload": WL}, source=str(tmp_path / "s.toml"))
    assert not {p.id for p in moved.points()} & {p.id for p in s.points()}


def test_rows_carry_the_tiers_columns():
    s = spec({"dram2": ["none", "base", CXL]})
    cols = {v: chip_columns(s.build_chip({"dram2": v})) for v in ("none", "base", CXL)}
    assert [cols[v]["dram2_attach"] for v in cols] == ["none", "package", "cxl"]
    assert [cols[v]["dram2_gib"] for v in cols] == [0.0, 160.0, 512.0]
    assert cols[CXL]["dram2_bytes_per_s"] == 126e9      # the links, below the 179 GB/s pins
    assert cols["base"]["dram2_bytes_per_s"] == load_chip(str(EXAMPLES / LPDDR)
                                                          ).dram2.peak_bytes_per_s
    from diptych.tools.dse.sweep import resolve_evaluator
    declared = result_columns(s, resolve_evaluator(None))
    assert str(declared["dram2"]) == "string"
    for k in ("dram2_gib", "dram2_bytes_per_s", "dram2_state_gib", "dram2_traffic_share"):
        assert str(declared[k]) == "double", k


def test_a_runs_tier_metrics_are_its_spilled_state_and_traffic(tmp_path):
    """A tiny model's decode on the CXL example with a 0.5 GiB first tier: the metrics are
    the run's own memory_tiers record (state in GiB, the tier's share of the DRAM bytes);
    0 for a run that fits the first tier."""
    tiny = str(write_config(tmp_path, TINY))
    c = load_chip(str(EXAMPLES / CXL))
    small = dataclasses.replace(c, dram=dataclasses.replace(c.dram, capacity_gib=0.5))
    wl = {"model": tiny, "phase": "decode", "batch": 512, "prompt": 4000, "gen": 1}
    m = evaluate_workload(small, wl)
    assert 0 < m["dram2_traffic_share"] < 1 and m["dram2_state_gib"] == pytest.approx(
        262144000 / 2**30)
    assert tier_metrics({"dram_bytes": 10.0, "info": {"memory_tiers": {
        "bytes": {"dram": 0, "dram2": 2**30}, "dram2_bytes_moved": 4.0}}}) == {
        "dram2_state_gib": 1.0, "dram2_traffic_share": 0.4, "dram3_state_gib": 0.0,
        "dram3_traffic_share": 0.0}
    fits = evaluate_workload(c, wl)
    assert (fits["dram2_state_gib"], fits["dram2_traffic_share"]) == (0.0, 0.0)


@pytest.mark.parametrize("chip, base, message", [
    ({"dram2": ["nowhere.toml"]}, LPDDR, "chip.dram2[0]: nowhere.toml: cannot read chip file"),
    ({"dram2": ["infer-2026"]}, LPDDR, "chip.dram2[0]: expected a chip with a [dram2] table "
                                       "('infer-2026' has none)"),
    ({"dram2": [3]}, LPDDR, "chip.dram2[0]: expected \"none\", \"base\""),
    ({"dram2": ["base"]}, "infer-2026", "chip.dram2[0]: expected a chip with a [dram2]"),
    ({"dram2_packages": [4]}, "infer-2026", "chip.dram2_packages: the base chip 'infer-2026' "
                                            "has no second memory tier"),
    ({"dram2": ["none"], "dram2_packages": [4]}, LPDDR, "chip.dram2_packages: the base chip"),
    ({"dram2_link_gb_per_s": [32.0]}, LPDDR, "chip.dram2_link_gb_per_s: no tier of the sweep "
                                             "is behind a link"),
    ({"dram2_packages": [0]}, LPDDR, "chip.dram2_packages[0]: expected a positive integer"),
    ({"dram2.kind": ["gddr7"]}, LPDDR, "chip.dram2.kind: a dotted path must name a numeric "
                                       "field, not a str (a tier of another kind"),
    ({"dram2.stacks": [4]}, "infer-2026", "chip.dram2.stacks: unknown chip parameter"),
])
def test_bad_tier_axes_name_the_key_and_value(chip, base, message):
    with pytest.raises(ValueError) as info:
        spec(chip, base)
    assert message in str(info.value)


def test_the_cli_exits_2_on_a_bad_tier_axis(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(f'base = "{EXAMPLES / LPDDR}"\n[chip]\ndram2 = ["none", "h100"]\n'
                   '[workload]\nmodel = "llama-3-8b"\nphase = "decode"\n')
    r = CliRunner().invoke(main, ["sweep", str(bad), "--out", str(tmp_path / "o"), "--dry-run"])
    assert r.exit_code == 2 and "chip.dram2[1]" in r.output and "'h100' has none" in r.output

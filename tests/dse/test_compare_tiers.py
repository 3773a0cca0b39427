"""``compare`` of two designs with a second memory tier (docs/dse.md, "Memory-tier axes"):
each chip's tier and, per decode point, the state each run put there and the tier's share of
its DRAM bytes, in the JSON, the rows and the table; the verdict names the tier when decode
streams from it. The engine is the roofline double; a tiny model and a 0.5 GiB first tier make
the long-context decode spill."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

import pytest

from diptych.arch import load_chip
from diptych.tools.dse.compare import CompareSettings, compare
from diptych.tools.dse.compare_table import metrics

sys.path.insert(0, str(Path(__file__).parent))
import fake_eval  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

CHIPS = Path(__file__).resolve().parents[2] / "examples" / "chips"
SETTINGS = CompareSettings(prompts=(512,), batches=(8, 512), contexts=(4000,), ref_batch=512,
                           train_tp=1, train_batch=1, train_seq=256)


def small_first_tier(path: str, name: str):
    c = load_chip(str(CHIPS / path))
    return dataclasses.replace(c, name=name,
                               dram=dataclasses.replace(c.dram, capacity_gib=0.5))


@pytest.fixture(scope="module")
def cmp(tmp_path_factory):
    tiny = write_config(tmp_path_factory.mktemp("tiny"), TINY)
    chips = [small_first_tier("infer-2026-lpddr.toml", "lpddr"),
             small_first_tier("infer-2026-cxl.toml", "cxl"),
             dataclasses.replace(load_chip("infer-2026"), name="hbm-only")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compare(chips, tiny, SETTINGS, run=fake_eval.roofline_run)


def test_the_json_states_each_tier_and_what_each_decode_put_there(cmp):
    j = cmp.to_json()["chips"]
    assert j["lpddr"]["dram2"]["attach"] == "package" and j["hbm-only"]["dram2"] is None
    assert j["cxl"]["dram2"] == {"attach": "cxl", "kind": "ddr5", "gib": 512.0,
                                 "bytes_per_s": 126e9}
    short, long_ = ({d["batch"]: d for d in j[n]["decode"]} for n in ("lpddr", "cxl"))
    assert short[8]["dram2_state_gib"] == 0.0 == long_[8]["dram2_state_gib"]
    # the same first tier places the same state in the second, whatever the tier
    assert short[512]["dram2_state_gib"] == long_[512]["dram2_state_gib"] > 0
    assert 0 < short[512]["dram2_traffic_share"] == long_[512]["dram2_traffic_share"] < 1
    assert {d["batch"]: d["dram2_state_gib"] for d in j["hbm-only"]["decode"]} == {8: 0.0,
                                                                                   512: 0.0}


def test_the_faster_tier_wins_the_spilled_decode_and_the_verdict_names_it(cmp):
    """LPDDR5X at 341 GB/s against the CXL links' 126 GB/s: with the same bytes in each tier,
    the package tier's decode is faster; the all-HBM chip (192 GiB holds it all) is fastest
    of the three and its verdict names the first tier."""
    d = {n: cmp.chips[n].decode[(512, 4000)] for n in cmp.chips}
    assert d["hbm-only"]["tpot_s"] < d["lpddr"]["tpot_s"] < d["cxl"]["tpot_s"]
    two = compare_two(cmp)
    assert "second tier (lpddr5x, package) at 341 GB/s" in two.verdicts()["decode"]["text"]


def compare_two(cmp):
    """The comparison of the two tiered chips only (the verdict then falls to a tier)."""
    from diptych.tools.dse.compare import Comparison

    return Comparison(model=cmp.model, settings=cmp.settings,
                      chips={n: cmp.chips[n] for n in ("lpddr", "cxl")})


def test_rows_and_table_carry_the_tier(cmp):
    rows = [r for r in cmp.rows() if r["phase"] == "decode" and r["batch"] == 512]
    assert all(r["dram2_state_gib"] is not None for r in rows)
    assert {r["chip"] for r in rows if r["dram2_state_gib"] > 0} == {"lpddr", "cxl"}
    table = {m.label: m for m in metrics(cmp)}
    assert table["DRAM tier 2"].cells[1].startswith("512 GiB ddr5, 126 GB/s behind 2 cxl")
    assert table["DRAM tier 2"].cells[2] == "none"
    spilled = table["decode b=512 ctx=4000: state in tier 2 · its share of DRAM bytes"]
    assert spilled.cells[0] == spilled.cells[1] != spilled.cells[2]
    assert not any(m.label.startswith("decode b=8 ctx=4000: state") for m in metrics(cmp))


def test_a_comparison_without_tiers_keeps_its_structure():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(["infer-2026"], "llama-3-8b", CompareSettings(
            prompts=(512,), batches=(1,), contexts=(1024,), ref_batch=1, train_seq=1024),
            run=fake_eval.roofline_run)
    j = c.to_json()["chips"]["infer-2026"]
    assert "dram2" not in j and set(j["decode"][0]) == {"batch", "context", "tpot_s",
                                                        "tokens_per_s"}
    assert "dram2_state_gib" not in c.rows()[0]
    assert not any(m.label == "DRAM tier 2" for m in metrics(c))

"""A sweep's dtype axis keeps the base chip's datapath (issue 12, item 3): the default dtype
changes, the declared MACs per PE per cycle, area and energy do not."""

from __future__ import annotations

import pytest

from diptych.arch import load_chip
from diptych.tools.dse.spec import parse_spec
from diptych.arch.area import die_area_mm2

WL = {"model": "llama-3-8b", "phase": ["decode"]}


def spec(base, dtypes, **kw):
    return parse_spec({"base": base, "chip": {"dtype": dtypes}, "workload": WL, **kw},
                      source="t.toml")


def test_h100_peaks_keep_the_preset_rate_ratios():
    base = load_chip("h100")
    s = spec("h100", ["int8", "fp8", "bf16"])
    chips = {p.chip["dtype"]: s.build_chip(p.chip) for p in s.points()}
    peak = {d: c.peak_ops_per_s[c.default_dtype] for d, c in chips.items()}
    rate = base.core.array.macs_per_pe_per_cycle
    for d in ("int8", "fp8"):
        assert peak[d] / peak["bf16"] == pytest.approx(rate[d] / rate["bf16"], rel=1e-12)
    assert peak["fp8"] == pytest.approx(2 * 989.4e12, rel=1e-3)      # H100 SXM dense FP8
    for c in chips.values():
        assert die_area_mm2(c) == pytest.approx(die_area_mm2(base), rel=1e-12)
        assert c.energy == base.energy and c.core.array == base.core.array


def test_a_dtype_the_base_chip_lacks_is_named():
    with pytest.raises(ValueError, match=r"chip\.dtype\[1\]: expected a dtype the base chip "
                                         r"'h100' supports.*macs_per_pe_per_cycle\.int4 is 0"):
        spec("h100", ["bf16", "int4"])


def test_rebuild_option_builds_one_mac_per_pe_for_the_dtype():
    s = spec("h100", ["int8", "bf16"], dtype_datapath="rebuild")
    chips = [s.build_chip(p.chip) for p in s.points()]
    assert [c.dtypes for c in chips] == [("int8",), ("bf16",)]
    assert chips[0].peak_ops_per_s["int8"] == chips[1].peak_ops_per_s["bf16"]
    # the same axis under the two options are different points
    keep = spec("h100", ["int8", "bf16"])
    assert {p.id for p in keep.points()}.isdisjoint(p.id for p in s.points())
    with pytest.raises(ValueError, match=r"dtype_datapath: expected \"keep\" or \"rebuild\""):
        spec("h100", ["bf16"], dtype_datapath="narrow")

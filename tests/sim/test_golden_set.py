"""Speed work changes nothing but time: the pinned golden set (golden_set.py) is bit-identical.

The numbers in golden_set.json were written from the code before the speed work (commit in the
file). A difference here means a simulated number moved: either a bug in a fast path, or a
deliberate model change, which must regenerate the file and say so.
"""

import json

import pytest

import golden_set as G

WANT = json.loads(G.PATH.read_text())


@pytest.mark.parametrize("part", ["gemms", "vectors", "workloads", "compare"])
def test_bit_identical_to_the_pinned_results(part):
    got = G.compute((part,))[part]
    d = G.diff(WANT[part], got, part)
    assert not d, "\n".join(d[:20])


def test_the_golden_set_covers_every_preset_and_dataflow():
    from diptych.arch import load_chip, preset_names
    # every preset the per-op engine runs (an all-SRAM chip has no DRAM for it yet)
    engine_presets = {p for p in preset_names() if load_chip(p).has_dram}
    assert {c[0] for c in G.GEMMS} == engine_presets
    assert {c[0] for c in G.VECTORS} == engine_presets
    assert {c[7] for c in G.GEMMS} == {None, "os", "ws", "is"}
    assert {g["mapping"]["dataflow"] for g in WANT["gemms"]} == {"os", "ws", "is"}

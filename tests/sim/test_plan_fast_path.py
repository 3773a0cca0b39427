"""The mapper's search on its fast path (one compiled table per group, each candidate's engine
run written into the group's vector in place) makes the same decision, the same runs and the
same counts as its reference path (``plan(reference=True)``: a :class:`mapper.Blocks` and
fresh engine vectors per candidate, ``traffic_bytes`` in Python), on many shapes and chips."""

import dataclasses
import random

import numpy as np
import pytest

from diptych.arch import load_chip
from diptych.sim import gemm as G
from diptych.sim import mapper as MP
from diptych.sim.array import array_rates
from diptych.workloads.ops import Gemm

from simtest_helpers import small_chip


def _decision(p) -> tuple:
    return (p["split"], p["problem"], p["blocks"], tuple(p["out"].tolist()), p["candidates"],
            p["simulated"], p["budget_hit"])


def _shapes(seed: int, n: int) -> list[Gemm]:
    rng = random.Random(seed)
    dims = [1, 3, 8, 17, 64, 100, 128, 512, 1024, 2048, 4096]
    out = []
    for i in range(n):
        kw = {}
        if rng.random() < 0.25:      # batched: independent products or a shared weight
            kw = dict(batch=rng.choice([2, 4, 8]), b_is_weight=rng.random() < 0.5)
        out.append(Gemm(name=f"g{i}", m=rng.choice(dims), k=rng.choice(dims[3:]) + rng.randrange(8),
                        n=rng.choice(dims[3:]) + rng.randrange(8), **kw))
    return out


CHIPS = {
    # H100 (132 SMs: sub-chip and wave splits, a shared L2), TPU v4 (OS and WS), a chip with
    # a NoC latency on every DRAM descriptor, a small chip with every dataflow and a buffer
    "h100": lambda: load_chip("h100"),
    "tpu-v4": lambda: load_chip("tpu-v4"),
    "infer-2026": lambda: load_chip("infer-2026"),
    "small-sb": lambda: small_chip(rows=8, cols=8, cores=3, arrays=2, spad_mib=0.05, sb_mib=0.5),
}


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_fast_search_equals_reference_search(name):
    chip = CHIPS[name]()
    n = 0
    for op in _shapes(sorted(CHIPS).index(name), 10):
        for df in chip.core.array.dataflows:
            fast = G.plan(op, chip, df)
            ref = G.plan(op, chip, df, reference=True)
            assert _decision(fast) == _decision(ref), (name, op, df)
            n += 1
    assert n >= 10


def test_fast_search_equals_reference_with_split_k_and_residency():
    chip = load_chip("h100")
    ops = [Gemm(name="sk", m=16, k=16384, n=256),                       # split-K offered
           Gemm(name="res", m=256, k=1024, n=512, a_source="scratchpad", c_dest="scratchpad",
                resident_bytes=1 << 20)]
    for op in ops:
        assert _decision(G.plan(op, chip)) == _decision(G.plan(op, chip, reference=True))
    assert G.plan(ops[0], chip)["split"].pk > 1     # (the case is a split-K one)


def test_table_rows_hold_each_candidates_traffic_and_blocks():
    """The compiled table's traffic and block counts (which the fast path gives the engine)
    are ``int(traffic_bytes)`` and the schedule's blocks of each candidate."""
    for chip in (load_chip("h100"), CHIPS["small-sb"]()):
        rates = array_rates(chip, "bf16")
        for op in _shapes(7, 4):
            m = op.m * op.batch if op.b_is_weight else op.m
            b = 1 if op.b_is_weight else op.batch
            layout = MP.op_layout(op, m, chip.tensor_cores, chip)
            for split in MP.splits(chip, b, m, op.n)[::7]:
                pb = MP.orient(op, chip.core.array.dataflows[0], split, m, chip.tensor_cores,
                               layout)
                try:
                    cs, _, _ = MP.candidate_table(chip, pb, rates, split, 1.0)
                except ValueError:
                    continue
                for i, blk in enumerate(cs):
                    assert cs.traffic[i] == int(MP.traffic_bytes(pb, blk))
                    assert cs.blocks[i] == (pb.batch * -(-pb.m // blk.mb) * -(-pb.k // blk.kb)
                                            * -(-pb.n // blk.nb))
                assert np.array_equal(cs.blocks, cs.blocks_count(pb))


def test_split_hash_is_the_dataclass_hash():
    sp = MP.Split(pb=1, pm=2, pn=3, batch=4, m=5, n=6, active=7, arrays_per_core=2, waves=2,
                  tail_active=3)
    fields = tuple(getattr(sp, f.name) for f in dataclasses.fields(sp))
    assert hash(sp) == hash(fields) == hash(sp)        # (the second call: the cached value)
    assert sp == dataclasses.replace(sp) and hash(dataclasses.replace(sp)) == hash(sp)
    assert hash(dataclasses.replace(sp, k=9)) == hash(fields[:-1] + (9,))


def test_oriented_problem_is_the_dataclass_constructors():
    """orient builds its Problem without the frozen __init__: every field set, equal (and
    hashing alike) to the constructor's on the same values, in every dataflow."""
    chip = CHIPS["small-sb"]()
    names = {f.name for f in dataclasses.fields(MP.Problem)}
    for op in _shapes(3, 3):
        m = op.m * op.batch if op.b_is_weight else op.m
        b = 1 if op.b_is_weight else op.batch
        for split in MP.splits(chip, b, m, op.n)[:5]:
            for df in ("os", "ws", "is"):
                pb = MP.orient(op, df, split, m, chip.tensor_cores,
                               MP.op_layout(op, m, chip.tensor_cores, chip))
                assert set(vars(pb)) == names
                want = MP.Problem(**{f: getattr(pb, f) for f in names})
                assert pb == want and hash(pb) == hash(want)


def test_enumerated_splits_are_the_dataclass_constructors():
    """The split enumeration builds its Splits without the frozen __init__: every field set,
    equal (and hashing alike) to the constructor's on the same values."""
    names = {f.name for f in dataclasses.fields(MP.Split)}
    for chip in (load_chip("h100"), CHIPS["small-sb"]()):
        for b, m, n, k in ((1, 3000, 4096, 4096), (4, 17, 100, 8192), (1, 1, 128256, 4096)):
            for sp in MP.splits(chip, b, m, n, k):
                assert set(vars(sp)) - {"_hash"} == names
                want = MP.Split(**{f: getattr(sp, f) for f in names})
                assert sp == want and hash(sp) == hash(want)

"""Collectives over a topology: bytes per link against hand counts and a brute-force router,
the bisection bound, monotonicity in bandwidth, and the algorithm NCCL's tuner would pick."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import GroupShape, bind, collective, lower_bound_seconds
from diptych.sim.cluster.collectives import torus_all_to_all_link_bytes

DGX_NCCL = bind(load_cluster("dgx-h100"), load_chip("h100"))
#: the plain rules (one protocol at the links' per-hop latency: a chip without a [collectives]
#: table); the library's protocols are tested in test_collective_protocols.py
DGX = dataclasses.replace(DGX_NCCL, protocols=(), algorithms=(), p2p=None)
#: what collectives sustain on a DGX H100 (h100.toml, dgx-h100.toml: nccl-tests bus bandwidth)
PORT, NIC = 450e9 * 0.82, 50e9 * 0.97
POD = bind(load_cluster("tpu-v4-pod"), load_chip("tpu-v4"))
B = 2.0**30


def brute_force_all_to_all(dims, rings, nbytes):
    """Route every pair of an all-to-all (``nbytes/n`` each) over a torus/mesh dimension by
    dimension (shortest way round a ring, ties split evenly); bytes on the busiest directed
    link."""
    coords = list(itertools.product(*[range(k) for k in dims]))
    n = len(coords)
    load: dict = {}

    def hop(node, d, step, amount):
        key = (node, d, step)
        load[key] = load.get(key, 0.0) + amount

    for src, dst in itertools.product(coords, coords):
        cur = list(src)
        for d, (k, ring) in enumerate(zip(dims, rings)):
            delta = (dst[d] - cur[d]) % k if ring else dst[d] - cur[d]
            paths = []
            if ring:
                fwd, back = delta, k - delta
                if delta == 0:
                    paths = []
                elif fwd < back:
                    paths = [(1, fwd, 1.0)]
                elif back < fwd:
                    paths = [(-1, back, 1.0)]
                else:
                    paths = [(1, fwd, 0.5), (-1, back, 0.5)]
            elif delta:
                paths = [(1 if delta > 0 else -1, abs(delta), 1.0)]
            for step, length, share in paths:
                pos = list(cur)
                for _ in range(length):
                    hop(tuple(pos), d, step, nbytes / n * share)
                    pos[d] = (pos[d] + step) % k
            cur[d] = dst[d]
    return max(load.values())


@pytest.mark.parametrize("dims,rings", [((4,), (True,)), ((5,), (True,)), ((4,), (False,)),
                                        ((4, 4), (True, True)), ((4, 3), (True, False)),
                                        ((2, 3, 4), (True, True, True))])
def test_torus_all_to_all_bytes_per_link_match_brute_force(dims, rings):
    want = brute_force_all_to_all(dims, rings, B)
    got = max(torus_all_to_all_link_bytes(B, k, r) for k, r in zip(dims, rings))
    assert got == pytest.approx(want, rel=1e-12)
    shape = GroupShape(n=math.prod(dims), n_local=math.prod(dims), n_dom=1,
                       spans=tuple(zip(dims, rings)))
    c = collective("all_to_all", B, shape, POD)
    assert c.link_bytes["scale_up"] == pytest.approx(want, rel=1e-12)


def test_all_to_all_hand_counts():
    # ring of 4, every chip sends B/4 to each: the +1 and the half of the +2 traffic cross
    # each link in each direction: B/4 + 2 x B/8 per node, 4 nodes over 4 links = B/2
    assert torus_all_to_all_link_bytes(B, 4, True) == pytest.approx(B / 2)
    # line of 4: the middle link carries nodes 0,1 -> 2,3: 4 x B/4 = B
    assert torus_all_to_all_link_bytes(B, 4, False) == pytest.approx(B)
    # NVSwitch node of 8: each port sends the 7/8 of its buffer that leaves the GPU
    node = GroupShape(n=8, n_local=8, n_dom=1)
    c = collective("all_to_all", B, node, DGX)
    assert c.link_bytes["scale_up"] == pytest.approx(7 / 8 * B)
    assert c.seconds == pytest.approx(7 / 8 * B / PORT + 1e-6)
    # 4 nodes x 8: each NIC carries the 24/32 that leaves the node, the port the 7/32 inside
    four = GroupShape(n=32, n_local=8, n_dom=4)
    c = collective("all_to_all", B, four, DGX)
    assert c.link_bytes["scale_out"] == pytest.approx(24 / 32 * B)
    assert c.link_bytes["scale_up"] == pytest.approx(7 / 8 * B * 8 / 32)
    assert c.seconds == pytest.approx(24 / 32 * B / NIC + 5e-6)


def test_hierarchical_all_reduce_hand_counts():
    # 4 DGX nodes x 8 GPUs: reduce-scatter in the node (7/8 B through each port), all-reduce of
    # B/8 between the 4 nodes on each rail (2 x 3/4 x B/8 through each NIC), all-gather in
    # the node (7/8 B again)
    shape = GroupShape(n=32, n_local=8, n_dom=4)
    c = collective("all_reduce", B, shape, DGX, algorithm="hierarchical")
    assert c.link_bytes["scale_up"] == pytest.approx(2 * 7 / 8 * B)
    assert c.link_bytes["scale_out"] == pytest.approx(2 * 3 / 4 * B / 8)
    intra = 2 * (7 / 8 * B / PORT + 7e-6)
    inter = 2 * 3 / 4 * (B / 8) / NIC + 2 * 3 * 5e-6
    assert c.seconds == pytest.approx(intra + inter)


def test_flat_ring_shares_the_nics_of_a_domain():
    # a ring over 2 nodes x 8: 8 rings, one per rail: each NIC carries 1/8 of 2(n-1)/n B
    shape = GroupShape(n=16, n_local=8, n_dom=2)
    c = collective("all_reduce", B, shape, DGX, algorithm="ring")
    assert c.link_bytes["scale_out"] == pytest.approx(2 * 15 / 16 * B / 8)
    assert c.link_bytes["scale_up"] == pytest.approx(2 * 15 / 16 * B)


def test_algorithm_choice_follows_size():
    # 128 nodes, one rank each (a DP group under TP=8): small buffers take the latency-lean
    # tree, large ones the bandwidth-optimal ring (as NCCL's tuner does)
    shape = GroupShape(n=128, n_local=1, n_dom=128)
    assert collective("all_reduce", 64e3, shape, DGX).algorithm == "tree"
    assert collective("all_reduce", 4e9, shape, DGX).algorithm == "ring"


def test_torus_bucket_all_reduce_one_ring():
    # a full ring of 16 (wraparound): two opposite rings, each reduce-scatter/all-gather
    # step moves 15/16 of half the buffer over one link
    shape = GroupShape(n=16, n_local=16, n_dom=1, spans=((16, True),))
    c = collective("all_reduce", B, shape, POD)
    assert c.seconds == pytest.approx(2 * 15 / 16 * B / 2 / 45e9 + 2 * 15 * 1e-6)


def test_single_rank_and_empty_buffers_cost_nothing():
    assert collective("all_reduce", B, GroupShape(1, 1, 1), DGX).seconds == 0.0
    assert collective("all_gather", 0.0, GroupShape(8, 8, 1), DGX).seconds == 0.0


def test_bad_input():
    with pytest.raises(ValueError, match="collective kind must be one of .*not 'broadcast'"):
        collective("broadcast", B, GroupShape(8, 8, 1), DGX)
    with pytest.raises(ValueError, match="algorithm 'tree' does not apply to a all_to_all"):
        collective("all_to_all", B, GroupShape(8, 8, 1), DGX, algorithm="tree")


KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send")


@st.composite
def shapes(draw):
    torus = draw(st.booleans())
    n_dom = draw(st.sampled_from([1, 1, 2, 3, 4, 16]))
    if torus:
        spans = tuple((draw(st.integers(2, 8)), draw(st.booleans()))
                      for _ in range(draw(st.integers(1, 3))))
        n_local = math.prod(k for k, _ in spans)
        if draw(st.booleans()):
            spans, n_local = (), 1
    else:
        spans, n_local = (), draw(st.integers(1, 8))
    if n_local * n_dom < 2:
        n_dom = 2
    net = POD if torus else DGX
    net = dataclasses.replace(net, link_bytes_per_s=draw(st.floats(1e9, 1e12)),
                              nic_bytes_per_s=draw(st.floats(1e9, 1e11)),
                              oversubscription=draw(st.sampled_from([1.0, 2.0])))
    shape = GroupShape(n=n_local * n_dom, n_local=n_local, n_dom=n_dom, spans=spans,
                       leaf_local=draw(st.booleans()) or n_dom == 1)
    return net, shape


@given(shapes(), st.sampled_from(KINDS), st.floats(1e3, 1e11))
@settings(max_examples=300, deadline=None)
def test_never_below_the_bisection_bound(ns, kind, nbytes):
    net, shape = ns
    t = collective(kind, nbytes, shape, net).seconds
    assert t >= lower_bound_seconds(kind, nbytes, shape, net) * (1 - 1e-9)


@given(shapes(), st.sampled_from(KINDS), st.floats(1e3, 1e11), st.floats(1.0, 8.0),
       st.sampled_from(["link_bytes_per_s", "nic_bytes_per_s"]))
@settings(max_examples=300, deadline=None)
def test_more_link_bandwidth_is_never_slower(ns, kind, nbytes, factor, which):
    net, shape = ns
    faster = dataclasses.replace(net, **{which: getattr(net, which) * factor})
    assert collective(kind, nbytes, shape, faster).seconds <= \
        collective(kind, nbytes, shape, net).seconds * (1 + 1e-12)


def test_nvls_all_reduce_in_one_switch_domain():
    """An NVSwitch domain reduces in the switch: each rank's buffer up once and the sum down
    once at the measured NVLS algorithm bandwidth (0.60 x 450 GB/s; the bytes between 2 and
    32 MiB at the measured ramp's lower rates, h100.toml), faster than the ring's 2(n-1)/n B
    at the ring bus bandwidth for 8 GPUs; never across domains or on a torus."""
    node = GroupShape(n=8, n_local=8, n_dom=1)
    c = collective("all_reduce", B, node, DGX)
    assert c.algorithm == "nvls"
    ramp = sum((hi - lo) * 2**20 * (1 / (450e9 * f) - 1 / (450e9 * 0.60))
               for lo, hi, f in ((2, 4, 0.401), (4, 8, 0.360), (8, 16, 0.476), (16, 32, 0.470)))
    assert B > 32 * 2**20 and 35e-6 < ramp < 45e-6
    assert c.seconds == pytest.approx(B / (450e9 * 0.60) + 25e-6 + ramp)
    ring = collective("all_reduce", B, node, DGX, algorithm="ring")
    assert ring.seconds == pytest.approx(2 * 7 / 8 * B / PORT + 14e-6)
    assert ring.seconds / c.seconds == pytest.approx(1.28, rel=0.02)   # measured 473/366 = 1.29
    for kind in ("all_gather", "reduce_scatter"):                      # no NVLS gain for these
        assert collective(kind, B, node, DGX).algorithm == "ring"
    # small buffers keep a latency-lean algorithm, large ones take NVLS (NCCL on 8 GPUs:
    # ring/LL up to 1 MiB, NVLS from 2 MiB; here the switch comes later, ~10 MB)
    assert collective("all_reduce", 1e6, node, DGX).algorithm != "nvls"
    assert collective("all_reduce", 64e6, node, DGX).algorithm == "nvls"
    with pytest.raises(ValueError, match="nvls"):
        collective("all_reduce", B, GroupShape(n=16, n_local=8, n_dom=2), DGX,
                   algorithm="nvls")

"""A collective library's algorithms and protocols by message size (h100: NCCL's cost-model
terms, src/graph/tuning.cc, in h100.toml [collectives]) and the per-dimension decomposition of
a torus (tpu-v4): closed forms per (algorithm, protocol), the choice never slower than any
option the library considers, monotone in size, the run and cluster paths agreeing, NCCL's
measured switch point, and bad presets refused by name."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import ConfigError, chip_from_dict, load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import GroupShape, bind, collective
from diptych.sim.cluster.topology import single_domain
from diptych.sim.protocols import torus_slice
from diptych.sim.run.links import collective_options, collective_seconds
from diptych.sim.run.stack import stack_chip
from diptych.tools.cli import main
from diptych.workloads.ops import Collective

H100, V4 = load_chip("h100"), load_chip("tpu-v4")
DGX = bind(load_cluster("dgx-h100"), H100)
BUS = 450e9 * 0.82                   # the Simple protocol's measured bus bandwidth (h100.toml)
LL = (6.6e-6, 0.6e-6, 0.5, 141e9)    # base, hop, fraction, cap: tuning.cc (h100.toml)
LL128 = (14.0e-6, 1.9e-6, 0.92)
SIMPLE = (8.4e-6, 3.4e-6)
KiB, MiB = 2**10, 2**20


def op(kind, nbytes, n):
    return Collective(name="c", kind=kind, bytes=float(nbytes), group=n)


def test_each_protocol_closed_form_on_one_node():
    n, b = 8, 256 * KiB
    o = collective_options(op("all_reduce", b, n), H100)
    ring = 2 * 7 / 8 * b
    assert o["ring/ll"] == pytest.approx(LL[0] + 14 * LL[1] + ring / min(BUS * LL[2], LL[3]))
    assert o["ring/ll128"] == pytest.approx(LL128[0] + 14 * LL128[1] + ring / (BUS * LL128[2]))
    assert o["ring/simple"] == pytest.approx(SIMPLE[0] + 14 * SIMPLE[1] + ring / BUS)
    # NCCL's tree all-reduce bandwidth: busBw x .92, then LL x 1/3.8
    assert o["tree/ll"] == pytest.approx(LL[0] + 14 * LL[1] + 2 * b / min(BUS * 0.2421, LL[3]))
    assert o["nvls"] == pytest.approx(b / (450e9 * 0.60) + 25e-6)
    g = collective_options(op("all_gather", b, n), H100)   # n-1 steps, (n-1)/n of the buffer
    assert g["ring/ll"] == pytest.approx(LL[0] + 7 * LL[1] + 7 / 8 * b / min(BUS / 2, 141e9))
    assert "nvls" not in g and not any(k.startswith("tree") for k in g)


def test_small_all_reduces_pay_ll_latency_and_never_reach_the_bus_bandwidth():
    """A decode all-reduce of a few hundred KiB runs ring/LL: latency-bound, its bus bandwidth
    far below the measured 367 GB/s; a 1 GiB one without NVLS runs ring/Simple at it."""
    for b in (16 * KiB, 256 * KiB, 512 * KiB):
        c = collective("all_reduce", b, GroupShape(8, 8, 1), DGX)
        assert (c.algorithm, c.protocol) == ("ring", "ll")
        assert c.seconds > LL[0] + 14 * LL[1]
        assert 2 * 7 / 8 * b / c.seconds < 0.5 * BUS
    off = bind(load_cluster("dgx-h100"), stack_chip(H100, nvls=False))
    big = collective("all_reduce", 2**30, GroupShape(8, 8, 1), off)
    assert big.protocol == "simple"      # 1 GiB: within 1.1 % of the bus bandwidth
    assert BUS > 2 * 7 / 8 * 2**30 / big.seconds > 0.985 * BUS
    mid = collective("all_reduce", 8 * MiB, GroupShape(8, 8, 1), off)
    assert mid.protocol == "ll128"      # between LL's latency and Simple's


def test_nccl_switches_from_ring_ll_to_nvls_between_1_and_2_mib():
    """NCCL 2.27.7 on 8x H200 (NCCL_DEBUG_SUBSYS=TUNING; stas00/ml-engineering
    network/benchmarks/results/all-reduce-8xH200.md): Ring/LL up to 1 MiB, NVLS/Simple from
    2 MiB. A check of the tuning.cc terms, not a fit."""
    node = GroupShape(8, 8, 1)
    assert collective("all_reduce", 1 * MiB, node, DGX).algorithm == "ring"
    assert collective("all_reduce", 2 * MiB, node, DGX).algorithm == "nvls"


#: stas00/ml-engineering network/benchmarks/results/all-reduce-8xH200.md: an all-reduce of
#: MiB on 8 H200s, algbw in GB/s (NCCL 2.27.7 runs NVLS/Simple from 2 MiB)
SWEEP = {2: 36.87, 4: 61.23, 8: 88.87, 16: 125.65, 32: 157.62, 64: 198.01, 128: 229.67,
         256: 249.23}


def test_nvls_follows_the_measured_sweep_up_to_its_constant_overhead():
    """From 2 MiB on, the sweep's time (B / algbw) and diptych's NVLS all-reduce differ by
    the same 18-26 us at every size: the harness's per-call overhead (one torch.distributed
    call timed by CUDA events), with the measured ramp of the rate (h100.toml
    ``in_network_reduction_ramp``: 160-215 GB/s for the bytes between 2 and 32 MiB, ~270
    beyond). Without the ramp the gap grows from 24 us at 2 MiB to 63 us at 64 MiB. The run
    and the cluster paths time it alike."""
    gaps = []
    for mib, algbw in SWEEP.items():
        b = mib * MiB
        c = collective("all_reduce", b, GroupShape(8, 8, 1), DGX)
        assert c.algorithm == "nvls"
        assert c.seconds == pytest.approx(collective_seconds(op("all_reduce", b, 8), H100),
                                          rel=1e-12)
        gaps.append(b / (algbw * 1e9) - c.seconds)
    assert max(gaps) - min(gaps) < 8e-6, gaps          # 18-26 us
    assert 15e-6 < min(gaps) and max(gaps) < 35e-6, gaps
    flat = dataclasses.replace(H100, interconnect=dataclasses.replace(
        H100.interconnect, in_network_reduction_ramp=()))
    b = 64 * MiB
    assert b / (SWEEP[64] * 1e9) - collective_seconds(op("all_reduce", b, 8), flat) > 55e-6


SIZES = st.floats(1.0, 4e9)
GROUPS = st.sampled_from([(2, 2, 1), (4, 4, 1), (8, 8, 1), (16, 8, 2), (64, 8, 8), (32, 1, 32),
                          (16, 2, 8)])


@given(GROUPS, st.sampled_from(["all_reduce", "reduce_scatter", "all_gather"]), SIZES)
@settings(max_examples=150, deadline=None)
def test_the_choice_is_never_slower_than_any_option_the_library_considers(g, kind, b):
    n, nl, nd = g
    shape = GroupShape(n, nl, nd, leaf_local=nd == 1)
    best = collective(kind, b, shape, DGX)
    for algo in ("ring", "tree", "nvls", "hierarchical"):
        try:
            other = collective(kind, b, shape, DGX, algorithm=algo)
        except ValueError:
            continue
        assert best.seconds <= other.seconds
    if nd == 1:
        opts = collective_options(op(kind, b, n), H100)
        assert collective_seconds(op(kind, b, n), H100) == min(opts.values())
        # the run path and a one-domain cluster agree
        one = bind(single_domain(H100, n), H100)
        assert best.seconds == pytest.approx(collective(kind, b, GroupShape(n, n, 1), one).seconds)
        assert best.seconds == pytest.approx(min(opts.values()))


@given(GROUPS, st.sampled_from(["all_reduce", "reduce_scatter", "all_gather"]), SIZES,
       st.floats(1.0, 4.0))
@settings(max_examples=150, deadline=None)
def test_monotone_in_message_size(g, kind, b, grow):
    n, nl, nd = g
    shape = GroupShape(n, nl, nd)
    assert (collective(kind, b * grow, shape, DGX).seconds
            >= collective(kind, b, shape, DGX).seconds)
    assert (collective_seconds(op(kind, b * grow, 8), H100)
            >= collective_seconds(op(kind, b, 8), H100))


def test_across_nodes_the_ring_pays_net_hops_and_the_nic_share():
    """2 DGX nodes x 8: 30 ring steps, 2 of them over the network (NCCL's nInterSteps =
    2(nNodes-1)), each NIC carrying its rail's 1/8 of 2(n-1)/n of the buffer at the
    protocol's share of 0.97 x 50 GB/s."""
    shape = GroupShape(16, 8, 2)
    b = 64 * MiB
    c = collective("all_reduce", b, shape, DGX, algorithm="ring")
    nic = 50e9 * 0.97
    want = {}
    for name, (base, hop, net, frac) in {"ll": (6.6, 0.6, 2.7, 0.5),
                                         "ll128": (14.0, 1.9, 4.0, 0.92),
                                         "simple": (8.4, 3.4, 14.0, 1.0)}.items():
        bw_up = min(BUS * frac, 141e9) if name == "ll" else BUS * frac
        want[name] = ((base + 28 * hop + 2 * net) * 1e-6
                      + max(2 * 15 / 16 * b / bw_up, 2 * 15 / 16 * b / 8 / (nic * frac)))
    assert c.seconds == pytest.approx(min(want.values()))
    assert c.protocol == min(want, key=want.get)


def test_across_many_nodes_small_buffers_take_the_tree_large_ones_the_ring():
    """128 nodes, one rank each (a DP group under TP8): the tree's 2·log2(128) = 14 network
    steps against the ring's 254, at NCCL's tree bandwidth factors and tree network latencies
    (tuning.cc: LL 5.0 µs a step, busBw × .92 / 3.8); the ring once bandwidth dominates."""
    shape = GroupShape(n=128, n_local=1, n_dom=128, leaf_local=False)
    nic = 50e9 * 0.97
    small = collective("all_reduce", 64e3, shape, DGX)
    assert (small.algorithm, small.protocol) == ("tree", "ll")
    assert small.seconds == pytest.approx(LL[0] + 14 * 5.0e-6 + 2 * 64e3 / (nic * 0.2421))
    big = collective("all_reduce", 4e9, shape, DGX)
    assert (big.algorithm, big.protocol) == ("ring", "simple")
    assert big.seconds == pytest.approx(SIMPLE[0] + 254 * 14e-6 + 2 * 127 / 128 * 4e9 / nic)


def test_torus_chip_runs_tp48_dimension_by_dimension():
    """TP48 on tpu-v4: the slice is a 3x4x4 mesh (no wraparound below whole 4^3 cubes); a
    small all-reduce pays 2·Σ(k-1) = 16 hops instead of the flat ring's 2·47 = 94; a large
    one keeps the flat ring striped over the six links (twice the mesh's bandwidth)."""
    assert torus_slice(48, 3) == (3, 4, 4)
    small = collective_options(op("all_reduce", 64, 48), V4)
    assert small["torus"] == pytest.approx(16e-6, rel=1e-3)
    assert small["ring"] == pytest.approx(94e-6, rel=1e-3)
    big = collective_options(op("all_reduce", 2**30, 48), V4)
    assert big["ring"] < big["torus"]
    assert collective_seconds(op("all_reduce", 2**30, 48), V4) == big["ring"]


def test_torus_reduce_scatter_on_a_whole_cube_uses_every_link():
    """On a 4x4x4 slice with wraparound the per-dimension reduce-scatter moves
    (n-1)/n of the buffer over 2·3 links: B·63/64 / (6 · 45 GB/s), plus 3·3 hops."""
    b = 2**30
    t = collective_options(op("reduce_scatter", b, 64), V4)["torus"]
    assert t == pytest.approx(63 / 64 * b / (6 * 45e9) + 9e-6)


def test_torus_links_keep_their_own_rule():
    pod = bind(load_cluster("tpu-v4-pod"), V4)
    assert pod.protocols == () and DGX.protocols and DGX.algorithms == ("ring", "tree", "nvls")
    with pytest.raises(ValueError, match="'hierarchical' does not apply"):
        collective("all_reduce", MiB, GroupShape(32, 8, 4), DGX, algorithm="hierarchical")


def _h100_dict():
    import tomllib
    return tomllib.loads((Path(__file__).parents[2] / "arch" / "chips" / "h100.toml").read_text())


@pytest.mark.parametrize("path,value,needle", [
    (("collectives", "algorithms"), ["ring", "rign"], "collectives.algorithms"),
    (("collectives", "algorithms"), ["tree"], "collectives.algorithms"),
    (("collectives", "protocols"), ["ll", "ll256"], "collectives.protocols"),
    (("collectives", "ll", "bus_fraction"), 0.0, "collectives.ll.bus_fraction"),
    (("collectives", "simple", "bus_fraction"), 1.5, "collectives.simple.bus_fraction"),
    (("interconnect", "torus_dims"), 10, "interconnect.torus_dims"),
    (("interconnect", "in_network_reduction_ramp"), [[2, 4, 0.4], [3, 8, 0.4]],
     "interconnect.in_network_reduction_ramp"),                    # overlapping
    (("interconnect", "in_network_reduction_ramp"), [[2, 4, 1.5]],
     "interconnect.in_network_reduction_ramp"),                    # a fraction above 1
    (("interconnect", "in_network_reduction_ramp"), [[2, 4]],
     "interconnect.in_network_reduction_ramp"),                    # not a triple
    (("interconnect", "in_network_reduction"), 0.0, "interconnect.in_network_reduction_ramp"),
])
def test_bad_library_tables_are_refused_by_name(path, value, needle):
    d = _h100_dict()
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        chip_from_dict(d, source="bad.toml")


def test_a_protocol_without_its_table_is_refused():
    d = _h100_dict()
    del d["collectives"]["ll128"]
    with pytest.raises(ConfigError, match=r"collectives\.protocols.*\[collectives\.ll128\]"):
        chip_from_dict(d, source="bad.toml")


def test_cli_exits_2_naming_a_bad_algorithm_in_a_preset(tmp_path):
    text = (Path(__file__).parents[2] / "arch" / "chips" / "h100.toml").read_text()
    bad = text.replace('algorithms = ["ring", "tree", "nvls"]', 'algorithms = ["ring", "nvsl"]')
    assert bad != text
    path = tmp_path / "bad.toml"
    path.write_text(bad)
    r = CliRunner().invoke(main, ["run", "--chip", str(path), "--model", "llama-3-8b",
                                  "--phase", "decode", "--tp", "8", "--chips", "8"])
    assert r.exit_code == 2 and "Traceback" not in r.output, (r.output, r.exception)
    assert "collectives.algorithms" in r.output and "nvsl" in r.output


def test_ideal_links_drop_the_library():
    from diptych.sim.run.variant import IDEAL, variant_chip
    bare = variant_chip(H100, IDEAL)
    assert bare.collectives is None
    assert collective_options(op("all_reduce", KiB, 8), bare).keys() == {"ring", "nvls"}
    assert dataclasses.replace(H100, collectives=None).collectives is None


def test_nccl_algo_setting_limits_the_library():
    """``collective_algorithms`` is NCCL_ALGO: ``ring`` keeps a 256 MiB all-reduce off NVLS
    (ring/Simple, its closed form), ``nvls`` alone leaves all-gathers on the ring."""
    ring_only = stack_chip(H100, collective_algorithms="ring")
    b = 256 * MiB
    o = collective_options(op("all_reduce", b, 8), ring_only)
    assert set(o) == {"ring/ll", "ring/ll128", "ring/simple"}
    assert collective_seconds(op("all_reduce", b, 8), ring_only) == pytest.approx(
        SIMPLE[0] + 14 * SIMPLE[1] + 2 * 7 / 8 * b / BUS)
    nvls_only = stack_chip(H100, collective_algorithms="nvls")
    assert set(collective_options(op("all_reduce", b, 8), nvls_only)) == {"nvls"}
    assert "ring/ll" in collective_options(op("all_gather", b, 8), nvls_only)
    net = bind(load_cluster("dgx-h100"), nvls_only)
    assert collective("all_reduce", KiB, GroupShape(8, 8, 1), net).algorithm == "nvls"


@pytest.mark.parametrize("chip,value,needle", [
    ("h100", "rign", "'rign' is not an algorithm"),
    ("h100", "hierarchical", "'hierarchical' is not one of the algorithms"),
    ("tpu-v4", "ring", "needs a [collectives] table"),
])
def test_cli_exits_2_naming_a_bad_collective_algorithm_option(chip, value, needle):
    r = CliRunner().invoke(main, ["run", "--chip", chip, "--model", "llama-3-8b", "--phase",
                                  "decode", "--tp", "8", "--chips", "8",
                                  "--collective-algorithms", value])
    assert r.exit_code == 2 and "Traceback" not in r.output, (r.output, r.exception)
    assert needle in r.output and "collective_algorithms" in r.output

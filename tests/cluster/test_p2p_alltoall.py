"""All-to-all by the collective library's point-to-point table (``[collectives.p2p]``, issue
21; docs/cluster.md, "Collectives"): a whole call costs the measured per-call latency (plus
one network step across nodes) and its busiest port's / NIC's bytes at the table's fractions
of each link class's sustained bandwidth. Checked against nccl-tests' ``alltoall_perf``
figures quoted in text (the sources h100.toml cites), against NVIDIA's rule for its bus
bandwidth across nodes, and against the closed form; chips without the table keep the
plain one-hop rule."""

from __future__ import annotations

import dataclasses

import pytest

from diptych.arch import ConfigError, chip_from_dict, load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import GroupShape, bind, collective
from diptych.sim.run.links import collective_launch_seconds, collective_options
from diptych.workloads.ops import Collective

H100 = load_chip("h100")
DGX = bind(load_cluster("dgx-h100"), H100)
PORT = 18 * 25e9 * 0.82          # h100.toml [interconnect]: what NVLink sustains
NIC = 50e9 * 0.97                # dgx-h100.toml [scale_out]: one NDR NIC as NCCL sustains it


def _run_seconds(nbytes: float, n: int, chip=H100) -> float:
    op = Collective(name="a2a", kind="all_to_all", bytes=nbytes, group=n)
    (t,) = collective_options(op, chip).values()
    return t


# [S] alltoall_perf, 8 NVLink4 GPUs through NVSwitch (H20's links are the H100 SXM's 18
# NVLink4), out-of-place time in us by size (deepseek-ai/DeepEP#303)
ALLTOALL_PERF_8_NVLINK_US = {128: 10.59, 256: 10.48, 512: 10.56, 1024: 10.80, 2048: 11.08,
                             4096: 11.13}


@pytest.mark.parametrize("nbytes,measured_us", sorted(ALLTOALL_PERF_8_NVLINK_US.items()))
def test_small_alltoall_in_a_node_takes_the_measured_call_time(nbytes, measured_us):
    # the plain rule said 1 us of hop (+3 us launch in `diptych run`): 2.6x too fast
    for got in (_run_seconds(nbytes, 8),
                collective("all_to_all", nbytes, GroupShape(8, 8, 1), DGX).seconds):
        assert got * 1e6 == pytest.approx(measured_us, rel=0.06)


def test_large_alltoall_in_a_node_reaches_the_measured_bus_bandwidth():
    # [S] 4x H100 alltoall_perf, 500 MB: busbw 334.9 GB/s out-of-place (NVIDIA/nccl#2169);
    # the model runs at NVIDIA's general ~370 GB/s (nccl-tests#212): within 10 %
    nbytes, n = 524288000, 4
    for t in (_run_seconds(nbytes, n),
              collective("all_to_all", nbytes, GroupShape(n, n, 1), DGX).seconds):
        busbw = nbytes / t * (n - 1) / n
        assert busbw == pytest.approx(334.9e9, rel=0.10)


@pytest.mark.parametrize("nodes", [2, 4, 8, 32])
def test_alltoall_across_nodes_runs_at_one_nic_per_gpu(nodes):
    # [S] NVIDIA's rule (sjeaugey, nccl-tests#130/#267): all-to-all runs at a single NIC's
    # bandwidth per GPU, i.e. an algorithm bandwidth of N/(N-1) x the NIC's on N nodes
    n, nbytes = 8 * nodes, float(2**30)
    c = collective("all_to_all", nbytes, GroupShape(n, 8, nodes), DGX)
    assert nbytes / c.seconds == pytest.approx(nodes / (nodes - 1) * NIC, rel=0.01)


def test_the_closed_form_with_fractions():
    # 4 nodes x 8 GPUs, the fractions below 1 to see each one act on its own link class
    p2p = dataclasses.replace(H100.collectives.p2p, base_latency_us=10.0,
                              scale_up_bus_fraction=0.5, scale_out_bus_fraction=0.8)
    chip = dataclasses.replace(H100, collectives=dataclasses.replace(H100.collectives, p2p=p2p))
    net = bind(load_cluster("dgx-h100"), chip)
    B = float(2**26)
    c = collective("all_to_all", B, GroupShape(32, 8, 4), net)
    up, out = 7 / 32 * B, 24 / 32 * B           # inside the node, leaving it
    assert c.link_bytes == {"scale_up": pytest.approx(up), "scale_out": pytest.approx(out)}
    assert c.seconds == pytest.approx(10e-6 + 5e-6 + max(up / (PORT * 0.5),
                                                         out / (NIC * 0.8)), rel=1e-12)
    # a NIC-light case, where the port bound wins
    c = collective("all_to_all", B, GroupShape(16, 8, 2), net)
    assert c.seconds == pytest.approx(10e-6 + 5e-6 + max(7 / 16 * B / (PORT * 0.5),
                                                         8 / 16 * B / (NIC * 0.8)), rel=1e-12)
    # one node: base + the port's 7/8 at its fraction, in `diptych run` as in the cluster
    want = 10e-6 + 7 / 8 * B / (PORT * 0.5)
    assert _run_seconds(B, 8, chip) == pytest.approx(want, rel=1e-12)
    assert collective("all_to_all", B, GroupShape(8, 8, 1), net).seconds == (
        pytest.approx(want, rel=1e-12))


def test_the_call_latency_holds_the_launch_and_chips_without_the_table_keep_the_plain_rule():
    assert collective_launch_seconds("all_to_all", H100) == 0.0
    assert collective_launch_seconds("send", H100) == pytest.approx(3e-6)
    plain = dataclasses.replace(H100, collectives=dataclasses.replace(H100.collectives,
                                                                      p2p=None))
    assert collective_launch_seconds("all_to_all", plain) == pytest.approx(3e-6)
    assert _run_seconds(2**20, 8, plain) == pytest.approx(7 / 8 * 2**20 / PORT + 1e-6)
    # a torus chip has no table at all: its all-to-all is untouched
    assert load_chip("tpu-v4").collectives is None


@pytest.mark.parametrize("field,value", [("base_latency_us", -1.0),
                                         ("scale_up_bus_fraction", 1.5),
                                         ("scale_out_bus_fraction", 0.0)])
def test_bad_p2p_fields_are_refused_by_name(field, value):
    import tomllib
    from pathlib import Path
    d = tomllib.loads((Path(__file__).parents[2] / "arch" / "chips" / "h100.toml").read_text())
    d["collectives"]["p2p"][field] = value
    with pytest.raises(ConfigError, match=rf"collectives\.p2p\.{field}"):
        chip_from_dict(d, source="bad.toml")

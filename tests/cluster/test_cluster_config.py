"""Cluster descriptions: presets against their published figures, and validation messages."""

from __future__ import annotations

import dataclasses

import pytest

from diptych.arch import load_chip
from diptych.arch.cluster import Cluster, cluster_from_dict, load_cluster, preset_names
from diptych.arch.schema import ConfigError, to_dict
from diptych.sim.cluster import bind
from diptych.sim.cluster.topology import GroupShape, bisection_bytes_per_s


def test_presets_load():
    assert {"dgx-h100", "tpu-v4-pod"} <= set(preset_names())
    for name in preset_names():
        c = load_cluster(name)
        assert isinstance(c, Cluster) and c.chips == c.domains * c.scale_up.chips


def test_dgx_h100_published_figures():
    net = bind(load_cluster("dgx-h100"), load_chip("h100"))
    assert net.domain_chips == 8                                   # 8 GPUs per DGX H100
    # NVLink4 900 GB/s bidirectional, NDR 400 Gb/s per GPU, as collectives sustain them:
    # ring busbw 367 of 450 GB/s (nccl-tests), 48.5 of 50 GB/s per NIC
    assert 2 * net.port_bytes_per_s == pytest.approx(900e9 * 0.82)
    assert net.nic_bytes_per_s * 8 == pytest.approx(400e9 * 0.97)
    assert net.nvls_bytes_per_s == pytest.approx(450e9 * 0.60)    # NVLS algbw ~270 GB/s
    assert net.chips == 16384 and net.rail_group_domains == 32     # 64 SU x 32 DGX


def test_tpu_v4_pod_bisection_matches_published_24_tb_s():
    # Jouppi et al. ISCA 2023: 4096 chips, bisection 24 TB/s per pod (one direction). A
    # 16^3 torus cut in half crosses 2 x 16 x 16 links of 45 GB/s: 23.0 TB/s.
    net = bind(load_cluster("tpu-v4-pod"), load_chip("tpu-v4"))
    assert net.dims == (16, 16, 16) and net.links_per_chip == 6
    pod = GroupShape(n=4096, n_local=4096, n_dom=1, spans=((16, True),) * 3)
    assert bisection_bytes_per_s(net, pod) == pytest.approx(24e12, rel=0.05)


@pytest.mark.parametrize("cluster,chip", [("dgx-h100", "train-2026"), ("dgx-h100", "h100"),
                                          ("tpu-v4-pod", "tpu-v4")])
def test_presets_take_links_and_latency_from_the_chip(cluster, chip):
    # the presets give no link figures, so each chip keeps its own: train-2026 on a DGX
    # H100 pod gets its 18 x 50 GB/s (not H100's 25), and its own per-hop latency
    ic = load_chip(chip).interconnect
    net = bind(load_cluster(cluster), load_chip(chip))
    assert net.links_per_chip == ic.links
    assert net.link_bytes_per_s == ic.gb_per_s_per_link_per_direction * 1e9 * ic.bus_efficiency
    assert net.up_latency_s == ic.latency_us * 1e-6


def test_cluster_link_figures_override_the_chip():
    chip = load_chip("train-2026")
    slow = dataclasses.replace(chip, interconnect=dataclasses.replace(chip.interconnect,
                                                                      latency_us=2.5))
    data = to_dict(load_cluster("dgx-h100"))
    assert bind(cluster_from_dict(data), slow).up_latency_s == pytest.approx(2.5e-6)
    data["scale_up"].update(links_per_chip=4, gb_per_s_per_link_per_direction=10.0,
                            latency_us=0.5)
    net = bind(cluster_from_dict(data), slow)
    assert (net.links_per_chip, net.link_bytes_per_s, net.up_latency_s) == (4, 10e9, 0.5e-6)


def test_torus_needs_two_links_per_dimension_from_the_chip_too():
    # tpu-v5e has 4 ICI links (a 2-D torus): a 3-D 16^3 pod needs 6 per chip
    with pytest.raises(ValueError, match=r"chip 'tpu-v5e': interconnect.links \(4\) must be "
                                         r"at least 6 for its 16x16x16 torus"):
        bind(load_cluster("tpu-v4-pod"), load_chip("tpu-v5e"))
    data = to_dict(load_cluster("tpu-v4-pod"))
    data["scale_up"]["links_per_chip"] = 4
    with pytest.raises(ConfigError, match=r"scale_up.links_per_chip: expected at least 6"):
        cluster_from_dict(data)


def _bad(path_value, match):
    data = to_dict(load_cluster("dgx-h100"))
    section, key, value = path_value
    (data[section] if section else data)[key] = value
    with pytest.raises(ConfigError, match=match):
        cluster_from_dict(data, source="mine.toml")


def test_init_wrong_topology_kind_names_field_and_value():
    _bad(("scale_up", "fabric", "dragonfly"), r"mine.toml: scale_up.fabric: expected one of "
                                              r"'switch', 'torus', got 'dragonfly'")
    _bad(("scale_out", "kind", "ring"), r"scale_out.kind: expected one of .*got 'ring'")


def test_init_wrong_values():
    _bad(("scale_up", "chips", 0), r"scale_up.chips: expected an integer >= 1, got 0")
    _bad(("scale_up", "torus_x", 4), r"scale_up.torus_x: expected no torus dimensions")
    _bad(("scale_out", "oversubscription", 0.5), r"oversubscription: expected a number >= 1")
    _bad(("scale_out", "kind", "none"), r"scale_out.kind: expected a network .* got 'none'")
    _bad(("scale_up", "latency", 1.0), r"unknown key \(did you mean 'latency_us'\?\)")
    data = to_dict(load_cluster("tpu-v4-pod"))
    data["scale_up"]["torus_z"] = 8
    with pytest.raises(ConfigError, match=r"torus_x x torus_y x torus_z = scale_up.chips "
                                          r"\(4096\), got \[16, 16, 8\]"):
        cluster_from_dict(data)


def test_unknown_cluster_name():
    with pytest.raises(ConfigError, match=r"unknown cluster 'dgx-h200'.*dgx-h100"):
        load_cluster("dgx-h200")

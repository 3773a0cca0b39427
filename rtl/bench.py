"""Simulator-independent testbench pieces: stimulus and reference model (the scoreboard and the
:class:`Plan` itself live in the light :mod:`diptych.rtl.plan` and are re-exported here).

A :class:`Plan` is everything a driver needs to exercise a :class:`~diptych.rtl.array.SystolicArray`
for a fixed number of cycles: the port values to present in each cycle, and for each cycle in
which an output must appear the expected ``out_row`` (OS) and output bits. The expected cycles
come from the array-timing contract in :mod:`diptych.sim.timing` and the expected bits from the
NumPy golden model :mod:`diptych.rtl.numerics_ref` under the datapath's accumulation rule
(:attr:`diptych.rtl.datapath.Datapath.rule`: ``"pair"`` for ``fused``, ``"sequential"`` for the
others). The same plan drives the fast amaranth.sim tests
and the cocotb bench on Verilator, and :func:`score` compares what a monitor saw against it.

**One contract.** Everything about *when* comes from :mod:`diptych.sim.timing`, called through
the module (so a change there, or a monkeypatch in a test, moves the bench): output cycles from
``os_output_cycles``/``ws_output_cycles``; the earliest legal cycles of the next tile from
``os_schedule``/``ws_schedule`` (the next tile's earliest cycles depend on the previous tile
only through its last step (OS) or its first and last rows (WS), so a one-step or contiguous
stand-in for the previous tile gives them); the steps of a tile at ``n`` MACs per PE per cycle
from ``os_steps`` and the stationary depth from ``ws_stationary_depth``. Random slack and
bubbles are only ever added *after* the earliest cycle, which keeps every rule. The RTL
implements the contract's default WS weight-install path only (one weight row shifted in per
cycle, the swap wave: a chip's ``core.array.weight_load_rows_per_cycle = 1`` and
``weight_swap = "wave"``); the bench plans with those defaults, and a schedule for a faster
path fails ``ws_output_cycles`` (tests/rtl/test_rtl_contract.py).

**Stimulus** (reproducible from a seed): tiles in every mode of the datapath (INT8, BF16, FP8
E4M3/E5M2 and mixed), back to back at the earliest legal cycle or with bubbles; depths around R;
operands from several regimes: a narrow exponent range (rounding, cancellation); the full range
(overflow to Inf, underflow to zero); FP8 subnormals; edge values sprinkled or dense (INT8
−128/127/0/−1; bf16 ±0, subnormals, ±Inf, NaNs, extreme normals; FP8 ±0, subnormals, max, NaN,
E5M2 Inf); *underflow* tiles whose sums cancel into the FP32 subnormal range (they must flush),
*ties* tiles (bf16 products at ½ ulp of the running sum), *rounding-order* tiles (FP8 products
at the last bits of the running sum), *cancelling* tiles (FP8: the running sum cancels a
product and a product far below is left, :func:`_cancel_pair`), *sticky-tie* tiles (FP8: a tie
that only a product far below decides, :func:`_sticky_pair`) and *overflow* tiles whose sums
pass FLT_MAX; every plan
has the directed regimes of each element family it uses, and its tile 1 is long and full of
bubbles. WS plans add top-edge partial sums (zeros, FP32
bits with subnormals/Inf/NaN, int32 values near the limits so the accumulator wraps) and chains
of passes that continue a K > R reduction. :func:`os_wrap_plan` is a directed INT8 OS tile of
2¹⁷ + 1024 steps whose int32 sums wrap; the directed special-value plan (signed zeros in every
operand position, subnormals, Inf, NaN, overflow, in every mode) is
:func:`diptych.rtl.special_plan.special_plan`.

**Bubbles carry random data.** In every cycle without ``in_valid`` the data ports (and
``in_last``/``in_first``/``mode``) carry pseudo-random bits derived from the plan's seed and the
cycle (``w_data`` likewise outside ``w_load``), so a PE that computes while ``valid`` is low,
or a shadow register that shifts without ``w_load``, corrupts results the scoreboard sees.
"""

from __future__ import annotations

import numpy as np

from ..sim import timing
from . import numerics_ref
from .array import check_config
from .datapath import MODE_CODES, get_datapath
from .plan import Plan, pack, score, unpack

__all__ = ["Plan", "make_plan", "os_plan", "ws_plan", "os_wrap_plan", "earliest_plan", "score",
           "pack", "unpack", "BF16_EDGES", "INT8_EDGES", "FP8_EDGES"]

#: bf16 edge values: ±0, subnormals, ±Inf, NaNs (quiet, signalling, negative), the largest and
#: smallest normals of both signs, ±1.
BF16_EDGES = (0x0000, 0x8000, 0x0001, 0x807F, 0x0040, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81,
              0x7F7F, 0xFF7F, 0x0080, 0x8080, 0x3F80, 0xBF80)
INT8_EDGES = (-128, 127, 0, -1)
#: FP8 edge values: ±0, smallest/largest subnormal, smallest normal, ±max, NaNs, ±1; E4M3 256
#: (S.1111.000, a number, not Inf) and E5M2 ±Inf.
FP8_EDGES = {
    "e4m3": (0x00, 0x80, 0x01, 0x07, 0x87, 0x08, 0x78, 0x7E, 0xFE, 0x7F, 0xFF, 0x38, 0xB8),
    "e5m2": (0x00, 0x80, 0x01, 0x03, 0x83, 0x04, 0x7B, 0xFB, 0x7C, 0xFC, 0x7D, 0xFF, 0x3C, 0xBC),
}
#: FP32 partial sums injected at the WS top edge: zeros, a subnormal, max normal, Inf, a NaN.
FP32_PSUM_EDGES = (0x00000000, 0x80000000, 0x00000001, 0x7F7FFFFF, 0xFF800000, 0x7FA00000)


# ---- operands ---------------------------------------------------------------------------------

def _bf16_random(rng, shape, regime: str) -> np.ndarray:
    sign = rng.integers(0, 2, shape)
    frac = rng.integers(0, 128, shape)
    lo, hi = {"wide": (1, 255), "overflow": (185, 200)}.get(regime, (120, 136))
    exp = rng.integers(lo, hi, shape)
    bits = (sign << 15) | (exp << 7) | frac
    edge_p = {"sprinkled": 0.04, "edges": 0.3}.get(regime, 0.0)
    mask = rng.random(shape) < edge_p
    bits = np.where(mask, rng.choice(np.array(BF16_EDGES), shape), bits)
    return bits.astype(np.uint16)


def _fp8_random(rng, fmt: str, shape, regime: str) -> np.ndarray:
    ebits, mbits, bias = (4, 3, 7) if fmt == "e4m3" else (5, 2, 15)
    sign = rng.integers(0, 2, shape)
    man = rng.integers(0, 1 << mbits, shape)
    if regime == "subnormal":
        exp = np.where(rng.random(shape) < 0.7, 0, rng.integers(1, 4, shape))
    elif regime in ("wide", "overflow"):     # every exponent (E4M3's top binade is finite)
        exp = rng.integers(0, (1 << ebits) - (1 if fmt == "e5m2" else 0), shape)
    else:
        exp = rng.integers(bias - 3, bias + 4, shape)
    bits = ((sign << 7) | (exp << mbits) | man).astype(np.uint8)
    if fmt == "e4m3":                         # moderate values never hit the NaN code
        bits = np.where((bits & 0x7F) == 0x7F, bits ^ 1, bits).astype(np.uint8)
    if regime == "edges":                     # every finite edge value, at random places
        finite = np.array([c for c in FP8_EDGES[fmt]
                           if np.isfinite(numerics_ref.fp8_to_fp32_bits(c, fmt).view(np.float32))])
        flat = bits.reshape(-1)
        n = min(flat.size, len(finite))
        flat[rng.permutation(flat.size)[:n]] = rng.permutation(finite)[:n]
        bits = flat.reshape(shape)
    elif regime == "sprinkled":               # NaNs and Infs too, sparsely
        mask = rng.random(shape) < 0.05
        bits = np.where(mask, rng.choice(np.array(FP8_EDGES[fmt]), shape), bits)
    return bits.astype(np.uint8)


def _int8_random(rng, shape, regime: str) -> np.ndarray:
    v = rng.integers(-128, 128, shape)
    edge_p = {"moderate": 0.0, "wide": 0.1, "sprinkled": 0.1, "edges": 0.5}.get(regime, 0.1)
    mask = rng.random(shape) < edge_p
    return np.where(mask, rng.choice(np.array(INT8_EDGES), shape), v).astype(np.int8)


def _elements(rng, kind: str, shape, regime: str) -> np.ndarray:
    if kind == "int8":
        return _int8_random(rng, shape, regime)
    if kind == "bf16":
        return _bf16_random(rng, shape, regime)
    return _fp8_random(rng, kind, shape, regime)


def _underflow_pair(rng, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """bf16 A[m×k], B[k×n] whose running sums cancel into the FP32 subnormal range.

    Steps come in pairs, aligned to the end so that the last one decides the result (an odd
    K starts with a zero step): ``A[:, p] = a``, ``A[:, p+1] = −a`` and ``B[p, :] = b``,
    ``B[p+1, :] = b ± 1 ulp``, with ``a·b`` near 2^-126, so each pair adds ``∓a·ulp(b)`` ≈ 2^-133:
    a subnormal the adder must flush (and some products underflow in the multiplier). A
    subnormal kept by a faulty adder would survive to the output (the next addend reads it as
    zero only if there is one)."""
    a = np.zeros((m, k), np.uint16)
    b = np.zeros((k, n), np.uint16)
    for s in range(k // 2):
        p = k % 2 + 2 * s
        ea = rng.integers(60, 67, m)                     # a ≈ 2^-67 … 2^-61 (biased 60 … 66)
        # b's biased exponent so that a·b ≈ 2^-126: (ea − 127) + (eb − 127) ≈ −126
        eb = 128 - int(round(ea.mean())) + rng.integers(-3, 4, n)
        av = (rng.integers(0, 2, m) << 15) | (ea << 7) | rng.integers(0, 128, m)
        bv = (rng.integers(0, 2, n) << 15) | (np.clip(eb, 1, 254) << 7) | rng.integers(1, 127, n)
        a[:, p], a[:, p + 1] = av, av ^ 0x8000
        b[p, :] = bv
        b[p + 1, :] = bv + rng.choice(np.array([1, -1]), n)
    return a, b


def _fp8_near(rng, fmt: str, exps, shape) -> np.ndarray:
    """FP8 bits of random-sign values ``1.f · 2^exps`` (rounded to the format)."""
    from .minifloat import encode

    v = (1 + rng.random(shape)) * np.exp2(exps) * np.where(rng.random(shape) < 0.5, -1, 1)
    return encode(fmt, v)


def _order_pair(rng, fa: str, fb: str, m: int, k: int, n: int, psum_exp: int | None):
    """FP8 A[m×k], B[k×n] whose products sit at the last bits of the running FP32 sum, so
    every addition rounds and the order of additions shows in the result.

    With ``psum_exp`` (WS: the partial sums entering are ``±1.f · 2^psum_exp``) every product
    is about ulp(psum) = 2^(psum_exp − 23); without (OS) the first two steps are large
    (≈ 2^8 … 2^10) and the later ones about ulp of that."""
    big = 9 if psum_exp is None else psum_exp
    t = big - 23 + rng.integers(-1, 2, (m, k))          # target product exponents
    ea = t // 2 + rng.integers(0, 2, (m, k))
    a = _fp8_near(rng, fa, ea, (m, k))
    eb = (big - 23) - (t // 2)[:1, :].T + rng.integers(-1, 1, (k, n))
    b = _fp8_near(rng, fb, eb, (k, n))
    if psum_exp is None and k > 2:
        a[:, :2] = _fp8_near(rng, fa, np.full((m, 2), 5), (m, 2))
        b[:2, :] = _fp8_near(rng, fb, np.full((2, n), 4), (2, n))
    return a, b


def _cancel_pair(rng, fa: str, fb: str, m: int, k: int, n: int):
    """FP8 A[m×k], B[k×n] in groups of four K-steps ``X, t, −X, τ`` (from ``k = 0``; the last
    ``k mod 4`` steps are zeros): ``X = a₀·b₀`` near the top of the formats, ``t`` 2⁻¹²–2⁻²⁴ of
    it (so the running sum ``X + t`` holds ``t`` in its last bits), then exactly ``−X`` (A's
    element with its sign flipped, the same B element) and a tiny ``τ`` from the formats'
    smallest values (2⁻²⁵–2⁻³⁴ of ``X`` for E4M3 × E4M3, to 2⁻⁶² for E5M2 × E5M2). The
    accumulator cancels ``X`` and what is left, ``t + τ``, needs ``τ`` far below the largest
    operand: the case that sizes the fused datapath's exact window, and for one-at-a-time
    accumulation a massive cancellation followed by a tiny addend."""
    from .minifloat import get_format

    def near(fmt, exps, shape):
        f = get_format(fmt)
        lo = f.emin - f.man_bits                          # the smallest subnormal
        return _fp8_near(rng, fmt, np.clip(exps, lo, f.emax), shape)
    top_a, top_b = get_format(fa).emax, get_format(fb).emax
    bot_a = get_format(fa).emin - get_format(fa).man_bits
    bot_b = get_format(fb).emin - get_format(fb).man_bits
    a = np.zeros((m, k), np.uint8)
    b = np.zeros((k, n), np.uint8)
    for g in range(k // 4):
        p = 4 * g
        ea, eb = top_a - rng.integers(1, 3, (m, 1)), top_b - rng.integers(1, 3, (1, n))
        a[:, p], b[p, :] = near(fa, ea, (m, 1))[:, 0], near(fb, eb, (1, n))[0]
        a[:, p + 1] = near(fa, ea - rng.integers(6, 13), (m, 1))[:, 0]
        b[p + 1, :] = near(fb, eb - rng.integers(6, 13), (1, n))[0]
        a[:, p + 2], b[p + 2, :] = a[:, p] ^ 0x80, b[p, :]
        a[:, p + 3] = near(fa, bot_a + rng.integers(0, 3, (m, 1)), (m, 1))[:, 0]
        b[p + 3, :] = near(fb, bot_b + rng.integers(0, 3, (1, n)), (1, n))[0]
    return a, b


def _sticky_pair(rng, fa: str, fb: str, m: int, k: int, n: int):
    """FP8 A[m×k], B[k×n] in groups of four K-steps ``X, 0, h, τ`` (from ``k = 0``; the last
    ``k mod 4`` steps zeros): ``X = a₀·2^e`` (B's element a power of two, so ``X`` has A's
    3 or 4 significant bits and an even last bit in FP32), ``h`` exactly half an FP32 ulp of ``X``
    with its sign (``X + h`` is a tie), and ``τ`` the formats' smallest product, mostly of the
    same sign. Summed exactly and rounded once (the pair rule) ``X + h + τ`` rounds away from
    ``X``; one at a time, ``X + h`` ties to even (``X``) and ``τ`` is lost. Only the sticky bit
    of an aligned-out ``τ`` (2⁻⁶³ of ``X`` for E5M2 × E5M2) tells the two apart."""
    from .minifloat import encode, get_format

    fma, fmb = get_format(fa), get_format(fb)
    a = np.zeros((m, k), np.uint8)
    b = np.zeros((k, n), np.uint8)
    for g in range(k // 4):
        p = 4 * g
        ea = fma.emax - rng.integers(0, 2, m)                  # A: 1.xyz · 2^ea, 4 bits
        eb = fmb.emax - rng.integers(0, 2, n)                  # B: 2^eb exactly
        sa = np.where(rng.random(m) < 0.5, -1.0, 1.0)
        sb = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        frac = rng.integers(0, 1 << fma.man_bits, m) / (1 << fma.man_bits)   # exact in fa
        a[:, p] = encode(fa, sa * (1 + frac) * np.exp2(ea))
        b[p, :] = encode(fb, sb * np.exp2(eb))
        # h = 2^(lead(X) − 24) with the sign of X: A gets 2^(ea − 12), B 2^(eb − 12)
        a[:, p + 2] = encode(fa, sa * np.exp2(ea - 12))
        b[p + 2, :] = encode(fb, sb * np.exp2(eb - 12))
        tiny_a = np.exp2(fma.emin - fma.man_bits) * sa * np.where(rng.random(m) < 0.75, 1, -1)
        a[:, p + 3] = encode(fa, tiny_a)
        b[p + 3, :] = encode(fb, np.exp2(fmb.emin - fmb.man_bits) * sb)
    return a, b


def _ties_pair(rng, m: int, k: int, n: int, psum_exp: int | None):
    """bf16 A[m×k], B[k×n] whose products are ±{½, 1, 1½} ulp of the running FP32 sum, so
    additions land exactly half-way (ties to even decides) or just off it.

    With ``psum_exp`` (WS) the sums start at ``±1.f · 2^psum_exp``; without (OS) the first step
    is a product of about 2^9 and later ones are about its ulp."""
    big = 9 if psum_exp is None else psum_exp
    sig = rng.choice(np.array([0x00, 0x40]), (m, k))         # 1.0 or 1.5
    xa = rng.integers(-3, 4, (m, k))
    a = (rng.integers(0, 2, (m, k)) << 15) | ((xa + 127) << 7) | sig
    yb = (big - 24) - xa[:1, :].T + rng.integers(0, 2, (k, n))
    b = (rng.integers(0, 2, (k, n)) << 15) | ((yb + 127) << 7)
    if psum_exp is None:
        a[:, 0] = (127 + 4) << 7 | rng.integers(0, 128, m)
        b[0, :] = (127 + 5) << 7 | rng.integers(0, 128, n)
    return a.astype(np.uint16), b.astype(np.uint16)


def _operands(rng, mode: str, m: int, k: int, n: int, regime: str, psum_exp=None):
    """A[m×k] and B[k×n] element arrays of ``mode`` in ``regime``."""
    fa, fb = numerics_ref.mode_formats(mode)
    if regime == "underflow":
        if mode == "bf16":
            return _underflow_pair(rng, m, k, n)
        regime = "subnormal"
    if regime == "order" and fa in numerics_ref.FP8_FORMATS:
        return _order_pair(rng, fa, fb, m, k, n, psum_exp)
    if regime == "cancel" and fa in numerics_ref.FP8_FORMATS:
        return _cancel_pair(rng, fa, fb, m, k, n)
    if regime == "sticky" and fa in numerics_ref.FP8_FORMATS:
        return _sticky_pair(rng, fa, fb, m, k, n)
    if regime == "ties" and mode == "bf16":
        return _ties_pair(rng, m, k, n, psum_exp)
    return _elements(rng, fa, (m, k), regime), _elements(rng, fb, (k, n), regime)


def _regimes(mode: str) -> tuple[str, ...]:
    if mode == "int8":
        return ("edges", "moderate", "wide", "sprinkled")
    if mode == "bf16":
        return ("underflow", "ties", "edges", "overflow", "moderate", "wide", "sprinkled")
    # in a plan's first round of modes (e4m3, e5m2, e4m3xe5m2, e5m2xe4m3) the sticky-tie tiles
    # land on E5M2 × E5M2, the only pair whose smallest product lies outside the fused
    # datapath's exact window (2⁻⁶³ of the largest)
    return ("edges", "sticky", "order", "cancel", "subnormal", "wide", "moderate", "sprinkled")


class _Regimes:
    """The tiles of each element family (INT8, BF16, FP8 in any of its modes) go round its
    regimes, directed ones first (bf16: underflow, rounding ties, edge values; FP8: every
    finite edge value, then sticky-tie tiles, rounding-order tiles, cancelling tiles, subnormal
    inputs; INT8: edge values), so
    a plan with as many tiles of a family as it has regimes meets them all."""

    def __init__(self):
        self.next: dict[str, int] = {}

    def __call__(self, mode: str) -> str:
        regs = _regimes(mode)
        fam = mode if mode in ("int8", "bf16") else "fp8"
        i = self.next.get(fam, 0)
        self.next[fam] = i + 1
        return regs[i % len(regs)]


def _elem_bits(x: np.ndarray) -> np.ndarray:
    """Unsigned bit patterns of an element array (int8 → uint8 two's complement)."""
    return x.view(np.uint8) if x.dtype == np.int8 else x


def _as_operands(mode: str, x) -> np.ndarray:
    x = np.asarray(x)
    if mode == "int8":
        if x.size and (x.min() < -128 or x.max() > 127):
            raise ValueError("int8 operands must lie in -128 .. 127")
        return x.astype(np.int8)
    top = 0xFFFF if mode == "bf16" else 0xFF
    if x.size and (x.min() < 0 or x.max() > top):
        raise ValueError(f"{mode} operands are bit patterns in 0 .. {top:#x}")
    return x.astype(np.uint16 if mode == "bf16" else np.uint8)


def _lanes(x: np.ndarray, n: int, eb: int) -> list[int]:
    """Pack the last axis of element bits ``x[..., n·L]`` into L lanes of n elements each."""
    bits = _elem_bits(x).astype(np.int64).reshape(*x.shape[:-1], -1, n)
    return [pack(v, eb) for v in bits.reshape(-1, n)]


def _pad_k(x: np.ndarray, axis: int, depth: int) -> np.ndarray:
    """Zero-pad ``x`` along ``axis`` to ``depth`` (a +0 element, int8 0)."""
    extra = depth - x.shape[axis]
    if extra <= 0:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, extra)
    return np.pad(x, pad)


def _mode_of(dtype: str, mode: str | None) -> str:
    dp = get_datapath(dtype)
    mode = dp.modes[0] if mode is None and len(dp.modes) == 1 else mode
    if mode is None:
        raise ValueError(f"the {dtype} datapath has several modes ({', '.join(dp.modes)}): "
                         "give one per tile")
    dp.macs_per_cycle(mode)
    return mode


# ---- explicit plans ---------------------------------------------------------------------------

def _new_plan(rows: int, cols: int, dtype: str, dataflow: str, **kw) -> Plan:
    dp = get_datapath(dtype)
    return Plan(rows, cols, dtype, dataflow, dp.lane_bits, dp.has_mode_port,
                block_port=dp.block_port, **kw)


def _expect(plan: Plan, t: int, cycle: int, row, words) -> None:
    """Record an expected output; the interface carries one row per cycle, so a contract that
    predicts two outputs in one cycle is refused (ValueError), not silently overwritten."""
    if cycle in plan.expected:
        raise ValueError(f"tile {t}: the timing contract predicts an output in cycle {cycle}, "
                         "which already holds another output (one row per cycle)")
    plan.expected[cycle] = (row, tuple(int(x) for x in words))


def os_plan(rows: int, cols: int, dtype: str, tiles, step_cycles, modes=None, *,
            seed: int = 1, bubble_data: str = "random") -> Plan:
    """An OS plan from explicit tiles ``[(A[R×K], B[K×C]), …]`` and their step cycles.

    Operands are element arrays of the tile's mode (int8 values, uint16 bf16 or uint8 FP8 bit
    patterns); ``modes`` gives one mode per tile (default: the datapath's only mode). A tile
    of depth K takes ``diptych.sim.timing.os_steps(K, n)`` steps at the mode's n MACs per PE
    per cycle (K is zero-padded to a multiple of n; the golden result is of the padded tile,
    which differs only in that an exactly −0 sum becomes +0). The output cycles are
    :func:`diptych.sim.timing.os_output_cycles` of ``step_cycles`` (which raises ValueError
    if an issue rule is broken); the bits are the golden model's.
    """
    check_config(rows, cols, dtype, "os")
    modes = [_mode_of(dtype, None if modes is None else modes[t]) for t in range(len(tiles))]
    plan = _new_plan(rows, cols, dtype, "os", seed=seed, bubble_data=bubble_data,
                     n_tiles=len(tiles), modes=modes)
    plan.predicted = timing.os_output_cycles(rows, cols, step_cycles)
    dp = get_datapath(dtype)
    for t, ((a, b), cycles, mode) in enumerate(zip(tiles, step_cycles, modes)):
        a, b = _as_operands(mode, a), _as_operands(mode, b)
        n, eb = dp.macs_per_cycle(mode), dp.element_bits(mode)
        k = a.shape[1] if a.ndim == 2 else -1
        if a.shape != (rows, k) or b.shape != (k, cols) or k < 1:
            raise ValueError(f"tile {t}: A must be {rows}×K and B K×{cols}, "
                             f"not {a.shape} and {b.shape}")
        steps = timing.os_steps(k, n)
        if len(cycles) != steps:
            raise ValueError(f"tile {t}: K={k} at {n} MACs per cycle takes {steps} steps, "
                             f"but {len(cycles)} step cycles were given")
        a, b = _pad_k(a, 1, steps * n), _pad_k(b, 0, steps * n)
        for s, c in enumerate(cycles):
            if c in plan.inputs:
                raise ValueError(f"tile {t}: two steps presented in cycle {c}")
            plan.inputs[c] = {
                "in_valid": 1, "in_last": int(s == steps - 1),
                "a_data": pack(_lanes(a[:, s * n:(s + 1) * n], n, eb), dp.lane_bits),
                "b_data": pack(_lanes(b[s * n:(s + 1) * n, :].T, n, eb), dp.lane_bits),
            }
            if dp.has_mode_port:
                plan.inputs[c]["mode"] = MODE_CODES[mode]
        result = numerics_ref.matmul_bits(mode, a, b, rule=dp.rule)
        for i, c in enumerate(plan.predicted[t]):
            _expect(plan, t, c, i, result[i])
    plan.n_cycles = max(plan.expected) + rows + cols + 4
    return plan


def ws_plan(rows: int, cols: int, dtype: str, tiles, load_cycles, row_cycles, modes=None, *,
            seed: int = 1, bubble_data: str = "random") -> Plan:
    """A WS plan from explicit tiles ``[(A[M×D], W[D×C], P[M×C] or None), …]``.

    ``D`` is the stationary depth :func:`diptych.sim.timing.ws_stationary_depth` at the mode's
    MACs per PE per cycle (R, or 2R for the ``multi`` datapath's 8-bit modes; a shallower W is
    zero-padded). ``load_cycles[t]`` is the first of tile ``t``'s R consecutive weight-load
    cycles, ``row_cycles[t]`` the cycles of its rows; P holds the top-edge partial sums as uint32
    bit patterns (None: zeros). Output cycles come from :func:`diptych.sim.timing.ws_output_cycles`.
    """
    check_config(rows, cols, dtype, "ws")
    modes = [_mode_of(dtype, None if modes is None else modes[t]) for t in range(len(tiles))]
    plan = _new_plan(rows, cols, dtype, "ws", seed=seed, bubble_data=bubble_data,
                     n_tiles=len(tiles), modes=modes)
    plan.predicted = timing.ws_output_cycles(rows, cols, load_cycles, row_cycles)
    dp = get_datapath(dtype)
    for t, ((a, wt, psum), wl, cycles, mode) in enumerate(zip(tiles, load_cycles, row_cycles,
                                                               modes)):
        n, eb = dp.macs_per_cycle(mode), dp.element_bits(mode)
        depth = timing.ws_stationary_depth(rows, n)
        m_rows = len(cycles)
        a, wt = _as_operands(mode, a), _as_operands(mode, wt)
        psum = (np.zeros((m_rows, cols), np.uint32) if psum is None
                else np.asarray(psum).astype(np.uint32))
        d = wt.shape[0] if wt.ndim == 2 else -1
        if (a.shape != (m_rows, d) or wt.shape != (d, cols) or psum.shape != (m_rows, cols)
                or not 1 <= d <= depth):
            raise ValueError(f"tile {t}: A must be {m_rows}×D, W D×{cols} (D ≤ {depth}) and P "
                             f"{m_rows}×{cols}, not {a.shape}, {wt.shape} and {psum.shape}")
        a, wt = _pad_k(a, 1, depth), _pad_k(wt, 0, depth)
        for r in range(rows):
            i = rows - 1 - r                           # PE row i: W rows i·n … i·n + n − 1
            plan.inputs.setdefault(wl + r, {}).update({
                "w_load": 1,
                "w_data": pack(_lanes(wt[i * n:(i + 1) * n, :].T, n, eb), dp.lane_bits)})
        for mm, c in enumerate(cycles):
            vals = {"in_valid": 1, "in_first": int(mm == 0),
                    "a_data": pack(_lanes(a[mm, :], n, eb), dp.lane_bits),
                    "psum_data": pack(psum[mm, :], 32)}
            if dp.has_mode_port:
                vals["mode"] = MODE_CODES[mode]
            plan.inputs.setdefault(c, {}).update(vals)
        result = numerics_ref.matmul_bits(mode, a, wt, psum, rule=dp.rule)
        for mm, c in enumerate(plan.predicted[t]):
            _expect(plan, t, c, None, result[mm])
    plan.n_cycles = max(plan.expected) + rows + cols + 4
    return plan


def os_wrap_plan(rows: int, cols: int, dtype: str = "int8", *, seed: int = 1,
                 start: int = 2) -> Plan:
    """One directed INT8 OS tile whose int32 sums leave the int32 range and must wrap.

    K = 2¹⁷ + 1024 steps' worth of constant operands (A row i: −128 or 127 alternately;
    B column j: −128, 127, −1, 1 in turn): sums of 16384·K = 2³¹ + 2²⁴ wrap negative, others stay
    in range. The constant stretch is one ``run`` (a driver can skip through it); the golden
    result is the exact sum modulo 2³².
    """
    check_config(rows, cols, dtype, "os")
    dp = get_datapath(dtype)
    n = dp.macs_per_cycle("int8")
    k = 2**17 + 1024
    steps = timing.os_steps(k, n)
    col_vals = np.array([-128, 127, -1, 1])[np.arange(cols) % 4]
    a = np.where(np.arange(rows) % 2 == 0, -128, 127)
    cycles = list(range(start, start + steps))
    plan = _new_plan(rows, cols, dtype, "os", seed=seed, n_tiles=1, modes=["int8"])
    plan.predicted = timing.os_output_cycles(rows, cols, [cycles])
    step = {"in_valid": 1, "in_last": 0,
            "a_data": pack(_lanes(np.repeat(a[:, None], n, 1).astype(np.int8), n, 8),
                           dp.lane_bits),
            "b_data": pack(_lanes(np.repeat(col_vals[:, None], n, 1).astype(np.int8), n, 8),
                           dp.lane_bits)}
    if dp.has_mode_port:
        step["mode"] = MODE_CODES["int8"]
    plan.runs = [(cycles[0], cycles[-2], step)]
    plan.inputs[cycles[-1]] = {**step, "in_last": 1}
    total = a[:, None].astype(np.int64) * col_vals[None, :] * (steps * n)
    result = ((total + 2**31) % 2**32 - 2**31).astype(np.int32).view(np.uint32)
    for i, c in enumerate(plan.predicted[0]):
        plan.expected[c] = (i, tuple(int(x) for x in result[i]))
    plan.n_cycles = max(plan.expected) + rows + cols + 4
    return plan


def earliest_plan(rows: int, cols: int, dtype: str, dataflow: str, sizes, mode: str | None = None,
                  *, seed: int = 1) -> Plan:
    """Back-to-back tiles at the earliest cycles the contract allows: what the engine models
    for the folds of one GEMM block (:func:`diptych.sim.timing.os_schedule` /
    :func:`~diptych.sim.timing.ws_schedule`, nothing of its own).

    OS: ``sizes`` are the tiles' depths K; a tile takes ``timing.os_steps(K, n)`` steps at the
    mode's n MACs per PE per cycle. WS: ``sizes`` are the tiles' row counts M, each with a full
    stationary tile (``timing.ws_stationary_depth(R, n)`` rows of W) and zero partial sums.
    Operands are moderate random values of ``mode`` (default: the datapath's only mode) from
    ``seed``. The plan's last expected output is in cycle ``os_sequence_cycles`` /
    ``ws_sequence_cycles`` − 1 of the steps / rows.
    """
    check_config(rows, cols, dtype, dataflow)
    mode = _mode_of(dtype, mode)
    sizes = list(sizes)
    if not sizes or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        raise ValueError(f"sizes must be a non-empty list of positive integers, not {sizes!r}")
    n = get_datapath(dtype).macs_per_cycle(mode)
    rng = np.random.default_rng(seed)
    if dataflow == "os":
        steps = [timing.os_steps(k, n) for k in sizes]
        cycles = timing.os_schedule(rows, cols, steps)
        tiles = [_operands(rng, mode, rows, k, cols, "moderate") for k in sizes]
        return os_plan(rows, cols, dtype, tiles, cycles, [mode] * len(sizes), seed=seed)
    depth = timing.ws_stationary_depth(rows, n)
    loads, row_cycles = timing.ws_schedule(rows, cols, sizes)
    tiles = [(*_operands(rng, mode, m, depth, cols, "moderate"), None) for m in sizes]
    return ws_plan(rows, cols, dtype, tiles, loads, row_cycles, [mode] * len(sizes), seed=seed)


# ---- random plans -----------------------------------------------------------------------------

def check_plan_args(rows: int, cols: int, dtype: str, dataflow: str, tiles, bubble_data
                    ) -> None:
    """ValueError naming a bad array shape, datapath, dataflow, tile count or bubble data."""
    check_config(rows, cols, dtype, dataflow)
    if isinstance(tiles, bool) or not isinstance(tiles, int) or tiles < 1:
        raise ValueError(f"tiles must be a positive integer, not {tiles!r}")
    if bubble_data not in ("random", "zero"):
        raise ValueError(f"bubble_data must be 'random' or 'zero', not {bubble_data!r}")


def make_plan(rows: int, cols: int, dtype: str, dataflow: str, *, seed: int = 1,
              tiles: int = 8, start: int = 1, modes=None, bubble_data: str = "random") -> Plan:
    """A random but reproducible plan of ``tiles`` tiles (see the module docstring).

    ``modes`` restricts the tiles' modes (default: every mode of the datapath, in turn and at
    random); ``bubble_data`` is ``"random"`` (default) or ``"zero"``. The block-scaled
    datapaths' plans are :func:`diptych.rtl.mx_bench.make_mx_plan`'s (blocks of 32; their
    lanes carry scales): :func:`diptych.rtl.plans.make_plan` takes any datapath.
    """
    check_plan_args(rows, cols, dtype, dataflow, tiles, bubble_data)
    dp = get_datapath(dtype)
    if dp.block_scaled:
        raise ValueError(f"the {dtype} datapath's plans are diptych.rtl.mx_bench's "
                         f"(diptych.rtl.plans.make_plan takes any datapath)")
    modes = tuple(dp.modes if modes is None else modes)
    for mo in modes:
        dp.macs_per_cycle(mo)
    rng = np.random.default_rng(seed)
    # every mode at least once (in order), then at random
    tile_modes = [modes[t] if t < len(modes) else str(rng.choice(modes)) for t in range(tiles)]
    build = _random_os if dataflow == "os" else _random_ws
    plan = build(rng, rows, cols, dtype, tile_modes, start, seed, bubble_data)
    return plan


def _steps_with_bubbles(rng, cycles: list[int], bubble_p: float, *, inside: bool = False
                        ) -> tuple[list[int], int]:
    """``cycles`` (consecutive) with random gaps inserted after steps; only ever later.
    ``inside``: at least one gap between the first and the last cycle (if there are two), a
    one-cycle gap after the first when the draws left none there (so the bench's ``bubbles``
    coverage class is always hit: :mod:`diptych.rtl.coverage`)."""
    out, shift, bubbles = [], 0, 0
    for c in cycles:
        out.append(c + shift)
        if rng.random() < bubble_p:
            gap = int(rng.integers(1, 4))
            shift += gap
            bubbles += gap
    if inside and len(out) > 1 and out[-1] - out[0] == len(out) - 1:
        out = out[:1] + [c + 1 for c in out[1:]]
        bubbles += 1
    return out, bubbles


def _os_earliest(R: int, C: int, prev_last: int | None, steps: int, start: int) -> list[int]:
    """Earliest legal step cycles of a ``steps``-step tile (timing.os_schedule)."""
    if prev_last is None:
        return timing.os_schedule(R, C, [steps], start=start)[0]
    return timing.os_schedule(R, C, [1, steps], start=prev_last)[1]


def _ws_earliest(R: int, C: int, prev: tuple[int, int] | None, m: int,
                 start: int) -> tuple[int, int]:
    """Earliest legal (load cycle, first row cycle) of an ``m``-row tile (timing.ws_schedule)."""
    if prev is None:
        loads, rows = timing.ws_schedule(R, C, [m], start=start)
        return loads[0], rows[0][0]
    first, last = prev
    loads, rows = timing.ws_schedule(R, C, [last - first + 1, m], start=first - R)
    return loads[1], rows[1][0]


def _random_os(rng, rows, cols, dtype, modes, start, seed, bubble_data):
    R = rows
    dp = get_datapath(dtype)
    tiles, step_cycles, bubbles = [], [], 0
    prev_last = None
    regimes = _Regimes()
    for t, mode in enumerate(modes):
        n = dp.macs_per_cycle(mode)
        # depths around R steps exercise both issue rules: fewer than R steps are limited by
        # the drain, R or more are not; with n = 2 an odd K leaves a padded half step. Tile 1
        # of every plan is long and full of bubbles.
        steps = int(rng.choice([1, max(1, R - 1), R, R + 1, 2 * R + 3,
                                int(rng.integers(1, 3 * R + 2))]))
        steps = 2 * R + 3 if t == 1 else steps
        k = max(1, steps * n - int(rng.integers(0, n)))
        regime = regimes(mode)
        if regime == "underflow":          # its steps come in cancelling pairs
            k = max(k, 2)
        elif regime in ("cancel", "sticky"):  # ... or groups of four
            k = max(k, 4 * int(rng.integers(1, 3)))
        steps = timing.os_steps(k, n)
        tight = t != 1 and rng.random() < 0.5    # tight: the earliest legal cycles, no bubbles
        cycles = _os_earliest(R, cols, prev_last, steps, start)
        if not tight:
            slack = int(rng.integers(0, 3))
            cycles, bub = _steps_with_bubbles(rng, [c + slack for c in cycles],
                                              0.5 if t == 1 else 0.25, inside=t == 1)
            bubbles += bub
        tiles.append(_operands(rng, mode, R, k, cols, regime))
        step_cycles.append(cycles)
        prev_last = cycles[-1]
    plan = os_plan(rows, cols, dtype, tiles, step_cycles, modes, seed=seed,
                   bubble_data=bubble_data)
    plan.bubbles = bubbles
    return plan


def _random_psum(rng, mode, shape, regime):
    """Top-edge partial sums: zeros (a fresh reduction), int32 values near the limits (the
    sum wraps; always in an INT8 edge tile), FP32 values near the products' magnitude (their
    last bits round, so the order of additions shows) or random FP32 bits with edges."""
    if mode == "int8":
        if regime == "edges" or rng.random() < 0.5:
            return rng.choice(np.array([2**31 - 1, 2**31, 2**31 - 100, 5], np.uint64),
                              shape).astype(np.uint32)
        return np.zeros(shape, np.uint32)
    u = rng.random()
    if regime in ("underflow", "cancel", "sticky") or u < 0.3:
        return np.zeros(shape, np.uint32)
    if u < 0.65:
        exp = rng.integers(110, 145, shape, dtype=np.uint64)
        near = ((rng.integers(0, 2, shape, dtype=np.uint64) << 31) | (exp << 23)
                | rng.integers(0, 2**23, shape, dtype=np.uint64))
        return near.astype(np.uint32)
    psum = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    mask = rng.random(shape) < 0.2
    return np.where(mask, rng.choice(np.array(FP32_PSUM_EDGES, np.uint32), shape),
                    psum).astype(np.uint32)


def _random_ws(rng, rows, cols, dtype, modes, start, seed, bubble_data):
    R, C = rows, cols
    dp = get_datapath(dtype)
    tiles, loads, row_cycles, bubbles = [], [], [], 0
    prev = None                  # (first row, last row) of the previous tile
    chain = None                 # (mode, rows, partial sums) of a K > R reduction in progress
    regimes = _Regimes()
    for t, mode in enumerate(modes):
        n = dp.macs_per_cycle(mode)
        depth = timing.ws_stationary_depth(R, n)
        regime = regimes(mode)
        psum_exp = None
        if (chain is not None and chain[0] == mode and t != 1
                and regime not in ("underflow", "order", "ties", "cancel", "sticky")
                and rng.random() < 0.7):
            _, m_rows, psum = chain                  # continue: next K-chunk, same rows
        else:
            # tile 1 of every plan is long (the next tile's weights load while it streams)
            m_rows = (2 * R + C + 2 if t == 1 else
                      int(rng.choice([1, R, R + C, int(rng.integers(1, 3 * R + 2))])))
            psum = _random_psum(rng, mode, (m_rows, C), regime)
            if regime in ("order", "ties"):           # partial sums ±1.f · 2^psum_exp
                psum_exp = int(rng.integers(8, 15))
                psum = ((rng.integers(0, 2, (m_rows, C), dtype=np.uint64) << np.uint64(31))
                        | (np.uint64(psum_exp + 127) << np.uint64(23))
                        | rng.integers(0, 2**23, (m_rows, C), dtype=np.uint64)
                        ).astype(np.uint32)
        a, wt = _operands(rng, mode, m_rows, depth, C, regime, psum_exp)
        chain = (mode, m_rows, numerics_ref.matmul_bits(mode, a, wt, psum, rule=dp.rule))
        wl, first = _ws_earliest(R, C, prev, m_rows, start)
        cycles = list(range(first, first + m_rows))
        if t == 1 or rng.random() >= 0.5:             # loose: slack, then bubbles
            s1, s2 = int(rng.integers(0, 3)), int(rng.integers(0, 3))
            wl += s1
            cycles, bub = _steps_with_bubbles(rng, [c + s1 + s2 for c in cycles],
                                              0.5 if t == 1 else 0.25, inside=t == 1)
            bubbles += bub
        tiles.append((a, wt, psum))
        loads.append(wl)
        row_cycles.append(cycles)
        prev = (cycles[0], cycles[-1])
    plan = ws_plan(rows, cols, dtype, tiles, loads, row_cycles, modes, seed=seed,
                   bubble_data=bubble_data)
    plan.bubbles = bubbles
    return plan

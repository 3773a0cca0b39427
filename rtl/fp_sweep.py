"""Deep check of the FP units: millions of vectors on Verilator against the CPU's own float32.

The test suite checks the multipliers and the FP32 adder on thousands of vectors in
amaranth.sim. This check goes much further: it verilates the units into a small C++ harness
and compares them with the host's IEEE float32 arithmetic (round to nearest even, with the
contract's input and output flushes applied in C) on

* the adder: ``adder_vectors`` vectors, a quarter each uniform random bits, near-cancellation
  (``b ≈ −a``), alignment shifts of 0–29 binades, and operands with similar exponents;
* the bf16 multiplier: every bf16 ``a`` against every ``mul_step``-th bf16 ``b``
  (``mul_step=1`` is exhaustive: 2³² pairs, a few minutes);
* the FP8 multiplier: every pair of FP8 codes in every format pair (E4M3/E5M2 × E4M3/E5M2,
  2¹⁸ vectors, always exhaustive), against the float product of the values the golden model
  decodes (the decode tables are generated from :mod:`diptych.rtl.numerics_ref`);
* the fused datapath's exact three-operand adder (:class:`~diptych.rtl.fused.Fp32Add3`):
  ``add3_vectors`` vectors in eight classes (:func:`add3_vectors`: uniform bits, similar
  exponents, massive cancellation with a far third term, an accumulator cancelling an FP8-sized
  product with a tiny product left over, near-ties, exact cancelling pairs in every position,
  the underflow and the overflow range), against :func:`diptych.rtl.numerics_ref.fp32_add3_bits`
  (exact integers; the golden model is itself checked against the Fraction oracle).

Run ``python -m diptych.rtl.fp_sweep [--adder-vectors N] [--mul-step S] [--add3-vectors N]``
(the benchmark: ``--adder-vectors 100000000 --mul-step 1 --add3-vectors 20000000``); it prints
the number of mismatches (the first few in full) and exits non-zero if there are any. The slow
test tier runs a sample (10⁵ adder vectors, every 4099th bf16 pair, all FP8 pairs, 2·10⁴
three-operand vectors).

The harness is built once by :func:`build` and run many times by :func:`check`, which also
takes the bf16 multiplier's range of ``a`` (``benchmarks/bf16_mul_exhaustive.py`` runs all 2³²
pairs that way, in resumable chunks) and a file of vectors with their expected results for any
of the four units (:func:`write_vectors`: the slow tier feeds the TestFloat-style vectors of
``tests/rtl/rtl_testfloat.py`` through it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from amaranth.back import verilog

from . import numerics_ref
from .fp import Bf16Multiplier, Fp8Multiplier, Fp32Adder
from .fused import Fp32Add3
from .verilator import ccache_path, verilator_env

__all__ = ["sweep", "build", "check", "write_vectors", "add3_vectors", "VECTOR_UNITS"]

_HARNESS = r"""
#include "Vfadd.h"
#include "Vfmul.h"
#include "Vf8mul.h"
#include "Vfadd3.h"
#include "fp8_tables.h"
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <random>
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t daz(uint32_t u) { return ((u >> 23) & 0xFF) == 0 ? (u & 0x80000000u) : u; }
static uint32_t fin(uint32_t u) {
  u = daz(u);
  return (((u >> 23) & 0xFF) == 0xFF && (u & 0x7FFFFF)) ? 0x7FC00000u : u;
}
static uint32_t ref_add(uint32_t a, uint32_t b) {
  volatile float x = u2f(daz(a)), y = u2f(daz(b)); volatile float s = x + y; return fin(f2u(s));
}
static uint32_t ref_mul(uint32_t a, uint32_t b) {
  volatile float x = u2f(daz(a << 16)), y = u2f(daz(b << 16)); volatile float p = x * y;
  return fin(f2u(p));
}
int main(int argc, char **argv) {
  long n_add = atol(argv[1]); long step = atol(argv[2]); unsigned long long seed = atoll(argv[3]);
  // optional: the bf16 multiplier's a range [a_lo, a_hi), the FP8 sweep on/off, a vector file
  uint32_t a_lo = argc > 5 ? atol(argv[5]) : 0, a_hi = argc > 6 ? atol(argv[6]) : 65536;
  int do_fp8 = argc > 7 ? atoi(argv[7]) : 1;
  Vfadd add; Vfmul mul; std::mt19937_64 g(seed); long bad = 0, n_mul = 0;
  for (long i = 0; i < n_add; i++) {
    uint64_t r = g(); uint32_t a = (uint32_t)r, b = (uint32_t)(r >> 32);
    switch (i % 4) {
      case 1: b = (a ^ 0x80000000u) + (uint32_t)(g() % 9) - 4; break;
      case 2: { int e = (a >> 23) & 0xFF, d = (int)(g() % 30), eb = e - d < 1 ? 1 : e - d;
                b = (b & 0x807FFFFFu) | ((uint32_t)eb << 23); break; }
      case 3: a = (a & 0x81FFFFFFu) | 0x3C000000u; b = (b & 0x81FFFFFFu) | 0x3C000000u; break;
    }
    add.a = a; add.b = b; add.eval();
    uint32_t w = ref_add(a, b);
    if (add.s != w) { if (bad < 10) printf("add %08x + %08x: got %08x, want %08x\n", a, b, add.s, w); bad++; }
  }
  for (uint32_t a = a_lo; a < a_hi; a++)
    for (uint32_t b = 0; b < 65536; b += step) {
      mul.a = a; mul.b = b; mul.eval(); n_mul++;
      uint32_t w = ref_mul(a, b);
      if (mul.p != w) { if (bad < 20) printf("mul %04x * %04x: got %08x, want %08x\n", a, b, mul.p, w); bad++; }
    }
  Vf8mul m8; long n8 = 0;
  for (int fa = 0; fa < 2 * do_fp8; fa++)
    for (int fb = 0; fb < 2; fb++)
      for (uint32_t a = 0; a < 256; a++)
        for (uint32_t b = 0; b < 256; b++) {
          m8.a = a; m8.b = b; m8.a_e5m2 = fa; m8.b_e5m2 = fb; m8.eval(); n8++;
          volatile float x = u2f(FP8_TO_FP32[fa][a]), y = u2f(FP8_TO_FP32[fb][b]);
          volatile float p = x * y;
          uint32_t w = fin(f2u(p));
          if (m8.p != w) { if (bad < 30) printf("fp8 mul %d%d %02x * %02x: got %08x, want %08x\n", fa, fb, a, b, m8.p, w); bad++; }
        }
  Vfadd3 a3; long n3 = 0;
  FILE *vf = fopen(argv[4], "rb"); uint32_t v[4];
  while (vf && fread(v, 4, 4, vf) == 4) {
    a3.a = v[0]; a3.b = v[1]; a3.c = v[2]; a3.eval(); n3++;
    if (a3.s != v[3]) { if (bad < 40) printf("add3 %08x + %08x + %08x: got %08x, want %08x\n", v[0], v[1], v[2], a3.s, v[3]); bad++; }
  }
  if (vf) fclose(vf);
  // vector file: records (unit, x, y, z, w, want); unit 0 add, 1 add3, 2 bf16 mul, 3 fp8 mul
  long nv = 0; uint32_t r[6]; FILE *tv = argc > 8 ? fopen(argv[8], "rb") : 0;
  while (tv && fread(r, 4, 6, tv) == 6) {
    uint32_t got;
    switch (r[0]) {
      case 0: add.a = r[1]; add.b = r[2]; add.eval(); got = add.s; break;
      case 1: a3.a = r[1]; a3.b = r[2]; a3.c = r[3]; a3.eval(); got = a3.s; break;
      case 2: mul.a = r[1]; mul.b = r[2]; mul.eval(); got = mul.p; break;
      default: m8.a = r[1]; m8.b = r[2]; m8.a_e5m2 = r[3]; m8.b_e5m2 = r[4]; m8.eval(); got = m8.p;
    }
    nv++;
    if (got != r[5]) {
      if (bad < 50) printf("vector unit %u %08x %08x %08x %08x: got %08x, want %08x\n",
                           r[0], r[1], r[2], r[3], r[4], got, r[5]);
      bad++;
    }
  }
  if (tv) fclose(tv);
  printf("adder vectors %ld, multiplier vectors %ld, fp8 multiplier vectors %ld, "
         "add3 vectors %ld, file vectors %ld, mismatches %ld\n", n_add, n_mul, n8, n3, nv, bad);
  return bad != 0;
}
"""


def _fp8_tables() -> str:
    """C tables: FP32 bits of every FP8 code, E4M3 then E5M2 (from the golden model)."""
    rows = []
    for fmt in numerics_ref.FP8_FORMATS:
        bits = numerics_ref.fp8_to_fp32_bits(range(256), fmt)
        rows.append("{" + ", ".join(f"0x{int(b):08x}u" for b in bits) + "}")
    return ("static const uint32_t FP8_TO_FP32[2][256] = {\n" + ",\n".join(rows) + "};\n")


def _fp32(rng, n, exp_lo=1, exp_hi=255, sig_bits=24):
    """Random FP32 bit patterns, biased exponents in [exp_lo, exp_hi), ``sig_bits``
    significant bits (the rest of the fraction zero), random signs."""
    e = rng.integers(exp_lo, exp_hi, n).astype(np.uint64)
    drop = np.uint64(24 - sig_bits)
    f = rng.integers(0, 2**23, n, dtype=np.uint64) >> drop << drop
    s = rng.integers(0, 2, n).astype(np.uint64)
    return ((s << np.uint64(31)) | (e << np.uint64(23)) | f).astype(np.uint32)


def _with_exp(bits, exp):
    """``bits`` with the biased exponent field replaced (clipped to 1 … 254)."""
    e = np.clip(exp, 1, 254).astype(np.uint32)
    return ((bits & np.uint32(0x807FFFFF)) | (e << np.uint32(23))).astype(np.uint32)


def add3_vectors(n: int, seed: int = 1) -> np.ndarray:
    """``uint32[n, 4]``: (a, b, c, golden a + b + c) in eight classes, one eighth each.

    The classes aim at what an aligned-window three-operand adder can get wrong: uniform bits
    (every special), similar exponents, ``b ≈ −a`` with ``c`` 10–70 binades below (massive
    cancellation, ``c`` partly outside the window), an accumulator ``a`` cancelling an 8-bit
    ``b`` (an FP8 product) to a few ulps with an 8-bit ``c`` 0–40 binades below that residue
    (the case that sizes the window), ``c`` near half an ulp of ``a + b`` (ties, two operands
    outside the window), exact negatives ``x, −x`` in every pair of positions with the third
    operand far below, the underflow range and the overflow range.
    """
    rng = np.random.default_rng(seed)
    k = (n + 7) // 8
    cls = []
    u = rng.integers(0, 2**32, (k, 3), dtype=np.uint64).astype(np.uint32)
    cls.append((u[:, 0], u[:, 1], u[:, 2]))
    a = _fp32(rng, k, 110, 150)
    cls.append((a, _fp32(rng, k, 110, 150), _fp32(rng, k, 110, 150)))
    a = _fp32(rng, k, 80, 200)
    ea = ((a >> 23) & 0xFF).astype(np.int64)
    b = ((a ^ np.uint32(0x80000000)).astype(np.int64) + rng.integers(-4, 5, k)).astype(np.uint32)
    cls.append((a, b, _with_exp(_fp32(rng, k), ea - rng.integers(10, 70, k))))
    # accumulator a; b = −(a to 8 bits) (an FP8-like product); c 8-bit, below the residue
    a = _fp32(rng, k, 90, 170)
    ea = ((a >> 23) & 0xFF).astype(np.int64)
    b = ((a & np.uint32(0xFFFF0000)) ^ np.uint32(0x80000000)).astype(np.uint32)
    a = (a.astype(np.int64) + rng.integers(-3, 4, k)).astype(np.uint32)     # residue: few ulps
    c = _with_exp(_fp32(rng, k, sig_bits=8), ea - 23 - rng.integers(0, 41, k))
    cls.append((a, b, c))
    # near-ties: c at about half an ulp of a (+ b far below, both c and b outside the window)
    a = _fp32(rng, k, 60, 200)
    ea = ((a >> 23) & 0xFF).astype(np.int64)
    c = _with_exp(_fp32(rng, k, sig_bits=rng.integers(1, 4)), ea - 24 - rng.integers(0, 3, k))
    b = _with_exp(_fp32(rng, k, sig_bits=8), ea - rng.integers(28, 60, k))
    cls.append((a, b, c))
    # exact negatives x, −x in every pair of positions, the third far below (or anywhere)
    x = _fp32(rng, k, 40, 220)
    ex = ((x >> 23) & 0xFF).astype(np.int64)
    t = _with_exp(_fp32(rng, k), ex - rng.integers(0, 80, k))
    nx = x ^ np.uint32(0x80000000)
    pos = rng.integers(0, 3, k)
    cls.append((np.where(pos == 2, t, x), np.where(pos == 1, t, np.where(pos == 0, nx, x)),
                np.where(pos == 0, t, nx)))
    cls.append(tuple(_fp32(rng, k, 1, 30) for _ in range(3)))                 # underflow
    cls.append(tuple(_fp32(rng, k, 230, 255) for _ in range(3)))              # overflow
    abc = np.concatenate([np.stack(c3, 1) for c3 in cls])[:n].astype(np.uint32)
    want = numerics_ref.fp32_add3_bits(abc[:, 0], abc[:, 1], abc[:, 2])
    return np.concatenate([abc, want[:, None]], 1).astype(np.uint32)


def build(work_dir, optimize: bool = True, add3=Fp32Add3) -> Path:
    """Verilate the four FP units and compile the harness in ``work_dir``; returns the binary.

    ``optimize=False`` compiles without optimisation: a faster build for short runs. ``add3``
    is the three-operand adder class under test (a variant, for experiments).
    """
    cc = ccache_path()
    env = {**os.environ, **verilator_env(),
           "MAKEFLAGS": "CFG_CXXFLAGS_PCH_I=-include" + (f" OBJCACHE={cc}" if cc else "")}
    root = Path(env["VERILATOR_ROOT"])
    opt = "-O1" if optimize else "-O0"
    w = Path(work_dir)
    w.mkdir(parents=True, exist_ok=True)
    (w / "add.v").write_text(verilog.convert(Fp32Adder(), name="fadd", emit_src=False))
    (w / "mul.v").write_text(verilog.convert(Bf16Multiplier(), name="fmul", emit_src=False))
    (w / "mul8.v").write_text(verilog.convert(Fp8Multiplier(), name="f8mul", emit_src=False))
    (w / "add3.v").write_text(verilog.convert(add3(), name="fadd3", emit_src=False))
    (w / "fp8_tables.h").write_text(_fp8_tables())
    (w / "main.cpp").write_text(_HARNESS)

    def run(cmd):
        p = subprocess.run(cmd, cwd=w, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:3])} … failed:\n"
                               f"{p.stdout[-2000:]}{p.stderr[-2000:]}")

    tops = (("fadd", "add.v"), ("fmul", "mul.v"), ("f8mul", "mul8.v"), ("fadd3", "add3.v"))
    for top, src in tops:
        run(["verilator", "--cc", src, "--top-module", top, "--prefix", f"V{top}",
             "-Mdir", f"o_{top}", "-Wno-fatal"])
        run(["make", "-s", "-C", f"o_{top}", "-f", f"V{top}.mk", f"OPT_FAST={opt}"])
    inc = [f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}",
           *(f"-Io_{t}" for t, _ in tops)]
    objs = []                             # the runtime, compiled once (through ccache)
    for name in ("verilated.cpp", "verilated_threads.cpp"):
        obj = name.replace(".cpp", ".o")
        run([*([cc] if cc else []), "c++", opt, *inc, "-c",
             str(root / "include" / name), "-o", obj])
        objs.append(obj)
    run(["c++", opt, *inc, "main.cpp", *(f"o_{t}/V{t}__ALL.a" for t, _ in tops), *objs,
         "-o", "check", "-lpthread"])
    return w / "check"


def check(binary, adder_vectors: int = 0, mul_step: int = 1, seed: int = 42, add3_file=None,
          mul_range: tuple[int, int] = (0, 65536), fp8: bool = True,
          vector_file=None) -> tuple[bool, str]:
    """Run the built harness once; returns (passed, its report).

    ``adder_vectors`` random FP32 sums (four classes) against the host's float; the bf16
    multiplier on every ``a`` in ``mul_range`` (``[lo, hi)``) against every ``mul_step``-th
    ``b``; every FP8 product (``fp8``); the three-operand sums of ``add3_file`` (records a, b,
    c, want); and the records of ``vector_file`` (:func:`write_vectors`).
    """
    lo, hi = mul_range
    if adder_vectors < 0 or mul_step < 1 or not 0 <= lo <= hi <= 65536:
        raise ValueError("adder_vectors must be >= 0, mul_step >= 1 and mul_range within "
                         f"0 … 65536, not {adder_vectors}, {mul_step}, {mul_range}")
    p = subprocess.run([str(binary), str(adder_vectors), str(mul_step), str(seed),
                        str(add3_file or ""), str(lo), str(hi), str(int(fp8)),
                        str(vector_file or "")], capture_output=True, text=True)
    return p.returncode == 0, (p.stdout + p.stderr).strip()


#: unit ids of the vector-file records (the harness's switch)
VECTOR_UNITS = {"fp32_add": 0, "fp32_add3": 1, "bf16_mul": 2, "fp8_mul": 3}


def write_vectors(path, unit: str, vectors, expected) -> int:
    """Append ``vectors`` of ``unit`` (tuples of its inputs: a, b[, c] or a, b, a_e5m2, b_e5m2)
    and their expected results to the vector file ``path``; returns the number written."""
    if unit not in VECTOR_UNITS:
        raise ValueError(f"unit must be one of {sorted(VECTOR_UNITS)}, not {unit!r}")
    rows = [(VECTOR_UNITS[unit], *v, *([0] * (4 - len(v))), w) for v, w in zip(vectors, expected)]
    arr = np.array(rows, dtype=np.uint64).astype(np.uint32).reshape(-1, 6)
    with open(path, "ab") as f:
        arr.tofile(f)
    return len(rows)


def sweep(adder_vectors: int = 20_000_000, mul_step: int = 7, seed: int = 42,
          optimize: bool = True, add3_vectors_n: int = 2_000_000,
          add3=Fp32Add3) -> tuple[bool, str]:
    """Build the harness in a temporary directory and run it once; returns (passed, report).

    ``optimize=False`` compiles without optimisation: a faster build for short runs.
    ``add3`` is the three-operand adder class under test (a variant, for experiments).
    """
    if adder_vectors < 0 or mul_step < 1 or add3_vectors_n < 0:
        raise ValueError("adder_vectors and add3_vectors_n must be >= 0 and mul_step >= 1")
    with tempfile.TemporaryDirectory(prefix="diptych-fpsweep-") as tmp:
        binary = build(tmp, optimize, add3)
        add3_vectors(add3_vectors_n, seed).tofile(Path(tmp) / "add3.bin")
        return check(binary, adder_vectors, mul_step, seed, Path(tmp) / "add3.bin")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adder-vectors", type=int, default=20_000_000)
    ap.add_argument("--mul-step", type=int, default=7, help="1 = all 2^32 bf16 pairs")
    ap.add_argument("--add3-vectors", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    ok, report = sweep(args.adder_vectors, args.mul_step, args.seed,
                       add3_vectors_n=args.add3_vectors)
    print(report)
    print(f"{'PASS' if ok else 'FAIL'} in {time.perf_counter() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

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
  decodes (the decode tables are generated from :mod:`diptych.rtl.golden`).

Run ``python -m diptych.rtl.fp_sweep [--adder-vectors N] [--mul-step S]`` (the benchmark:
``--adder-vectors 100000000 --mul-step 1``); it prints the number of mismatches (the first few
in full) and exits non-zero if there are any. The slow test tier runs a sample
(10⁵ adder vectors, every 4099th bf16 pair, all FP8 pairs).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amaranth.back import verilog

from . import golden
from .fp import Bf16Multiplier, Fp8Multiplier, Fp32Adder
from .verilator import ccache_path, verilator_env

__all__ = ["sweep"]

_HARNESS = r"""
#include "Vfadd.h"
#include "Vfmul.h"
#include "Vf8mul.h"
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
  for (uint32_t a = 0; a < 65536; a++)
    for (uint32_t b = 0; b < 65536; b += step) {
      mul.a = a; mul.b = b; mul.eval(); n_mul++;
      uint32_t w = ref_mul(a, b);
      if (mul.p != w) { if (bad < 20) printf("mul %04x * %04x: got %08x, want %08x\n", a, b, mul.p, w); bad++; }
    }
  Vf8mul m8; long n8 = 0;
  for (int fa = 0; fa < 2; fa++)
    for (int fb = 0; fb < 2; fb++)
      for (uint32_t a = 0; a < 256; a++)
        for (uint32_t b = 0; b < 256; b++) {
          m8.a = a; m8.b = b; m8.a_e5m2 = fa; m8.b_e5m2 = fb; m8.eval(); n8++;
          volatile float x = u2f(FP8_TO_FP32[fa][a]), y = u2f(FP8_TO_FP32[fb][b]);
          volatile float p = x * y;
          uint32_t w = fin(f2u(p));
          if (m8.p != w) { if (bad < 30) printf("fp8 mul %d%d %02x * %02x: got %08x, want %08x\n", fa, fb, a, b, m8.p, w); bad++; }
        }
  printf("adder vectors %ld, multiplier vectors %ld, fp8 multiplier vectors %ld, mismatches %ld\n",
         n_add, n_mul, n8, bad);
  return bad != 0;
}
"""


def _fp8_tables() -> str:
    """C tables: FP32 bits of every FP8 code, E4M3 then E5M2 (from the golden model)."""
    rows = []
    for fmt in golden.FP8_FORMATS:
        bits = golden.fp8_to_fp32_bits(range(256), fmt)
        rows.append("{" + ", ".join(f"0x{int(b):08x}u" for b in bits) + "}")
    return ("static const uint32_t FP8_TO_FP32[2][256] = {\n" + ",\n".join(rows) + "};\n")


def sweep(adder_vectors: int = 20_000_000, mul_step: int = 7, seed: int = 42,
          optimize: bool = True) -> tuple[bool, str]:
    """Build and run the harness; returns (passed, its report).

    ``optimize=False`` compiles without optimisation: a faster build for short runs.
    """
    if adder_vectors < 0 or mul_step < 1:
        raise ValueError("adder_vectors must be >= 0 and mul_step >= 1")
    cc = ccache_path()
    env = {**os.environ, **verilator_env(),
           "MAKEFLAGS": "CFG_CXXFLAGS_PCH_I=-include" + (f" OBJCACHE={cc}" if cc else "")}
    root = Path(env["VERILATOR_ROOT"])
    opt = "-O1" if optimize else "-O0"
    with tempfile.TemporaryDirectory(prefix="diptych-fpsweep-") as tmp:
        w = Path(tmp)
        (w / "add.v").write_text(verilog.convert(Fp32Adder(), name="fadd", emit_src=False))
        (w / "mul.v").write_text(verilog.convert(Bf16Multiplier(), name="fmul", emit_src=False))
        (w / "mul8.v").write_text(verilog.convert(Fp8Multiplier(), name="f8mul",
                                                  emit_src=False))
        (w / "fp8_tables.h").write_text(_fp8_tables())
        (w / "main.cpp").write_text(_HARNESS)

        def run(cmd):
            p = subprocess.run(cmd, cwd=w, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd[:3])} … failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")

        tops = (("fadd", "add.v"), ("fmul", "mul.v"), ("f8mul", "mul8.v"))
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
        p = subprocess.run([str(w / "check"), str(adder_vectors), str(mul_step), str(seed)],
                           capture_output=True, text=True)
        return p.returncode == 0, (p.stdout + p.stderr).strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adder-vectors", type=int, default=20_000_000)
    ap.add_argument("--mul-step", type=int, default=7, help="1 = all 2^32 bf16 pairs")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    ok, report = sweep(args.adder_vectors, args.mul_step, args.seed)
    print(report)
    print(f"{'PASS' if ok else 'FAIL'} in {time.perf_counter() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

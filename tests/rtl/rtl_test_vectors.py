"""Shared test vectors for the BF16/FP32 numerics tests."""

import numpy as np

BF16_EDGES = [0x0000, 0x8000, 0x0001, 0x807F, 0x0040, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81,
              0x7F7F, 0xFF7F, 0x0080, 0x8080, 0x3F80, 0xBF80, 0x3F81, 0x4000, 0x0100, 0x1F80]
FP32_EDGES = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F800000, 0xFF800000,
              0x7FC00000, 0xFFC00001, 0x7F800001, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000,
              0x80800000, 0x00C00000, 0x3F800000, 0xBF800000, 0x3F800001, 0x33800000,
              0x33800001, 0xB3800000, 0x73000000, 0x4B800000, 0xCB800001]


def random_fp32(rng, n):
    """Mixed: uniform bits (all classes) and a narrow exponent band (rounding, cancellation)."""
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    s = rng.integers(0, 2, n).astype(np.uint32)
    e = rng.integers(100, 140, n).astype(np.uint32)
    f = rng.integers(0, 2**23, n).astype(np.uint32)
    narrow = (s << 31) | (e << 23) | f
    return np.where(rng.random(n) < 0.5, u, narrow).astype(np.uint32)

#: FP8 edge codes (both formats read them differently): zeros, smallest/largest subnormals,
#: smallest normals, E4M3 256 (1111.000) and max 448 (1111.110), E5M2 max (11110.11), E5M2 ±Inf
#: (11111.00), NaNs (E4M3 S.1111.111; E5M2 S.11111.xx), ±1 in each format, a mid value.
FP8_EDGES = [0x00, 0x80, 0x01, 0x81, 0x03, 0x07, 0x87, 0x04, 0x08, 0x78, 0x7B, 0xFB, 0x7C,
             0xFC, 0x7D, 0x7E, 0xFE, 0x7F, 0xFF, 0x38, 0xB8, 0x3C, 0xBC, 0x55]

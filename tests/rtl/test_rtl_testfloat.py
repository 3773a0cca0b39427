"""Fast tier: TestFloat-style vectors through the FP units (amaranth.sim) against the exact
oracle, with per-class coverage that fails when a claimed class was never exercised."""

from fractions import Fraction

import numpy as np
import pytest

import rtl_fraction_ref as oracle
import rtl_testfloat as tf
from diptych.rtl import numerics_ref


@pytest.fixture(scope="module", params=sorted(tf.UNITS))
def unit_vectors(request):
    return request.param, tf.vectors(request.param)


def test_every_unit_matches_the_exact_oracle_on_its_vectors(unit_vectors):
    """Every vector, bit for bit; a mismatch names the classes the vector hits."""
    unit, vecs = unit_vectors
    bad = tf.mismatches(unit, vecs)
    assert not bad, bad[:10]


def test_every_claimed_class_is_exercised(unit_vectors):
    """Coverage you can read (issue 26 item 6, for the FP units): the class counts of the run,
    computed from the exact results; a class the set claims and never hits fails the test."""
    unit, vecs = unit_vectors
    counts = tf.coverage(unit, vecs)
    print(f"\n{unit}: {len(vecs)} vectors: "
          + ", ".join(f"{k} {counts[k]}" for k in sorted(counts)))
    missing = [k for k in tf.CLAIMS[unit] if counts[k] == 0]
    assert not missing, f"{unit}: no vector exercised {missing}"


def test_the_golden_model_agrees_with_the_oracle_on_the_vectors():
    """The NumPy golden (what the array bench scores against) on the same vectors."""
    for unit, fn in (("fp32_add", numerics_ref.fp32_add_bits),
                     ("bf16_mul", numerics_ref.bf16_mul_bits)):
        v = np.array(tf.vectors(unit), dtype=np.uint64)
        got = fn(v[:, 0].astype(np.uint32 if unit == "fp32_add" else np.uint16),
                 v[:, 1].astype(np.uint32 if unit == "fp32_add" else np.uint16)).tolist()
        assert got == tf.expected(unit, tf.vectors(unit))
    v = np.array(tf.vectors("fp32_add3"), dtype=np.uint64).astype(np.uint32)
    assert (numerics_ref.fp32_add3_bits(v[:, 0], v[:, 1], v[:, 2]).tolist()
            == tf.expected("fp32_add3", tf.vectors("fp32_add3")))


# ---- the classifier on hand-made cases (each class stated from first principles) -----------

ONE = 0x3F800000


@pytest.mark.parametrize("a, b, classes", [
    (ONE, 0x33800000, {"tie-down", "align-near-width"}),          # 1 + 2^-24: tie, LSB even
    (ONE | 1, 0x33800000, {"tie-up"}),                            # (1 + 2^-23) + 2^-24: odd
    (ONE, 0x33800001, {"near-tie-above"}),                        # just above ½ ulp
    (ONE, 0x337FFFFF, {"near-tie-below"}),                        # just below ½ ulp
    (0x3FFFFFFF, 0x33800000, {"carry-out", "tie-up"}),            # (2 − 2^-23) + 2^-24 → 2
    (ONE, ONE, {"carry-in", "exact", "align-0"}),
    (ONE, 0xBF800000, {"cancel-total", "zero-result-pos"}),
    (0x80000000, 0x80000000, {"zero-result-neg"}),
    (ONE, 0xBF7FFFFF, {"cancel-massive", "align-1"}),              # 1 − (1 − 2^-24)
    (0x7F7FFFFF, 0x73000000, {"overflow", "overflow-by-rounding"}),   # FLT_MAX + ½ ulp
    (0x7F7FFFFE, 0x73000001, {"max-result", "near-tie-above"}),  # FLT_MAX − ulp + ½ ulp+
    (0x01000000, 0x80800000, {"min-normal-result", "exact"}),     # 2^-125 − 2^-126
    (0x00800001, 0x80800000, {"underflow"}),                      # 2^-149·2^23 residue
    (0x00000001, ONE, {"subnormal-in"}),
    (0x7F800000, 0xFF800000, {"inf-cancel"}),
    (ONE, 0x2F800000, {"align-far"}),                             # 2^-32 below
])
def test_classifier_on_hand_made_sums(a, b, classes):
    got = tf.classify("fp32_add", (a, b))
    assert classes <= got, (hex(a), hex(b), got)


def test_classifier_rounding_classes_agree_with_the_oracle():
    """Independent statement: a tie-down vector's exact sum rounds to the lower neighbour, a
    tie-up one's to the upper, carry-out lands on a power of two; checked on the oracle's bits."""
    for a, b in tf.vectors("fp32_add"):
        cls = tf.classify("fp32_add", (a, b))
        r = oracle.fp32_add(a, b)
        exact = oracle.fp32_value(a if (a >> 23) & 0xFF else a & 0x80000000) + \
            oracle.fp32_value(b if (b >> 23) & 0xFF else b & 0x80000000) \
            if not cls & {"nan-in", "inf-in"} else None
        if cls & {"tie-down", "tie-up"} and "overflow" not in cls:
            err = abs(oracle.fp32_value(r) - exact)
            ulp = Fraction(2) ** (oracle._floor_log2(abs(exact)) - 23)
            assert err == ulp / 2, (hex(a), hex(b))
            assert (r & 1) == 0 or "carry-out" in cls, (hex(a), hex(b))   # ties go to even
        if "carry-out" in cls and "overflow" not in cls:
            assert r & 0x7FFFFF == 0, (hex(a), hex(b))
        if "underflow" in cls:
            assert r & 0x7FFFFFFF == 0, (hex(a), hex(b))


def test_vectors_are_reproducible_and_level_checked():
    assert tf.vectors("fp32_add", seed=3) == tf.vectors("fp32_add", seed=3)
    assert tf.vectors("fp32_add", seed=3) != tf.vectors("fp32_add", seed=4)
    with pytest.raises(ValueError, match="unit"):
        tf.vectors("fp16_add")
    with pytest.raises(ValueError, match="level"):
        tf.vectors("fp32_add", level=3)
    assert len(tf.fp32_p2()) == 88        # TestFloat's f32NumP2 for a 23-bit fraction

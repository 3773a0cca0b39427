"""``dram.play_one``'s four-activate ring, spelled per ``j % 4`` (no tuple indexed at run
time), against the rule as first written: activation ``j`` of a transfer (0-based) at
``first[j % 4] + (j // 4)·tFAW`` and the last four kept, bit for bit."""

from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.sim import dram as D


def _ring_ref(start, a, na, tfaw):
    """The ring after ``na`` activations from ``start`` (the rule as first written)."""
    f = [max(start, x + tfaw) for x in a]
    if na >= 4:
        return tuple(f[j % 4] + (j // 4) * tfaw for j in range(na - 4, na))
    return tuple(a[na:]) + tuple(f[:na])


_T = st.floats(0.0, 1e7, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(start=_T, ring=st.tuples(st.one_of(_T, st.just(-1e18)), _T, _T, _T),
       na=st.integers(0, 70), tfaw=st.sampled_from([30.0, 7.3, 1e-3, 0.1 + 0.2]))
def test_ring_equals_the_rule_per_activation(start, ring, na, tfaw):
    tp = (1.0, 28.0, tfaw, 2.5, 2.0, 47.0, 3900.0, 378.0)
    out = D.play_one(start, 0, 1.0, tp, 0.0, -1, *ring, 1, na, 1, D.NO_MEMO)
    got = out[2:6]
    ref = _ring_ref(start, ring, na, tfaw)
    assert got == ref, (got, ref)

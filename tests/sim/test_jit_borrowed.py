"""``sim.jit.borrowed``: an owner-less view of an array inside a kernel (the engine's hot path
passes these to its per-transfer helpers to skip reference counting)."""

import numba
import numpy as np

from diptych.sim.jit import borrowed, jit


@jit
def _write_through(a, b, k):
    """Writes ``k`` through a borrowed view of ``a`` and one of a row of ``b``, from a helper
    that is not inlined; returns the view's sum (read through it) and its shape."""
    va = borrowed(a)
    vb = borrowed(b)
    _fill(va, k)
    _fill(vb[1], k + 1.0)
    return va.sum(), va.shape[0], vb.shape


@jit
def _fill(v, k):
    for i in range(v.shape[0]):
        v[i] = k + i


def test_borrowed_views_share_the_owner_memory():
    a = np.zeros(5)
    b = np.zeros((3, 4))
    s, n, shape = _write_through(a, b, 2.0)
    assert a.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0] and s == 20.0 and n == 5
    assert shape == (3, 4)
    assert b[1].tolist() == [3.0, 4.0, 5.0, 6.0] and b[0].sum() == 0 and b[2].sum() == 0


def test_borrowed_keeps_the_type():
    """Same array type in and out: a helper given the view and the owner compiles one
    specialisation (uncached kernels, so that the helper's signatures are its own)."""
    if numba.config.DISABLE_JIT:
        return

    @numba.njit
    def callee(v):
        return v.shape[0]

    @numba.njit
    def caller(a):
        return callee(borrowed(a)) + callee(a)

    assert caller(np.zeros((3, 2))) == 6
    assert len(callee.signatures) == 1

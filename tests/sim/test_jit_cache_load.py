"""``sim.jit``: cached kernels load without Numba's context refresh, and nothing else changes.

Two fresh processes share one ``NUMBA_CACHE_DIR``: the first compiles a kernel and writes it to
the cache; the second loads it (a cache hit) and must get the same result as the plain Python
function (the independent reference), without Numba having imported its implementation
registries (the refresh the load skips), and must then still compile a new kernel that needs
those registries (a list, a set) and get the reference's result: a cache miss compiles as
before."""

import os
import subprocess
import sys
import textwrap

import numba
import pytest

from diptych.sim.jit import LOAD_WITHOUT_REFRESH

KERNEL = textwrap.dedent('''
    from diptych.sim.jit import jit

    def stride_sum(n, s):
        t = 0
        for i in range(0, n, s):
            t += i * i % 7
        return t

    stride_sum_k = jit(stride_sum)
''')

CHILD = textwrap.dedent('''
    import sys
    sys.path.insert(0, sys.argv[1])
    import kern
    from diptych.sim import jit as J
    got = kern.stride_sum_k(1000, 3)
    hits = sum(kern.stride_sum_k.stats.cache_hits.values())
    registries = [m for m in ("numba.cpython.listobj", "numba.cpython.setobj")
                  if m in sys.modules]

    def distinct(n):
        return len(set([i % 5 for i in range(n)]))
    fresh = J.jit(distinct, cache=False)(12) == distinct(12) if sys.argv[2] == "1" else None
    print(J.LOAD_WITHOUT_REFRESH, got == kern.stride_sum(1000, 3), hits, registries, fresh)
''')


def _child(tmp, env, compile_fresh):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp), str(int(compile_fresh))],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().split(None, 3)


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="no compiled kernels")
@pytest.mark.skipif(not LOAD_WITHOUT_REFRESH,
                    reason="this Numba is outside sim/jit.py _VERIFIED_NUMBA: its own load")
def test_cached_load_skips_refresh_and_a_miss_still_compiles(tmp_path):
    (tmp_path / "kern.py").write_text(KERNEL)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "nc")}
    first = _child(tmp_path, env, False)   # compiles stride_sum_k, writes the cache
    assert first[:3] == ["True", "True", "0"]
    second = _child(tmp_path, env, True)   # loads it from the cache, then compiles one
    loaded, same, hits, rest = second
    assert (loaded, same, hits) == ("True", "True", "1")
    registries, fresh = rest.rsplit(" ", 1)
    assert registries == "[]", "the cache load refreshed the context (imported registries)"
    assert fresh == "True"


def _plain(x):
    return x + 1


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="no compiled kernels")
def test_only_diptych_kernels_load_without_refresh():
    """Other Numba code in the process keeps Numba's own cache (and its refresh)."""
    from numba.core.caching import FunctionCache

    from diptych.sim.dram_counts import count_c
    from diptych.sim.jit import LOAD_WITHOUT_REFRESH, jit

    assert type(numba.njit(cache=True)(_plain)._cache) is FunctionCache
    for ours in (jit(_plain), count_c):
        assert isinstance(ours._cache, FunctionCache)
        assert (type(ours._cache) is not FunctionCache) == LOAD_WITHOUT_REFRESH


def _poly(x, n):
    t = 0.0
    for i in range(n):
        t = t * x + (i % 3) - 0.5
    return t


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="no compiled kernels")
def test_outside_the_verified_numba_kernels_are_plain_numba(monkeypatch, tmp_path):
    """The switch off (a Numba outside ``_VERIFIED_NUMBA``, or its private API changed):
    ``jit`` and ``cached_cfunc`` give Numba's own kernels, with Numba's own cache, and the
    plain Python function's results (the reference)."""
    from numba.core.caching import FunctionCache

    from diptych.sim import jit as J

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))   # not the tests' folder
    newer = (J._VERIFIED_NUMBA[1][0], J._VERIFIED_NUMBA[1][1])
    monkeypatch.setattr(J, "_numba_minor", lambda: newer)
    assert J._no_refresh_cache_class() is None
    monkeypatch.setattr(J, "_NO_REFRESH", None)
    k = J.jit(_poly)
    assert type(k._cache) is FunctionCache
    assert k(1.25, 40) == _poly(1.25, 40)
    c = J.cached_cfunc("float64(float64, int64)", _poly)
    assert type(c._cache) is FunctionCache
    assert c.ctypes(0.75, 33) == _poly(0.75, 33)


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="no compiled kernels")
def test_cached_cfunc_falls_back_when_numbas_constructor_changed(monkeypatch, tmp_path):
    """Numba's private ``CFunc(...)`` refusing diptych's call (TypeError): Numba's own
    ``numba.cfunc(sig, cache=True)``, same results as the Python function."""
    from numba.core import ccallback
    from numba.core.caching import FunctionCache

    from diptych.sim import jit as J

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    real, calls = ccallback.CFunc, []

    def changed(*args, **kwargs):     # the first call (diptych's) fails, Numba's own works
        calls.append(kwargs)
        if len(calls) == 1:
            raise TypeError("CFunc() got an unexpected keyword argument 'locals'")
        return real(*args, **kwargs)
    monkeypatch.setattr(ccallback, "CFunc", changed)
    c = J.cached_cfunc("float64(float64, int64)", _poly)
    assert len(calls) == 2 and type(c._cache) is FunctionCache
    assert c.ctypes(-1.5, 17) == _poly(-1.5, 17)

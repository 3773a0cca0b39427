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

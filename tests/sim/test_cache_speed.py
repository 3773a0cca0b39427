"""The result cache's fast paths (issue 27) against their slow references: the canonical
form (:func:`cache._canonical` vs :func:`cache._canonical_reference`), ``OpStats.to_dict``
vs :func:`dataclasses.asdict`, the bytes of a written entry vs the format written by hand,
and directories made once per process yet made again when removed."""

import collections
import dataclasses
import hashlib
import hmac
import json
import os
import shutil
import stat

import numpy as np
from hypothesis import given, settings, strategies as st

from diptych.sim import cache
from diptych.sim.plain import as_plain_dict
from diptych.sim.stats import OpStats


def _same(a, b) -> bool:
    """Equal in value and in type at every level (nan equal to nan, -0.0 not to 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(x, y) for x, y in
                                          zip(list(a) + list(a.values()),
                                              list(b) + list(b.values())))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


@dataclasses.dataclass(frozen=True)
class _Box:
    a: object
    b: object = None


class _F(float):
    pass


_Pair = collections.namedtuple("_Pair", "x y")

_scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=6)
            | st.floats(allow_nan=True, allow_infinity=True)
            | st.sampled_from([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1.0])
            | st.floats(width=32).map(np.float64) | st.floats().map(_F))
_keys = st.text(max_size=4) | st.integers(-5, 5) | st.booleans() | st.none() | st.floats()


def _nested(leaves):
    return st.recursive(leaves, lambda inner: (
        st.lists(inner, max_size=4) | st.tuples(inner, inner)
        | st.dictionaries(_keys, inner, max_size=4)
        | st.builds(_Box, inner, inner) | st.builds(_Pair, inner, inner)), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_nested(_scalars))
def test_canonical_equals_the_reference_and_serialises_to_the_same_bytes(v):
    fast, ref = cache._canonical(v), cache._canonical_reference(v)
    assert _same(fast, ref)
    assert json.dumps({"key": "k", "result": fast}, sort_keys=True) == \
        json.dumps({"key": "k", "result": ref}, sort_keys=True)


_plain = st.none() | st.booleans() | st.integers() | st.text(max_size=4) | st.floats()
_plain_tree = st.recursive(_plain, lambda inner: (
    st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3)), max_leaves=10)


def _stats(mapping, stall, energy) -> OpStats:
    return OpStats(name="g", kind="gemm", cycles=10, seconds=1e-8, compute_cycles=7,
                   array_busy_cycles=6, stall_cycles=4, stall_breakdown=stall, macs=5,
                   flops=10.0, utilization=0.5, dram_read_bytes=1.0, dram_write_bytes=2.0,
                   sram_read_bytes=3.0, sram_write_bytes=-0.0, dram_bytes_per_s=float("inf"),
                   energy_j=float("nan"), energy_breakdown=energy, bound="memory",
                   mapping=mapping)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), _plain_tree | _nested(_scalars), max_size=5),
       st.dictionaries(st.text(max_size=4), _plain, max_size=3),
       st.dictionaries(st.text(max_size=4), st.floats(), max_size=3))
def test_to_dict_equals_asdict(mapping, stall, energy):
    s = _stats(mapping, stall, energy)
    got, want = s.to_dict(), dataclasses.asdict(s)
    assert _same(got, want)
    assert got["mapping"] is not s.mapping          # a copy, as asdict's
    assert as_plain_dict(_Box(a=[_Pair(1, 2.0)], b={"x": (3,)})) == \
        dataclasses.asdict(_Box(a=[_Pair(1, 2.0)], b={"x": (3,)}))


def _written_by_hand(k: str, result: dict, directory) -> bytes:
    """The entry format as the cache defines it (format 3): ``{"result", "sha256"}`` with an
    HMAC-SHA-256 of the sorted JSON of the key and the reference canonical result."""
    secret = (directory / cache.KEY_FILE).read_bytes()
    msg = json.dumps({"key": k, "result": cache._canonical_reference(result)},
                     sort_keys=True).encode()
    mac = hmac.new(secret, msg, hashlib.sha256).hexdigest()
    return json.dumps({"result": result, "sha256": mac}).encode()


def test_entries_are_byte_identical_to_the_format_and_dirs_are_made_again(fresh):
    k = "ab" + "0" * 62
    res = dataclasses.replace(      # (finite: the reader refuses NaN)
        _stats({"tile": [128, 256], "df": "ws", "f": 0.1 + 0.2, "t": (1, 2.5)},
               {"dram": 3, "fill_drain": 1}, {"mac": 1e-9, "static": 0.0}),
        dram_bytes_per_s=1e12, energy_j=2e-9).to_dict()
    for _ in range(2):                      # the second store finds its directories made
        cache.store_result(k, res)
        p = cache._path(k)
        assert p.read_bytes() == _written_by_hand(k, res, fresh)
    for d in (fresh, fresh / "results", p.parent):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    shutil.rmtree(fresh / "results")        # removed behind the process's back
    cache.store_result(k, res)
    assert cache.enabled() and p.read_bytes() == _written_by_hand(k, res, fresh)
    assert stat.S_IMODE(os.stat(fresh / "results").st_mode) == 0o700
    assert cache.load_result(k, check_result=lambda r: None) == json.loads(
        json.dumps(res))
    assert not [f for f in p.parent.iterdir() if f.name.startswith(".tmp-")]


def test_a_shard_replaced_by_a_file_turns_the_cache_off(fresh):
    k = "cd" + "1" * 62
    cache.store_result(k, {"x": 1})
    shutil.rmtree(cache._path(k).parent)
    cache._path(k).parent.write_text("not a directory")
    cache.store_result(k, {"x": 1})
    assert not cache.enabled()


def test_the_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "a"))
    assert cache.cache_dir() == tmp_path / "a"
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "b"))
    assert cache.cache_dir() == tmp_path / "b" and cache._results_dir() == tmp_path / "b/results"
    monkeypatch.setenv(cache.ENV_DIR, "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache.cache_dir() == tmp_path / "x" / "diptych"

"""The persistent result cache (diptych.sim.cache): same results with and without it, keys
that tell different work apart, atomic files under concurrent writers, and the CLI."""

import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import warnings

import pytest
from click.testing import CliRunner

import golden_set as G
from diptych.arch import load_chip
from diptych.sim import api, cache
from diptych.workloads.ops import Gemm
from diptych.tools.cli import main




def _golden_ops():
    ops = [G.gemm_op(c) for c in G.GEMMS[::3]]
    vec = [G.vector_op(c) for c in G.VECTORS[::4]]
    return ops, vec


def _all(ops, vec):
    return ([api.simulate(op, chip, dataflow=df).to_dict() for chip, op, df in ops]
            + [api.simulate(op, chip).to_dict() for chip, op in vec])


def test_results_identical_with_and_without_the_cache(fresh):
    ops, vec = _golden_ops()
    cache.set_enabled(False)
    without = _all(ops, vec)
    assert cache.info()["entries"] == 0
    cache.set_enabled(True)
    api._gemm_cached.cache_clear()
    api._vector_cached.cache_clear()
    first = _all(ops, vec)                 # misses: computed, the GEMMs written
    assert cache.info()["entries"] == len(ops)     # (all distinct; vector ops stay in memory)
    api._gemm_cached.cache_clear()
    api._vector_cached.cache_clear()
    again = _all(ops, vec)                 # hits: read back from disk
    for a, b, c in zip(without, first, again):
        assert not G.diff(a, b) and not G.diff(a, c)
        assert a == c


def test_keys_tell_different_work_apart_and_ignore_names(fresh):
    chip = load_chip("tpu-v4")
    g = Gemm(name="", m=64, k=128, n=256)
    k = cache.key("gemm", g, chip, None)
    import dataclasses
    assert cache.key("gemm", g, chip, None) == k
    assert cache.key("gemm", g, chip, "ws") != k
    assert cache.key("gemm", dataclasses.replace(g, n=257), chip, None) != k
    assert cache.key("gemm", dataclasses.replace(g, c_dtype="fp32"), chip, None) != k
    faster = dataclasses.replace(chip, clock_ghz=chip.clock_ghz * 1.01)
    assert cache.key("gemm", g, faster, None) != k
    # names and tags are not part of a result: simulate clears them before the lookup
    a = api.simulate(Gemm(name="a", m=64, k=128, n=256, tags=("x",)), chip)
    b = api.simulate(Gemm(name="b", m=64, k=128, n=256), chip)
    assert a.name == "a" and b.name == "b" and a.cycles == b.cycles
    assert cache.info()["entries"] == 1


def test_other_code_is_never_served(fresh, monkeypatch):
    chip = load_chip("tpu-v4")
    op = Gemm(name="g", m=96, k=96, n=96)
    api.simulate(op, chip)
    api._gemm_cached.cache_clear()
    monkeypatch.setattr(cache, "code_hash", lambda: "edited sources")
    calls = []
    real = api.gemm_stats
    monkeypatch.setattr(api, "gemm_stats", lambda *a: calls.append(1) or real(*a))
    api.simulate(op, chip)
    assert calls == [1] and cache.info()["entries"] == 2


def test_corrupt_files_are_misses_and_unwritable_dirs_switch_it_off(fresh, tmp_path):
    chip = load_chip("tpu-v4")
    op = Gemm(name="g", m=32, k=32, n=32)
    want = api.simulate(op, chip)
    for f in fresh.rglob("*.json"):
        f.write_text("{not json")
    api._gemm_cached.cache_clear()
    assert api.simulate(op, chip) == want                  # recomputed, file rewritten
    api._gemm_cached.cache_clear()
    assert api.simulate(op, chip) == want
    blocker = tmp_path / "file"
    blocker.write_text("")
    os.environ[cache.ENV_DIR] = str(blocker / "sub")       # cannot be created
    api._gemm_cached.cache_clear()
    assert api.simulate(op, chip) == want and not cache.enabled()


def _worker(args):
    d, i = args
    os.environ[cache.ENV_DIR] = d
    from diptych.sim import api as A
    chip = load_chip("train-2026")
    ops = [Gemm(name=f"w{i}", m=64 + 64 * (j % 3), k=512, n=256) for j in range(6)]
    return [A.simulate(o, chip).cycles for o in ops]


def test_concurrent_workers_share_the_cache(fresh):
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("needs fork")
    with mp.get_context("fork").Pool(3) as pool:
        res = pool.map(_worker, [(str(fresh), i) for i in range(6)])
    assert all(r == res[0] for r in res)
    files = list(fresh.rglob("*"))
    assert not [f for f in files if f.name.startswith(".tmp-")]
    assert cache.info()["entries"] == 3
    for f in fresh.rglob("*.json"):
        json.loads(f.read_text())


def test_cli_info_clear_and_no_cache(fresh, monkeypatch):
    r = CliRunner().invoke(main, ["gemm", "64", "64", "64", "--chip", "tpu-v4", "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["cache", "info", "--json"])
    d = json.loads(r.output)
    assert d["entries"] == 1 and d["location"] == str(fresh) and d["enabled"]
    r = CliRunner().invoke(main, ["cache", "clear"])
    assert r.exit_code == 0 and "removed 1 cached result" in r.output
    assert cache.info()["entries"] == 0
    api._gemm_cached.cache_clear()
    r = CliRunner().invoke(main, ["--no-cache", "gemm", "64", "64", "64", "--chip", "tpu-v4"])
    monkeypatch.delenv(cache.ENV_OFF, raising=False)    # (the flag sets it for workers)
    assert r.exit_code == 0 and cache.info()["entries"] == 0


def test_default_location_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "diptych"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "diptych"


def test_cli_help_and_listing_do_not_import_numba():
    code = ("import sys\nfrom diptych.tools.cli import main\n"
            "for a in (['--help'], ['chips', 'list'], ['models', 'show', 'llama-3-8b'],"
            " ['cache', 'info']):\n"
            "    try:\n        main(a)\n    except SystemExit:\n        pass\n"
            "print('NUMBA', 'numba' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "NUMBA False"


def _entry(fresh):
    (f,) = list(fresh.rglob("*.json"))
    return f, json.loads(f.read_text())


@pytest.mark.parametrize("forge", [
    lambda d: d["result"].update(cycles=1),                    # a forged result, old checksum
    lambda d: d.update(sha256="0" * 64),
    lambda d: d.pop("sha256"),
])
def test_an_edited_entry_fails_its_checksum_and_is_recomputed(fresh, forge):
    chip = load_chip("tpu-v4")
    op = Gemm(name="g", m=32, k=32, n=48)
    want = api.simulate(op, chip)
    f, d = _entry(fresh)
    forge(d)
    f.write_text(json.dumps(d))
    api._gemm_cached.cache_clear()
    with pytest.warns(UserWarning, match=r"cache entry .* is invalid"):
        assert api.simulate(op, chip) == want
    api._gemm_cached.cache_clear()
    assert api.simulate(op, chip) == want                      # rewritten, valid again


@pytest.mark.parametrize("field,value,why", [
    ("cycles", 1, "stall_cycles != cycles - array_busy_cycles"),
    ("energy_j", float("nan"), "energy_j"),
    ("energy_j", -1.0, "energy_j"),
    ("seconds", "fast", "seconds"),
    ("macs", True, "macs"),
])
def test_a_result_that_breaks_the_schema_is_refused_even_with_a_valid_checksum(
        fresh, field, value, why):
    chip = load_chip("tpu-v4")
    op = Gemm(name="g", m=32, k=32, n=64)
    api.simulate(op, chip)
    f, d = _entry(fresh)
    k = f.stem
    d["result"][field] = value
    d["sha256"] = cache._checksum(k, d["result"])              # a deliberate forger
    assert why in cache.check_entry(k, d)


def test_clear_touches_only_what_the_cache_wrote_and_follows_no_link(fresh, tmp_path):
    api.simulate(Gemm(name="g", m=32, k=32, n=32), load_chip("tpu-v4"))
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / ("a" * 64 + ".json")
    victim.write_text("{}")
    results = fresh / "results"
    os.symlink(outside, results / "ff")                        # a shard that is a link
    os.symlink(victim, next(results.glob("[0-9a-f][0-9a-f]")) / ("b" * 64 + ".json"))
    (results / "notes.json").write_text("mine")
    assert cache.clear() == 1
    assert victim.exists() and (results / "notes.json").exists()
    assert oct(fresh.stat().st_mode & 0o777) == "0o700"


def _valid_mac(f, d, field, value):
    """``d`` with ``result[field] = value`` signed with this cache's key: only someone with
    the key (the user) could write it; the schema must still refuse it."""
    d["result"][field] = value
    d["sha256"] = cache._checksum(f.stem, d["result"])
    return json.dumps(d)


#: Things found where an entry should be (issue 22 items 6 and 9): each is discarded with a
#: warning naming the file and why, and the op recomputed; nothing blocks or is followed.
BAD_ENTRIES = {
    "fifo": (lambda f, d, t: os.mkfifo(f), "not a regular file"),
    "link to /dev/zero": (lambda f, d, t: os.symlink("/dev/zero", f), "a symbolic link"),
    "link to a valid entry elsewhere": (
        lambda f, d, t: (t.write_text(json.dumps(d)), os.symlink(t, f)), "a symbolic link"),
    "directory": (lambda f, d, t: f.mkdir(), "not a regular file"),
    "2 MiB": (lambda f, d, t: f.write_bytes(b" " * (2 << 20)), "larger than the cache writes"),
    "truncated": (lambda f, d, t: f.write_text(json.dumps(d)[:100]), "not JSON"),
    "latin-1": (lambda f, d, t: f.write_bytes(json.dumps(d).encode() + b"\xe9"), "not UTF-8"),
    "nested": (lambda f, d, t: f.write_text("[" * 100_000 + "]" * 100_000),
               "nested too deeply"),
    "key twice": (lambda f, d, t: f.write_text(json.dumps(d)[:-1] + ', "result": {}}'),
                  "appears twice"),
    "NaN token": (lambda f, d, t: f.write_text(json.dumps(d).replace(
        '"energy_j": ', '"energy_j": NaN, "x": ', 1)), "not JSON"),
    "other cache's entry": (lambda f, d, t: f.write_text(json.dumps(
        {**d, "sha256": "ab" * 32})), "checksum mismatch"),
    "1e308 with the key": (lambda f, d, t: f.write_text(_valid_mac(f, d, "seconds", 1e308)),
                           "seconds"),
    "2**70 cycles with the key": (lambda f, d, t: f.write_text(
        _valid_mac(f, d, "macs", 2**70)), "macs"),
    "a list": (lambda f, d, t: f.write_text("[1, 2]"), "not a cache entry"),
}


@pytest.mark.parametrize("name", list(BAD_ENTRIES))
def test_whatever_is_in_an_entrys_place_is_discarded_with_a_warning(fresh, tmp_path, name):
    make, why = BAD_ENTRIES[name]
    chip = load_chip("tpu-v4")
    op = Gemm(name="g", m=32, k=48, n=32)
    want = api.simulate(op, chip)
    f, d = _entry(fresh)
    f.unlink()
    target = tmp_path / "elsewhere.json"
    make(f, d, target)
    api._gemm_cached.cache_clear()
    with pytest.warns(UserWarning, match=f"cache entry {f} is invalid \\(.*{why}"):
        assert api.simulate(op, chip) == want
    if name.startswith("link to a valid"):
        assert json.loads(target.read_text()) == d           # the target is left alone
    if name != "directory":                                   # rewritten, valid again
        assert f.is_file() and not f.is_symlink()
        assert cache.load(f.stem).to_dict() == {**want.to_dict(), "name": ""}


def test_the_key_is_private_and_a_bad_one_is_replaced(fresh):
    chip = load_chip("tpu-v4")
    op = Gemm(name="g", m=32, k=32, n=80)
    want = api.simulate(op, chip)
    key = fresh / cache.KEY_FILE
    assert oct(key.stat().st_mode & 0o777) == "0o600" and key.stat().st_size == 32
    key.unlink()
    key.write_bytes(b"short")                                 # not a key: replaced
    cache._secret.cache_clear()
    api._gemm_cached.cache_clear()
    with pytest.warns(UserWarning, match="cache key .* replaced"):
        assert api.simulate(op, chip) == want
    assert key.stat().st_size == 32
    cache._secret.cache_clear()


@pytest.mark.parametrize("which", ["shard", "results"])
def test_a_cache_directory_that_is_a_link_turns_the_cache_off(fresh, tmp_path, which):
    """A shard (or ``results/``) replaced by a link to elsewhere: the cache neither reads nor
    writes through it (it would serve or leave files outside what it made)."""
    chip = load_chip("tpu-v4")
    op = Gemm(name="g", m=32, k=48, n=48)
    want = api.simulate(op, chip)
    f, d = _entry(fresh)
    moved = tmp_path / "moved"
    real = f.parent if which == "shard" else f.parent.parent
    real.rename(moved)
    os.symlink(moved, real)
    api._gemm_cached.cache_clear()
    with pytest.warns(UserWarning, match=f"cache directory {real} is a link"):
        assert api.simulate(op, chip) == want
    assert not cache.enabled()
    api._gemm_cached.cache_clear()
    before = sorted(p.name for p in moved.rglob("*"))
    api.simulate(Gemm(name="h", m=32, k=48, n=64), chip)       # nothing written through it
    assert sorted(p.name for p in moved.rglob("*")) == before


# ---- the cache's warnings on the command line: one line each ---------------------------------


def test_cache_warnings_are_one_line_while_the_cli_runs_and_nothing_else_changes():
    from diptych.tools.errors import one_line_warnings

    before = warnings.formatwarning
    restore = one_line_warnings()
    try:
        msg = cache.CacheWarning("cache entry /c/ab/ab.json is invalid (not JSON): "
                                 "discarded and recomputed")
        assert warnings.formatwarning(msg, cache.CacheWarning, "/x/sim/cache.py", 373,
                                      "warnings.warn(...)") == \
            "Warning: cache entry /c/ab/ab.json is invalid (not JSON): discarded and recomputed\n"
        other = warnings.formatwarning("m", UserWarning, "/x/y.py", 7, "src")
        assert other == before("m", UserWarning, "/x/y.py", 7, "src")
        assert other.startswith("/x/y.py:7: UserWarning: m")
    finally:
        restore()
    assert warnings.formatwarning is before
    assert issubclass(cache.CacheWarning, UserWarning)    # pytest.warns(UserWarning) still sees it


def test_a_bad_entry_prints_one_warning_line_naming_the_file_and_the_fault(tmp_path):
    """``diptych gemm`` on a cache with an entry that is not JSON: its stderr is one line,
    ``Warning: cache entry <file> is invalid (not JSON ...): discarded and recomputed``, not
    Python's ``.../sim/cache.py:NNN: UserWarning: ...`` and the source line under it."""
    code = ("import pathlib, sys\nfrom diptych.tools.cli import main\n"
            "def go():\n"
            "    try:\n        main(['gemm', '32', '48', '64', '--chip', 'tpu-v4', '--json'])\n"
            "    except SystemExit:\n        pass\n"
            "go()\n"
            "f = sorted(pathlib.Path(sys.argv[1]).glob('results/*/*.json'))[0]\n"
            "f.write_text('{')\n"
            "print('BAD', f, file=sys.stderr)\n"
            "from diptych.sim import api\n"
            "api._gemm_cached.cache_clear()\n"      # (the memo would serve it otherwise)
            "go()\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env.update({cache.ENV_DIR: str(tmp_path / "c")})
    env.pop(cache.ENV_OFF, None)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "c")], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    bad, *lines = r.stderr.splitlines()
    f = bad.removeprefix("BAD ")
    assert len(lines) == 1, r.stderr
    assert re.fullmatch(rf"Warning: cache entry {re.escape(f)} is invalid \(not JSON.*\): "
                        r"discarded and recomputed", lines[0]), lines[0]

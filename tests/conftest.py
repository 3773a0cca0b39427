"""Shared pytest configuration for the whole suite."""

import os
import tempfile
import time

# Plots are rendered without a display everywhere.
os.environ.setdefault("MPLBACKEND", "Agg")

# The persistent result cache (diptych.sim.cache) of a test session lives in a fresh temporary
# directory: tests never read or write the user's cache. (Subprocesses inherit it.)
os.environ["DIPTYCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="diptych-test-cache-")
os.environ.pop("DIPTYCH_NO_CACHE", None)

# Property tests draw the same examples on every run (a CI run cannot fail on a case no other
# run saw); `HYPOTHESIS_PROFILE=explore pytest ...` draws fresh random ones when hunting bugs.
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty persistent result cache (diptych.sim.cache), on, with the in-memory op memo
    empty, as in a new process (the op cache's and the serving piece cache's tests)."""
    from diptych.sim import api, cache
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "c"))
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    cache.set_enabled(None)
    api._gemm_cached.cache_clear()
    api._vector_cached.cache_clear()
    yield tmp_path / "c"
    cache.set_enabled(None)
    api._gemm_cached.cache_clear()
    api._vector_cached.cache_clear()


# ---- per-tier time, printed at the end of every run (.ci/run shows it) ------------------------
# A tier is the top-level test folder, split into its fast tests and its `slow` ones (the
# Verilator builds); the time is the sum of each test's setup, call and teardown.

_TIERS: dict[str, list] = {}
_START = time.perf_counter()


def pytest_runtest_logreport(report):
    folder = report.nodeid.split("/")[1] if report.nodeid.count("/") > 1 else "tests"
    tier = f"{folder} ({'slow' if 'slow' in report.keywords else 'fast'})"
    entry = _TIERS.setdefault(tier, [0, 0.0])
    entry[1] += report.duration
    if report.when == "call":
        entry[0] += 1


def pytest_terminal_summary(terminalreporter):
    if not _TIERS:
        return
    terminalreporter.section("time per tier")
    for tier, (n, secs) in sorted(_TIERS.items()):
        terminalreporter.write_line(f"{tier:<24} {n:5d} tests {secs:8.1f} s")
    total = sum(s for _, s in _TIERS.values())
    terminalreporter.write_line(f"{'all tests':<24} {sum(n for n, _ in _TIERS.values()):5d} "
                                f"tests {total:8.1f} s (session wall "
                                f"{time.perf_counter() - _START:.1f} s)")

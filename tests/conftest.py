"""Shared pytest configuration for the whole suite."""

import os
import tempfile

# Plots are rendered without a display everywhere.
os.environ.setdefault("MPLBACKEND", "Agg")

# The persistent result cache (diptych.sim.cache) of a test session lives in a fresh temporary
# directory: tests never read or write the user's cache. (Subprocesses inherit it.)
os.environ["DIPTYCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="diptych-test-cache-")
os.environ.pop("DIPTYCH_NO_CACHE", None)

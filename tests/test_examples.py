"""The examples run as shipped: the notebook tour, and the example inputs the README uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_notebook_tour_runs(tmp_path):
    out = tmp_path / "report"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "notebook_tour.py"), str(out)],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ms per token" in r.stdout and "tokens/s per chip" in r.stdout
    assert (out / "index.html").exists() and (out / "compare.csv").exists()

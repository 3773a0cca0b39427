"""Fixtures shared by the serving tests."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from roofline_double import roofline

import diptych.sim.run.node as run_mod
import diptych.sim.run.summed as summed_mod
from diptych.tools.cli import main


@pytest.fixture
def cli(monkeypatch):
    """``cli(*args)``: the command line with the engine replaced by the roofline double.
    Both defaults are patched: the scheduled frame's ops take the run's (node), the attention
    cores the summed model's; with only the first patched the cores ran on the engine (the
    trace test took ~110 s of the CI budget for a check of the output's shape)."""
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    monkeypatch.setattr(summed_mod, "_default_simulate", lambda: roofline)
    runner = CliRunner()
    return lambda *args: runner.invoke(main, [str(a) for a in args])

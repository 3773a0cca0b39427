"""setup.py's build step that compiles the engine's kernels into the wheel (issue 27 item 1):
it must never fail a build, never warm up a package other than the one built, and be
skippable. The full build (~25 s of compiling) is measured in docs/limits.md, not here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _build_py(build_lib):
    spec = importlib.util.spec_from_file_location("diptych_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)            # defines the command; setup() runs only as main
    from setuptools.dist import Distribution

    cmd = mod.BuildPyWithKernels(Distribution())
    cmd.build_lib = str(build_lib)
    return cmd


def test_a_build_dir_without_the_package_is_refused_not_fatal(tmp_path, monkeypatch, capsys):
    """An empty build directory: the subprocess would import the development tree instead
    (this venv's editable install); the step must notice, say so and go on."""
    monkeypatch.delenv("DIPTYCH_BUILD_NO_WARMUP", raising=False)
    assert _build_py(tmp_path).compile_kernels() is False
    out = capsys.readouterr().out
    assert "kernels not compiled" in out
    assert not list(tmp_path.rglob("*.nbi"))


def test_the_step_can_be_skipped(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIPTYCH_BUILD_NO_WARMUP", "1")
    assert _build_py(tmp_path).compile_kernels() is False
    assert capsys.readouterr().out == ""

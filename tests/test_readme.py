"""The README's quick start and CI agree: .ci/run runs exactly the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```\n(.+?)\n```", section, flags=re.S)


def test_quick_start_has_exactly_two_commands():
    cmds = quick_start_commands()
    assert len(cmds) == 2
    assert all("\n" not in c for c in cmds)
    assert "apt-get" not in "".join(cmds) and "PATH=" not in "".join(cmds)


def test_ci_runs_the_readme_test_command():
    test_cmd = quick_start_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_cmd in [line.strip() for line in ci]
    assert "pytest" in test_cmd
    # ... and that command runs every tier: no marker selection hidden in the configuration
    import tomllib
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m" not in opts.get("addopts", "").split()

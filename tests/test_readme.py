"""The README and CI agree: .ci/run runs exactly the README's test command; every command of
"What you can ask it" parses, its input files ship and its outputs go to the ignored out/."""

import re
import shlex
from pathlib import Path

import click
import pytest

from diptych.tools.cli import main

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


# ---- "What you can ask it": every command parses, every input file ships ------------------
OUTPUT_OPTIONS = ("--trace", "--report", "-o", "--output", "--out")


def ask_it_commands() -> list[list[str]]:
    """Each ``diptych ...`` command of the block, as argv lists (``a && b`` gives two)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## What you can ask it", 1)[1].split("```", 2)[1]
    out = []
    for line in block.strip().splitlines():
        code = line.split("  #", 1)[0].strip()
        for part in code.split("&&"):
            argv = shlex.split(part)
            assert argv[0] == "diptych", line
            out.append(argv[1:])
    return out


def parse(argv: list[str]) -> click.Context:
    """Parse argv down to the leaf command (options, types and choices are checked; nothing
    runs); returns the leaf context."""
    cmd, ctx = main, main.make_context("diptych", list(argv))
    while isinstance(cmd, click.Group):
        args = [*ctx._protected_args, *ctx.args]
        name, cmd, rest = cmd.resolve_command(ctx, args)
        ctx = cmd.make_context(name, rest, parent=ctx)
    return ctx


def test_every_ask_it_command_parses():
    cmds = ask_it_commands()
    assert len(cmds) >= 15
    for argv in cmds:
        ctx = parse(argv)
        assert ctx.command.callback is not None, argv


def test_ask_it_inputs_ship_and_outputs_go_to_out():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/out/" in ignored
    for argv in ask_it_commands():
        for i, tok in enumerate(argv):
            if i and argv[i - 1] in OUTPUT_OPTIONS:
                assert tok.startswith("out/"), (argv, tok)      # outputs under out/
            elif tok.startswith("out/"):
                continue                                        # made by an earlier command
            elif "/" in tok or tok.endswith((".csv", ".toml", ".json")):
                assert (ROOT / tok).exists(), (argv, tok)       # inputs ship


def test_examples_readme_lists_every_example():
    listed = (ROOT / "examples" / "README.md").read_text()
    for p in (ROOT / "examples").iterdir():
        if p.name != "README.md":
            assert f"`{p.name}`" in listed, p.name


def test_resnet50_topology_matches_the_paper():
    """He et al. 2016: ResNet-50 is 3.8e9 multiply-adds at 224×224; 53 convs + the FC."""
    from diptych.workloads import load_topology

    ops = load_topology(ROOT / "examples" / "resnet50-conv.csv")
    assert len(ops) == 54
    assert sum(o.macs for o in ops) == pytest.approx(3.8e9, rel=0.03)
    by = {o.name: o for o in ops}
    assert by["conv1"].m == 112 * 112 and by["conv5_3c"].m == 7 * 7 and by["fc1000"].k == 2048

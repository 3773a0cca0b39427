"""Bad precision input through the CLI (issue 12, item 7): exit 2 and one line naming the
field, the value and what was expected."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from roofline_double import roofline

import diptych.sim.run.node as run_mod
from diptych.arch import load_chip, to_dict
from diptych.tools.cli import main

RUN = ["run", "--model", "llama-3-8b", "--phase", "decode", "--prompt", "128", "--json"]


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args))


def _one_line(r, *parts):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    err = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(err) == 1, r.output
    for p in parts:
        assert p in err[0], (p, err[0])


def test_dtype_the_datapath_lacks(cli):
    _one_line(cli(*RUN, "--chip", "h100", "--precision", "mxfp4"),
              "core.array.macs_per_pe_per_cycle.mxfp4 is 0", "block_scale is 'none'",
              "int8, fp8, bf16, fp16, fp32")


def test_mx_rate_without_scale_support(cli, tmp_path):
    import tomlkit
    d = to_dict(load_chip("train-2026"))
    d["core"]["array"]["block_scale"] = "none"
    path = tmp_path / "chip.toml"
    path.write_text(tomlkit.dumps(_no_none(d)))
    _one_line(cli(*RUN, "--chip", str(path)), "core.array.block_scale", "pe or vector",
              "'none'")


def test_w4a8_without_a_dequant_path(cli):
    _one_line(cli(*RUN, "--chip", "tpu-v1", "--weights-dtype", "int4"),
              "core.array.dequant is 'none'", "'int4xint8'", "expected")


def test_unknown_format_name(cli):
    r = cli(*RUN, "--chip", "h100", "--precision", "w=mxfp5")
    _one_line(r, "'mxfp5' is not a dtype", "mxfp4")


def test_k_not_a_multiple_of_the_block_is_padded_not_refused(cli):
    # KV contraction lengths are any number of tokens: 129 keys in MXFP8 run (padded blocks)
    r = cli(*RUN[:-3], "--prompt", "129", "--chip", "infer-2026", "--precision", "mxfp8",
            "--json")
    assert r.exit_code == 0, r.output


def _no_none(d):
    """A chip dict without its absent (None) optional tables, as TOML has no null."""
    return {k: _no_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}

"""`diptych chips ...` and the top-level CLI behaviour."""

import json

from click.testing import CliRunner

from diptych.tools import __version__
from diptych.arch import load_chip, preset_names
from diptych.tools.cli import main


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and __version__ in r.output


def test_list_names_every_preset():
    r = run("chips", "list")
    assert r.exit_code == 0
    for name in preset_names():
        assert name in r.output


def test_show_json_tpu_v4():
    r = run("chips", "show", "tpu-v4", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    chip = load_chip("tpu-v4")
    derived = d["derived"]
    assert derived["peak_ops_per_s"] == chip.peak_ops_per_s
    assert abs(derived["peak_ops_per_s"]["bf16"] - 275e12) / 275e12 < 0.01
    assert derived["dram_bytes_per_s"] == chip.dram_bytes_per_s
    assert d["core"]["array"]["rows"] == 128
    assert derived["die_area_mm2"] == sum(derived["area_mm2"].values())


def test_show_human():
    r = run("chips", "show", "train-2026")
    assert r.exit_code == 0
    assert "train-2026" in r.output and "bf16" in r.output


def test_show_unknown_chip_exit_2_no_traceback():
    r = run("chips", "show", "nope")
    assert r.exit_code == 2
    assert "unknown chip 'nope'" in r.output
    assert "Traceback" not in r.output


def test_validate_ok_and_broken(tmp_path):
    from importlib import resources
    src = resources.files("diptych.arch.chips").joinpath("tpu-v4.toml").read_text()
    good = tmp_path / "good.toml"
    good.write_text(src)
    r = run("chips", "validate", str(good))
    assert r.exit_code == 0 and "OK" in r.output
    bad = tmp_path / "bad.toml"
    bad.write_text(src.replace("rows = 128", "rows = 0"))
    r = run("chips", "validate", str(bad))
    assert r.exit_code == 2
    assert f"{bad}: core.array.rows: expected an integer >= 1 and <= 4096, got 0" in r.output
    assert "Traceback" not in r.output


def test_debug_shows_traceback():
    r = run("--debug", "chips", "show", "nope")
    assert r.exit_code != 0 and r.exception is not None

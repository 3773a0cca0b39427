"""Your own chip in one step: ``chips show --toml`` / ``chips template`` / ``show --json`` all
load back, unchanged, to the chip they came from."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from diptych.arch import load_chip, load_chip_file, preset_names
from diptych.tools.cli import main
from diptych.arch.area import die_area_mm2


def cli(*args):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("name", preset_names())
def test_show_toml_validates_and_loads_to_the_preset(name, tmp_path):
    r = cli("chips", "show", name, "--toml")
    assert r.exit_code == 0, r.output
    p = tmp_path / "mine.toml"
    p.write_text(r.stdout)
    v = cli("chips", "validate", str(p))
    assert v.exit_code == 0 and "OK" in v.output, v.output
    assert load_chip_file(p) == load_chip(name)          # the same frozen dataclass


@pytest.mark.parametrize("name", preset_names())
def test_show_json_loads_back(name, tmp_path):
    r = cli("chips", "show", name, "--json")
    p = tmp_path / "mine.json"
    p.write_text(r.stdout)
    assert cli("chips", "validate", str(p)).exit_code == 0
    assert load_chip(str(p)) == load_chip(name)
    assert json.loads(r.stdout)["derived"]["die_area_mm2"] == pytest.approx(
        die_area_mm2(load_chip(name)))


def test_template_header_fields_and_name(tmp_path):
    out = tmp_path / "sub" / "mine.toml"
    r = cli("chips", "template", "infer-2026", "-o", str(out), "--name", "my-chip")
    assert r.exit_code == 0 and "wrote" in r.output, r.output
    text = out.read_text()
    assert text.startswith("# diptych chip description: written from the built-in preset "
                           "infer-2026.")
    assert f"diptych chips validate {out}" in text
    assert "clock_ghz = 1.6 # core clock in GHz; >= 0.001 and <= 10" in text
    assert "# [shared_buffer]" in text                   # the optional table, to uncomment
    mine = load_chip_file(out)
    assert mine.name == "my-chip"
    import dataclasses
    assert dataclasses.replace(mine, name="infer-2026") == load_chip("infer-2026")
    # an edit the user makes is what loads
    out.write_text(text.replace("clock_ghz = 1.6 #", "clock_ghz = 1.8 #"))
    assert load_chip_file(out).clock_ghz == 1.8
    # and the validator still guards the design: 256×256 arrays bust the 800 mm² budget
    out.write_text(text.replace("rows = 128 #", "rows = 256 #").replace("cols = 128 #",
                                                                          "cols = 256 #"))
    r = cli("chips", "validate", str(out))
    assert r.exit_code == 2 and "area_budget_mm2" in r.output
    # uncommenting the optional table adds it (16 MiB: infer-2026's die is 780 of its
    # 800 mm² since its PEs carry the MX modes, and 64 MiB more would exceed the budget)
    text = text.replace("# [shared_buffer]", "[shared_buffer]").replace(
        "# capacity_mib = ...", "capacity_mib = 16.0").replace(
        "# bytes_per_cycle = ...", "bytes_per_cycle = 1024.0")
    out.write_text(text)
    assert load_chip_file(out).shared_buffer.capacity_mib == 16.0


def test_template_does_not_overwrite_without_force(tmp_path):
    out = tmp_path / "mine.toml"
    out.write_text("keep me")
    r = cli("chips", "template", "tpu-v4", "-o", str(out))
    assert r.exit_code == 2 and "exists; pass --force" in r.output
    assert out.read_text() == "keep me"
    assert cli("chips", "template", "tpu-v4", "-o", str(out), "--force").exit_code == 0
    assert load_chip_file(out) == load_chip("tpu-v4")


def test_template_of_a_user_file(tmp_path):
    first = tmp_path / "a.toml"
    assert cli("chips", "template", "h100", "-o", str(first), "--name", "a").exit_code == 0
    second = tmp_path / "b.toml"
    assert cli("chips", "template", str(first), "-o", str(second)).exit_code == 0
    assert f"written from {first} (a)" in second.read_text()
    assert load_chip_file(second) == load_chip_file(first)

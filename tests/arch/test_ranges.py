"""Every numeric chip field is finite and bounded; rates are exact; files that are not text
files are refused before parsing, with messages that name the file."""

from __future__ import annotations

import dataclasses
import os

import pytest

from diptych.arch import ConfigError, chip_from_dict, load_chip, load_chip_file
from diptych.arch.chip import Chip
from diptych.arch.schema import MAX_INPUT_BYTES, read_config_file

from chip_fields import base_chip, numeric_fields, put

FIELDS = list(numeric_fields(Chip))


def test_every_numeric_field_has_an_upper_bound():
    assert len(FIELDS) > 50
    unbounded = [p for p, meta, _ in FIELDS if meta.get("max") is None]
    assert unbounded == []


LEAVES = [(p, tp) for p, _, tp in FIELDS]


@pytest.mark.parametrize("path,tp", LEAVES, ids=[p for p, _ in LEAVES])
def test_non_finite_and_out_of_range_values_are_refused(path, tp):
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ConfigError) as info:
            chip_from_dict(put(base_chip(), path, bad), source="bad.toml")
        msg = str(info.value)
        assert msg.startswith(f"bad.toml: {path}: expected ")
        assert ("finite" in msg) if tp is float else ("an integer" in msg), msg
    over = dict((p, meta) for p, meta, _ in FIELDS)[path]["max"] * 2 + 1
    with pytest.raises(ConfigError, match=rf"^bad.toml: {path}: expected "):
        chip_from_dict(put(base_chip(), path, int(over) if tp is int else float(over)),
                       source="bad.toml")


def test_presets_stay_valid_and_exact():
    from diptych.arch import preset_names
    from diptych.sim.array import array_rates

    for name in preset_names():
        chip = load_chip(name)
        for dt in chip.dtypes:
            r = array_rates(chip, dt)
            assert r.os_num / r.os_den == chip.core.array.macs_per_pe_per_cycle[dt]


@pytest.mark.parametrize("rate", [0.01, 1 / 3, 0.75, 1.0])
def test_slow_rates_are_exact_so_utilisation_never_exceeds_one(rate):
    """0.01 MACs/PE/cycle was rounded up to 1/64 before (utilisation 1.56)."""
    from diptych.sim import simulate_gemm

    chip = load_chip("tpu-v1")
    arr = dataclasses.replace(chip.core.array,
                              macs_per_pe_per_cycle=dataclasses.replace(
                                  chip.core.array.macs_per_pe_per_cycle, int8=rate))
    chip = dataclasses.replace(chip, core=dataclasses.replace(chip.core, array=arr))
    st = simulate_gemm(256, 512, 256, chip, dtype="int8")
    assert st.utilization <= 1.0
    # independent bound: no cycle does more MACs than the peak rate allows
    assert st.cycles >= 256 * 512 * 256 / (256 * 256 * rate)


# ---- files -----------------------------------------------------------------------------------


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "chip.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"chip.toml: cannot read chip file \(not a regular "
                                          r"file\)$"):
        load_chip_file(fifo)


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r": cannot read chip file \(a directory\)$"):
        load_chip_file(tmp_path)


def test_undecodable_bytes_name_the_file(tmp_path):
    p = tmp_path / "latin.toml"
    p.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"latin.toml: chip file is not UTF-8 text \(byte 11: "
                                          r"b'\\xe9'\)"):
        load_chip_file(p)


@pytest.mark.parametrize("fmt,text", [("toml", "a = " + "[" * 5000 + "]" * 5000),
                                      ("json", "[" * 100_000 + "]" * 100_000)])
def test_deep_nesting_is_a_message_not_a_recursion_error(tmp_path, fmt, text):
    p = tmp_path / f"deep.{fmt}"
    p.write_text(text)
    with pytest.raises(ConfigError, match=rf"deep.{fmt}: invalid {fmt.upper()} "):
        read_config_file(p, "test file")


def test_json_nan_tokens_are_refused(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"hidden_size": NaN}')
    with pytest.raises(ConfigError, match=r"config.json: invalid JSON \(NaN is not a JSON "
                                          r"number\)"):
        read_config_file(p, "model config")


def test_huge_files_are_refused_before_reading(tmp_path):
    p = tmp_path / "huge.toml"
    with open(p, "wb") as fh:
        fh.truncate(MAX_INPUT_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ConfigError, match=r"huge.toml: chip file of 67,108,865 bytes is larger "
                                          r"than the 64 MiB diptych reads"):
        load_chip_file(p)


def test_docs_table_matches_the_code():
    from pathlib import Path

    from diptych.arch.dtypes import DTYPES
    from diptych.arch.schema import range_text

    doc = (Path(__file__).parents[2] / "docs" / "chips.md").read_text()
    for path, meta, tp in FIELDS:
        if path.split(".")[-1] in DTYPES:
            continue
        why = meta.get("why", "")
        row = f"| `{path}` | {'integer' if tp is int else 'number'} " \
              f"{range_text(meta)} | {why} |" if why else \
              f"| `{path}` | {'integer' if tp is int else 'number'} " \
              f"{range_text(meta)} | |"
        assert row in doc, row

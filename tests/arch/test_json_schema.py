"""`diptych chips schema` (issue 23 item 6): a JSON Schema generated from the same field rules
`chips validate` applies; every preset, the template and `chips show --json` validate against
it, and the schema and the loader agree on values at and past every numeric bound."""

from __future__ import annotations

import copy
import json
import tomllib
from importlib import resources

import jsonschema
import pytest
from click.testing import CliRunner

from diptych.arch import chip_from_dict, preset_names
from diptych.arch.chip import PIN_RATE_MAX_GBPS
from diptych.arch.schema import ConfigError
from diptych.tools.chips_cmd import chip_json_schema
from diptych.tools.cli import main

SCHEMA = chip_json_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _preset(name: str) -> dict:
    text = resources.files("diptych.arch.chips").joinpath(f"{name}.toml").read_text()
    return tomllib.loads(text)


def _schema_ok(d: dict) -> bool:
    return VALIDATOR.is_valid(d)


def _loader_ok(d: dict) -> bool:
    try:
        chip_from_dict(copy.deepcopy(d))
    except (ConfigError, ValueError):
        return False
    return True


def test_the_schema_is_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["additionalProperties"] is False and "name" in SCHEMA["required"]


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_and_its_show_json_validate(name):
    VALIDATOR.validate(_preset(name))
    r = CliRunner().invoke(main, ["chips", "show", name, "--json"])
    assert r.exit_code == 0
    VALIDATOR.validate(json.loads(r.output))


def test_the_template_validates(tmp_path):
    out = tmp_path / "mine.toml"
    r = CliRunner().invoke(main, ["chips", "template", "h100", "-o", str(out)])
    assert r.exit_code == 0, r.output
    VALIDATOR.validate(tomllib.loads(out.read_text()))


def _numeric_fields(schema: dict, path=()):
    """(path, field schema) of every number or integer field with a bound."""
    for k, sub in schema.get("properties", {}).items():
        if sub.get("type") == "object":
            yield from _numeric_fields(sub, path + (k,))
        elif sub.get("type") in ("number", "integer") and (
                "minimum" in sub or "maximum" in sub or "exclusiveMinimum" in sub):
            yield path + (k,), sub


def _set(d: dict, path: tuple, v) -> dict:
    d = copy.deepcopy(d)
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = v
    return d


def test_schema_and_loader_agree_past_every_bound_of_the_h100():
    """For every bounded numeric field the h100 sets: a value past its maximum or below its
    minimum is refused by both the schema and the loader."""
    base = _preset("h100")
    checked = 0
    for path, sub in _numeric_fields(SCHEMA):
        node = base
        try:
            for k in path:
                node = node[k]
        except (KeyError, TypeError):
            continue                                  # a table the h100 does not have
        bad = []
        if "maximum" in sub:
            bad.append(sub["maximum"] * 2 + 1)
        if "minimum" in sub:
            bad.append(sub["minimum"] - 1)
        if "exclusiveMinimum" in sub:
            bad.append(sub["exclusiveMinimum"])
        for v in bad:
            d = _set(base, path, int(v) if sub["type"] == "integer" else float(v))
            assert not _schema_ok(d), (path, v)
            assert not _loader_ok(d), (path, v)
            checked += 1
    assert checked > 60


@pytest.mark.parametrize("kind,top", sorted(PIN_RATE_MAX_GBPS.items()))
def test_pin_rates_are_bounded_per_dram_kind(kind, top):
    """hbm3e at 12 Gb/s per pin was accepted (the range ignored the kind)."""
    base = _preset("h100")
    ok = _set(_set(base, ("dram", "kind"), kind), ("dram", "gbps_per_pin"), top)
    over = _set(ok, ("dram", "gbps_per_pin"), top * 1.25)
    assert _schema_ok(ok) and _loader_ok(ok)
    assert not _schema_ok(over)
    with pytest.raises(ConfigError, match=f"at most {top:g} Gb/s for {kind}"):
        chip_from_dict(over)


def test_unknown_keys_are_refused_by_both():
    d = _set(_preset("h100"), ("core", "arrayz"), 4)
    assert not _schema_ok(d) and not _loader_ok(d)


def test_cli_writes_the_schema(tmp_path):
    out = tmp_path / "chip.schema.json"
    r = CliRunner().invoke(main, ["chips", "schema", "-o", str(out)])
    assert r.exit_code == 0
    assert json.loads(out.read_text()) == json.loads(json.dumps(SCHEMA))

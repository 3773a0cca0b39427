"""Load chips from TOML files or built-in presets."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from .chip import Chip
from .schema import ConfigError, build, read_config_file
from .validate import validate_chip


def preset_names() -> list[str]:
    """Names of the built-in chip presets (``arch/chips/*.toml``), sorted."""
    root = resources.files("diptych.arch.chips")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def chip_from_dict(data: dict, *, source: str | None = None) -> Chip:
    """Build and validate a :class:`Chip` from a parsed-TOML dict: every field and table
    while it is built, then the checks across tables (:mod:`diptych.arch.validate`)."""
    return validate_chip(build(Chip, data, source=source), source)


#: Top-level key of a chip JSON file that loading ignores: the derived quantities that
#: ``diptych chips show --json`` writes beside the description.
DERIVED_KEY = "derived"


def load_chip_file(path: str | Path) -> Chip:
    """Load a chip TOML (or JSON) file; raises :class:`ConfigError` on any problem.
    A JSON file's top-level ``derived`` table (output only) is ignored."""
    data = read_config_file(path, "chip file")
    if str(path).endswith(".json") and isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != DERIVED_KEY}
    return chip_from_dict(data, source=str(path))


def load_chip(name_or_path: "str | Path | Chip") -> Chip:
    """A preset name (``tpu-v4``), a path to a TOML file, or a Chip (returned as is)."""
    if isinstance(name_or_path, Chip):
        return name_or_path
    text = str(name_or_path)
    if text in preset_names():
        res = resources.files("diptych.arch.chips").joinpath(f"{text}.toml")
        data = tomllib.loads(res.read_text())
        return chip_from_dict(data, source=f"{text}.toml")
    if text.endswith(".toml") or "/" in text or Path(text).exists():
        return load_chip_file(text)
    raise ConfigError(
        f"unknown chip {text!r}: expected a preset ({', '.join(preset_names())}) "
        "or a path to a .toml file"
    )

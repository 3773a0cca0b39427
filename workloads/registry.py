"""Built-in models (``workloads/models/*.json``, real HF config files) and user config.json files."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ..arch.schema import read_config_file
from .config import ModelConfig, model_from_hf


def builtin_names() -> list[str]:
    """Names of the built-in models, sorted."""
    root = resources.files("diptych.workloads.models")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_model_file(path: str | Path, name: str | None = None) -> ModelConfig:
    """Load a HuggingFace ``config.json`` (or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    data = read_config_file(path, "model config", fmt="json", error=ValueError)
    if name is None:
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return model_from_hf(data, name=name, source=str(path))


def load_model(name_or_path: "str | Path | ModelConfig") -> ModelConfig:
    """A built-in name (``llama-3-70b``), a path to a config.json, or a ModelConfig as is."""
    if isinstance(name_or_path, ModelConfig):
        return name_or_path
    text = str(name_or_path)
    if text in builtin_names():
        res = resources.files("diptych.workloads.models").joinpath(f"{text}.json")
        return model_from_hf(json.loads(res.read_text()), name=text, source=f"{text}.json")
    if text.endswith(".json") or "/" in text or Path(text).exists():
        return load_model_file(text)
    raise ValueError(f"unknown model {text!r}: expected a built-in ({', '.join(builtin_names())}) "
                     f"or a path to a HuggingFace config.json")

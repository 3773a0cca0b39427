"""Sweep specifications: which chips and workloads a sweep visits.

A spec is a TOML file (or the equivalent dict)::

    base = "infer-2026"        # preset or chip TOML every point starts from
    mode = "grid"              # "grid": every combination; "random": `samples` draws
    samples = 100              # random mode only: number of chip points
    seed = 0                   # random mode only
    area_budget_mm2 = 800.0    # optional: points whose die is larger are not run
    power_budget_w = 700.0     # optional: rows report whether average power is within it
    points_per_task = 8        # optional: points per work unit (and per result file)
    dtype_datapath = "keep"    # optional: "keep" (default) or "rebuild" (the dtype axis)

    [chip]                     # chip parameters (CHIP_PARAMS), each a list of values;
    array_rows = [64, 128]     # random mode also takes {min, max, log, integer} ranges
    dtype = ["int8", "bf16"]
    "dram.t_rcd_ns" = [14.4]   # any scalar field of the chip, by its dotted path
    dram2 = ["none", "base"]   # the second memory tier: removed, the base's, or a chip file's
    dram3 = ["none", "base"]   # the third (behind the second) likewise

    [workload]                 # workload parameters (WORKLOAD_PARAMS): a value or a list
    model = "llama-3-8b"
    phase = ["prefill", "decode"]
    batch = [1, 8]

The points are the chip points × every combination of the workload values. Each point's id is a
hash of the base chip and the point's parameters, so the same point always has the same id.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...arch import DTYPES, Chip, chip_from_dict, load_chip, to_dict
from ...arch.dtypes import is_block_scaled
from ...arch.schema import read_config_file
from ...sim.limits import check_sizes

#: Most points one sweep may describe (checked before any point is built): a million
#: workload runs is days of CPU; split larger explorations into several specs.
MAX_SWEEP_POINTS = 1_000_000

# ---------------------------------------------------------------------------------------------
# chip parameters: name -> (kind, doc, setter(d, value))


def _set(path: str) -> Callable[[dict, Any], None]:
    keys = path.split(".")

    def setter(d: dict, v: Any) -> None:
        node = d
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = v

    return setter


def _set_dtype(d: dict, v: str) -> None:
    """``dtype_datapath = "keep"``: the default dtype among those the base chip's arrays
    support; rates, area and energy stay as declared."""
    d["default_dtype"] = v


def _rebuild_dtype(d: dict, v: str) -> None:
    """``dtype_datapath = "rebuild"``: arrays built for ``v`` only, one MAC per PE per cycle
    (the PE's area and energy are ``v``'s coefficients)."""
    d["core"]["array"]["macs_per_pe_per_cycle"] = {v: 1.0}
    d["core"]["array"]["mixed_input"] = []
    if d["core"]["array"].get("block_scale", "none") == "none" and is_block_scaled(v):
        d["core"]["array"]["block_scale"] = "pe"
    d["default_dtype"] = v


def _set_square(d: dict, v: int) -> None:
    d["core"]["array"]["rows"] = v
    d["core"]["array"]["cols"] = v


def _set_stacks(d: dict, v: int) -> None:
    dram = d["dram"]
    per_stack = dram["capacity_gib"] / dram["stacks"]
    dram["stacks"] = v
    dram["capacity_gib"] = per_stack * v


def _set_sram_total(d: dict, v: float) -> None:
    d["core"]["scratchpad"]["capacity_mib"] = v / d["tensor_cores"]


_ORDINAL = {"dram2": "second", "dram3": "third"}


def _tier(d: dict, name: str, table: str = "dram2") -> dict:
    """The point's ``[dram2]`` (or ``[dram3]``) table; ValueError (the point is recorded as an
    invalid chip) when it has none: a ``dram2 = "none"`` point of a grid that also sizes the
    tier."""
    t = d.get(table)
    if t is None:
        raise ValueError(f"chip.{name}: this point has no {_ORDINAL[table]} memory tier "
                         f"([{table}]) to set ({table} = \"none\", or a base chip without one)")
    return t


def _set_tier_packages(d: dict, v: int, table: str = "dram2") -> None:
    t = _tier(d, f"{table}_packages", table)
    per_package = t["capacity_gib"] / t["stacks"]
    t["stacks"] = v
    t["capacity_gib"] = per_package * v


def _set_tier3_packages(d: dict, v: int) -> None:
    _set_tier_packages(d, v, "dram3")


def _set_stacks_at_edge(d: dict, v: int) -> None:
    """HBM stacks traded for second-tier PHYs on the same die edge: ``v`` stacks, and the
    tier's packages (or link ports' worth of packages) grown or shrunk by the edge the change
    frees or takes, ``floor((stacks − v) × mm_edge_per_hbm_phy ÷ mm_edge_per_phy)`` (capacity
    per package kept); a tier left with no package is removed. Points whose edge still cannot
    hold the PHYs are run and marked infeasible."""
    from ...arch.geometry import DEFAULT_DIE

    t = _tier(d, "hbm_stacks_at_edge")
    if t.get("attach", "package") != "package":
        raise ValueError("chip.hbm_stacks_at_edge: the tier is behind a link (its edge is "
                         "link ports, not packages): trade package tiers only")
    if not t.get("mm_edge_per_phy"):
        raise ValueError("chip.hbm_stacks_at_edge: the tier's mm_edge_per_phy is 0 (not "
                         "modelled): no edge to trade")
    hbm_mm = (d.get("die") or {}).get("mm_edge_per_hbm_phy", DEFAULT_DIE.mm_edge_per_hbm_phy)
    freed = (d["dram"]["stacks"] - v) * hbm_mm
    packages = t["stacks"] + math.floor(freed / t["mm_edge_per_phy"] + 1e-9)
    _set_stacks(d, v)
    if packages < 1:
        d["dram2"] = None
    else:
        _set_tier_packages(d, packages)


def _set_tier_field(name: str, key: str) -> Callable[[dict, Any], None]:
    table = name.split("_", 1)[0]       # dram2_... or dram3_...
    def setter(d: dict, v: Any) -> None:
        _tier(d, name, table)[key] = v
    return setter


#: Named chip parameters. Order matters: ``sram_mib`` (a chip total) is applied after ``cores``.
CHIP_PARAMS: dict[str, tuple[str, str, Callable[[dict, Any], None]]] = {
    "clock_ghz": ("float", "core clock in GHz", _set("clock_ghz")),
    "cores": ("int", "tensor cores", _set("tensor_cores")),
    "arrays_per_core": ("int", "systolic arrays per tensor core", _set("core.arrays")),
    "array_rows": ("int", "PE rows per array", _set("core.array.rows")),
    "array_cols": ("int", "PE columns per array", _set("core.array.cols")),
    "array_dim": ("int", "square arrays: rows = cols", _set_square),
    "dtype": ("dtype", "default datapath precision, among those the base chip supports, at "
                       "its declared rate (dtype_datapath = \"rebuild\": arrays built for "
                       "this dtype only, one MAC per PE per cycle)", _set_dtype),
    "sram_mib_per_core": ("float", "scratchpad MiB per tensor core",
                          _set("core.scratchpad.capacity_mib")),
    "sram_mib": ("float", "scratchpad MiB of the whole chip, split evenly over the cores",
                 _set_sram_total),
    "vector_lanes": ("int", "vector lanes per tensor core", _set("core.vector.lanes")),
    "hbm_stacks": ("int", "DRAM stacks (capacity scales with the stack count)", _set_stacks),
    "hbm_gbps_per_pin": ("float", "DRAM data rate per pin in Gb/s", _set("dram.gbps_per_pin")),
    "links": ("int", "chip-to-chip links", _set("interconnect.links")),
    "link_gb_per_s": ("float", "GB/s per link per direction",
                      _set("interconnect.gb_per_s_per_link_per_direction")),
    "tdp_w": ("float", "thermal design power in W", _set("tdp_w")),
    # the second memory tier (docs/chips.md, "Memory tiers"; docs/dse.md, "Memory-tier axes")
    "dram2": ("tier", "second memory tier: \"none\" (removed), \"base\" (the base chip's) or "
                      "a chip preset or TOML whose [dram2] table the point takes", None),
    "dram2_packages": ("int", "second-tier packages (capacity scales with the count)",
                       _set_tier_packages),
    "hbm_stacks_at_edge": ("int", "HBM stacks, the die edge they free or take traded against "
                           "second-tier packages", _set_stacks_at_edge),
    "dram2_gbps_per_pin": ("float", "second-tier data rate per pin in Gb/s",
                           _set_tier_field("dram2_gbps_per_pin", "gbps_per_pin")),
    "dram2_link_gb_per_s": ("float", "GB/s per link port of a tier behind a link",
                            _set_tier_field("dram2_link_gb_per_s", "link_gb_per_s")),
    # the third memory tier, behind the second (docs/chips.md, "A third tier")
    "dram3": ("tier3", "third memory tier: \"none\" (removed), \"base\" (the base chip's) or "
                       "a chip preset or TOML whose [dram3] table the point takes", None),
    "dram3_packages": ("int", "third-tier packages (capacity scales with the count)",
                       _set_tier3_packages),
    "dram3_gbps_per_pin": ("float", "third-tier data rate per pin in Gb/s",
                           _set_tier_field("dram3_gbps_per_pin", "gbps_per_pin")),
    "dram3_link_gb_per_s": ("float", "GB/s per link port of a third tier behind a link",
                            _set_tier_field("dram3_link_gb_per_s", "link_gb_per_s")),
}
#: The named parameters that set the second memory tier.
TIER_PARAMS = ("dram2", "dram2_packages", "hbm_stacks_at_edge", "dram2_gbps_per_pin",
               "dram2_link_gb_per_s")
#: The named parameters that set the third memory tier.
TIER3_PARAMS = ("dram3", "dram3_packages", "dram3_gbps_per_pin", "dram3_link_gb_per_s")

PHASES = ("prefill", "decode", "train")

#: Workload parameters passed to ``run_workload``: name -> (kind, doc, default).
WORKLOAD_PARAMS: dict[str, tuple[str, str, Any]] = {
    "model": ("str", "model name (built-in) or path to a HuggingFace config.json", None),
    "phase": ("phase", "prefill, decode or train", None),
    "batch": ("int", "batch size (sequences)", 1),
    "prompt": ("int", "prompt tokens (prefill; decode context before generation)", 2048),
    "gen": ("int", "generated tokens (decode)", 128),
    "seq": ("int", "training sequence length (train)", None),
    "tp": ("int", "tensor-parallel degree", 1),
    "dp": ("int", "data-parallel degree", 1),
    "weights_dtype": ("dtype", "weight precision (default: the chip's)", None),
    "act_dtype": ("dtype", "activation precision (default: the chip's)", None),
    "kv_dtype": ("dtype", "KV-cache precision (default: the chip's)", None),
    "execution": ("execution", "schedule (default: the program's list schedule) or sum "
                  "(every op alone, times added)", None),
}
EXECUTIONS = ("schedule", "sum")

TOP_KEYS = ("base", "mode", "samples", "seed", "area_budget_mm2", "power_budget_w",
            "points_per_task", "dtype_datapath", "chip", "workload")
#: What a sweep's ``dtype`` axis does to the arrays (docs/dse.md, "The dtype axis").
DTYPE_DATAPATHS = ("keep", "rebuild")


@dataclass(frozen=True)
class Point:
    """One sweep point: chip parameters × workload parameters, with a stable id."""

    id: str
    chip: dict[str, Any]
    workload: dict[str, Any]

    @property
    def params(self) -> dict[str, Any]:
        return {**self.chip, **self.workload}


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep specification (see the module docstring)."""

    base: str
    base_chip: Chip
    mode: str
    chip_axes: dict[str, Any]
    workload_axes: dict[str, list]
    samples: int = 0
    seed: int = 0
    area_budget_mm2: float | None = None
    power_budget_w: float | None = None
    points_per_task: int | None = None
    source: str = "<spec>"
    chip_kinds: dict[str, str] = field(default_factory=dict)
    dtype_datapath: str = "keep"
    #: the ``dram2`` axis's values → the ``[dram2]`` table each gives (None: "none")
    tiers: dict[str, Any] = field(default_factory=dict)
    #: the ``dram3`` axis's values → the ``[dram3]`` table each gives (None: "none")
    tiers3: dict[str, Any] = field(default_factory=dict)
    _base_key: str = field(default="", repr=False)

    # ---- chips ---------------------------------------------------------------------------
    def chip_dict(self, params: dict[str, Any]) -> dict:
        """The base chip's dict with ``params`` applied (not yet validated)."""
        d = copy.deepcopy(to_dict(self.base_chip))
        _normalise_tables(d)
        for name in _ordered(params):
            value = params[name]
            if name == "dtype" and self.dtype_datapath == "rebuild":
                _rebuild_dtype(d, value)
            elif name == "dram2":
                d["dram2"] = copy.deepcopy(self.tiers[value])
            elif name == "dram3":
                d["dram3"] = copy.deepcopy(self.tiers3[value])
            elif name in CHIP_PARAMS:
                CHIP_PARAMS[name][2](d, value)
            else:
                _set(name)(d, value)
        d["name"] = f"{self.base_chip.name}-" + _digest({"chip": params})[:8]
        d["description"] = "sweep point of " + self.base_chip.name + ": " + ", ".join(
            f"{k}={v}" for k, v in params.items())
        d["area_budget_mm2"] = 0.0  # budgets are the sweep's, applied per point
        return d

    def build_chip(self, params: dict[str, Any]) -> Chip:
        """The validated chip of one chip point; raises ConfigError naming the parameters."""
        return chip_from_dict(self.chip_dict(params),
                              source=f"{self.base} with " + ", ".join(
                                  f"{k}={v}" for k, v in params.items()))

    # ---- points --------------------------------------------------------------------------
    def chip_points(self) -> list[dict[str, Any]]:
        """Chip parameter sets: the grid in spec order, or ``samples`` seeded random draws."""
        names = list(self.chip_axes)
        if self.mode == "grid":
            return [dict(zip(names, combo))
                    for combo in itertools.product(*(self.chip_axes[n] for n in names))]
        rng = random.Random(self.seed)
        out = []
        for _ in range(self.samples):
            out.append({n: _draw(rng, self.chip_axes[n], self.chip_kinds.get(n, 'float'))
                        for n in names})
        return out

    def workload_points(self) -> list[dict[str, Any]]:
        names = list(self.workload_axes)
        return [dict(zip(names, combo))
                for combo in itertools.product(*(self.workload_axes[n] for n in names))]

    def count(self) -> int:
        """Points the spec describes (repeated values counted), without building any."""
        chips = self.samples if self.mode == "random" else math.prod(
            len(v) for v in self.chip_axes.values())
        return chips * math.prod(len(v) for v in self.workload_axes.values())

    def point(self, chip: dict[str, Any], workload: dict[str, Any]) -> Point:
        """The point of chip parameters ``chip`` and workload parameters ``workload``."""
        pid = _digest({"base": self._base_key, "chip": chip, "workload": workload})[:16]
        return Point(pid, chip, workload)

    def points(self) -> list[Point]:
        """Every point, chip-major, duplicates (same id) removed, order stable."""
        seen: set[str] = set()
        out = []
        workloads = self.workload_points()
        for cp in self.chip_points():
            for wp in workloads:
                p = self.point(cp, wp)
                if p.id not in seen:
                    seen.add(p.id)
                    out.append(p)
        return out


# ---------------------------------------------------------------------------------------------


def _ordered(params: dict[str, Any]) -> list[str]:
    """Application order: the ``dram2`` and ``dram3`` tables first (dotted ``dram2.*`` /
    ``dram3.*`` paths and the tier parameters then edit the point's tiers), dotted paths, then
    the named parameters."""
    order = {n: i for i, n in enumerate(CHIP_PARAMS)}
    order["dram2"] = -3
    order["dram3"] = -2
    return sorted(params, key=lambda n: order.get(n, -1))


def _normalise_tables(d: dict) -> None:
    """Drop zero entries of dtype tables so that ``to_dict`` output round-trips compactly."""
    mac = d["core"]["array"]["macs_per_pe_per_cycle"]
    d["core"]["array"]["macs_per_pe_per_cycle"] = {k: v for k, v in mac.items() if v}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _draw(rng: random.Random, axis: Any, kind: str):
    if isinstance(axis, list):
        return axis[rng.randrange(len(axis))]
    lo, hi = axis["min"], axis["max"]
    if axis.get("log"):
        x = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    else:
        x = rng.uniform(lo, hi)
    if kind == "int" or axis.get("integer"):
        return int(min(hi, max(lo, round(x))))
    return x


def _err(source: str, key: str, value: Any, expected: str) -> ValueError:
    return ValueError(f"{source}: {key}: expected {expected}, got {value!r}")


def _check_value(source: str, key: str, kind: str, v: Any) -> Any:
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _err(source, key, v, "a positive integer")
    elif kind == "float":
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0
                or not math.isfinite(v)):
            raise _err(source, key, v, "a finite positive number")
        v = float(v)
    elif kind == "dtype":
        if v not in DTYPES:
            raise _err(source, key, v, "one of " + ", ".join(DTYPES))
    elif kind == "phase":
        if v not in PHASES:
            raise _err(source, key, v, "one of " + ", ".join(PHASES))
    elif kind == "execution":
        if v not in EXECUTIONS:
            raise _err(source, key, v, "one of " + ", ".join(EXECUTIONS))
    elif kind in ("str", "tier", "tier3"):
        if not isinstance(v, str) or not v:
            table = "dram3" if kind == "tier3" else "dram2"
            raise _err(source, key, v, "a non-empty string" if kind == "str" else
                       f"\"none\", \"base\" or a chip preset or TOML with a [{table}] table")
    return v


def _tiers(source: str, base_chip: Chip, chip_axes: dict,
           table: str = "dram2") -> dict[str, Any]:
    """The ``dram2`` (``table`` ``dram3``: the ``dram3``) axis's values → the table each gives
    (None for "none"), each checked; then the tier parameters need a tier to set: the base
    chip's or the axis's (ValueError naming the key otherwise)."""
    tiers: dict[str, Any] = {}
    nth = _ORDINAL[table]
    params = TIER_PARAMS if table == "dram2" else TIER3_PARAMS
    axis = chip_axes.get(table)
    if axis is not None and not isinstance(axis, list):
        raise _err(source, f"chip.{table}", axis, "a list of tiers")
    for i, v in enumerate(axis or []):
        key = f"chip.{table}[{i}]"
        if v == "none":
            tiers[v] = None
            continue
        if v == "base":
            chip = base_chip
        else:
            path = Path(source).parent / v
            ref = str(path) if v.endswith(".toml") and path.exists() else v
            try:
                chip = load_chip(ref)
            except ValueError as exc:
                raise ValueError(f"{source}: {key}: {exc}") from None
        if getattr(chip, table) is None:
            raise _err(source, key, v, f"a chip with a [{table}] table ({chip.name!r} has "
                       f"none): \"none\", \"base\" or a chip preset or TOML with one")
        tiers[v] = to_dict(chip)[table]
    given = [t for t in tiers.values() if t is not None]
    if axis is None and getattr(base_chip, table) is not None:
        given = [to_dict(base_chip)[table]]
    for name in params[1:]:
        if name not in chip_axes:
            continue
        if not given:
            raise ValueError(f"{source}: chip.{name}: the base chip {base_chip.name!r} has no "
                             f"{nth} memory tier ([{table}]) and no {table} axis gives one")
        if name == f"{table}_link_gb_per_s" and not any(
                t.get("attach", "package") != "package" for t in given):
            which = "tier" if table == "dram2" else f"{nth} tier"
            raise ValueError(f"{source}: chip.{name}: no {which} of the sweep is behind a "
                             f"link ([{table}] attach = \"cxl\", \"pcie\" or \"c2c\")")
    return tiers


_TIER_HINT = (" (a tier of another kind or attachment: the dram2 (dram3) axis takes a chip "
              "TOML whose [dram2] ([dram3]) table a point uses)")


def _raw_path_kind(base: dict, path: str, source: str) -> str:
    node: Any = base
    tier = path.startswith(("dram2.", "dram3."))
    for k in path.split("."):
        if not isinstance(node, dict) or k not in node:
            raise ValueError(
                f"{source}: chip.{path}: unknown chip parameter; expected one of "
                f"{', '.join(CHIP_PARAMS)}, or a dotted path to a field of the base chip "
                "(e.g. \"dram.t_rcd_ns\")" + (_TIER_HINT if tier else ""))
        node = node[k]
    if isinstance(node, (dict, list)) or isinstance(node, str):
        raise ValueError(f"{source}: chip.{path}: a dotted path must name a numeric field, "
                         f"not a {type(node).__name__}" + (_TIER_HINT if tier else ""))
    return "int" if isinstance(node, int) and not isinstance(node, bool) else "float"


def _check_model(source: str, key: str, name: str) -> None:
    """A spec's model must load (built-in name or readable config.json) before any point runs."""
    from ...workloads import load_model

    try:
        load_model(name)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{source}: {key}: {exc}") from None


def _base(data: dict, source: str) -> tuple[str, Chip]:
    """The spec's ``base`` chip (a path relative to the spec's folder, or a preset)."""
    if "base" not in data:
        raise ValueError(f"{source}: base: missing required key (a chip preset or TOML path "
                         "every point starts from)")
    base = data["base"]
    if not isinstance(base, str):
        raise _err(source, "base", base, "a chip preset name or TOML path")
    base_path = Path(base)
    if not base_path.is_absolute() and (Path(source).parent / base_path).exists() \
            and base.endswith(".toml"):
        base = str(Path(source).parent / base_path)
    try:
        return base, load_chip(base)
    except ValueError as exc:
        raise ValueError(f"{source}: base: {exc}") from None


def _sampling(data: dict, source: str) -> tuple[str, int, int]:
    """(mode, samples, seed) of the spec."""
    mode = data.get("mode", "grid")
    if mode not in ("grid", "random"):
        raise _err(source, "mode", mode, "\"grid\" or \"random\"")
    samples = data.get("samples", 0)
    if mode == "random":
        if (isinstance(samples, bool) or not isinstance(samples, int) or not
                1 <= samples <= MAX_SWEEP_POINTS):
            raise _err(source, "samples", samples,
                       f"a positive integer in random mode (at most {MAX_SWEEP_POINTS:,})")
    elif "samples" in data:
        raise _err(source, "samples", samples, "no samples in grid mode (use mode = \"random\")")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise _err(source, "seed", seed, "an integer")
    return mode, samples, seed


def _chip_axis(source: str, key: str, kind: str, axis, mode: str):
    """One ``[chip]`` axis: a list of values, or (random mode) a numeric range table."""
    if isinstance(axis, dict):
        if mode != "random":
            raise _err(source, key, axis, "a list of values (ranges need mode = \"random\")")
        extra = set(axis) - {"min", "max", "log", "integer"}
        if extra or "min" not in axis or "max" not in axis:
            raise _err(source, key, axis, "a range table {min, max, log, integer}")
        if kind not in ("int", "float"):
            raise _err(source, key, axis, "a list of values (this parameter is not numeric)")
        for flag in ("log", "integer"):
            if not isinstance(axis.get(flag, False), bool):
                raise _err(source, f"{key}.{flag}", axis[flag], "true or false")
        lo = _check_value(source, f"{key}.min", "float", axis["min"])
        hi = _check_value(source, f"{key}.max", "float", axis["max"])
        if hi < lo:
            raise _err(source, f"{key}.max", axis["max"], f"at least min ({axis['min']})")
        return dict(axis)
    values = axis if isinstance(axis, list) else [axis]
    if not values:
        raise ValueError(f"{source}: {key}: empty list: the grid would have no points; "
                         "give at least one value")
    return [_check_value(source, f"{key}[{i}]", kind, v) for i, v in enumerate(values)]


def _chip_axes(data: dict, source: str, base_dict: dict, mode: str
               ) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``[chip]`` axes and each one's kind."""
    chip_axes: dict[str, Any] = {}
    chip_kinds: dict[str, str] = {}
    chip_tab = data.get("chip", {})
    if not isinstance(chip_tab, dict):
        raise _err(source, "chip", chip_tab, "a table of chip parameters")
    for name, axis in chip_tab.items():
        kind = CHIP_PARAMS[name][0] if name in CHIP_PARAMS else _raw_path_kind(
            base_dict, name, source)
        chip_kinds[name] = kind
        chip_axes[name] = _chip_axis(source, f"chip.{name}", kind, axis, mode)
    return chip_axes, chip_kinds


def _check_dtype_axis(data: dict, source: str, base_chip: Chip, chip_axes: dict) -> str:
    """The spec's ``dtype_datapath``, with every dtype of the axis one the base chip can run
    (``keep``) or has coefficients for (``rebuild``); then the axes that exclude each other."""
    datapath = data.get("dtype_datapath", "keep")
    if datapath not in DTYPE_DATAPATHS:
        raise _err(source, "dtype_datapath", datapath, "\"keep\" or \"rebuild\"")
    for i, v in enumerate(chip_axes.get("dtype", []) if isinstance(chip_axes.get("dtype"),
                                                                   list) else []):
        if datapath == "keep":
            if not base_chip.supports(v):
                raise _err(source, f"chip.dtype[{i}]", v,
                           f"a dtype the base chip {base_chip.name!r} supports "
                           f"({', '.join(base_chip.dtypes)}): core.array."
                           f"macs_per_pe_per_cycle.{v} is 0 (dtype_datapath = \"rebuild\" "
                           "builds arrays for it instead)")
            continue
        for table, coeff in (("area.mm2_per_mac", base_chip.area.mm2_per_mac[v]),
                             ("energy.pj_per_mac", base_chip.energy.pj_per_mac[v])):
            if coeff <= 0:
                raise ValueError(f"{source}: chip.dtype[{i}]: the base chip {base_chip.name!r} "
                                 f"has no {table}.{v} coefficient (it is {coeff}); add one to "
                                 "the base chip's TOML or drop this dtype")
    if "array_dim" in chip_axes and ({"array_rows", "array_cols"} & set(chip_axes)):
        raise ValueError(f"{source}: chip.array_dim: cannot be combined with array_rows or "
                         "array_cols (it sets both)")
    for other in ("hbm_stacks", "dram2_packages"):
        if "hbm_stacks_at_edge" in chip_axes and other in chip_axes:
            raise ValueError(f"{source}: chip.hbm_stacks_at_edge: cannot be combined with "
                             f"{other} (it sets both stacks and packages)")
    if "sram_mib" in chip_axes and "sram_mib_per_core" in chip_axes:
        raise ValueError(f"{source}: chip.sram_mib: cannot be combined with sram_mib_per_core")
    return datapath


def _workload_axes(data: dict, source: str) -> dict[str, list]:
    """The ``[workload]`` axes (model and phase required)."""
    wl_tab = data.get("workload")
    if not isinstance(wl_tab, dict) or not wl_tab:
        raise ValueError(f"{source}: workload: missing table; expected at least model and "
                         "phase, e.g. [workload] model = \"llama-3-8b\", phase = [\"decode\"]")
    workload_axes: dict[str, list] = {}
    for name, axis in wl_tab.items():
        if name not in WORKLOAD_PARAMS:
            raise _err(source, f"workload.{name}", axis,
                       f"a known workload parameter ({', '.join(WORKLOAD_PARAMS)})")
        values = axis if isinstance(axis, list) else [axis]
        if not values:
            raise ValueError(f"{source}: workload.{name}: empty list: the grid would have no "
                             "points; give at least one value")
        kind = WORKLOAD_PARAMS[name][0]
        workload_axes[name] = [_check_value(source, f"workload.{name}[{i}]", kind, v)
                               for i, v in enumerate(values)]
        for i, v in enumerate(workload_axes[name]):
            if name in ("batch", "prompt", "gen", "seq"):
                try:
                    check_sizes(**{name: v})
                except ValueError as exc:
                    raise ValueError(f"{source}: workload.{name}[{i}]: {exc}") from None
    for req in ("model", "phase"):
        if req not in workload_axes:
            raise ValueError(f"{source}: workload.{req}: missing required key "
                             f"({WORKLOAD_PARAMS[req][1]})")
    for i, v in enumerate(workload_axes["model"]):
        _check_model(source, f"workload.model[{i}]", v)
    return workload_axes


def parse_spec(data: dict, *, source: str = "<spec>") -> SweepSpec:
    """Validate a spec dict (parsed TOML); every problem is a ValueError naming the key."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a table of sweep settings, got {data!r}")
    for key in data:
        if key not in TOP_KEYS:
            raise _err(source, key, data[key], f"no such key (known keys: {', '.join(TOP_KEYS)})")
    base, base_chip = _base(data, source)
    mode, samples, seed = _sampling(data, source)
    budgets = {}
    for key in ("area_budget_mm2", "power_budget_w"):
        if key in data:
            budgets[key] = _check_value(source, key, "float", data[key])
    ppt = data.get("points_per_task")
    if ppt is not None:
        _check_value(source, "points_per_task", "int", ppt)
    base_dict = to_dict(base_chip)
    chip_axes, chip_kinds = _chip_axes(data, source, base_dict, mode)
    datapath = _check_dtype_axis(data, source, base_chip, chip_axes)
    tiers = _tiers(source, base_chip, chip_axes)
    tiers3 = _tiers(source, base_chip, chip_axes, "dram3")
    workload_axes = _workload_axes(data, source)
    key: dict = {"base": base_dict}
    if "dtype" in chip_axes:
        key["dtype_datapath"] = datapath
    if tiers:       # the tiers' tables, so that editing a referenced file gives new ids
        key["tiers"] = tiers
    if tiers3:
        key["tiers3"] = tiers3
    spec = SweepSpec(base=base, base_chip=base_chip, mode=mode, chip_axes=chip_axes,
                     workload_axes=workload_axes, samples=samples, seed=seed,
                     area_budget_mm2=budgets.get("area_budget_mm2"),
                     power_budget_w=budgets.get("power_budget_w"), points_per_task=ppt,
                     source=source, chip_kinds=chip_kinds, dtype_datapath=datapath,
                     tiers=tiers, tiers3=tiers3,
                     _base_key=_digest(base_dict if len(key) == 1 else key)[:16])
    n, n_wl = spec.count(), math.prod(len(v) for v in workload_axes.values())
    if n > MAX_SWEEP_POINTS:
        raise ValueError(f"{source}: the spec describes {n:,} points ({n // n_wl:,} chips × "
                         f"{n_wl:,} workloads); a sweep runs at most "
                         f"{MAX_SWEEP_POINTS:,}: split it into several specs")
    return spec


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec TOML file."""
    data = read_config_file(path, "sweep spec", error=ValueError)
    return parse_spec(data, source=str(path))

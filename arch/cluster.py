"""The cluster description: scale-up domains of chips and the scale-out network between them.

A :class:`Cluster` is ``domains`` identical scale-up domains of ``scale_up.chips`` chips each:

* the **scale-up fabric** inside a domain is either a ``switch`` (NVLink through NVSwitch: any
  chip reaches any other at its full port bandwidth, non-blocking) or a ``torus`` (TPU ICI: a
  2-D or 3-D torus, each chip linked to its neighbours along each dimension; ``wraparound =
  false`` makes it a mesh). Per-link bandwidth, the number of links per chip and the per-hop
  latency default to the chip's own ``[interconnect]`` table, so the same cluster file can host
  different chip designs (the presets leave them to the chip); a cluster file that gives them
  overrides the chip's;
* the **scale-out network** joins the domains: one NIC per chip into a ``fat_tree`` (optionally
  ``oversubscription``:1 above the leaf switches), a ``rail_optimized`` fat tree (NIC i of every
  domain on rail i: same-rail traffic within a leaf group of ``rail_group_domains`` domains never
  crosses the spine), or ``none`` (a single domain).

Load one with :func:`load_cluster` (a preset name from ``arch/clusters/*.toml`` or a path);
every field is validated when the cluster is built, with the standard message (file, key,
value, expectation).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .bounds import BUS_EFFICIENCY, LINK_GB_PER_S, LINK_LATENCY_US
from .schema import ConfigError, bound, build, f, fail, read_config_file

FABRICS: tuple[str, ...] = ("switch", "torus")
SCALE_OUT_KINDS: tuple[str, ...] = ("fat_tree", "rail_optimized", "none")


@dataclass(frozen=True, kw_only=True)
class ScaleUp:
    """One scale-up domain: ``chips`` chips on a ``switch`` or ``torus`` fabric."""

    fabric: str = f(choices=FABRICS, doc="scale-up fabric kind")
    chips: int = f(min=1, doc="chips per scale-up domain (integer >= 1)")
    torus_x: int = f(default=1, min=1, doc="torus size along x, the fastest-varying "
                                           "dimension (integer >= 1; torus only)")
    torus_y: int = f(default=1, min=1, doc="torus size along y (integer >= 1; torus only)")
    torus_z: int = f(default=1, min=1, doc="torus size along z (integer >= 1; 1 for a 2-D "
                                           "torus; torus only)")
    wraparound: bool = f(default=True, doc="torus links wrap around (false: a mesh)")
    links_per_chip: int | None = f(default=None, min=1,
                                   doc="links per chip (integer >= 1; default: the chip's "
                                       "interconnect.links)")
    gb_per_s_per_link_per_direction: float | None = f(
        default=None, doc="GB/s per link per direction (default: the chip's interconnect "
                          "value)", **LINK_GB_PER_S)
    latency_us: float | None = f(default=None,
                                 doc="latency per hop / per collective step in microseconds "
                                     "(default: the chip's interconnect.latency_us)",
                                 **LINK_LATENCY_US, zero_ok=True)

    def _validate(self, source, path):
        dims = (self.torus_x, self.torus_y, self.torus_z)
        if self.fabric == "torus":
            if math.prod(dims) != self.chips:
                fail(source, f"{path}.torus_x", list(dims),
                     f"torus_x x torus_y x torus_z = scale_up.chips ({self.chips})")
            if self.links_per_chip is not None and self.links_per_chip < self.torus_links:
                fail(source, f"{path}.links_per_chip", self.links_per_chip,
                     f"at least {self.torus_links} (two per torus dimension)")
        elif dims != (1, 1, 1):
            fail(source, f"{path}.torus_x", list(dims),
                 "no torus dimensions for a switch fabric")

    @property
    def torus_links(self) -> int:
        """Links a chip needs for the torus: two per dimension longer than 1 (0 on a
        switch)."""
        if self.fabric != "torus":
            return 0
        return 2 * sum(1 for d in (self.torus_x, self.torus_y, self.torus_z) if d > 1)

    @property
    def torus_dims(self) -> tuple[int, ...]:
        """Torus dimensions, x fastest (a switch domain is one dimension of ``chips``)."""
        if self.fabric != "torus":
            return (self.chips,)
        return (self.torus_x, self.torus_y, self.torus_z)


@dataclass(frozen=True, kw_only=True)
class ScaleOut:
    """The network between scale-up domains (one NIC per chip)."""

    kind: str = f(choices=SCALE_OUT_KINDS, doc="scale-out network kind")
    nic_gb_per_s_per_direction: float = f(default=0.0,
                                          doc="NIC bandwidth per chip per direction in GB/s "
                                              "(0: none)",
                                          **LINK_GB_PER_S, zero_ok=True)
    latency_us: float = f(default=0.0,
                          doc="latency per message / collective step in microseconds",
                          **LINK_LATENCY_US, zero_ok=True)
    oversubscription: float = f(default=1.0,
                                doc="fat-tree oversubscription above the leaf (1 = "
                                    "non-blocking)",
                                **bound(1.0, 1000.0, "1 = non-blocking; 1000:1 is above any "
                                        "built fabric (~1-8:1)"))
    rail_group_domains: int = f(default=1, min=1,
                                doc="domains under one set of rail leaf switches (integer "
                                    ">= 1; rail_optimized only)")
    bus_efficiency: float = f(default=1.0,
                              doc="fraction of the NIC bandwidth collectives sustain",
                              **BUS_EFFICIENCY)


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """``domains`` scale-up domains joined by a scale-out network (module docstring)."""

    name: str = f(doc="cluster name")
    description: str = f(default="", doc="one-line description")
    domains: int = f(min=1, doc="scale-up domains in the cluster (integer >= 1)")
    scale_up: ScaleUp = f(doc="the scale_up table")
    scale_out: ScaleOut = f(doc="the scale_out table")

    def _validate(self, source, path):
        so = self.scale_out
        if self.domains > 1 and so.kind == "none":
            fail(source, "scale_out.kind", so.kind,
                 f"a network (fat_tree or rail_optimized) to join {self.domains} domains")
        if so.kind != "none" and so.nic_gb_per_s_per_direction <= 0:
            fail(source, "scale_out.nic_gb_per_s_per_direction", so.nic_gb_per_s_per_direction,
                 f"a bandwidth > 0 for a {so.kind} network")
        if so.kind != "rail_optimized" and so.rail_group_domains != 1:
            fail(source, "scale_out.rail_group_domains", so.rail_group_domains,
                 "1 (rail groups apply to rail_optimized networks only)")

    @property
    def chips(self) -> int:
        """Chips in the whole cluster."""
        return self.domains * self.scale_up.chips


def preset_names() -> list[str]:
    """Names of the built-in cluster presets (``arch/clusters/*.toml``), sorted."""
    root = resources.files("diptych.arch.clusters")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def cluster_from_dict(data: dict, *, source: str | None = None) -> Cluster:
    """Build and validate a :class:`Cluster` from a parsed-TOML dict."""
    return build(Cluster, data, source=source)


def load_cluster(name_or_path: "str | Path | Cluster") -> Cluster:
    """A preset name (``dgx-h100``), a path to a TOML file, or a Cluster (returned as is)."""
    if isinstance(name_or_path, Cluster):
        return name_or_path
    text = str(name_or_path)
    if text in preset_names():
        res = resources.files("diptych.arch.clusters").joinpath(f"{text}.toml")
        return cluster_from_dict(tomllib.loads(res.read_text()), source=f"{text}.toml")
    if text.endswith(".toml") or "/" in text or Path(text).exists():
        return cluster_from_dict(read_config_file(text, "cluster file"), source=text)
    raise ConfigError(f"unknown cluster {text!r}: expected a preset "
                      f"({', '.join(preset_names())}) or a path to a .toml file")

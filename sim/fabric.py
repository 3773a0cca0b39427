"""What the on-chip network and the die-to-die hop charge the engine (docs/floorplan.md §7).

DRAM bytes travel from the memory controllers (and, on a chiplet package, across die-to-die
interfaces) through the on-chip network to the cores. :func:`fabric` turns the closed forms of
:func:`diptych.arch.noc.noc_report` and :func:`diptych.arch.package.d2d_report` into the four
charges the engine applies:

* **bandwidth**: the DRAM bandwidth the cores can pull is capped at the lower of the NoC's and
  the D2D interfaces' caps (``dram_cap_bytes_per_s``). The DRAM model plays every transfer on
  a second aggregate server at that rate (:mod:`diptych.sim.dram`, ``F_FABRIC``), beside the
  pins' server: a long stream takes ``bytes / cap`` when the cap is below the pins. A cap at
  or above the pins cannot bind (the pin server is never ahead of it) and is not played;
* **latency**: every DRAM descriptor's setup grows by the NoC's mean latency (routers × hop
  cycles) plus ``mean_crossings × d2d_latency_ns`` (the expected D2D latency over
  interleaved addresses), ``dram_setup_ns``;
* **a link**: a chip whose DRAM is a memory tier behind a link (``[dram2] attach`` ``cxl``,
  ``pcie``, ``c2c``: :func:`diptych.sim.run.placed.tier2_chip` times a second tier's bytes on
  such a chip) has its DRAM capped at the links' rate (both directions on one server: errs
  slow for mixed reads and writes), or at the chip's share of the pins of a memory its node's
  chips share (``shared_by``) when that is lower, and ``link_latency_ns`` added to every
  descriptor's setup;
* **energy**: ``noc`` = NoC pJ/byte × (DRAM bytes + shared-buffer re-read bytes), ``d2d`` =
  D2D pJ per DRAM byte (``8 × pJ/bit × mean crossings``) × DRAM bytes; keys of the energy
  breakdown only for a chip with a ``[noc]`` (resp. a multi-die ``[package]``), so that a chip
  without them keeps its breakdown unchanged;
* **shared buffer**: on a mesh the shared buffer sits across the network (the middle strip of
  the floorplan), so its bandwidth for re-reads between tiles is capped at the mesh bisection
  (``shared_buffer_bytes_per_cycle``).

A chip with neither table gets :data:`NONE`: nothing is charged and every number stays
bit-identical.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from .dram import F_FABRIC, engine_dram, timing_vectors


@dataclass(frozen=True)
class Fabric:
    """The charges of one chip (see the module docstring); units in the names."""

    dram_cap_bytes_per_s: float        # inf: no cap below the pins
    bottleneck: str                    # what sets the cap ("" when none binds)
    dram_setup_ns: float               # added to every DRAM descriptor's setup
    noc_pj_per_byte: float             # per DRAM or shared-buffer byte on the network
    d2d_pj_per_dram_byte: float        # per DRAM byte, averaged over the crossings
    has_noc: bool
    has_d2d: bool
    shared_buffer_bytes_per_cycle: float | None  # whole buffer, capped at the bisection

    @property
    def ns_per_byte(self) -> float:
        """The DRAM model's fabric-server rate (0: no server)."""
        return 0.0 if math.isinf(self.dram_cap_bytes_per_s) else 1e9 / self.dram_cap_bytes_per_s

    def energy_j(self, dram_bytes: float, noc_bytes: float) -> dict[str, float]:
        """The ``noc``/``d2d`` energy keys (J) of ``dram_bytes`` moved to or from DRAM and
        ``noc_bytes`` on the network (DRAM plus shared-buffer bytes); empty for a chip
        without the tables."""
        out = {}
        if self.has_noc:
            out["noc"] = noc_bytes * self.noc_pj_per_byte * 1e-12
        if self.has_d2d:
            out["d2d"] = dram_bytes * self.d2d_pj_per_dram_byte * 1e-12
        return out


#: The charges of a chip without ``[noc]`` and without a multi-die ``[package]``.
NONE = Fabric(math.inf, "", 0.0, 0.0, 0.0, False, False, None)


@lru_cache(maxsize=256)
def fabric(chip) -> Fabric:
    """The NoC and D2D charges of ``chip`` (:data:`NONE` without the tables)."""
    from ..arch.noc import noc_report
    from ..arch.package import d2d_report

    pkg = getattr(chip, "package", None)
    has_d2d = pkg is not None and pkg.dies > 1 and chip.has_dram
    noc = noc_report(chip) if chip.has_dram else None
    sbuf = chip.shared_buffer
    sb = None if sbuf is None else float(sbuf.bytes_per_cycle)
    link = chip.dram if getattr(chip.dram, "linked", False) else None
    if noc is None and not has_d2d and link is None:
        return NONE if sb is None else Fabric(math.inf, "", 0.0, 0.0, 0.0, False, False, sb)
    pins = chip.dram.peak_bytes_per_s * (1.0 - 1e-9)   # a cap equal to the pins cannot bind
    cap, what, setup, noc_pj, d2d_pj = math.inf, "", 0.0, 0.0, 0.0
    if link is not None:    # a tier behind a link (tier2_chip): its rate and its latency
        setup += link.link_latency_ns
        if link.link_bytes_per_s < pins:
            cap, what = link.link_bytes_per_s, f"{link.attach} link"
        if link.shared_by > 1 and link.pin_share_bytes_per_s < min(cap, pins):
            # a memory the node's chips share: each streams its share of the pins
            cap, what = link.pin_share_bytes_per_s, f"shared by {link.shared_by} chips"
    if noc is not None:
        setup += noc.latency_ns
        noc_pj = noc.pj_per_byte
        if noc.dram_cap_bytes_per_s < min(cap, pins):
            cap, what = noc.dram_cap_bytes_per_s, f"NoC ({noc.bottleneck})"
        if sb is not None and noc.topology == "mesh":
            sb = min(sb, noc.bisection_bytes_per_s / chip.clock_hz)
    if has_d2d:
        d2d = d2d_report(chip)
        setup += d2d.mean_crossings * pkg.d2d_latency_ns
        d2d_pj = d2d.pj_per_dram_byte
        if d2d.dram_cap_bytes_per_s < min(cap, pins):
            cap, what = d2d.dram_cap_bytes_per_s, "die-to-die interfaces"
    return Fabric(cap, what, setup, noc_pj, d2d_pj, noc is not None, has_d2d, sb)


@lru_cache(maxsize=256)
def dram_vectors(chip):
    """The DRAM model's (integer, float) parameter vectors for ``chip``, with its fabric cap
    (:data:`diptych.sim.dram.F_FABRIC`); shared, read-only, memoised per chip (asked once per
    engine run). An all-SRAM chip gets the placeholder geometry of
    :func:`diptych.sim.dram.engine_dram` and no charges."""
    return _vectors(engine_dram(chip), fabric(chip).ns_per_byte)


@lru_cache(maxsize=64)
def _vectors(dram, ns_per_byte: float):
    ip, fp = timing_vectors(dram)
    if ns_per_byte == 0.0:
        return ip, fp
    fp = fp.copy()
    fp[F_FABRIC] = ns_per_byte
    return ip, fp

"""Process nodes for the cost model: wafer price and defect density, with their sources.

A chip's ``[cost] node`` names one of :data:`NODES`; ``wafer_usd`` and
``defect_density_per_cm2`` in the chip's table override the node's figures. Prices are the
foundry's sale price of one processed 300 mm wafer; defect densities are random (killer)
defects per cm², as foundries report them for a node in volume production.

Sources:

* wafer prices [S]: CSET, S. M. Khan and A. Mann, "AI Chips: What They Are and Why They
  Matter" (2020), table "foundry sale price per wafer" (2020 dollars): 16/12 nm $3,984,
  10 nm $5,992, 7 nm $9,346, 5 nm $16,988; the same figures circulated as TSMC's April-2020
  price list (TechPowerUp, "Alleged Prices of TSMC Silicon Wafers Appear"). 28 nm: "about
  US$3,000" in 2011 (DigiTimes via smbom.com) [S]. 3 nm: "about US$20,000" (DigiTimes, Nov
  2022, via Taiwan News / Tom's Hardware) [S]. N4 is an N5-family half node and is priced as
  N5 [D].
* defect densities: TSMC N7 0.09 /cm² three quarters after volume production (VLSI
  Symposium 2019) and N5 0.10-0.11 /cm² at its volume ramp, expected below 0.10 and trending to
  ~0.06-0.07 a year later (TSMC Technology Symposium 2020, via AnandTech "Better Yield on 5nm
  than 7nm", 25 Aug 2020, and SemiWiki's reading of the same plot) [S]. N4 as mature N5 [D];
  N3 0.08 [assumption: between N5's ramp and its mature value]; 16/12 nm and 28 nm 0.08 and
  0.10 [assumption: mature planar/FinFET nodes].
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    """One process node: ``wafer_usd`` per processed 300 mm wafer, ``defect_density_per_cm2``."""

    name: str
    wafer_usd: float
    defect_density_per_cm2: float
    description: str


NODES: dict[str, Node] = {n.name: n for n in (
    Node("n28", 3000.0, 0.10, "28 nm planar (TPU v1 class)"),
    Node("n16", 3984.0, 0.08, "16/12 nm FinFET"),
    Node("n7", 9346.0, 0.09, "7 nm (TPU v4 class)"),
    Node("n5", 16988.0, 0.07, "5 nm, mature"),
    Node("n4", 16988.0, 0.07, "4 nm, N5 family (H100's 4N)"),
    Node("n3", 20000.0, 0.08, "3 nm"),
)}

#: Node names accepted by ``[cost] node``.
NODE_NAMES: tuple[str, ...] = tuple(NODES)

"""Collective communication time and energy from a chip's interconnect.

Ring algorithms over ``n`` chips, each moving a ``bytes``-sized buffer (the standard
bandwidth-optimal cost model, e.g. Patarasuk & Yuan 2009; NCCL's "bus bandwidth"):

* all-reduce (reduce-scatter + all-gather): ``2(n−1)/n · bytes`` sent per chip in
  ``2(n−1)`` steps;
* all-gather, reduce-scatter, all-to-all: ``(n−1)/n · bytes`` in ``n−1`` steps.

Time = bytes sent ÷ bandwidth + steps × per-hop latency. Bandwidth is the chip's total
per-direction link bandwidth (``links × GB/s per link per direction``) as a collective
library sustains it (× ``interconnect.bus_efficiency``): we assume the ring is striped over
all links (parallel rings, as NCCL does over NVLink); a single-link ring would be ``links``
times slower. On a chip whose links end in a switch that reduces in the network
(``interconnect.in_network_reduction`` > 0: NVLink SHARP), an all-reduce takes the faster of
the ring and the in-switch reduction: ``bytes ÷ (raw bandwidth × in_network_reduction)`` + its
fixed latency (``in_network_reduction_latency_us``). The same rules as a one-domain cluster
(:mod:`diptych.sim.cluster.collectives`).
"""

from __future__ import annotations

from ...arch.chip import Chip
from ...workloads.ops import Collective


def ring_bytes_and_steps(kind: str, nbytes: float, n: int) -> tuple[float, int]:
    """Bytes each chip sends and the number of sequential ring steps."""
    if n <= 1:
        return 0.0, 0
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n * nbytes, 2 * (n - 1)
    return (n - 1) / n * nbytes, n - 1


def collective_seconds(op: Collective, chip: Chip) -> float:
    """Time of ``op`` on a ring of ``op.group`` chips of type ``chip``."""
    sent, steps = ring_bytes_and_steps(op.kind, op.bytes, op.group)
    if steps == 0:
        return 0.0
    ic = chip.interconnect
    bw = ic.sustained_bytes_per_s_per_direction
    if bw <= 0:
        raise ValueError(f"chip {chip.name!r} has no chip-to-chip links (interconnect.links = "
                         f"{ic.links}); it cannot run a {op.group}-chip {op.kind} "
                         f"(use --tp 1 --dp 1)")
    ring = sent / bw + steps * ic.latency_us * 1e-6
    if op.kind == "all_reduce" and ic.in_network_reduction:
        nvls = (op.bytes / (ic.bytes_per_s_per_direction * ic.in_network_reduction)
                + ic.in_network_reduction_latency_us * 1e-6)
        return min(ring, nvls)
    return ring


def collective_energy_j(op: Collective, chip: Chip) -> float:
    """Link energy of ``op`` on one chip: bits sent × pJ per link bit."""
    sent, _ = ring_bytes_and_steps(op.kind, op.bytes, op.group)
    return sent * 8 * chip.energy.pj_per_link_bit * 1e-12

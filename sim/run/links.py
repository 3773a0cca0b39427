"""Collective communication time and energy from a chip's interconnect.

Ring algorithms over ``n`` chips, each moving a ``bytes``-sized buffer (the standard
bandwidth-optimal cost model, e.g. Patarasuk & Yuan 2009; NCCL's "bus bandwidth"):

* all-reduce (reduce-scatter + all-gather): ``2(n−1)/n · bytes`` sent per chip in
  ``2(n−1)`` steps;
* all-gather, reduce-scatter: ``(n−1)/n · bytes`` in ``n−1`` steps;
* all-to-all: ``(n−1)/n · bytes`` in one step on a switch (every pair at once: NCCL's grouped
  sends "progress independently", NCCL user guide, "Point-to-point communication"; NVSHMEM
  puts likewise), as the cluster's ``direct`` rule; ``n−1`` ring steps on a torus chip
  [the cluster's dimension-ordered torus rule is not applied here].

Time = bytes sent ÷ bandwidth + steps × per-hop latency. Bandwidth is the chip's total
per-direction link bandwidth (``links × GB/s per link per direction``) as a collective
library sustains it (× ``interconnect.bus_efficiency``): we assume the ring is striped over
all links (parallel rings, as NCCL does over NVLink); a single-link ring would be ``links``
times slower. The same rules as a one-domain cluster (:mod:`diptych.sim.cluster.collectives`):

* a chip with a collective library table (``[collectives]``: NCCL on h100) runs each ring of
  an all-reduce, reduce-scatter or all-gather by every protocol it offers (an all-to-all is
  NCCL point-to-point: the plain rule above), at the protocol's latency and share of the bandwidth
  (:mod:`diptych.sim.protocols`), and takes the fastest; its fixed latency (NCCL's
  ``baseLat``) holds the collective's launch, so such a collective pays no separate
  ``collective_launch_us`` (:func:`collective_launch_seconds`); an all-to-all on such a chip
  with a point-to-point table (``[collectives.p2p]``) pays its measured per-call latency
  (launch included) instead of one hop, at its share of the sustained bandwidth;
* on a chip whose links end in a switch that reduces in the network
  (``interconnect.in_network_reduction`` > 0: NVLink SHARP), an all-reduce may take the
  in-switch reduction: ``bytes ÷ (raw bandwidth × in_network_reduction)`` + its fixed
  latency (``in_network_reduction_latency_us``);
* a chip whose links form a torus (``interconnect.torus_dims`` > 0: TPU ICI) may run an
  all-reduce, reduce-scatter or all-gather dimension by dimension over the slice that holds
  the group (:func:`~diptych.sim.protocols.torus_slice`): ``Σ(k_d − 1)`` hops per pass in
  place of the flat ring's ``n − 1``, over one or two links per dimension.
"""

from __future__ import annotations

from ...arch.chip import Chip
from ...workloads.ops import Collective
from ..protocols import (chain_seconds, chip_algorithms, chip_p2p, chip_protocols,
                         nvls_bandwidth_seconds, ring_fraction, ring_seconds, slice_spans,
                         torus_bucket, torus_slice)


def ring_bytes_and_steps(kind: str, nbytes: float, n: int) -> tuple[float, int]:
    """Bytes each chip sends and the number of sequential ring steps."""
    frac, steps = ring_fraction(kind, n)
    return frac * nbytes, steps


def collective_options(op: Collective, chip: Chip) -> dict[str, float]:
    """Seconds of ``op`` by every (algorithm, protocol) the chip's links and library offer,
    keyed ``"ring"``, ``"direct"``, ``"ring/ll"``, ``"tree/simple"``, ``"nvls"``, ``"torus"``
    (empty for a group of one). :func:`collective_seconds` is their minimum."""
    sent, steps = ring_bytes_and_steps(op.kind, op.bytes, op.group)
    if steps == 0:
        return {}
    ic = chip.interconnect
    if op.torus_axes:
        return {"torus": _sub_slice_seconds(op, chip)}
    bw = ic.sustained_bytes_per_s_per_direction
    if bw <= 0:
        raise ValueError(f"chip {chip.name!r} has no chip-to-chip links (interconnect.links = "
                         f"{ic.links}); it cannot run a {op.group}-chip {op.kind} "
                         f"(use --tp 1 --dp 1)")
    out: dict[str, float] = {}
    # NCCL's ring-family collectives by protocol; all-to-all and sends are point-to-point
    # in NCCL and keep the plain rule, as in the cluster (:mod:`diptych.sim.cluster.collectives`)
    protos = chip_protocols(chip) if library_timed(op.kind, chip) else ()
    if protos:
        for p in protos:
            out[f"ring/{p.name}"] = ring_seconds(op.kind, op.bytes, op.group, bw, p)
            if op.kind == "all_reduce" and "tree" in chip_algorithms(chip):
                out[f"tree/{p.name}"] = chain_seconds(op.bytes, op.group, bw, p)
    elif op.kind == "all_to_all" and not ic.torus_dims:
        # NCCL's all-to-all is grouped point-to-point: its n−1 sends "progress independently"
        # (NCCL user guide, "Point-to-point communication"), as NVSHMEM puts do: each port
        # carrying its (n−1)/n share, as the cluster's direct rule; one hop of latency, or
        # with the library's point-to-point table its measured per-call cost and share of
        # the sustained bandwidth (:func:`p2p_timed`)
        p2p = chip_p2p(chip)
        out["direct"] = (p2p.base_s + p2p.bandwidth_seconds(sent / bw) if p2p
                         else sent / bw + ic.latency_us * 1e-6)
    else:
        out["ring"] = sent / bw + steps * ic.latency_us * 1e-6
    nvls_ok = not protos or "nvls" in chip_algorithms(chip)
    if op.kind == "all_reduce" and ic.in_network_reduction and nvls_ok:
        out["nvls"] = (nvls_bandwidth_seconds(op.bytes, ic.bytes_per_s_per_direction,
                                              ic.in_network_reduction,
                                              ic.in_network_reduction_ramp)
                       + ic.in_network_reduction_latency_us * 1e-6)
    if protos and "ring" not in chip_algorithms(chip):     # NCCL_ALGO without the ring
        rest = {k: v for k, v in out.items() if not k.startswith("ring")}
        out = rest or out                   # all-gathers, reduce-scatters: the ring still
    if ic.torus_dims and op.kind in ("all_reduce", "reduce_scatter", "all_gather"):
        spans = slice_spans(torus_slice(op.group, ic.torus_dims))
        link = ic.gb_per_s_per_link_per_direction * 1e9 * ic.bus_efficiency
        bw_s, lat_s, _ = torus_bucket(op.kind, op.bytes, spans, link, ic.latency_us * 1e-6)
        out["torus"] = bw_s + lat_s
    return out


def _sub_slice_seconds(op: Collective, chip: Chip) -> float:
    """A collective over the sides ``op.torus_axes`` of the torus slice ``op.torus_shape``
    (the 2-D layout's X or YZ groups): the per-dimension bucket rule over those sides alone
    (their chips are joined only by those dimensions' links; no flat ring striped over all
    of them), each side a ring where the whole slice wraps around
    (:func:`~diptych.sim.protocols.slice_spans`)."""
    ic = chip.interconnect
    if not ic.torus_dims or len(op.torus_shape) > ic.torus_dims:
        raise ValueError(f"{op.name}: a collective over sides {op.torus_axes} of a "
                         f"{'x'.join(map(str, op.torus_shape))} torus slice needs a chip whose "
                         f"links form a torus of >= {len(op.torus_shape)} dimensions "
                         f"(interconnect.torus_dims = {ic.torus_dims})")
    wrap = slice_spans(op.torus_shape)
    wraps = bool(wrap) and wrap[0][1]
    spans = tuple((op.torus_shape[i], wraps) for i in op.torus_axes if op.torus_shape[i] > 1)
    link = ic.gb_per_s_per_link_per_direction * 1e9 * ic.bus_efficiency
    bw_s, lat_s, _ = torus_bucket(op.kind, op.bytes, spans, link, ic.latency_us * 1e-6)
    return bw_s + lat_s


#: The collectives a collective library times by its protocols (NCCL's ring-family kernels).
LIBRARY_KINDS = ("all_reduce", "reduce_scatter", "all_gather")


def library_timed(kind: str, chip: Chip) -> bool:
    """Whether a ``kind`` collective on ``chip``'s links is timed by its collective library's
    protocols (a ``[collectives]`` table, links not a torus), whose fixed latency is NCCL's
    ``baseLat``: the whole fixed cost of one collective call as NCCL's tuner predicts it
    (its kernel's launch and set-up included; the tuner's terms are corrected on measured
    runs, sjeaugey, NVIDIA/nccl#535)."""
    ic = chip.interconnect
    return (kind in LIBRARY_KINDS and bool(chip_protocols(chip))
            and not (ic is not None and ic.torus_dims))


def p2p_timed(kind: str, chip: Chip) -> bool:
    """Whether a ``kind`` collective on ``chip``'s links is an all-to-all timed by its
    library's point-to-point table (``[collectives.p2p]``, links not a torus), whose
    ``base_latency_us`` is a whole measured call (nccl-tests' ``alltoall_perf``, launch
    included)."""
    ic = chip.interconnect
    return (kind == "all_to_all" and chip_p2p(chip) is not None
            and not (ic is not None and ic.torus_dims))


def collective_launch_seconds(kind: str, chip: Chip) -> float:
    """The fixed issue cost charged beside a ``kind`` collective's time on the links: the
    chip's ``[overheads] collective_launch_us``, except for a collective its library times
    (:func:`library_timed`, :func:`p2p_timed`), whose fixed latency already holds it
    (charging both would count one kernel launch twice)."""
    if library_timed(kind, chip) or p2p_timed(kind, chip):
        return 0.0
    return chip.fixed_costs.collective_launch_us * 1e-6


def collective_seconds(op: Collective, chip: Chip) -> float:
    """Time of ``op`` over ``op.group`` chips of type ``chip``: the fastest of
    :func:`collective_options`."""
    return min(collective_options(op, chip).values(), default=0.0)


def collective_energy_j(op: Collective, chip: Chip) -> float:
    """Link energy of ``op`` on one chip: bits sent × pJ per link bit."""
    sent, _ = ring_bytes_and_steps(op.kind, op.bytes, op.group)
    return sent * 8 * chip.energy.pj_per_link_bit * 1e-12

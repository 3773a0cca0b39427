"""Communication beside compute: what a collective library's kernels take from the compute
kernels that run beside them (a chip's ``[comm_kernels]`` table,
:class:`~diptych.arch.chip.CommKernels`; docs/cluster.md, "Communication beside compute").

A collective that overlaps compute is not free for the compute beside it, on two counts:

* **cores**: NCCL launches one CTA per channel and its CTAs do not share an SM with a compute
  kernel (NVIDIA/nccl#689), so for as long as the collective runs it holds
  :func:`held_cores` of the chip's cores, and the compute beside it runs on the others; a
  GEMM launched for the whole chip deals its tiles to the cores left in
  ``ceil(tiles / cores left)`` waves (:func:`~diptych.sim.run.tp_overlap.requantised_s`), a
  kernel without a tile grid of ours (attention) at the cores' share;
* **DRAM bandwidth**: the collective's kernel stages what it sends and receives in DRAM and
  reads or writes the user buffers (NVIDIA/nccl#1428: 2-3x the link bytes), a share
  :func:`dram_share` of the chip's bandwidth while it runs, which the memory-bound kernels
  beside it lose (NVIDIA/nccl#1433); compute-bound kernels keep theirs.

:func:`slowdown` is how much longer a list of compute ops (:class:`OpLoad`, a layer's as the
engine timed them) takes with a collective beside it for all of their time; :func:`beside_s`
is a compute of ``compute_s`` beside a collective of ``comm_s`` (the pair's time, with
:func:`~diptych.sim.run.tp_overlap.bulk_held_s`: the compute advances at ``1 / factor`` while
the collective runs); :func:`two_streams` is a compute stream of segments, each releasing a
collective to a second stream that slows the first while it runs (the data-parallel gradient
buckets). With a factor of 1 each is the ideal overlap it replaces (``max(comm, compute)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..protocols import sent_bytes  # noqa: F401  (re-exported: the bytes its callers pass)
from .tp_overlap import bulk_held_s, requantised_s

#: the peers a pipeline exchange sends to and receives from at once (Megatron-Core's batched
#: send and receive: the next stage and the previous one)
PIPELINE_PEERS = 2
#: the largest DRAM share a collective is charged [assumption: a kernel that would need more
#: is itself memory-bound; the cap keeps the memory-bound ops' time finite]
MAX_DRAM_SHARE = 0.9


@dataclass(frozen=True)
class OpLoad:
    """One compute op as :func:`slowdown` sees it: its ``seconds`` alone (all repeats), the
    engine's ``mapping`` of a GEMM (:func:`~diptych.sim.run.tp_overlap.requantised_s`; None:
    not a GEMM, the cores' share), ``memory``: DRAM-bound (it loses the collective's DRAM
    share, not cores), ``fixed``: bound by neither (launch or latency: unchanged),
    ``attention``: one of the layer's attention ops (what ring attention's exchange runs
    beside)."""

    seconds: float
    mapping: dict | None = None
    memory: bool = False
    attention: bool = False
    fixed: bool = False


class Loads:
    """A pass's compute ops (:class:`OpLoad`) summarised for :func:`group_slowdown`: their
    seconds alone, the memory-bound and the unaffected part, and (memoised per cores held)
    the compute-bound part's seconds on the cores left."""

    __slots__ = ("ops", "alone_s", "memory_s", "fixed_s", "_held", "_attention")

    def __init__(self, ops: Iterable[OpLoad] = ()):
        self.ops = tuple(ops)
        self.alone_s = sum(x.seconds for x in self.ops)
        self.memory_s = sum(x.seconds for x in self.ops if x.memory)
        self.fixed_s = sum(x.seconds for x in self.ops if x.fixed and not x.memory)
        self._held: dict[tuple[int, int], float] = {}
        self._attention: Loads | None = None

    def __len__(self) -> int:
        return len(self.ops)

    def held_s(self, held: int, total_cores: int, share: float) -> float:
        """Seconds of these ops with ``held`` of ``total_cores`` cores and ``share`` of the
        DRAM bandwidth taken for all of their time (:func:`slowdown`'s terms)."""
        key = (held, total_cores)
        compute = self._held.get(key)
        if compute is None:
            compute = self._held[key] = sum(
                requantised_s(x.seconds, x.mapping, held, total_cores)
                for x in self.ops if not (x.memory or x.fixed))
        return compute + self.fixed_s + self.memory_s / (1.0 - share)

    def attention(self) -> "Loads":
        """The attention ops alone (memoised)."""
        if self._attention is None:
            self._attention = Loads(x for x in self.ops if x.attention)
        return self._attention


def held_cores(table, kind: str, crosses_network: bool, peers: int = PIPELINE_PEERS) -> int:
    """Cores a collective of ``kind`` holds while it runs (``table``: the chip's
    :class:`~diptych.arch.chip.CommKernels`): a send (point-to-point) its channels per peer ×
    ``peers``; any other its ring's channels, on the network when its group
    ``crosses_network``, else inside the scale-up domain."""
    if kind == "send":
        return table.p2p_cores_per_peer * peers
    return table.ring_network_cores if crosses_network else table.ring_nvlink_cores


def dram_share(table, link_bytes: float, comm_s: float, dram_bytes_per_s: float) -> float:
    """Share of the chip's DRAM bandwidth a collective's kernel takes while it runs: the
    ``table``'s DRAM bytes per link byte × the ``link_bytes`` it sends, over ``comm_s`` at
    ``dram_bytes_per_s`` (at most :data:`MAX_DRAM_SHARE`)."""
    if comm_s <= 0.0 or link_bytes <= 0.0 or dram_bytes_per_s <= 0.0:
        return 0.0
    return min(MAX_DRAM_SHARE,
               table.hbm_bytes_per_link_byte * link_bytes / (comm_s * dram_bytes_per_s))


def slowdown(loads: Iterable[OpLoad], held: int, total_cores: int, share: float) -> float:
    """Seconds ``loads`` take with a collective beside them for all of their time, over their
    seconds alone (1 for none): a compute-bound op on the ``total_cores − held`` cores left
    (a GEMM re-quantised by its mapping, another at the cores' share), a memory-bound op at
    ``1 − share`` of the DRAM bandwidth, a launch- or latency-bound op unchanged."""
    return group_slowdown([Loads(loads)], held, total_cores, share)


def group_slowdown(groups: Iterable[Loads], held: int, total_cores: int,
                   share: float) -> float:
    """:func:`slowdown` of the ops of several :class:`Loads` together."""
    alone = slowed = 0.0
    for g in groups:
        if g.alone_s > 0.0:
            alone += g.alone_s
            slowed += g.held_s(held, total_cores, share)
    return slowed / alone if alone > 0.0 else 1.0


def beside_s(compute_s: float, comm_s: float, factor: float) -> float:
    """Seconds of a compute of ``compute_s`` beside a collective of ``comm_s`` started with
    it, the compute taking ``factor`` times as long while the collective runs: ``max(comm,
    compute)`` at a factor of 1."""
    if compute_s <= 0.0:
        return max(comm_s, 0.0)
    return bulk_held_s(compute_s, compute_s * factor, comm_s)


def two_streams(segments: Sequence[tuple[float, float, float]]) -> float:
    """End of two streams, from the start of the first segment: compute segments
    ``(compute_s, comm_s, factor)`` run one after another on the compute stream, each
    releasing its collective of ``comm_s`` to the communication stream when it ends (run in
    order, one at a time); a segment's compute takes ``factor`` times as long while a
    collective runs. Exact: the collectives a segment runs beside were all released before
    it started."""
    busy: list[tuple[float, float]] = []          # the collectives' [start, end), in order
    t = comm_end = 0.0
    first = 0                                     # the first interval that may still matter
    for compute_s, comm_s, factor in segments:
        work = compute_s
        while work > 0.0:
            while first < len(busy) and busy[first][1] <= t:
                first += 1
            if first == len(busy):
                t += work
                break
            start, end = busy[first]
            if t < start:                           # free until the next collective
                step = min(work, start - t)
                t, work = t + step, work - step
                continue
            done = (end - t) / factor               # work done while this one runs
            if done >= work:
                t, work = t + work * factor, 0.0
            else:
                t, work = end, work - done
        if comm_s > 0.0:
            comm_start = max(t, comm_end)
            comm_end = comm_start + comm_s
            busy.append((comm_start, comm_end))
    return max(t, comm_end)


def collectives_factor(chip, colls: Iterable[tuple[str, float, float, bool]],
                       groups: Sequence[Loads]) -> float:
    """:func:`group_slowdown` of the compute ``groups`` beside the collectives ``colls``
    (each ``(kind, link bytes, seconds, crosses the network)``) run one after another, on
    ``chip`` (its ``[comm_kernels]`` table; 1 without one, or without collectives): the most
    cores any of them holds, their DRAM share over their summed time."""
    table, colls = chip.comm_kernels, list(colls)
    if table is None or not colls or not groups:
        return 1.0
    held = max(held_cores(table, kind, net) for kind, _, _, net in colls)
    share = dram_share(table, sum(b for _, b, _, _ in colls), sum(s for _, _, s, _ in colls),
                       chip.dram.peak_bytes_per_s if chip.dram is not None else 0.0)
    return group_slowdown(groups, held, chip.tensor_cores, share)


def tax_s(compute_s: float, comm_s: float, factor: float) -> float:
    """Seconds a collective of ``comm_s`` beside a compute of ``compute_s`` adds beyond the
    ideal overlap ``max(compute, comm)`` (:func:`beside_s`)."""
    return beside_s(compute_s, comm_s, factor) - max(compute_s, comm_s)

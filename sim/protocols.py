"""Collective algorithms by protocol and message size, and the per-dimension decomposition of
a torus: the terms shared by ``diptych run`` (:mod:`diptych.sim.run.links`) and the cluster
step (:mod:`diptych.sim.cluster.collectives`).

**Protocols** (a chip's ``[collectives]`` table, :class:`~diptych.arch.chip.CollectiveLibrary`;
NCCL's cost model, src/graph/tuning.cc): a collective of ``steps`` sequential steps (``h``
over the scale-up links, ``s`` over the network) by protocol ``p`` takes ::

    t = base(p) + h·hop(p) + s·net_hop(p) + busiest link bytes / min(B·fraction(p), cap(p))

where ``B`` is the bandwidth the Simple protocol sustains on that link (the links'
``bus_efficiency`` times their raw bandwidth). LL pays the least latency and reaches half the
bandwidth, LL128 more latency and 0.92, Simple the most latency and all of it, so a small
all-reduce takes LL and never reaches the measured bus bandwidth, a large one Simple (or the
switch's in-network reduction) and approaches it.

**Torus decomposition** (:func:`torus_bucket`): reduce-scatter along x, then y, ...;
all-gather in reverse; all-reduce is both. The buffer is split into one part per dimension,
the parts rotating their dimension order so every dimension's links are busy at once; a full
dimension with wraparound runs two opposite rings (2× a link), a line one. Latency: one hop
per step, ``Σ (k_d − 1)`` steps per pass instead of the ``n − 1`` of a flat ring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Protocol:
    """One protocol, resolved in seconds and bytes/s (``cap_bytes_per_s`` 0: none)."""

    name: str
    base_s: float
    hop_s: float
    net_hop_s: float
    fraction: float
    cap_bytes_per_s: float = 0.0
    tree_fraction: float = 0.0        # a tree all-reduce's fraction (0: ``fraction``)
    tree_net_hop_s: float = 0.0       # a tree's latency per network step (0: ``net_hop_s``)

    def bandwidth(self, simple_bytes_per_s: float, tree: bool = False) -> float:
        """The bus bandwidth this protocol sustains where Simple sustains ``simple`` (by a
        tree all-reduce with ``tree``)."""
        f = self.tree_fraction if tree and self.tree_fraction else self.fraction
        bw = simple_bytes_per_s * f
        return min(bw, self.cap_bytes_per_s) if self.cap_bytes_per_s else bw


def chip_protocols(chip) -> tuple[Protocol, ...]:
    """The protocols of ``chip``'s collective library (empty: the chip has none)."""
    lib = getattr(chip, "collectives", None)
    return () if lib is None else _protocols(lib)


@lru_cache(maxsize=None)
def _protocols(lib) -> tuple[Protocol, ...]:
    """A library table's protocols, resolved once per table (every collective asks)."""
    return tuple(Protocol(name, p.base_latency_us * 1e-6, p.hop_latency_us * 1e-6,
                          p.net_hop_latency_us * 1e-6, p.bus_fraction,
                          p.max_bus_gb_per_s * 1e9, p.tree_bus_fraction,
                          p.tree_net_hop_latency_us * 1e-6)
                 for name, p in lib.table())


@dataclass(frozen=True)
class P2P:
    """A library's point-to-point path (an all-to-all: grouped sends), resolved: the whole
    fixed cost of one call in seconds and the fractions of the sustained bandwidth it reaches
    on the scale-up links and on the NICs (:class:`~diptych.arch.chip.PointToPoint`)."""

    base_s: float
    up_fraction: float
    out_fraction: float

    def bandwidth_seconds(self, up_s: float, out_s: float = 0.0) -> float:
        """The bandwidth part of one call whose bytes take ``up_s`` seconds on the scale-up
        links and ``out_s`` on the NICs at their sustained rates (the two run at once): each
        at the library's share of it. The call's fixed cost, :attr:`base_s`, comes on top."""
        return max(up_s / self.up_fraction, out_s / self.out_fraction)


def chip_p2p(chip) -> P2P | None:
    """The point-to-point table of ``chip``'s collective library (``[collectives.p2p]``);
    None: the chip has none, its all-to-alls keep the links' plain rule."""
    lib = getattr(chip, "collectives", None)
    t = None if lib is None else lib.p2p
    if t is None:
        return None
    return P2P(t.base_latency_us * 1e-6, t.scale_up_bus_fraction, t.scale_out_bus_fraction)


def chip_algorithms(chip) -> tuple[str, ...]:
    """The algorithms ``chip``'s library considers (empty: no library table)."""
    lib = getattr(chip, "collectives", None)
    return () if lib is None else lib.algorithms


def ring_fraction(kind: str, n: int) -> tuple[float, int]:
    """(fraction of the buffer each rank sends, sequential steps) of a ring collective."""
    if n <= 1:
        return 0.0, 0
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n, 2 * (n - 1)
    return (n - 1) / n, n - 1


def sent_bytes(kind: str, nbytes: float, n: int) -> float:
    """Bytes one rank's kernel sends in a ``kind`` collective on a ``nbytes`` buffer (the
    :class:`~diptych.workloads.ops.Collective` convention) over ``n`` ranks, as a ring moves
    them (:func:`ring_fraction`); a ``"send"`` sends all of it."""
    if kind == "send":
        return float(nbytes)
    return ring_fraction(kind, n)[0] * nbytes


MIB = 2**20


def nvls_bandwidth_seconds(nbytes: float, raw: float, fraction: float, ramp) -> float:
    """Seconds the bytes of an all-reduce through the switch's in-network reduction take
    (its fixed latency apart): ``nbytes`` at ``fraction`` of ``raw`` (the links' raw
    bandwidth, bytes/s), except the parts of the message inside ``ramp``'s segments ``(from
    MiB, to MiB, fraction)``, which move at their own fraction of ``raw``:
    ``Interconnect.in_network_reduction`` and ``in_network_reduction_ramp``."""
    rate = raw * fraction
    if not ramp:
        return nbytes / rate
    t, rest = 0.0, nbytes
    for lo, hi, frac in ramp:
        part = max(0.0, min(nbytes, hi * MIB) - lo * MIB)
        t += part / (raw * frac)
        rest -= part
    return t + rest / rate


def ring_seconds(kind: str, nbytes: float, n: int, simple_bytes_per_s: float,
                 proto: Protocol) -> float:
    """A ring of ``n`` ranks in one domain by ``proto``: ``base + steps·hop +
    ring fraction · nbytes / protocol bandwidth``."""
    frac, steps = ring_fraction(kind, n)
    if steps == 0:
        return 0.0
    return (proto.base_s + steps * proto.hop_s
            + frac * nbytes / proto.bandwidth(simple_bytes_per_s))


def chain_seconds(nbytes: float, n: int, simple_bytes_per_s: float, proto: Protocol) -> float:
    """NCCL's tree all-reduce inside one domain, a chain of ``n`` ranks (reduce up, broadcast
    down): ``base + 2(n−1)·hop + 2·nbytes / tree bandwidth`` (each rank's port carries
    the buffer up and the result down)."""
    if n <= 1:
        return 0.0
    return (proto.base_s + 2 * (n - 1) * proto.hop_s
            + 2.0 * nbytes / proto.bandwidth(simple_bytes_per_s, tree=True))


def torus_bucket(kind: str, nbytes: float, spans, link_bytes_per_s: float,
                 hop_s: float) -> tuple[float, float, float]:
    """(bandwidth seconds, latency seconds, busiest link bytes) of a reduce-scatter /
    all-gather / all-reduce over torus ``spans`` ((extent, is_ring) per dimension), one
    buffer part per dimension (module docstring)."""
    dims = [(k, ring) for k, ring in spans if k > 1]
    if not dims:
        return 0.0, 0.0, 0.0
    parts = len(dims)
    per_dim_bytes = [0.0] * parts
    total = 0.0
    for t in range(parts):
        phase = 0.0
        for j in range(parts):
            data = nbytes / parts
            for s in range(t):                      # the dims this part has already done
                data /= dims[(j + s) % parts][0]
            d = (j + t) % parts
            k, ring = dims[d]
            lanes = 2 if ring else 1
            b = (k - 1) / k * data / lanes
            per_dim_bytes[d] += b
            phase = max(phase, b / link_bytes_per_s)
        total += phase
    lat = sum(k - 1 for k, _ in dims) * hop_s
    factor = 2 if kind == "all_reduce" else 1
    return factor * total, factor * lat, factor * max(per_dim_bytes)


def torus_slice(n: int, dims: int) -> tuple[int, ...]:
    """The slice of a ``dims``-dimensional torus that holds ``n`` chips: the factorisation of
    ``n`` into ``dims`` factors with the smallest largest factor (then the smallest sum),
    ascending (x the shortest). 48 chips on a 3-D torus: (3, 4, 4)."""
    if n < 1 or dims < 1:
        raise ValueError(f"a torus slice needs n >= 1 and dims >= 1, not {n!r}, {dims!r}")

    def splits(m: int, d: int, lo: int):
        if d == 1:
            if m >= lo:
                yield (m,)
            return
        a = lo
        while a ** d <= m:
            if m % a == 0:
                for rest in splits(m // a, d - 1, a):
                    yield (a, *rest)
            a += 1

    best = min(splits(n, dims, 1), key=lambda t: (max(t), sum(t)))
    return best


def slice_spans(shape: tuple[int, ...]) -> tuple[tuple[int, bool], ...]:
    """(extent, wraparound) per dimension of a torus slice: TPU v4 closes a dimension into a
    ring only across whole 4×4×4 cubes, through its optical switches (Jouppi et al., ISCA
    2023, Section 2), so a slice wraps around where every dimension is a multiple of 4, and
    is a mesh of lines otherwise [assumption: the same rule for every torus chip]."""
    whole = all(k % 4 == 0 for k in shape)
    return tuple((k, whole) for k in shape if k > 1)


def log2_steps(n: int) -> int:
    """``⌈log2 n⌉`` (0 for one)."""
    return math.ceil(math.log2(n)) if n > 1 else 0

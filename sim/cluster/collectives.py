"""Collective and point-to-point communication over a cluster topology.

A collective moves a ``nbytes`` buffer per rank (the :class:`~diptych.workloads.ops.Collective`
convention: all-reduce and reduce-scatter reduce a ``nbytes`` input, all-gather builds a
``nbytes`` output from ``nbytes/n`` shards, all-to-all sends ``nbytes/n`` to every member)
over a group whose placement is a :class:`~diptych.sim.cluster.topology.GroupShape`. Each
algorithm's time is a bandwidth term (the busiest link's bytes ÷ its bandwidth, as a collective
library sustains it: the links' ``bus_efficiency``) plus a latency term (sequential steps × the
per-step latency of the slowest link class used):

* ``ring`` (one domain or a flat ring over several): the ring fraction ``2(n−1)/n`` (all-reduce)
  or ``(n−1)/n`` of the buffer through each chip's scale-up port, and across domains through
  the NICs, with ``n_local`` parallel rings (one per rail, as NCCL runs one ring per NIC) so a
  domain's ``n_local`` NICs share the inter-domain part; ``2(n−1)`` or ``n−1`` steps.
  On a torus: bucket algorithms dimension by dimension (reduce-scatter along x, then y, ...;
  all-gather in reverse; all-reduce is both), the buffer split into one part per dimension,
  the parts rotating their dimension order so that every dimension's links are busy at
  once; a full dimension with wraparound runs two opposite rings (2× a link), a partial one
  (a line) one;
* ``nvls`` (all-reduce inside one switch domain whose switch reduces in the network, NVLink
  SHARP): each rank's buffer up to the switch once and the reduced buffer down once, at the
  chip's ``in_network_reduction`` fraction of its port bandwidth (the measured algorithm
  bandwidth: NCCL's NVLS on 8 H100s), at its protocol's fixed latency (the chip's
  ``in_network_reduction_latency_us``): small buffers keep the ring, as NCCL's tuner does;
* ``tree`` (all-reduce): NCCL's double binary tree between domains (chains inside),
  ``2·nbytes`` per domain spread over its NICs, ``2⌈log2 n_dom⌉`` network steps; one domain
  on a switch: a tree of chips (``2⌈log2 n⌉`` steps; latency-lean, it stands for the
  low-latency kernels small all-reduces get: NCCL runs a chain there, ``2(n−1)`` steps, but
  its 2.27 symmetric-memory kernels and inference engines' custom all-reduces take fewer);
* ``hierarchical`` (several domains, several members per domain): reduce-scatter inside the
  domain, the collective on ``nbytes / n_local`` between domains (one member per domain per
  rail, ring or tree, whichever is faster), all-gather inside the domain;
* ``direct`` (all-to-all): every pair at once; on a switch each chip's port carries its
  ``(n_local−1)/n`` share, across domains each NIC ``(n − n_local)/n``; on a torus with
  dimension-ordered routing a dimension's busiest link carries ``nbytes · Σ_j min(j, k−j) /
  (2k)`` (ring of ``k``) or ``max_i (i+1)(k−1−i) · nbytes / k`` (line), hops × latency;
* ``p2p`` (send): one message, scale-up port (switch), one link (torus neighbour) or the NIC.

**A collective library** (the chip's ``[collectives]`` table, on a switch fabric: h100 runs
NCCL): all-reduce, reduce-scatter and all-gather are timed by every (algorithm, protocol) pair
the library's tuner considers (:func:`_library`; :mod:`diptych.sim.protocols`): each protocol's
fixed latency and per-step latencies (scale-up hops and network hops) replace the per-hop
latency above, and its bandwidth fraction (LL ½, LL128 0.92, Simple 1, LL capped) multiplies
what Simple sustains on each link class; inside one domain NCCL's tree is a chain (``2(n−1)``
steps, ``2·bytes`` per port) and NVLS runs Simple only; ``hierarchical`` only where the
library lists it. Sends keep the plain rule; an all-to-all (NCCL's grouped point-to-point)
keeps the direct rule's bytes, but where the library has a point-to-point table
(``[collectives.p2p]``, measured by nccl-tests' ``alltoall_perf``) it pays that table's
per-call latency (plus one network step when it crosses domains: the cluster's scale-out
latency) in place of the hop latencies, at its fractions of each link class's sustained
bandwidth. A torus never takes the library (TPU ICI collectives are XLA's, per dimension,
above).

:func:`collective` evaluates every algorithm that applies and keeps the fastest, as NCCL's
tuner does from its own cost model, so small buffers pick latency-lean protocols and trees
and large ones bandwidth-optimal rings (or NVLS). :func:`lower_bound_seconds` is the
bisection bound every algorithm respects (tests: time ≥ bytes that must cross a cut ÷ the
cut's bandwidth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..protocols import Protocol, chain_seconds, ring_fraction, ring_seconds, torus_bucket
from .topology import GroupShape, Network, cuts, nic_bytes_per_s

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send")
ALGORITHMS = ("ring", "tree", "nvls", "hierarchical", "direct", "p2p")


@dataclass(frozen=True)
class CommCost:
    """Time of one collective and the bytes it puts on each link class, per direction:
    ``scale_up`` on the busiest chip port (switch) or link (torus), ``scale_out`` on the
    busiest NIC."""

    kind: str
    algorithm: str
    seconds: float
    nbytes: float
    group: int
    link_bytes: dict[str, float] = field(default_factory=dict)
    protocol: str = ""            # the library protocol (ll, ll128, simple); "" without one

    def to_dict(self) -> dict:
        return {"kind": self.kind, "algorithm": self.algorithm, "protocol": self.protocol,
                "seconds": self.seconds, "bytes": self.nbytes, "group": self.group,
                "link_bytes": dict(self.link_bytes)}


__all__ = ["ALGORITHMS", "KINDS", "CommCost", "collective", "lower_bound_seconds",
           "ring_fraction", "torus_all_to_all_link_bytes"]


# ---- inside one domain ------------------------------------------------------------------------

def _torus_bucket(kind: str, nbytes: float, spans, net: Network) -> tuple[float, float, float]:
    """(bandwidth seconds, latency seconds, busiest link bytes) of a reduce-scatter /
    all-gather / all-reduce over torus ``spans``, one buffer part per dimension
    (:func:`~diptych.sim.protocols.torus_bucket`)."""
    return torus_bucket(kind, nbytes, spans, net.link_bytes_per_s, net.up_latency_s)


def torus_all_to_all_link_bytes(nbytes: float, k: int, ring: bool) -> float:
    """Bytes on the busiest link (one direction) of one dimension of ``k`` chips when every
    chip sends ``nbytes`` spread evenly over the ``k`` positions (dimension-ordered routing;
    ties on a ring split evenly)."""
    if k <= 1:
        return 0.0
    if ring:
        return nbytes * sum(min(j, k - j) for j in range(1, k)) / (2 * k)
    return max((i + 1) * (k - 1 - i) for i in range(k - 1)) * nbytes / k


def _intra(kind: str, nbytes: float, shape: GroupShape, net: Network
           ) -> tuple[float, float, float]:
    """(bandwidth s, latency s, busiest scale-up bytes) of ``kind`` among the ``n_local``
    members of one domain (ring / bucket algorithms; all-to-all direct)."""
    k = shape.n_local
    if k <= 1:
        return 0.0, 0.0, 0.0
    if net.torus:
        if kind == "all_to_all":
            loads = [torus_all_to_all_link_bytes(nbytes, kk, ring) for kk, ring in shape.spans]
            hops = sum((kk // 2 if ring else kk - 1) for kk, ring in shape.spans)
            worst = max(loads, default=0.0)
            return worst / net.link_bytes_per_s, hops * net.up_latency_s, worst
        return _torus_bucket(kind, nbytes, shape.spans, net)
    if kind == "all_to_all":
        b = (k - 1) / k * nbytes
        return b / net.port_bytes_per_s, net.up_latency_s, b
    frac, steps = ring_fraction(kind, k)
    b = frac * nbytes
    return b / net.port_bytes_per_s, steps * net.up_latency_s, b


# ---- algorithms ---------------------------------------------------------------------------

def _cost(kind, algo, bw_s, lat_s, nbytes, shape, up=0.0, out=0.0) -> CommCost:
    return CommCost(kind, algo, bw_s + lat_s, nbytes, shape.n,
                    {"scale_up": up, "scale_out": out})


def _library(kind: str, nbytes: float, shape: GroupShape, net: Network) -> list[CommCost]:
    """Every (algorithm, protocol) the chip's collective library considers for a ring-family
    collective on a switch fabric (:mod:`diptych.sim.protocols`): rings striped over the
    ports (and, across domains, one per rail over the NICs), NCCL's tree (a chain inside a
    domain, a binary tree between domains), and NVLS inside one domain (Simple only, its own
    fixed latency). Each protocol's latency terms replace the links' per-hop latency; its
    bandwidth fraction multiplies what the Simple protocol sustains on each link class."""
    n, nl, nd = shape.n, shape.n_local, shape.n_dom
    algos = net.algorithms
    port = net.port_bytes_per_s
    out: list[CommCost] = []
    frac, steps = ring_fraction(kind, n)
    if nd == 1:
        for p in net.protocols:
            out.append(CommCost(kind, "ring", ring_seconds(kind, nbytes, n, port, p), nbytes, n,
                                {"scale_up": frac * nbytes, "scale_out": 0.0}, p.name))
            if kind == "all_reduce" and "tree" in algos:
                out.append(CommCost(kind, "tree", chain_seconds(nbytes, n, port, p), nbytes, n,
                                    {"scale_up": 2.0 * nbytes, "scale_out": 0.0}, p.name))
        if kind == "all_reduce" and "nvls" in algos and net.nvls_bytes_per_s:
            out.append(CommCost(kind, "nvls", net.nvls_seconds(nbytes) + net.nvls_latency_s,
                                nbytes, n, {"scale_up": nbytes, "scale_out": 0.0}, "simple"))
        return out
    nic = nic_bytes_per_s(net, shape)
    inter = 2 * (nd - 1) if kind == "all_reduce" else nd - 1

    def net_hop(p: Protocol) -> float:
        return p.net_hop_s or net.out_latency_s

    up = frac * nbytes if nl > 1 else 0.0
    o = frac * nbytes / nl
    for p in net.protocols:
        lat = p.base_s + (steps - inter) * p.hop_s + inter * net_hop(p)
        bw_s = max(up / p.bandwidth(port), o / (nic * p.fraction))
        out.append(CommCost(kind, "ring", bw_s + lat, nbytes, n, {"scale_up": up, "scale_out": o},
                            p.name))
        if kind == "all_reduce" and "tree" in algos:
            b_out = 2.0 * nbytes / nl
            b_up = 2.0 * nbytes if nl > 1 else 0.0
            lat = (p.base_s + 2 * (nl - 1) * p.hop_s
                   + 2 * math.ceil(math.log2(nd)) * (p.tree_net_hop_s or net_hop(p)))
            tf = p.tree_fraction or p.fraction
            bw_s = max(b_up / p.bandwidth(port, tree=True), b_out / (nic * tf))
            out.append(CommCost(kind, "tree", bw_s + lat, nbytes, n,
                                {"scale_up": b_up, "scale_out": b_out}, p.name))
    return out


def _candidates(kind: str, nbytes: float, shape: GroupShape, net: Network) -> list[CommCost]:
    nl, nd = shape.n_local, shape.n_dom
    if (net.protocols and not net.torus
            and kind in ("all_reduce", "reduce_scatter", "all_gather")):
        out = _library(kind, nbytes, shape, net)
        if nd > 1 and nl > 1 and "hierarchical" in net.algorithms:
            out += [c for c in _plain(kind, nbytes, shape, net) if c.algorithm == "hierarchical"]
        if "ring" not in net.algorithms:          # NCCL_ALGO without the ring
            out = [c for c in out if c.algorithm != "ring"] or out
        return out
    return _plain(kind, nbytes, shape, net)


def _plain(kind: str, nbytes: float, shape: GroupShape, net: Network) -> list[CommCost]:
    """The candidates without a collective library: one protocol at the links' sustained
    bandwidth and per-hop latency."""
    n, nl, nd = shape.n, shape.n_local, shape.n_dom
    nic = nic_bytes_per_s(net, shape) if nd > 1 else 0.0
    out: list[CommCost] = []
    if kind == "send":
        if nd > 1:
            return [_cost(kind, "p2p", nbytes / nic, net.out_latency_s, nbytes, shape,
                          out=nbytes)]
        bw = net.link_bytes_per_s if net.torus else net.port_bytes_per_s
        return [_cost(kind, "p2p", nbytes / bw, net.up_latency_s, nbytes, shape, up=nbytes)]
    p2p = net.p2p if kind == "all_to_all" else None
    if nd == 1:
        bw_s, lat_s, up = _intra(kind, nbytes, shape, net)
        if p2p:                   # the library's measured call: its fixed cost, its share
            bw_s, lat_s = p2p.bandwidth_seconds(bw_s), p2p.base_s
        out.append(_cost(kind, "direct" if kind == "all_to_all" else "ring", bw_s, lat_s,
                         nbytes, shape, up=up))
        if kind == "all_reduce" and not net.torus:
            b = 2.0 * nbytes
            out.append(_cost(kind, "tree", b / net.port_bytes_per_s,
                             2 * math.ceil(math.log2(n)) * net.up_latency_s, nbytes, shape,
                             up=b))
            if net.nvls_bytes_per_s:          # up to the switch once, the sum down once
                out.append(_cost(kind, "nvls", net.nvls_seconds(nbytes),
                                 net.nvls_latency_s, nbytes, shape, up=nbytes))
        return out
    if kind == "all_to_all":
        bw_i, lat_i, up = _intra(kind, nbytes * nl / n, shape, net)
        inter = (n - nl) / n * nbytes
        if p2p:                   # its fixed cost and one network step
            out.append(_cost(kind, "direct", p2p.bandwidth_seconds(bw_i, inter / nic),
                             p2p.base_s + net.out_latency_s, nbytes, shape, up=up, out=inter))
            return out
        out.append(_cost(kind, "direct", max(bw_i, inter / nic),
                         max(lat_i, net.out_latency_s), nbytes, shape, up=up, out=inter))
        return out
    # several domains: flat ring (switch domains), tree, hierarchical
    frac, steps = ring_fraction(kind, n)
    if not net.torus or nl == 1:
        up = frac * nbytes if nl > 1 else 0.0
        o = frac * nbytes / nl
        out.append(_cost(kind, "ring", max(up / net.port_bytes_per_s, o / nic),
                         steps * max(net.up_latency_s, net.out_latency_s), nbytes, shape,
                         up=up, out=o))
    if kind == "all_reduce":
        b_out = 2.0 * nbytes / nl
        bw_i, lat_i, up = ((2.0 * nbytes / net.port_bytes_per_s,
                            2 * (nl - 1) * net.up_latency_s, 2.0 * nbytes) if nl > 1
                           else (0.0, 0.0, 0.0))
        if net.torus and nl > 1:                  # reduce / broadcast by dimension buckets
            bw_i, lat_i, up = _torus_bucket("all_reduce", nbytes, shape.spans, net)
        out.append(_cost(kind, "tree", max(bw_i, b_out / nic),
                         lat_i + 2 * math.ceil(math.log2(nd)) * net.out_latency_s, nbytes,
                         shape, up=up, out=b_out))
    if nl > 1:
        inner = "reduce_scatter" if kind in ("all_reduce", "reduce_scatter") else "all_gather"
        bw_i, lat_i, up = _intra(inner, nbytes, shape, net)
        if kind == "all_reduce":
            bw_i, lat_i, up = 2 * bw_i, 2 * lat_i, 2 * up
        per = nbytes / nl
        ishape = GroupShape(n=nd, n_local=1, n_dom=nd, leaf_local=shape.leaf_local)
        inter = min(_candidates(kind, per, ishape, net), key=lambda c: c.seconds)
        out.append(CommCost(kind, "hierarchical", bw_i + lat_i + inter.seconds, nbytes, n,
                            {"scale_up": up, "scale_out": inter.link_bytes["scale_out"]}))
    return out


def collective(kind: str, nbytes: float, shape: GroupShape, net: Network,
               algorithm: str | None = None) -> CommCost:
    """The fastest algorithm for ``kind`` on ``nbytes`` per rank over ``shape`` (or the
    named ``algorithm``; ValueError if it does not apply)."""
    if kind not in KINDS:
        raise ValueError(f"collective kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if not nbytes >= 0:
        raise ValueError(f"collective bytes must be >= 0, not {nbytes!r}")
    if shape.n <= 1 or nbytes == 0:
        return CommCost(kind, "none", 0.0, nbytes, shape.n, {"scale_up": 0.0, "scale_out": 0.0})
    cands = _candidates(kind, nbytes, shape, net)
    if algorithm is not None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, "
                             f"not {algorithm!r}")
        cands = [c for c in cands if c.algorithm == algorithm]
        if not cands:
            raise ValueError(f"algorithm {algorithm!r} does not apply to a {kind} over "
                             f"{shape.n} ranks in {shape.n_dom} domain(s)")
    return min(cands, key=lambda c: c.seconds)


def lower_bound_seconds(kind: str, nbytes: float, shape: GroupShape, net: Network) -> float:
    """The largest, over the group's cuts (:func:`~diptych.sim.cluster.topology.cuts`), of
    the bytes that must cross the cut ÷ its bandwidth per direction: for sides ``a ≤ b``
    (``n = a + b``), all-to-all moves ``a·b·nbytes/n``; all-gather, reduce-scatter and
    all-reduce at least ``b·nbytes/n`` (the larger side's shards / reduced outputs)."""
    n = shape.n
    if n < 2 or kind == "send" or nbytes == 0:
        return 0.0
    best = 0.0
    for a, b, bw in cuts(net, shape):
        crossing = a * b * nbytes / n if kind == "all_to_all" else b * nbytes / n
        best = max(best, crossing / bw)
    return best

"""A cluster bound to a chip, where ranks sit, and the shape of a communication group.

:class:`Network` resolves a :class:`~diptych.arch.cluster.Cluster`'s bandwidths (the scale-up
link figures default to the chip's ``[interconnect]``). Rank ``r`` sits in scale-up domain
``r // chips_per_domain`` at local index ``r % chips_per_domain``; on a torus, the local index
is laid out x fastest, then y, then z. :func:`group_ranks` places a plan's groups (Megatron's
order: tp innermost, then cp, then dp and pp in ``plan.order``; expert-parallel groups are
the innermost ``ep`` ranks of the cp × dp block, the expert-data-parallel groups the rest), and
:func:`group_shape` reduces a group to what the collective models need: members per domain,
domains spanned, and on a torus the extent of the group along each dimension (a full
dimension with wraparound is a ring, a partial one a line).

Groups of one kind are congruent in Megatron's layouts when the sizes divide the domain, so
the group that holds rank 0 stands for all of them (exact when every parallel size divides
the torus dimension or domain it lands in; otherwise an approximation, stated in docs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...arch.chip import Chip
from ...arch.cluster import Cluster
from ..protocols import (P2P, Protocol, chip_algorithms, chip_p2p, chip_protocols,
                         nvls_bandwidth_seconds)
from .plan import Plan


@dataclass(frozen=True)
class Network:
    """A cluster with every bandwidth resolved, in bytes/s and seconds."""

    name: str
    domains: int
    domain_chips: int
    fabric: str                       # switch | torus
    dims: tuple[int, ...]             # torus dims (x fastest); switch: (domain_chips,)
    wraparound: bool
    links_per_chip: int
    link_bytes_per_s: float           # one scale-up link, one direction, as collectives sustain
    up_latency_s: float
    scale_out: str                    # fat_tree | rail_optimized | none
    nic_bytes_per_s: float            # one chip's NIC, one direction
    out_latency_s: float
    oversubscription: float
    rail_group_domains: int
    nvls_fraction: float = 0.0        # in-switch-reduced all-reduce ÷ the raw port bandwidth
    nvls_latency_s: float = 0.0       # its fixed latency
    nvls_ramp: tuple = ()             # its measured segments (Interconnect's, MiB and fractions)
    up_efficiency: float = 1.0        # link_bytes_per_s ÷ the raw link bandwidth
    protocols: tuple[Protocol, ...] = ()   # the chip's collective library (switch fabrics)
    algorithms: tuple[str, ...] = ()       # the algorithms its tuner considers (() : all)
    p2p: P2P | None = None                 # its point-to-point table (all-to-all; switch fabrics)

    @property
    def chips(self) -> int:
        return self.domains * self.domain_chips

    @property
    def port_bytes_per_s(self) -> float:
        """A chip's whole scale-up bandwidth per direction (all its links), as collectives
        sustain it (the chip's ``bus_efficiency`` applied)."""
        return self.links_per_chip * self.link_bytes_per_s

    @property
    def nvls_bytes_per_s(self) -> float:
        """The algorithm bandwidth of an all-reduce through the switch's in-network reduction
        (0: the fabric has none)."""
        if self.torus or not self.nvls_fraction:
            return 0.0
        return self.port_bytes_per_s / self.up_efficiency * self.nvls_fraction

    def nvls_seconds(self, nbytes: float) -> float:
        """The bandwidth seconds of an ``nbytes`` all-reduce through the in-network reduction,
        its ramp's segments at their own rates (:func:`..protocols.nvls_bandwidth_seconds`)."""
        return nvls_bandwidth_seconds(nbytes, self.port_bytes_per_s / self.up_efficiency,
                                      self.nvls_fraction, self.nvls_ramp)

    @property
    def torus(self) -> bool:
        return self.fabric == "torus"


def bind(cluster: Cluster, chip: Chip) -> Network:
    """Resolve ``cluster`` for ``chip``: scale-up links, their bandwidth and latency not given
    in the cluster file come from the chip's interconnect table; the bandwidths are what
    collectives sustain (the chip's ``bus_efficiency`` on the scale-up links, the scale-out
    table's on the NICs), and a switch fabric reduces in the network at the chip's
    ``in_network_reduction``; on a switch fabric the chip's collective library
    (``[collectives]``: its protocols, algorithms and point-to-point table; a torus keeps
    the links' own rule,
    TPU ICI collectives are not NCCL's). Raises ValueError when the
    chip has no links and the cluster does not give them, or when a torus needs more links
    per chip (two per dimension) than the chip has."""
    up = cluster.scale_up
    ic = chip.interconnect
    links = up.links_per_chip if up.links_per_chip is not None else ic.links
    gbps = (up.gb_per_s_per_link_per_direction if up.gb_per_s_per_link_per_direction
            is not None else ic.gb_per_s_per_link_per_direction)
    latency_us = up.latency_us if up.latency_us is not None else ic.latency_us
    if up.chips > 1 and (links < 1 or gbps <= 0):
        raise ValueError(f"cluster {cluster.name!r}: scale_up.links_per_chip and "
                         f"gb_per_s_per_link_per_direction are not set and chip "
                         f"{chip.name!r} has no links (interconnect.links = "
                         f"{ic.links}); set them in the cluster file")
    if links < up.torus_links:
        where = ("scale_up.links_per_chip" if up.links_per_chip is not None
                 else f"chip {chip.name!r}: interconnect.links")
        raise ValueError(f"cluster {cluster.name!r}: {where} ({links}) must be at least "
                         f"{up.torus_links} for its {'x'.join(map(str, up.torus_dims))} torus "
                         f"(two links per dimension); give scale_up.links_per_chip or use "
                         f"a chip with more links")
    so = cluster.scale_out
    return Network(name=cluster.name, domains=cluster.domains, domain_chips=up.chips,
                   fabric=up.fabric, dims=up.torus_dims, wraparound=up.wraparound,
                   links_per_chip=links, link_bytes_per_s=gbps * 1e9 * ic.bus_efficiency,
                   up_latency_s=latency_us * 1e-6, scale_out=so.kind,
                   nic_bytes_per_s=so.nic_gb_per_s_per_direction * 1e9 * so.bus_efficiency,
                   out_latency_s=so.latency_us * 1e-6, oversubscription=so.oversubscription,
                   rail_group_domains=so.rail_group_domains,
                   nvls_fraction=ic.in_network_reduction if up.fabric == "switch" else 0.0,
                   nvls_latency_s=ic.in_network_reduction_latency_us * 1e-6,
                   nvls_ramp=ic.in_network_reduction_ramp,
                   up_efficiency=ic.bus_efficiency,
                   protocols=chip_protocols(chip) if up.fabric == "switch" else (),
                   algorithms=chip_algorithms(chip) if up.fabric == "switch" else (),
                   p2p=chip_p2p(chip) if up.fabric == "switch" else None)


def single_domain(chip: Chip, chips: int) -> Cluster:
    """The cluster a plan runs on when none is given: one scale-up domain of ``chips`` chips
    on a switch, each chip with the links of its own ``[interconnect]``, no scale-out
    network. Its collectives are rings striped over all of a chip's links, the model
    ``diptych run`` uses without a cluster (:mod:`diptych.sim.run.links`)."""
    from ...arch.cluster import cluster_from_dict

    return cluster_from_dict({
        "name": f"{chip.name} x{chips}",
        "description": f"one switch domain of {chips} {chip.name} on the chip's own links "
                       f"(default: no cluster given)",
        "domains": 1, "scale_up": {"fabric": "switch", "chips": chips},
        "scale_out": {"kind": "none"}})


@dataclass(frozen=True)
class GroupShape:
    """Where a group's ``n`` members sit: ``n_local`` per domain over ``n_dom`` domains;
    ``spans`` the (extent, is_ring) of the group along each torus dimension it covers
    (empty on a switch); ``leaf_local``: inter-domain traffic stays below the leaf switches
    (rail-aligned within one rail group), so oversubscription does not apply."""

    n: int
    n_local: int
    n_dom: int
    spans: tuple[tuple[int, bool], ...] = ()
    leaf_local: bool = True


def _strides(plan: Plan) -> tuple[dict[str, int], dict[str, int]]:
    sizes = {"tp": plan.tp, "cp": plan.cp, "dp": plan.dp, "pp": plan.pp}
    strides, s = {}, 1
    for name in plan.order.split("-"):
        strides[name] = s
        s *= sizes[name]
    return sizes, strides


GROUP_KINDS = ("tp", "cp", "pp", "dp", "ep", "edp", "zs", "zr", "ezs", "amax")


def group_ranks(plan: Plan, kind: str) -> list[int]:
    """Global ranks of the ``kind`` group that holds rank 0 (``dp`` is the dense gradient
    group, dp × cp ranks; ``ep`` the expert-parallel group, ``edp`` the expert gradient
    group, cp·dp/ep ranks; ``zs`` the ZeRO shard group, the innermost ``plan.shards`` of
    the dp × cp ranks, ``zr`` its replicas, ``ezs`` the expert shard group, ``amax`` the
    tp × cp × dp ranks of one stage that an FP8 recipe's amax all-reduce spans: Megatron's
    amax reduction group)."""
    if kind not in GROUP_KINDS:
        raise ValueError(f"group kind must be one of {', '.join(GROUP_KINDS)}, not {kind!r}")
    sizes, strides = _strides(plan)
    if kind == "amax":
        return sorted(r + t * strides["tp"] for r in group_ranks(plan, "dp")
                      for t in range(sizes["tp"]))

    def span(*names: str) -> list[int]:
        ranks = [0]
        for nm in names:
            ranks = [r + i * strides[nm] for i in range(sizes[nm]) for r in ranks]
        return ranks

    if kind in ("tp", "cp", "pp"):
        return span(kind)
    block = span("cp", "dp")
    if kind == "dp":
        return block
    if kind == "ep":
        return block[:plan.ep]
    if kind == "edp":
        return block[::plan.ep]
    return _zero_group(block, 0, plan, kind)


def _zero_group(block: list[int], b: int, plan: Plan, kind: str) -> list[int]:
    """The ZeRO shard / replica / expert-shard group of block position ``b``."""
    S = plan.shards
    lo = b - b % S
    if kind == "zs":
        return block[lo:lo + S]
    if kind == "zr":
        return block[b % S::S]
    return block[lo + b % plan.ep:lo + S:plan.ep]


def stage_peer(plan: Plan) -> int:
    """Rank of stage 1 in rank 0's pipeline (the peer of a pipeline send)."""
    _, strides = _strides(plan)
    return strides["pp"]


def group_shape(ranks: list[int], net: Network) -> GroupShape:
    """Reduce a group's ranks to its :class:`GroupShape` on ``net``."""
    if not ranks:
        raise ValueError("a communication group needs at least one rank")
    D = net.domain_chips
    if max(ranks) >= net.chips:
        raise ValueError(f"rank {max(ranks)} is outside the cluster's {net.chips} chips")
    doms: dict[int, list[int]] = {}
    for r in ranks:
        doms.setdefault(r // D, []).append(r % D)
    n_local = max(len(v) for v in doms.values())
    first = doms[min(doms)]
    spans: tuple[tuple[int, bool], ...] = ()
    if net.torus and n_local > 1:
        out = []
        step = 1
        for size in net.dims:
            k = len({(l // step) % size for l in first})
            if k > 1:
                out.append((k, net.wraparound and k == size))
            step *= size
        spans = tuple(out)
    leaf_local = True
    if len(doms) > 1:
        same_rails = len({tuple(sorted(v)) for v in doms.values()}) == 1
        if net.scale_out == "rail_optimized":
            groups = {d // net.rail_group_domains for d in doms}
            leaf_local = same_rails and len(groups) == 1
        else:
            leaf_local = False
    return GroupShape(n=len(ranks), n_local=n_local, n_dom=len(doms), spans=spans,
                      leaf_local=leaf_local)


def nic_bytes_per_s(net: Network, shape: GroupShape) -> float:
    """A chip's usable scale-out bandwidth for this group (oversubscription above the leaf)."""
    if shape.leaf_local:
        return net.nic_bytes_per_s
    return net.nic_bytes_per_s / net.oversubscription


def cuts(net: Network, shape: GroupShape) -> list[tuple[int, int, float]]:
    """Cuts that split the group in two, as ``(a, b, bytes/s)``: the side sizes ``a ≤ b`` and
    the cut's bandwidth per direction (what the smaller side can send or receive across it).

    Switch domain: the ports of half the members (non-blocking). Torus: through one dimension
    (the cross-section of the other dimensions, doubled for a ring). With several domains such
    a cut runs through every domain, and the smaller side's NICs also cross it; and a cut
    between halves of the domains crosses only the smaller half's NICs."""
    n = shape.n
    out: list[tuple[int, int, float]] = []
    nic = nic_bytes_per_s(net, shape) if shape.n_dom > 1 else 0.0
    if shape.n_local > 1:          # a cut inside every domain (traffic may also leave by NIC)
        if net.torus and shape.spans:
            for k, ring in shape.spans:
                cross = shape.n_local // k * shape.n_dom
                a = k // 2 * (shape.n_local // k) * shape.n_dom
                out.append((a, n - a, cross * (2 if ring else 1) * net.link_bytes_per_s
                            + a * nic))
        else:
            a = shape.n_local // 2 * shape.n_dom
            out.append((a, n - a, a * (net.port_bytes_per_s + nic)))
    if shape.n_dom > 1:
        a = shape.n_dom // 2 * shape.n_local
        out.append((a, n - a, a * nic))
    return out


def bisection_bytes_per_s(net: Network, shape: GroupShape) -> float:
    """The group's narrowest cut (see :func:`cuts`), bytes/s per direction."""
    return min((bw for _, _, bw in cuts(net, shape)), default=float("inf"))


def rank_coords(plan: Plan, rank: int) -> dict[str, int]:
    """A rank's index along each parallel dimension (tp, cp, dp, pp)."""
    sizes, strides = _strides(plan)
    return {k: (rank // strides[k]) % sizes[k] for k in sizes}


def group_of(plan: Plan, kind: str, rank: int) -> tuple[int, ...]:
    """The ranks of ``rank``'s ``kind`` group (see :func:`group_ranks`), ascending order of
    the group's own index (so a ring follows it)."""
    if kind not in GROUP_KINDS:
        raise ValueError(f"group kind must be one of {', '.join(GROUP_KINDS)}, not {kind!r}")
    sizes, strides = _strides(plan)
    c = rank_coords(plan, rank)
    base = rank - sum(c[k] * strides[k] for k in ("cp", "dp"))
    if kind in ("tp", "cp", "pp"):
        base = rank - c[kind] * strides[kind]
        return tuple(base + i * strides[kind] for i in range(sizes[kind]))
    block = [base + ci * strides["cp"] + di * strides["dp"]
             for di in range(sizes["dp"]) for ci in range(sizes["cp"])]
    b = c["cp"] + sizes["cp"] * c["dp"]
    if kind == "dp":
        return tuple(block)
    if kind == "amax":
        return tuple(sorted(r + (t - c["tp"]) * strides["tp"] for r in block
                            for t in range(sizes["tp"])))
    if kind == "ep":
        lo = b - b % plan.ep
        return tuple(block[lo:lo + plan.ep])
    if kind == "edp":
        return tuple(block[b % plan.ep::plan.ep])
    return tuple(_zero_group(block, b, plan, kind))

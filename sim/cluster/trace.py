"""Traces of a cluster step: a Perfetto timeline and Chakra execution traces.

:func:`perfetto_trace` returns Chrome trace-event JSON (opens in ui.perfetto.dev) with one
process per rank: the ranks of rank 0's pipeline (one per stage; every other rank of a stage
runs the same timeline) or, for plans of at most ``max_ranks`` chips, every rank. Tracks:
compute (each layer's forward or backward compute inside each pipeline unit, and the
``bubble`` spans where the device waits), one track per communication kind (tp, cp, ep: each
collective of each layer, starting with the layer; dp: ZeRO-3 gathers per layer and the
gradient reduction, optimizer and parameter all-gather after the pipeline), and pipeline sends:
at their producers' end for a data-flow run; for a Megatron issue-order run
(:class:`~.megatron_p2p.QueuedRun`) each send and receive where the simulation runs it, its
transfer from its rendezvous to its end and its kernel's wait for its peer from its dispatch,
one track per kind and direction (docs/cluster.md, "Traces").
When the layer-level expansion would exceed ``max_events``, units are drawn whole.

:func:`export_chakra` writes one execution trace per rank in the Chakra format ASTRA-sim reads
(mlcommons/chakra ``schema/protobuf/et_def.proto``: a length-delimited ``GlobalMetadata``
then ``Node`` messages, files ``<prefix>.<rank>.et``), plus ``comm_group.json`` mapping each
communicator's id to its ranks (ASTRA-sim's ``--comm-group-configuration``). Compute nodes
(``COMP_NODE``) carry diptych's simulated ``duration_micros`` and ``num_ops``; collectives
(``COMM_COLL_NODE``) ``comm_type``, ``comm_size`` (bytes per rank) and ``pg_name`` (the
communicator id); pipeline transfers are ``COMM_SEND_NODE``/``COMM_RECV_NODE`` with
``comm_src``, ``comm_dst``, ``comm_size`` and ``comm_tag``. Each node depends on the one
before it on its rank (``data_deps``).
"""

from __future__ import annotations

import json
from pathlib import Path

from .step import ClusterResult
from .topology import group_of, rank_coords

_TRACKS = {"compute": 1, "tp": 2, "cp": 3, "ep": 4, "dp": 5, "pp": 6}
#: a Megatron issue-order run's p2p ops, one track per kind and direction (each in its
#: stream's order, so a track's spans never overlap)
_P2P_TRACKS = {"pp send next": 7, "pp recv prev": 8, "pp send prev": 9, "pp recv next": 10}


def _pipeline_ranks(res: ClusterResult, max_ranks: int) -> list[int]:
    plan = res.plan
    if plan.chips <= max_ranks:
        return list(range(plan.chips))
    return list(group_of(plan, "pp", 0))


def _unit_layers(res: ClusterResult, chunk_vs: int) -> list[str]:
    chunks = res.layout["chunks"]
    kinds = list(chunks[chunk_vs])
    if chunk_vs == 0:
        kinds = ["embedding"] + kinds
    if chunk_vs == len(chunks) - 1:
        kinds = kinds + ["head"]
    return kinds


def perfetto_trace(res: ClusterResult, *, max_ranks: int = 64,
                   max_events: int = 400_000) -> dict:
    """Chrome/Perfetto trace of ``res`` (module docstring); times in microseconds."""
    if res.pipeline is None:
        raise ValueError("this result has no event-level pipeline run; simulate it with "
                         "golden=True to trace it")
    plan, run = res.plan, res.pipeline
    P = plan.pp
    ranks = _pipeline_ranks(res, max_ranks)
    n_layers = sum(len(c) for c in res.layout["chunks"]) + 2
    detail = len(ranks) * res.micro_batches * 2 * n_layers * 3 <= max_events
    per_stage: list[list[dict]] = []
    send = res.layout["send_s"]
    p2p = getattr(run, "p2p", None)      # a Megatron issue-order run's sends and receives
    tracks = dict(_TRACKS, **(_P2P_TRACKS if p2p is not None and send > 0 else {}))
    for s in range(P):
        ev: list[dict] = []
        prev_end = 0.0
        for kind, mb, c, start, end in run.units[s]:
            if end <= start and res.phase != "train" and kind == "B":
                continue
            vs = c * P + s
            if start > prev_end + 1e-12:
                ev.append({"name": "bubble", "cat": "bubble", "ph": "X", "ts": prev_end * 1e6,
                           "dur": (start - prev_end) * 1e6, "tid": _TRACKS["compute"]})
            prev_end = max(prev_end, end)
            label = f"{kind} mb{mb} chunk{vs}"
            layers = _unit_layers(res, vs)
            if not detail:
                ev.append({"name": label, "cat": "forward" if kind == "F" else "backward",
                           "ph": "X", "ts": start * 1e6, "dur": (end - start) * 1e6,
                           "tid": _TRACKS["compute"], "args": {"layers": len(layers)}})
            else:
                t = start
                # what the unit's pipeline send and receive take from its compute (the
                # cores and DRAM they hold, sim/run/interference.py), shown at its start
                extra = (end - start) - sum(
                    (res.layers[k].fwd_compute + sum(res.layers[k].exposed_fwd.values()))
                    if kind == "F" else
                    (res.layers[k].bwd_compute + sum(res.layers[k].exposed_bwd.values()))
                    for k in layers)
                if extra > 1e-12 and send > 0:
                    ev.append({"name": "pipeline send/receive beside the chunk", "cat": "pp",
                               "ph": "X", "ts": t * 1e6, "dur": extra * 1e6,
                               "tid": _TRACKS["compute"], "args": {"unit": label}})
                    t += extra
                for i, k in enumerate(layers):
                    st = res.layers[k]
                    comp = st.fwd_compute if kind == "F" else st.bwd_compute
                    colls = st.colls_fwd if kind == "F" else st.colls_bwd
                    exp = st.exposed_fwd if kind == "F" else st.exposed_bwd
                    ev.append({"name": f"{k}", "cat": "forward" if kind == "F" else "backward",
                               "ph": "X", "ts": t * 1e6, "dur": comp * 1e6,
                               "tid": _TRACKS["compute"],
                               "args": {"unit": label, "layer": i}})
                    track_t: dict[str, float] = {}
                    for ck, group, coll, nbytes, secs in colls:
                        ts = track_t.get(ck, t)
                        ev.append({"name": f"{coll} ({group}) {k}", "cat": ck, "ph": "X",
                                   "ts": ts * 1e6, "dur": secs * 1e6, "tid": _TRACKS[ck],
                                   "args": {"bytes": nbytes, "exposed_s_of_kind":
                                            exp.get(ck, 0.0)}})
                        track_t[ck] = ts + secs
                    t += comp + sum(exp.values())
            V = plan.chunks
            if send > 0 and p2p is None and (
                    (kind == "F" and vs < V - 1) or (kind == "B" and vs > 0
                                                     and res.phase == "train")):
                what = "activations" if kind == "F" else "gradients"
                ev.append({"name": f"send {what} mb{mb}", "cat": "pp", "ph": "X",
                           "ts": end * 1e6, "dur": send * 1e6, "tid": _TRACKS["pp"]})
        if p2p is not None and send > 0:
            ev += _p2p_events(p2p[s], send)
        fin = res.layout["finish"][s]
        t = fin
        lay = res.layout
        for name, secs, track in (
                ("gradient reduction (exposed)", lay["tails"][s], "dp"),
                ("tied embedding gradient all-reduce (waited)", lay["embedding_sync"][s], "pp"),
                ("optimizer", lay["optimizer"][s], "compute"),
                ("parameter all-gather (exposed)", lay["param_ag"][s], "dp")):
            if secs > 0:
                ev.append({"name": name, "cat": "step", "ph": "X", "ts": t * 1e6,
                           "dur": secs * 1e6, "tid": _TRACKS[track]})
                t += secs
        per_stage.append(ev)
    events: list[dict] = []
    for r in ranks:
        s = rank_coords(plan, r)["pp"]
        events.append({"name": "process_name", "ph": "M", "pid": r,
                       "args": {"name": f"rank {r} (stage {s})"}})
        for name, tid in tracks.items():
            events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": tid,
                           "args": {"name": name}})
        for e in per_stage[s]:
            events.append({**e, "pid": r})
    meta = {"model": res.model, "chip": res.chip, "cluster": res.cluster,
            "plan": res.plan.describe(), "seconds": res.seconds,
            "ranks_shown": "all" if len(ranks) == plan.chips else "one per pipeline stage"}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": meta}


def _p2p_events(records: list[tuple], send: float) -> list[dict]:
    """One rank's sends and receives of a Megatron issue-order run
    (:class:`~.megatron_p2p.QueuedRun` ``p2p``: kind, direction, dispatched, ended): each op's
    transfer from its rendezvous with its peer (its end less the transfer's ``send`` seconds,
    the run's model) to its end and, before it, its kernel waiting for the peer from its
    dispatch, on the track of its kind and direction."""
    ev = []
    for kind, direction, posted, ended in records:
        what = "activations" if (direction == "next") == (kind == "S") else "gradients"
        name = f"{'send' if kind == 'S' else 'receive'} {what}"
        tid = _P2P_TRACKS[f"pp {'send' if kind == 'S' else 'recv'} {direction}"]
        met = ended - send
        args = {"dispatched_s": posted, "rendezvous_s": met, "end_s": ended}
        if met > posted + 1e-12:
            ev.append({"name": f"{name}: waits for its peer", "cat": "pp wait", "ph": "X",
                       "ts": posted * 1e6, "dur": (met - posted) * 1e6, "tid": tid,
                       "args": args})
        ev.append({"name": name, "cat": "pp", "ph": "X", "ts": met * 1e6,
                   "dur": send * 1e6, "tid": tid, "args": args})
    return ev


def write_perfetto_trace(res: ClusterResult, path, **kw) -> None:
    """Write :func:`perfetto_trace` to ``path``."""
    with open(path, "w") as fh:
        json.dump(perfetto_trace(res, **kw), fh)


# ---- Chakra -----------------------------------------------------------------------------

#: Field numbers from mlcommons/chakra schema/protobuf/et_def.proto (the subset written).
_NODE_TYPES = {"COMP_NODE": 4, "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7}
_COLL_TYPES = {"all_reduce": 0, "all_gather": 2, "all_to_all": 6, "reduce_scatter": 7}
CHAKRA_VERSION = "0.0.4"


def chakra_classes():
    """Message classes (GlobalMetadata, Node, AttributeProto) built at run time from the
    published schema's field numbers (a wire-compatible subset of et_def.proto)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="diptych_et_def.proto",
                                            package="ChakraProtoMsg", syntax="proto3")

    def msg(name, fields):
        m = fd.message_type.add(name=name)
        for fname, num, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
        return m

    O, R = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    msg("BoolList", [("values", 1, F.TYPE_BOOL, R, None)])
    attr = msg("AttributeProto", [
        ("name", 1, F.TYPE_STRING, O, None), ("doc_string", 2, F.TYPE_STRING, O, None),
        ("int64_val", 9, F.TYPE_INT64, O, None), ("uint64_val", 13, F.TYPE_UINT64, O, None),
        ("bool_val", 27, F.TYPE_BOOL, O, None),
        ("bool_list", 28, F.TYPE_MESSAGE, O, ".ChakraProtoMsg.BoolList"),
        ("string_val", 29, F.TYPE_STRING, O, None)])
    attr.oneof_decl.add(name="value")
    for f in attr.field:
        if f.number >= 3:
            f.oneof_index = 0
    msg("GlobalMetadata", [("version", 1, F.TYPE_STRING, O, None),
                           ("attr", 2, F.TYPE_MESSAGE, R, ".ChakraProtoMsg.AttributeProto")])
    node = msg("Node", [
        ("id", 1, F.TYPE_UINT64, O, None), ("name", 2, F.TYPE_STRING, O, None),
        ("type", 3, F.TYPE_ENUM, O, ".ChakraProtoMsg.NodeType"),
        ("ctrl_deps", 4, F.TYPE_UINT64, R, None), ("data_deps", 5, F.TYPE_UINT64, R, None),
        ("start_time_micros", 6, F.TYPE_UINT64, O, None),
        ("duration_micros", 7, F.TYPE_UINT64, O, None),
        ("attr", 10, F.TYPE_MESSAGE, R, ".ChakraProtoMsg.AttributeProto")])
    del node
    enum = fd.enum_type.add(name="NodeType")
    for name, num in (("INVALID_NODE", 0), ("METADATA_NODE", 1), ("MEM_LOAD_NODE", 2),
                      ("MEM_STORE_NODE", 3), ("COMP_NODE", 4), ("COMM_SEND_NODE", 5),
                      ("COMM_RECV_NODE", 6), ("COMM_COLL_NODE", 7)):
        enum.value.add(name=name, number=num)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    get = message_factory.GetMessageClass
    return (get(pool.FindMessageTypeByName("ChakraProtoMsg.GlobalMetadata")),
            get(pool.FindMessageTypeByName("ChakraProtoMsg.Node")),
            get(pool.FindMessageTypeByName("ChakraProtoMsg.AttributeProto")))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


class _RankGraph:
    """Nodes of one rank's trace, chained by data dependencies."""

    def __init__(self, Node, Attr):
        self.Node, self.Attr = Node, Attr
        self.nodes: list = []

    def add(self, name: str, ntype: str, attrs: list, duration_us: float = 0.0,
            deps: tuple[int, ...] = ()):
        n = self.Node(id=len(self.nodes), name=name, type=_NODE_TYPES[ntype],
                      duration_micros=max(0, int(round(duration_us))))
        if self.nodes:
            n.data_deps.append(self.nodes[-1].id)
        n.data_deps.extend(d for d in deps if d not in n.data_deps)
        n.attr.append(self.Attr(name="is_cpu_op", bool_val=False))
        n.attr.extend(attrs)
        self.nodes.append(n)
        return n

    def p2p(self, name: str, ntype: str, src: int, dst: int, nbytes: float, tag: int):
        """A pipeline transfer node (send or receive) from ``src`` to ``dst``."""
        A = self.Attr
        return self.add(name, ntype, [A(name="comm_src", int64_val=src),
                                      A(name="comm_dst", int64_val=dst),
                                      A(name="comm_size", uint64_val=int(nbytes)),
                                      A(name="comm_tag", int64_val=tag)])


#: Ranks a Chakra export writes at most (one file per rank).
MAX_ET_RANKS = 4096


def export_chakra(res: ClusterResult, directory, *, prefix: str = "diptych",
                  max_ranks: int = MAX_ET_RANKS) -> list[Path]:
    """Write ``<directory>/<prefix>.<rank>.et`` for every rank and ``comm_group.json``
    (module docstring); returns the paths written."""
    plan, run = res.plan, res.pipeline
    if run is None:
        raise ValueError("this result has no event-level pipeline run; simulate it with "
                         "golden=True to export it")
    if plan.chips > max_ranks:
        raise ValueError(f"the plan has {plan.chips} ranks, more than max_ranks "
                         f"({max_ranks}): one trace per rank would be that many files")
    Meta, Node, Attr = chakra_classes()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[int, ...], int] = {}

    def pg(kind: str, rank: int) -> str:
        g = group_of(plan, kind, rank)
        if g not in groups:
            groups[g] = len(groups) + 1
        return str(groups[g])

    V, P = plan.chunks, plan.pp
    send_bytes = res.comm.get("pp send", {}).get("bytes", 0.0)
    paths = []
    for r in range(plan.chips):
        s = rank_coords(plan, r)["pp"]
        pipe = group_of(plan, "pp", r)
        g = _RankGraph(Node, Attr)
        for kind, mb, c, _, _ in run.units[s]:
            if kind == "B" and res.phase != "train":
                continue
            vs = c * P + s
            fwd = kind == "F"
            src_vs = vs - 1 if fwd else vs + 1
            if 0 <= src_vs < V and (fwd or res.phase == "train") and send_bytes:
                g.p2p(f"recv {kind} mb{mb} vs{vs}", "COMM_RECV_NODE", pipe[src_vs % P], r,
                      send_bytes, (mb * V + vs) * 2 + (0 if fwd else 1))
            for i, k in enumerate(_unit_layers(res, vs)):
                st = res.layers[k]
                comp = st.fwd_compute if fwd else st.bwd_compute
                flops = st.fwd_flops if fwd else st.bwd_flops
                g.add(f"{kind} mb{mb} vs{vs} {k}[{i}]", "COMP_NODE", [
                    Attr(name="num_ops", int64_val=int(flops))], comp * 1e6)
                for _, group, coll, nbytes, _ in (st.colls_fwd if fwd else st.colls_bwd):
                    g.add(f"{coll} ({group}) {k}[{i}] {kind} mb{mb}", "COMM_COLL_NODE", [
                        Attr(name="comm_type", int64_val=_COLL_TYPES[coll]),
                        Attr(name="comm_size", uint64_val=int(nbytes)),
                        Attr(name="pg_name", string_val=pg(group, r))])
            dst_vs = vs + 1 if fwd else vs - 1
            if 0 <= dst_vs < V and (fwd or res.phase == "train") and send_bytes:
                g.p2p(f"send {kind} mb{mb} vs{vs}", "COMM_SEND_NODE", r, pipe[dst_vs % P],
                      send_bytes, (mb * V + dst_vs) * 2 + (0 if fwd else 1))
        if res.phase == "train":
            for label, entry in res.comm.items():
                if label.startswith("dp grad") and entry["bytes"] > 0:
                    g.add(label, "COMM_COLL_NODE", [
                        Attr(name="comm_type", int64_val=_COLL_TYPES[entry["kind"]]),
                        Attr(name="comm_size", uint64_val=int(entry["bytes"])),
                        Attr(name="pg_name", string_val=pg(entry["group_kind"], r))])
            g.add("optimizer", "COMP_NODE", [Attr(name="num_ops", int64_val=0)],
                  res.layout["optimizer"][s] * 1e6)
        path = out / f"{prefix}.{r}.et"
        with open(path, "wb") as fh:
            for m in [Meta(version=CHAKRA_VERSION)] + g.nodes:
                data = m.SerializeToString()
                fh.write(_varint(len(data)) + data)
        paths.append(path)
    with open(out / "comm_group.json", "w") as fh:
        json.dump({str(i): list(g) for g, i in groups.items()}, fh)
    return paths


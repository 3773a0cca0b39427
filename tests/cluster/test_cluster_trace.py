"""Perfetto traces of a cluster step and Chakra execution traces, read back with an
independent protobuf wire-format reader against the field numbers of mlcommons/chakra's
``schema/protobuf/et_def.proto``."""

from __future__ import annotations

import json

import pytest
from cluster_orders import cluster_step, step_both_orders
from roofline_double import roofline

from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.sim.cluster.topology import rank_coords
from diptych.sim.cluster.trace import export_chakra, perfetto_trace
from diptych.sim.run import Scenario

# et_def.proto: Node.id 1, name 2, type 3, data_deps 5, duration_micros 7, attr 10;
# AttributeProto.name 1, int64_val 9, uint64_val 13, bool_val 27, string_val 29;
# NodeType COMP_NODE 4, COMM_SEND_NODE 5, COMM_RECV_NODE 6, COMM_COLL_NODE 7;
# CollectiveCommType ALL_REDUCE 0, ALL_GATHER 2, ALL_TO_ALL 6, REDUCE_SCATTER 7.


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf):
    """Parse one protobuf message: {field number: [values]} (varints as int, length-delimited
    as bytes)."""
    out: dict[int, list] = {}
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:                                          # pragma: no cover - not written
            raise AssertionError(f"unexpected wire type {wire}")
        out.setdefault(num, []).append(v)
    return out


def messages(path):
    data = path.read_bytes()
    i, out = 0, []
    while i < len(data):
        n, i = varint(data, i)
        out.append(fields(data[i:i + n]))
        i += n
    return out


def attrs(node):
    out = {}
    for a in node.get(10, []):
        f = fields(a)
        name = f[1][0].decode()
        val = next(f[k][0] for k in (9, 13, 27, 29) if k in f) if any(
            k in f for k in (9, 13, 27, 29)) else 0
        out[name] = val
    return out


@pytest.fixture(scope="module")
def res():
    return simulate_cluster_step("llama-3-8b", "h100", "dgx-h100", Plan(tp=2, pp=2, dp=2, zero=1),
                                 Scenario.of(phase="train", batch=8, seq=1024), simulate=roofline)


def test_perfetto_one_process_per_rank(res):
    tr = perfetto_trace(res)
    ev = tr["traceEvents"]
    procs = {e["pid"] for e in ev if e.get("name") == "process_name"}
    assert procs == set(range(8))
    spans = [e for e in ev if e.get("ph") == "X"]
    names = {e["cat"] for e in spans}
    assert {"forward", "backward", "bubble", "pp", "tp"} <= names
    # stage 0's compute spans add up to its forward and backward compute
    r0 = [e for e in spans if e["pid"] == 0 and e["cat"] in ("forward", "backward")]
    st = res.layers
    chunks = res.layout["chunks"][0]
    want = res.micro_batches * (sum(st[k].fwd_compute + st[k].bwd_compute for k in chunks)
                                + st["embedding"].fwd_compute + st["embedding"].bwd_compute)
    assert sum(e["dur"] for e in r0) == pytest.approx(want * 1e6, rel=1e-9)
    # the pipeline ends where the step's pipeline part ends: the last layer's compute span
    # and the communication its schedule leaves exposed after it (the tensor-parallel
    # all-reduces of a scheduled layer, sim/cluster/timing.py; none under execution="sum")
    end = max(spans, key=lambda e: e["ts"] + e["dur"] if e["cat"] in ("forward", "backward")
              else -1.0)
    exposed = (st[end["name"]].exposed_fwd if end["cat"] == "forward"
               else st[end["name"]].exposed_bwd)
    assert end["ts"] + end["dur"] + 1e6 * sum(exposed.values()) == pytest.approx(
        res.info["pipeline_s"] * 1e6, rel=1e-9)


def test_perfetto_large_plans_show_one_rank_per_stage(res):
    tr = perfetto_trace(res, max_ranks=4)
    procs = {e["pid"] for e in tr["traceEvents"] if e.get("name") == "process_name"}
    assert procs == {0, 4}                        # rank 0's pipeline: stages 0 and 1


def test_chakra_traces_read_back(res, tmp_path):
    paths = export_chakra(res, tmp_path)
    assert [p.name for p in paths] == [f"diptych.{r}.et" for r in range(8)]
    groups = json.loads((tmp_path / "comm_group.json").read_text())
    msgs = messages(paths[0])
    assert msgs[0][1][0] == b"0.0.4"                              # GlobalMetadata.version
    nodes = msgs[1:]
    assert [n.get(1, [0])[0] for n in nodes] == list(range(len(nodes)))
    types = [n[3][0] for n in nodes]
    assert set(types) <= {4, 5, 6, 7} and types.count(5) > 0 and types.count(7) > 0
    for n in nodes[1:]:                                       # chained on the rank
        deps = n[5][0]
        assert varint(deps, 0)[0] == n.get(1, [0])[0] - 1
    colls = [attrs(n) for n in nodes if n[3][0] == 7]
    tp = [a for a in colls if groups[a["pg_name"].decode()] == [0, 1]]
    # h100's stack overlaps its layers' TP all-reduces as Transformer Engine does, as
    # all-gathers and reduce-scatters (sim/run/tp_overlap.py); under sequence parallelism
    # the vocab-parallel embedding reduce-scatters and the output layer all-gathers its
    # input (workloads/lower.py): no all-reduce is left
    assert {a["comm_type"] for a in tp} == {2, 7}
    assert tp[0]["comm_size"] == 1 * 1024 * 4096 * 2            # tokens x hidden x bf16
    dp = [a for a in colls if groups[a["pg_name"].decode()] == [0, 2]]
    assert dp and all(a["comm_type"] == 7 for a in dp)          # ZeRO-1 reduce-scatter
    sends = [attrs(n) for n in nodes if n[3][0] == 5]
    assert all(a["comm_src"] == 0 and a["comm_dst"] == 4 for a in sends)
    comp_us = sum(n.get(7, [0])[0] for n in nodes if n[3][0] == 4)
    st = res.layers
    chunks = res.layout["chunks"][0]
    want = res.micro_batches * (sum(st[k].fwd_compute + st[k].bwd_compute for k in chunks)
                                + st["embedding"].fwd_compute + st["embedding"].bwd_compute)
    want += res.layout["optimizer"][0]
    assert comp_us == pytest.approx(want * 1e6, abs=len(nodes))   # rounded to whole us


def test_chakra_refuses_too_many_ranks(res, tmp_path):
    with pytest.raises(ValueError, match="the plan has 8 ranks, more than max_ranks \\(4\\)"):
        export_chakra(res, tmp_path, max_ranks=4)


# --- a Megatron issue-order run: p2p ops drawn where the simulation runs them ---------------

def _p2p_spans(tr, pid, tid):
    """(start, end) in seconds of the transfers and of the waits on one track."""
    sp = [e for e in tr["traceEvents"] if e.get("ph") == "X" and e["pid"] == pid
          and e["tid"] == tid]
    xfer = [(e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6) for e in sp if e["cat"] == "pp"]
    wait = [(e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6) for e in sp if e["cat"] == "pp wait"]
    return xfer, wait


def _close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-12, abs=1e-12)


def _no_overlap(tr):
    """Spans on one (pid, tid) track nest or follow each other (Perfetto's JSON import
    drops improperly nested slices); here the p2p tracks' spans never overlap."""
    by: dict = {}
    for e in tr["traceEvents"]:
        if e.get("ph") == "X" and e["tid"] >= 7:
            by.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    assert by
    for spans in by.values():
        spans.sort()
        for (_, e0), (s1, _) in zip(spans, spans[1:]):
            assert s1 >= e0 - 1e-6


@pytest.fixture(scope="module")
def f1b_megatron():
    return cluster_step(Plan(tp=2, pp=2, dp=1, schedule="1f1b"), "one_queue")


def test_perfetto_draws_megatron_p2p_at_its_rendezvous_worked_by_hand(f1b_megatron):
    """The P = 2, m = 3 1F1B pipeline of tests/cluster/test_megatron_p2p.py (F = 1 s, B = 2 s,
    send 0.5 s), worked by hand from Megatron's issue order, put in a cluster step's result.
    Rank 0 (first stage): send_forward after F0 meets rank 1's recv_forward (posted at 0):
    [1, 1.5]; send_forward_recv_backward posted at 2.5 meets rank 1's
    send_backward_recv_forward (posted after its B0 at 4.5): [4.5, 5]; the next one posted at
    8 meets rank 1's at 8: [8, 8.5]; its recv_backward posted at 10.5 meets rank 1's last
    send_backward at 11.5: [11.5, 12]. The old drawing put each send at its producer's end
    (rank 1's first gradient send at B0's end, 4.5, but rank 0's second send at F1's end,
    2.5, two seconds before it runs)."""
    import dataclasses

    from diptych.sim.cluster.megatron_p2p import simulate_megatron_pipeline

    run = simulate_megatron_pipeline([[1.0], [1.0]], [[2.0], [2.0]], 3, send_s=0.5,
                                     schedule="1f1b", batched=True, one_queue=True)
    res = dataclasses.replace(f1b_megatron, pipeline=run, micro_batches=3,
                              layout={**f1b_megatron.layout, "send_s": 0.5})
    tr = json.loads(json.dumps(perfetto_trace(res, max_events=0)))
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in tr["traceEvents"]
             if e.get("name") == "thread_name"}
    assert names[(0, 7)] == "pp send next" and names[(0, 8)] == "pp recv prev"
    assert names[(0, 9)] == "pp send prev" and names[(0, 10)] == "pp recv next"
    send0, wait0 = _p2p_spans(tr, 0, 7)
    _close(send0, [(1.0, 1.5), (4.5, 5.0), (8.0, 8.5)])
    _close(wait0, [(2.5, 4.5)])
    recv0, rwait0 = _p2p_spans(tr, 0, 10)
    _close(recv0, [(4.5, 5.0), (8.0, 8.5), (11.5, 12.0)])
    _close(rwait0, [(2.5, 4.5), (10.5, 11.5)])
    r1 = next(r for r in range(res.plan.chips) if rank_coords(res.plan, r)["pp"] == 1)
    send1, wait1 = _p2p_spans(tr, r1, 9)
    _close(send1, [(4.5, 5.0), (8.0, 8.5), (11.5, 12.0)])
    assert wait1 == []
    recv1, rwait1 = _p2p_spans(tr, r1, 8)
    _close(recv1, [(1.0, 1.5), (4.5, 5.0), (8.0, 8.5)])
    _close(rwait1, [(0.0, 1.0)])
    # the spans are the simulation's records: dispatched, rendezvous (end - send), end
    for s, r, tid, kind in ((0, 0, 7, "S"), (0, 0, 10, "R"), (1, r1, 9, "S"), (1, r1, 8, "R")):
        rec = [x for x in run.p2p[s] if x[0] == kind]
        _close(_p2p_spans(tr, r, tid)[0], [(e - 0.5, e) for _, _, _, e in rec])
    # no send drawn at its producer's end on the old pp track
    assert not [e for e in tr["traceEvents"] if e.get("tid") == 6
                and e["name"].startswith("send ")]
    _no_overlap(tr)


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("interleaved", 2)])
def test_perfetto_megatron_cluster_step_p2p_spans_are_the_runs_records(schedule, v):
    """A cluster step on an issue-order stack: every rank's p2p spans are its run's records
    (the transfer ``send_s`` long, ending at the record's end; a wait from dispatch to the
    rendezvous), the tracks' spans never overlap and the JSON round-trips. The data-flow
    stack keeps the old drawing (sends at their producers' end, no p2p tracks)."""
    from diptych.sim.cluster.megatron_p2p import QueuedRun

    plan = Plan(tp=2, pp=2, dp=1, schedule=schedule, virtual_stages=v)
    out = step_both_orders(plan)
    res = out["one_queue"]
    assert isinstance(res.pipeline, QueuedRun)
    send = res.layout["send_s"]
    assert send > 0
    tr = json.loads(json.dumps(perfetto_trace(res)))
    tids = {"S": {"next": 7, "prev": 9}, "R": {"prev": 8, "next": 10}}
    waited = 0
    for r in range(plan.chips):
        s = rank_coords(plan, r)["pp"]
        for kind in "SR":
            for d, tid in tids[kind].items():
                rec = [x for x in res.pipeline.p2p[s] if x[:2] == (kind, d)]
                xfer, wait = _p2p_spans(tr, r, tid)
                _close(xfer, [(e - send, e) for *_, e in rec])
                want = [(a, e - send) for *_, a, e in rec if e - send > a + 1e-12]
                _close(wait, want)
                waited += len(want)
    assert waited > 0
    _no_overlap(tr)
    flow = perfetto_trace(out["dataflow"])
    assert not isinstance(out["dataflow"].pipeline, QueuedRun)
    assert {e["tid"] for e in flow["traceEvents"] if "tid" in e} == set(range(1, 7))
    assert [e for e in flow["traceEvents"] if e.get("tid") == 6
            and e["name"].startswith("send activations")]

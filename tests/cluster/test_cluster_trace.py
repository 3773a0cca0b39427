"""Perfetto traces of a cluster step and Chakra execution traces, read back with an
independent protobuf wire-format reader against the field numbers of mlcommons/chakra's
``schema/protobuf/et_def.proto``."""

from __future__ import annotations

import json

import pytest
from roofline_double import roofline

from diptych.sim.cluster import Plan, simulate_cluster_step
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

"""The GEMM trace: every active array appears, and the spans' args (block indices, element
ranges, bytes, MACs) add up to the GEMM and to the engine's own totals."""

from __future__ import annotations

import json

import pytest

from diptych.arch import load_chip
from diptych.sim import simulate_gemm
from diptych.sim.run import Scenario
from diptych.sim.trace import gemm_trace, write_gemm_trace

CASES = [("tpu-v1", 1001, 700, 300, None),       # one array, no shared buffer
         ("infer-2026", 3000, 1000, 5000, None),  # 64 arrays, uneven slices clamped
         ("infer-2026", 1001, 300, 2000, "is"),   # input stationary: M and N swapped
         ("tpu-v4", 64, 4096, 8192, None)]        # shared-buffer copies


def _spans(tr):
    n = tr["otherData"]["active_arrays"]
    return [e for e in tr["traceEvents"] if e["ph"] == "X" and e["pid"] <= n]


def _volume(r):
    out = 1
    for lo, hi in r.values():
        out *= hi - lo
    return out


@pytest.mark.parametrize("chip, m, k, n, df", CASES)
def test_every_array_and_the_whole_gemm(chip, m, k, n, df):
    c = load_chip(chip)
    tr = gemm_trace(m, k, n, c, dataflow=df)
    st = simulate_gemm(m, k, n, c, dataflow=df)
    od = tr["otherData"]
    assert od["active_arrays"] == st.mapping["active_arrays"]
    assert od["blocks_shown_per_array"] == od["blocks_per_array"] == st.mapping["blocks"]
    names = {e["pid"]: e["args"]["name"] for e in tr["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert [names[p] for p in range(1, od["active_arrays"] + 1)] == [
        f"array {a} (core {a // st.mapping['arrays_per_core']})"
        for a in range(od["active_arrays"])]
    spans = _spans(tr)
    compute = [e for e in spans if e["tid"] == 3]
    # the compute spans of all arrays tile C = A·B exactly once
    assert sum(_volume(e["args"]["gemm_range"]) for e in compute) == m * k * n
    # every array plays the representative's schedule
    first = [(e["ts"], e["dur"], e["name"]) for e in compute if e["pid"] == 1]
    for a in range(2, od["active_arrays"] + 1):
        assert [(e["ts"], e["dur"], e["name"]) for e in compute if e["pid"] == a] == first
    # written bytes are the engine's; so are the read bytes where no shared buffer is involved
    assert sum(e["args"]["bytes"] for e in spans if e["tid"] == 4) == st.dram_write_bytes
    if set(st.mapping["shared_buffer"].values()) == {"dram"}:
        assert sum(e["args"]["bytes"] for e in spans if e["tid"] in (1, 2)) == \
            st.dram_read_bytes
    for e in spans:
        assert set(e["args"]["block"]) == {"batch", "m", "n", "k"}
        assert ("macs" in e["args"]) == (e["tid"] == 3)
        assert ("source" in e["args"]) == (e["tid"] in (1, 2))


def test_shared_buffer_sources_are_named():
    tr = gemm_trace(64, 4096, 8192, load_chip("tpu-v4"))
    sources = {e["args"]["source"] for e in _spans(tr) if e["tid"] in (1, 2)}
    assert "DRAM" in sources and any("read once for the 8 arrays" in s for s in sources)


def test_written_file_creates_its_folder(tmp_path):
    p = tmp_path / "out" / "t.json"
    write_gemm_trace(p, 256, 256, 256, load_chip("tpu-v4"))
    d = json.loads(p.read_text())
    assert "same schedule" in d["otherData"]["note"] and d["traceEvents"]


def test_run_trace_spans_carry_the_op_records():
    from roofline_double import roofline

    from diptych.sim.run import run_workload
    from diptych.sim.run.trace import chrome_trace

    # chrome_trace draws a summed run (execution="sum"; a schedule has schedule_trace)
    res = run_workload("infer-2026", "llama-3-8b",
                       Scenario.of(phase="decode", batch=4, prompt=256, execution="sum"),
                       simulate=roofline)
    ev = [e for e in chrome_trace(res.layers)["traceEvents"] if e["ph"] == "X"]
    recs = {r["op"]: r for r in res.layers}
    qkv = [e for e in ev if e["name"] == "qkv_proj"]
    assert len(qkv) == recs["qkv_proj"]["repeat"]
    for k in ("flops", "dram_bytes", "dtype", "utilization"):
        assert qkv[0]["args"][k] == recs["qkv_proj"][k]
    assert sum(e["args"].get("flops", 0) for e in ev) == pytest.approx(
        sum(r["flops"] * r["repeat"] for r in res.layers))


def test_large_traces_show_the_first_blocks_of_every_array(monkeypatch):
    import diptych.sim.trace as T

    monkeypatch.setattr(T, "MAX_SHOWN_BLOCKS", 64)
    tr = T.gemm_trace(3000, 1000, 5000, load_chip("infer-2026"))      # 64 arrays, 5 blocks each
    od = tr["otherData"]
    assert (od["active_arrays"], od["blocks_per_array"], od["blocks_shown_per_array"]) == (64, 5, 1)
    compute = [e for e in _spans(tr) if e["tid"] == 3]
    assert len(compute) == 64 and {e["args"]["block"]["k"] for e in compute} == {0}

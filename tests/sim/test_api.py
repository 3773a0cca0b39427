"""The public API, the CLI and their error messages."""

import json

import pytest
from click.testing import CliRunner

from diptych.arch import load_chip
from diptych.sim import OpStats, simulate, simulate_gemm
from diptych.workloads.ops import Gemm
from diptych.sim.vector import elementwise_op, norm_op, softmax_op
from diptych.tools.cli import main

KEYS = ["cycles", "seconds", "compute_cycles", "stall_cycles", "macs", "utilization",
        "dram_read_bytes", "dram_write_bytes", "dram_bytes_per_s", "energy_j", "mapping"]


def test_simulate_gemm_reports_everything():
    chip = load_chip("tpu-v4")
    st = simulate_gemm(512, 512, 512, chip)
    assert isinstance(st, OpStats) and st.kind == "gemm"
    d = st.to_dict()
    for k in KEYS:
        assert k in d
    json.dumps(d)
    assert set(st.stall_breakdown) == {"dram", "fill_drain", "writeback"}
    assert set(st.energy_breakdown) == {"mac", "sram", "dram", "vector", "static"}
    assert st.energy_j == pytest.approx(sum(st.energy_breakdown.values()))
    assert st.macs == 512 ** 3 and st.flops == 2 * 512 ** 3
    assert st.seconds == pytest.approx(st.cycles / chip.clock_hz)


def test_memoised_by_shape_not_name():
    chip = load_chip("tpu-v4")
    a = simulate(Gemm(name="x", m=64, k=256, n=512), chip)
    b = simulate(Gemm(name="y", m=64, k=256, n=512), chip)
    assert a.name == "x" and b.name == "y" and a.cycles == b.cycles


def test_gemv_streams_the_weights_once():
    chip = load_chip("infer-2026")
    for m in (1, 8, 64):
        st = simulate_gemm(m, 8192, 8192, chip, dtype="fp8")
        w = 8192 * 8192
        # weights once; A (m × 8192 FP8) at most once per array, as every array splitting N
        # needs all of it
        assert st.dram_read_bytes <= 1.05 * (w + m * 8192 * chip.arrays)
        # the mapper's choice is at least as good as every single dataflow
        for df in chip.core.array.dataflows:
            assert st.cycles <= simulate_gemm(m, 8192, 8192, chip, dtype="fp8", dataflow=df).cycles


@pytest.mark.parametrize("args,msg", [
    ((0, 4, 4), "m must be a positive integer, not 0"),
    ((4, -1, 4), "k must be a positive integer, not -1"),
    ((4, 4, 2.5), "n must be a positive integer, not 2.5"),
])
def test_bad_dimensions(args, msg):
    with pytest.raises(ValueError, match=msg):
        simulate_gemm(*args, load_chip("tpu-v4"))


def test_unsupported_dtype_and_dataflow():
    chip = load_chip("tpu-v1")
    with pytest.raises(ValueError, match=r"dtype 'bf16' is not supported by chip 'tpu-v1' \(supported: int8\)"):
        simulate_gemm(8, 8, 8, chip, dtype="bf16")
    with pytest.raises(ValueError, match=r"dataflow 'os' is not supported by chip 'tpu-v1' \(supported: ws\)"):
        simulate_gemm(8, 8, 8, chip, dataflow="os")
    with pytest.raises(ValueError, match="dataflow must be one of os, ws, is, not 'xs'"):
        simulate_gemm(8, 8, 8, chip, dataflow="xs")


def test_scratchpad_too_small():
    import dataclasses
    c = load_chip("tpu-v4")
    sp = dataclasses.replace(c.core.scratchpad, capacity_mib=0.001)
    tiny = dataclasses.replace(c, core=dataclasses.replace(c.core, scratchpad=sp), area_budget_mm2=0.0)
    with pytest.raises(ValueError, match="scratchpad too small for the minimal tile"):
        simulate_gemm(512, 512, 512, tiny)


def test_cli_json_and_errors(tmp_path):
    r = CliRunner().invoke(main, ["gemm", "128", "256", "512", "--chip", "tpu-v4", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for k in KEYS:
        assert k in d
    assert d["cycles"] == simulate_gemm(128, 256, 512, load_chip("tpu-v4")).cycles
    r = CliRunner().invoke(main, ["gemm", "0", "4", "4", "--chip", "tpu-v4"])
    assert r.exit_code == 2 and "m must be a positive integer, not 0" in r.output
    r = CliRunner().invoke(main, ["gemm", "4", "4", "4", "--chip", "tpu-v1", "--dtype", "bf16"])
    assert r.exit_code == 2 and "not supported by chip 'tpu-v1'" in r.output
    r = CliRunner().invoke(main, ["gemm", "4", "4", "4", "--chip", "tpu-v1", "--dataflow", "is"])
    assert r.exit_code == 2 and "dataflow 'is' is not supported" in r.output


def test_cli_trace(tmp_path):
    p = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["gemm", "512", "512", "512", "--chip", "tpu-v4", "--trace", str(p)])
    assert r.exit_code == 0, r.output
    ev = json.loads(p.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"DMA-in X", "DMA-in W", "compute", "write-back"} <= names
    assert any(n.startswith("pseudo-channel") for n in names)
    spans = [e for e in ev if e["ph"] == "X"]
    assert spans and all(e["dur"] > 0 for e in spans)


def test_vector_ops():
    chip = load_chip("tpu-v4")
    for op in (elementwise_op("add", 1 << 20, inputs=2, kind="add"), softmax_op("sm", 64, 4096),
               norm_op("rms", 64, 8192), norm_op("ln", 64, 8192, kind="layernorm")):
        st = simulate(op, chip)
        assert st.kind == "vector"
        assert st.dram_read_bytes == op.read_bytes and st.dram_write_bytes == op.write_bytes
        assert st.cycles >= op.flops / (chip.vector_ops_per_s / chip.clock_hz)
        assert st.cycles >= (op.read_bytes + op.write_bytes) / (chip.dram_bytes_per_s / chip.clock_hz)
        assert st.energy_breakdown["vector"] > 0 or op.ops_per_element == 0
    big = simulate(elementwise_op("a", 1 << 22), chip)
    small = simulate(elementwise_op("a", 1 << 20), chip)
    assert big.cycles > 3 * small.cycles


def test_simulate_many_equals_simulate_in_order_serial_and_forked():
    from diptych.sim import simulate_many
    chip = load_chip("tpu-v4")
    ops = [Gemm(name=f"g{i}", m=m, k=k, n=n)
           for i, (m, k, n) in enumerate([(1, 256, 512), (64, 512, 256), (1, 256, 512),
                                          (128, 128, 128), (8, 1024, 384), (256, 256, 300),
                                          (2, 640, 128), (33, 128, 200), (64, 512, 256)])]
    want = [simulate(op, chip) for op in ops]
    assert simulate_many(ops, chip, workers=1) == want
    assert simulate_many(ops, chip, workers=2) == want  # 7 distinct shapes < 4 x 2: serial
    got = simulate_many(ops * 4, chip, workers=2)         # still 7 distinct
    assert got == want * 4
    many = [Gemm(name=f"h{i}", m=1 + 7 * i, k=128 + 32 * i, n=256) for i in range(12)]
    assert simulate_many(many, chip, workers=2) == [simulate(op, chip) for op in many]  # forked
    with pytest.raises(ValueError, match="workers must be a positive integer, not 0"):
        simulate_many(ops, chip, workers=0)

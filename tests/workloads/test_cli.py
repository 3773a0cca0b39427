"""`diptych models` and `diptych run` through click, engine replaced by the roofline double."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from roofline_double import roofline

import diptych.sim.run.node as run_mod
from diptych.tools.cli import main


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args))


def test_models_list_and_show(cli):
    r = cli("models", "list")
    assert r.exit_code == 0 and "llama-3.1-405b" in r.output and "671.03 B" in r.output
    r = cli("models", "show", "llama-3-70b", "--json")
    d = json.loads(r.output)
    assert d["parameters"] == 70_553_706_496
    assert d["kv_bytes_per_token"]["bf16"] == 327_680
    assert d["kv_bytes_per_token"]["fp8"] == 163_840
    r = cli("models", "show", "mixtral-8x7b")
    assert r.exit_code == 0 and "top-2" in r.output
    assert "every token" not in r.output           # no windows: no per-kind rows


def test_models_show_states_full_and_windowed_kv(cli):
    # gpt-oss-120b: 18 sliding (128) and 18 full layers of 2 · 8 KV heads · 64 · 2 B
    r = cli("models", "show", "gpt-oss-120b")
    assert r.exit_code == 0, r.output
    per_kind = 18 * 2 * 8 * 64 * 2
    assert f"18 × sliding 128 │ {per_kind:,} B/token (at most 128 tokens a sequence)" \
        in r.output
    assert f"18 × full        │ {per_kind:,} B/token (every token)" in r.output


def test_run_json_keys(cli):
    r = cli("run", "--chip", "train-2026", "--model", "llama-3-8b", "--phase", "decode",
            "--batch", "4", "--prompt", "256", "--gen", "8", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for k in ("seconds", "flops", "dram_bytes", "mfu", "ttft_s", "tpot_s", "tokens_per_s",
              "energy_j_per_token", "fits", "memory_bytes", "layers"):
        assert k in d
    assert d["layers"][0]["op"] == "embed_tokens"


def test_run_table_and_curve(cli, tmp_path):
    trace = tmp_path / "t.json"
    r = cli("run", "--chip", "infer-2026", "--model", "llama-3-8b", "--phase", "decode",
            "--batch", "1,64,2048", "--prompt", "16", "--trace", str(trace),
            "--execution", "sum")
    assert r.exit_code == 0, r.output
    assert "batching curve" in r.output and "compute-bound" in r.output
    ev = json.loads(trace.read_text())["traceEvents"]
    # the summed run's trace expands every layer (the schedule's shows the simulated repeats:
    # tests/workloads/test_execute.py)
    assert sum(e.get("name") == "qkv_proj" for e in ev) == 32     # one per layer
    r = cli("run", "--chip", "infer-2026", "--model", "llama-3-8b", "--phase", "decode",
            "--batch", "1,2048", "--prompt", "16", "--json")
    d = json.loads(r.output)
    assert [x["batch"] for x in d["curve"]] == [1, 2048]
    assert d["compute_bound_batch"] == 2048


def test_run_training_and_tp(cli):
    r = cli("run", "--chip", "train-2026", "--model", "llama-3-8b", "--phase", "train",
            "--batch", "8", "--seq", "1024", "--chips", "8", "--tp", "2", "--json")
    d = json.loads(r.output)
    assert (d["tp"], d["dp"], d["chips"]) == (2, 4, 8)
    assert any(x["op"] == "grad_all_reduce" for x in d["layers"])


def test_run_topology(cli, tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("Layer,M,N,K,\nA,256,256,256,\n")
    r = cli("run", "--chip", "tpu-v4", "--topology", str(p), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["flops"] == 2 * 256**3


@pytest.mark.parametrize("args,msg", [
    (["--batch", "0"], "batch must be a positive integer, not 0"),
    (["--batch", "1,x"], "not 'x'"),
    (["--prompt", "-3"], "prompt must be a positive integer, not -3"),
    (["--tp", "3"], "tp=3 cannot split llama-3-8b"),
    (["--model", "gpt-9"], "unknown model 'gpt-9'"),
])
def test_bad_input_exit_2(cli, args, msg):
    base = ["run", "--chip", "train-2026", "--model", "llama-3-8b", "--phase", "decode",
            "--prompt", "16"]
    r = cli(*base, *args)
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output


def test_bad_config_files_exit_2(cli, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"architectures": ["T5ForConditionalGeneration"]}))
    r = cli("models", "show", str(p))
    assert r.exit_code == 2 and "LlamaForCausalLM" in r.output
    p.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 100,
                             "num_attention_heads": 3, "intermediate_size": 8,
                             "num_hidden_layers": 1, "vocab_size": 10,
                             "max_position_embeddings": 16}))
    r = cli("run", "--chip", "train-2026", "--model", str(p), "--prompt", "4")
    assert r.exit_code == 2 and "must be divisible by num_attention_heads" in r.output
    csv = tmp_path / "bad.csv"
    csv.write_text("Layer,M,N,K,\nA,1,2,3,\nB,4,,6,\n")
    r = cli("run", "--chip", "train-2026", "--topology", str(csv))
    assert r.exit_code == 2 and "bad.csv:3" in r.output


def test_context_warning_goes_to_stderr(cli):
    r = cli("run", "--chip", "train-2026", "--model", "llama-3-8b", "--phase", "decode",
            "--prompt", "9000", "--json")
    assert r.exit_code == 0
    assert "Warning: context of 9001 tokens exceeds" in r.output

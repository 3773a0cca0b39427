"""`diptych serve` through click (the engine replaced by the roofline double): the JSON keys,
sweeps, traces, the Vidur-style profile export and every bad input's exit code 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest


EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "trace-small.csv")
KEYS = {"ttft_s", "tpot_s", "e2e_s", "tokens_per_s", "tokens_per_s_per_chip", "goodput_rps",
        "tokens_per_j", "kv_peak_fraction", "preemptions", "requests", "chips"}
BASE = ("serve", "--chip", "h100", "--model", "llama-3-8b")




def test_json_has_the_issue_keys(cli):
    r = cli(*BASE, "--qps", 4, "--requests", 60, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert KEYS <= set(d)
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(d[k]) == {"mean", "p50", "p90", "p99"}
        assert d[k]["p50"] <= d[k]["p90"] <= d[k]["p99"]
    assert d["requests"] == 60 and d["chips"] == 1
    assert d["tokens_per_s_per_chip"] == pytest.approx(d["tokens_per_s"])
    assert 0 < d["kv_peak_fraction"] <= 1 and d["preemptions"] == 0


def test_table_output_and_trace_file(cli, tmp_path):
    out = tmp_path / "serve.json"
    r = cli(*BASE, "--trace", EXAMPLE, "--trace-out", out)
    assert r.exit_code == 0, r.output
    assert "time to first token" in r.output and "goodput" in r.output
    ev = json.loads(out.read_text())["traceEvents"]
    steps = [e for e in ev if e.get("name") == "step"]
    begins = [e for e in ev if e.get("ph") == "b" and e["name"].startswith("request ")]
    assert steps and len(begins) == 120
    assert all(e["dur"] > 0 for e in steps)


def test_closed_loop_disaggregated_and_speculative_runs(cli):
    r = cli("serve", "--model", "llama-3-70b", "--prefill-chip", "train-2026",
            "--prefill-chips", 1, "--decode-chip", "infer-2026", "--decode-chips", 1,
            "--concurrency", 4, "--requests", 12, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["chips"] == 2 and d["info"]["kv_transfer_bytes"] > 0
    r = cli(*BASE, "--concurrency", 4, "--requests", 12, "--speculative",
            "draft=none,k=3,accept=0.8", "--prefix-share", 0.25, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["info"]["expected_tokens_per_verify"] == pytest.approx(
        (1 - 0.8 ** 4) / 0.2)


def test_sweep_json_and_plot(cli, tmp_path):
    png = tmp_path / "curve.png"
    r = cli(*BASE, "--sweep-qps", "2:30:3", "--requests", 40, "--plot", png, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert [p["qps"] for p in d["points"]] == [2, 16, 30]
    assert d["points"][0]["meets_slo"]
    assert png.stat().st_size > 1000
    # the highest load meeting the SLOs with goodput within the tolerance of its load
    ok = [p["qps"] for p in d["points"] if p["meets_slo"] and p["sustained"]]
    assert d["max_qps_meeting_slo"] == (max(ok) if ok else None)
    for p in d["points"]:
        assert p["sustained"] == (p["goodput_rps"] >= (1 - d["goodput_tolerance"]) * p["qps"])


def test_export_profile_in_vidur_layout(cli, tmp_path):
    r = cli("serve", "--chip", "h100", "--model", "llama-3-70b", "--tp", 2,
            "--max-batched-tokens", 512, "--max-batch", 16, "--export-profile", tmp_path / "p")
    assert r.exit_code == 0, r.output
    with open(tmp_path / "p" / "mlp.csv") as fh:
        rows = list(csv.DictReader(fh))
    cols = set(rows[0])
    for op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "mlp_act",
               "input_layernorm", "post_attention_layernorm", "attn_rope", "add"):
        assert f"time_stats.{op}.median" in cols
    assert {"num_tokens", "num_tensor_parallel_workers", "n_embd", "n_head"} <= cols
    assert int(rows[0]["num_tokens"]) == 512 and rows[0]["num_tensor_parallel_workers"] == "2"
    with open(tmp_path / "p" / "attention.csv") as fh:
        att = list(csv.DictReader(fh))
    dec = [a for a in att if a["is_prefill"] == "False"]
    pre = [a for a in att if a["is_prefill"] == "True"]
    assert dec and pre and dec[0]["time_stats.attn_decode.median"]
    assert (tmp_path / "p" / "all_reduce.csv").exists()
    meta = json.loads((tmp_path / "p" / "profile.json").read_text())
    assert meta["chip"] == "h100" and meta["tensor_parallel"] == 2


@pytest.mark.parametrize("args,match", [
    (("--qps", 0), "qps must be a positive number"),
    (("--qps", -2), "qps must be a positive number"),
    (("--qps", 1, "--slo-ttft", 0), "slo_ttft_s must be a positive number of seconds, not 0"),
    (("--qps", 1, "--slo-tpot", -0.1), "slo_tpot_s must be a positive"),
    (("--qps", 1, "--prompt", 9000), "9000 prompt tokens does not fit the model's context"),
    (("--qps", 1, "--prompt", "lognormal:mean=10"), "exactly mean, sigma"),
    (("--qps", 1, "--concurrency", 2), "exactly one of"),
    ((), "exactly one of --qps"),
    (("--qps", 1, "--speculative", "k=3"), "draft=MODEL,k=K,accept=P"),
    (("--qps", 1, "--speculative", "k=2,accept=1.5"), "accept must be a probability"),
    (("--qps", 1, "--prefix-share", 2), "prefix share must be a fraction"),
    (("--sweep-qps", "5:1:3"), "HI"),
    (("--qps", 1, "--plot", "x.png"), "--sweep-qps"),
])
def test_bad_input_exits_2_naming_the_value(cli, args, match):
    r = cli(*BASE, *args)
    assert r.exit_code == 2, r.output
    assert match in r.output


def test_bad_traces_exit_2_with_file_and_line(cli, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("arrival_s,prompt_tokens,output_tokens\n")
    r = cli(*BASE, "--trace", empty)
    assert r.exit_code == 2 and "holds no requests" in r.output
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n0.1,100,10\n0.2,oops,10\n")
    r = cli(*BASE, "--trace", bad)
    assert r.exit_code == 2 and f"{bad}:3: prompt_tokens must be a positive integer" in r.output
    long = tmp_path / "long.csv"
    long.write_text("arrival_s,prompt_tokens,output_tokens\n0.1,8000,500\n")
    r = cli(*BASE, "--trace", long)
    assert r.exit_code == 2 and "8000 prompt + 500 output tokens" in r.output


def test_prompt_beyond_the_kv_capacity_of_one_sequence_exits_2(cli, tmp_path):
    chip = tmp_path / "small-hbm.toml"
    src = (Path(__file__).resolve().parents[2] / "arch" / "chips" / "h100.toml").read_text()
    chip.write_text(src.replace('name = "h100"', 'name = "h100-18g"').replace(
        "capacity_gib = 80.0", "capacity_gib = 18.0"))
    r = cli("serve", "--chip", chip, "--model", "llama-3-8b", "--tp", 1, "--qps", 1,
            "--prompt", 6000, "--gen", 2000, "--requests", 3)
    assert r.exit_code == 2, r.output
    assert "needs 8000 tokens of KV cache, more than the" in r.output


def test_execution_defaults_to_runs_and_the_grid_schedules(cli):
    r = cli(*BASE, "--qps", 4, "--requests", 20, "--json")
    assert r.exit_code == 0, r.output
    run = cli("run", "--chip", "h100", "--model", "llama-3-8b", "--phase", "decode",
              "--batch", 1, "--prompt", 10, "--json")
    assert run.exit_code == 0, run.output
    assert json.loads(r.output)["info"]["execution"] == json.loads(run.output)["execution"]
    for extra in ((), ("--no-fusion",)):
        r = cli(*BASE, "--qps", 4, "--requests", 20, "--execution", "schedule", *extra,
                "--json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["info"]["execution"] == "schedule"
    r = cli(*BASE, "--qps", 4, "--requests", 5, "--execution", "schedule", "--attention",
            "unfused")
    assert r.exit_code == 2 and "--oracle direct" in r.output

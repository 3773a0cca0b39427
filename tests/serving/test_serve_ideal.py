"""``serve --ideal`` (sim/serving/ideal.py, issue 21 item 7): a deployment's bound, every
overhead left out. Checked against the serving waterfall of the same load (a different path:
its levels turn the mechanisms on one at a time), against the run with only the runtime's
host costs left out, and for the bad input the issue names (a runtime with host costs, a
recipe: exit 2 naming it)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from roofline_double import roofline
from test_serving_engine import _spaced_trace

from diptych.arch.runtime import IDEAL as IDEAL_RUNTIME, load_runtime
from diptych.sim.run import Scenario
from diptych.sim.run.variant import IDEAL
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.ideal import ideal
from diptych.sim.serving.serve import Deployment, Load, Pool, StepTimerCache, colocated, serve
from diptych.sim.serving.step_time import make_replica
from diptych.tools.cli import main


def _busy(res) -> float:
    return sum(sum(i.rec_dt) for i in res.instances)


def _steps(res) -> dict:
    return {s["mechanism"]: s for s in res.waterfall["steps"]}


def test_the_bound_is_the_run_less_its_overheads(tmp_path):
    """Four lone requests of 512 + 8 tokens on one h100 under its own runtime (vLLM V1): the
    bound runs that runtime without its host costs, and its busy time is the waterfall's
    work levels (GEMMs and attention, vector work, recipe ops; one chip has no collective),
    i.e. the run less its launches, power limit and host costs, which are not zero here;
    every latency falls. The same runtime named without its host costs gives the same bound."""
    dep = colocated("h100", "llama-3-8b", execution="sum")
    load = Load(trace=_spaced_trace(tmp_path, 4, 512, 8))
    res = serve(dep, load, ServeConfig(), oracles=StepTimerCache("direct", roofline),
                waterfall=True)
    st = _steps(res)
    assert res.info["runtime"] == "vllm-v1"
    assert st["launches"]["busy_s"] > 0.0 and st["host"]["busy_s"] > 0.0
    d2, c2 = ideal(dep)
    assert c2.runtime.name == "vllm-v1 without host costs" and c2.runtime.is_ideal
    bound = serve(d2, load, c2, oracles=StepTimerCache("direct", roofline))
    work = st["gemm"]["busy_s"] + st["non_gemm"]["busy_s"] + st["recipe"]["busy_s"]
    assert _busy(bound) == pytest.approx(work, rel=1e-9)
    assert _busy(res) - _busy(bound) == pytest.approx(
        st["launches"]["busy_s"] + st["power"]["busy_s"] + st["host"]["busy_s"], rel=1e-9)
    assert bound.ttft_s["mean"] < res.ttft_s["mean"]
    assert bound.tpot_s["mean"] < res.tpot_s["mean"]
    assert bound.info["pools"][0]["variant"] == dataclasses.asdict(IDEAL)
    assert "variant" not in res.info["pools"][0]       # a run as it is: no key added
    assert bound.to_dict()["deployment"].endswith(" (ideal)")
    assert not res.to_dict()["deployment"].endswith(" (ideal)")
    # a runtime with no host costs, named: accepted, its engine settings kept
    d3, c3 = ideal(dep, ServeConfig(runtime=load_runtime("vllm-v1").without_host()))
    same = serve(d3, load, c3, oracles=StepTimerCache("direct", roofline))
    assert _busy(same) == _busy(bound) and same.tpot_s == bound.tpot_s


def test_tensor_parallel_collectives_at_line_rate(tmp_path):
    """TP2: the bound's all-reduces run at the links' raw rate: faster than the same variant
    without ``raw_links``, and the same whichever all-reduce kernels the engine has (an
    engine's own kernels need the chip's collective library table, which the raw links drop:
    TensorRT-LLM's one-shot kernel gives way too)."""
    dep = colocated("h100", "llama-3-8b", tp=2, execution="sum")
    load = Load(trace=_spaced_trace(tmp_path, 3, 256, 4))
    d2, c2 = ideal(dep)
    bound = serve(d2, load, c2, oracles=StepTimerCache("direct", roofline))
    library = dep.with_replicas(variant=dataclasses.replace(IDEAL, raw_links=False))
    slower = serve(library, load, c2, oracles=StepTimerCache("direct", roofline))
    assert _busy(bound) < _busy(slower) and bound.tpot_s["mean"] < slower.tpot_s["mean"]
    assert bound.info["pools"][0]["variant"]["raw_links"] is True
    trt = load_runtime("trtllm-bench").without_host()
    assert trt.all_reduce == "trtllm"
    runs = []
    for engine in ("trtllm", "nccl"):
        d, c = ideal(dep, ServeConfig(runtime=dataclasses.replace(trt, all_reduce=engine)))
        runs.append(serve(d, load, c, oracles=StepTimerCache("direct", roofline)))
    assert _busy(runs[0]) == _busy(runs[1]) and runs[0].tpot_s == runs[1].tpot_s


def test_an_afd_deployment_s_ffn_replica_too():
    from diptych.sim.serving.afd import AfdSpec
    from diptych.sim.serving.deployment import afd_deployment

    dep = afd_deployment("h100", "h100", "qwen3-30b-a3b", AfdSpec(1, 2, 2))
    d2, _ = ideal(dep, ServeConfig(runtime=IDEAL_RUNTIME))
    assert d2.pool.replica.variant == IDEAL and d2.afd.ffn.variant == IDEAL
    assert d2.describe().endswith(" (ideal)")


def test_every_pool_of_a_disaggregated_deployment():
    s = Scenario.of(phase="decode")
    dep = Deployment(prefill=Pool(make_replica("h100", "llama-3-8b", s)),
                     decode=Pool(make_replica("h100", "llama-3-8b", s), 2))
    d2, c2 = ideal(dep, None)
    assert [p.replica.variant for _, p in d2.roles] == [IDEAL, IDEAL]
    assert [p.replicas for _, p in d2.roles] == [1, 2]
    assert c2.runtime.name == "vllm-v1 without host costs"


def test_bad_input_names_what_contradicts_it():
    dep = colocated("h100", "llama-3-8b")
    with pytest.raises(ValueError, match="--runtime vllm-v1 charges them"):
        ideal(dep, ServeConfig(runtime=load_runtime("vllm-v1")))
    fp8 = colocated("h100", "llama-3-8b", weights_dtype="fp8", recipe="fp8-static")
    with pytest.raises(ValueError, match="--recipe fp8-static"):
        ideal(fp8)
    base = ["serve", "--chip", "h100", "--model", "llama-3-8b", "--qps", "2", "--requests", "4",
            "--prompt", "128", "--gen", "4", "--ideal"]
    r = CliRunner().invoke(main, base + ["--runtime", "trtllm-bench"])
    assert r.exit_code == 2 and "--ideal" in r.output and "trtllm-bench" in r.output
    r = CliRunner().invoke(main, base + ["--weights-dtype", "fp8", "--recipe", "fp8-static"])
    assert r.exit_code == 2 and "--ideal" in r.output and "fp8-static" in r.output
    r = CliRunner().invoke(main, base + ["--export-profile", "out/never"])
    assert r.exit_code == 2 and "--export-profile" in r.output and "--ideal" in r.output


def test_cli_json_and_report():
    base = ["serve", "--chip", "h100", "--model", "llama-3-8b", "--qps", "2", "--requests", "4",
            "--prompt", "128", "--gen", "4"]
    r = CliRunner().invoke(main, base + ["--ideal", "--runtime", "ideal", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["info"]["runtime"] == "ideal"
    assert d["info"]["pools"][0]["variant"] == dataclasses.asdict(IDEAL)
    r = CliRunner().invoke(main, base + ["--ideal"])
    assert r.exit_code == 0, r.output
    assert "left out" in r.output and "the power limit" in r.output

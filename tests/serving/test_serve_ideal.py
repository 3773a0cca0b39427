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
    """Four lone requests of 512 + 8 tokens on one h100 under vLLM V1's engine: the bound's
    busy time is the waterfall's work levels (GEMMs and attention, vector work, recipe ops;
    one chip has no collective), i.e. the run less its launches, power limit and host costs,
    which are not zero here; every latency falls."""
    dep = colocated("h100", "llama-3-8b", execution="sum")
    load = Load(trace=_spaced_trace(tmp_path, 4, 512, 8))
    rt = load_runtime("vllm-v1")
    res = serve(dep, load, ServeConfig(runtime=rt), oracles=StepTimerCache("direct", roofline),
                waterfall=True)
    st = _steps(res)
    assert st["launches"]["busy_s"] > 0.0 and st["host"]["busy_s"] > 0.0
    # the same engine without its host costs (its sampler and KV sizing kept, as the
    # waterfall's levels keep them): accepted, as a runtime with no host cost
    d2, c2 = ideal(dep, ServeConfig(runtime=rt.without_host()))
    bound = serve(d2, load, c2, oracles=StepTimerCache("direct", roofline))
    work = st["gemm"]["busy_s"] + st["non_gemm"]["busy_s"] + st["recipe"]["busy_s"]
    assert _busy(bound) == pytest.approx(work, rel=1e-9)
    assert _busy(res) - _busy(bound) == pytest.approx(
        st["launches"]["busy_s"] + st["power"]["busy_s"] + st["host"]["busy_s"], rel=1e-9)
    assert bound.ttft_s["mean"] < res.ttft_s["mean"]
    assert bound.tpot_s["mean"] < res.tpot_s["mean"]
    assert bound.info["pools"][0]["variant"] == dataclasses.asdict(IDEAL)
    assert "variant" not in res.info["pools"][0]       # a run as it is: no key added


def test_tensor_parallel_collectives_at_line_rate(tmp_path):
    """TP2: the bound is faster than the chip alone with its overheads (the ``ideal``
    runtime), its all-reduces at the links' raw rate and without launches."""
    dep = colocated("h100", "llama-3-8b", tp=2, execution="sum")
    load = Load(trace=_spaced_trace(tmp_path, 3, 256, 4))
    chip_alone = serve(dep, load, ServeConfig(runtime=IDEAL_RUNTIME),
                       oracles=StepTimerCache("direct", roofline))
    d2, c2 = ideal(dep)
    bound = serve(d2, load, c2, oracles=StepTimerCache("direct", roofline))
    assert _busy(bound) < _busy(chip_alone)
    assert bound.tpot_s["mean"] < chip_alone.tpot_s["mean"]
    assert bound.info["runtime"] == IDEAL_RUNTIME.name
    assert bound.info["pools"][0]["variant"]["raw_links"] is True


def test_every_pool_of_a_disaggregated_deployment():
    s = Scenario.of(phase="decode")
    dep = Deployment(prefill=Pool(make_replica("h100", "llama-3-8b", s)),
                     decode=Pool(make_replica("h100", "llama-3-8b", s), 2))
    d2, c2 = ideal(dep, None)
    assert [p.replica.variant for _, p in d2.roles] == [IDEAL, IDEAL]
    assert [p.replicas for _, p in d2.roles] == [1, 2]
    assert c2.runtime is IDEAL_RUNTIME


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

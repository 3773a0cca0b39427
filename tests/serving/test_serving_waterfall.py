"""The serving waterfall (sim/serving/waterfall.py, issue 21 item 7): each level is the same
load served with one more mechanism on; checked against the run itself, against levels that
must add nothing (one chip: no collectives; the ideal runtime: no host time) and against
closed forms for requests that run alone (the fixed costs of a step)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from roofline_double import roofline
from test_serving_engine import _spaced_trace

from diptych.arch import load_chip
from diptych.arch.runtime import IDEAL, load_runtime
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
from diptych.sim.serving.step_time import DirectStepTimer
from diptych.sim.serving.waterfall import STEPS
from diptych.workloads.serving_step import Step
from diptych.tools.cli import main


def _steps(res) -> dict:
    return {s["mechanism"]: s for s in res.waterfall["steps"]}


def test_levels_add_up_to_the_run_and_each_adds_its_own_mechanism(tmp_path):
    """Four lone requests of 512 + 8 tokens on one h100, sync vLLM-V0-like host costs: the
    busy times add up to the run's; with one chip no collective exists; the host adds its
    per-step time; launches add the chip's fixed costs of every step."""
    dep = colocated("h100", "llama-3-8b", power_limit=False, execution="sum")
    rt = load_runtime("vllm-v0")
    load = Load(trace=_spaced_trace(tmp_path, 4, 512, 8))
    res = serve(dep, load, ServeConfig(runtime=rt), oracles=StepTimerCache("direct", roofline),
                waterfall=True)
    st = _steps(res)
    assert [s["mechanism"] for s in res.waterfall["steps"]] == [n for n, _ in STEPS]
    busy = sum(sum(i.rec_dt) for i in res.instances)
    assert res.waterfall["busy_s"] == pytest.approx(busy, rel=1e-12)
    assert sum(s["busy_s"] for s in st.values()) == pytest.approx(busy, rel=1e-12)
    assert sum(s["share"] for s in st.values()) == pytest.approx(1.0, rel=1e-12)
    assert st["host"]["ttft_s"] == pytest.approx(res.ttft_s["mean"], rel=1e-12)
    assert st["communication"]["busy_s"] == pytest.approx(0.0, abs=1e-12)   # one chip
    assert st["power"]["busy_s"] == pytest.approx(0.0, abs=1e-12)           # limit off
    # the host: per step fixed + per sequence + share of the device time (vLLM V0: sync)
    steps = sum(len(i.rec_dt) for i in res.instances)
    dev = busy - st["host"]["busy_s"]
    host = (rt.step_host_fixed_us + rt.step_host_per_seq_us) * 1e-6 * steps \
        + rt.step_host_device_fraction * dev
    assert st["host"]["busy_s"] == pytest.approx(host, rel=1e-9)
    # launches: the step's cost with and without the chip's [overheads], independently
    o = DirectStepTimer(dep.pool.replica, roofline)
    free = DirectStepTimer(dataclass_variant(dep.pool.replica), roofline)
    want = 4 * sum(o.cost(s).seconds - free.cost(s).seconds
                   for s in [Step(prefill=((512, 0),))] + [Step(1, 512 + i + 1)
                                                            for i in range(7)])
    assert st["launches"]["busy_s"] == pytest.approx(want, rel=1e-9)


def dataclass_variant(replica):
    """``replica`` with only its launches and syncs left out."""
    import dataclasses
    from diptych.sim.run.variant import Variant
    return dataclasses.replace(replica, variant=Variant(no_launches=True, no_power_limit=True))


def test_the_ideal_runtime_and_tensor_parallel_collectives(tmp_path):
    """TP2 on the ideal runtime: the host adds nothing; the all-reduces add time."""
    dep = colocated("h100", "llama-3-8b", tp=2, power_limit=False, execution="sum")
    res = serve(dep, Load(trace=_spaced_trace(tmp_path, 3, 256, 4)), ServeConfig(runtime=IDEAL),
                oracles=StepTimerCache("direct", roofline), waterfall=True)
    st = _steps(res)
    assert st["host"]["busy_s"] == pytest.approx(0.0, abs=1e-12)
    assert st["communication"]["busy_s"] > 0.0
    assert st["communication"]["tpot_s"] > st["launches"]["tpot_s"]


def test_a_hot_chip_charges_the_power_step(tmp_path):
    import dataclasses
    from diptych.sim.run import Scenario
    from diptych.sim.serving.serve import Deployment, Pool
    from diptych.sim.serving.step_time import make_replica

    hot = dataclasses.replace(load_chip("h100"), tdp_w=400.0)
    dep = Deployment(pool=Pool(make_replica(hot, "llama-3-8b", Scenario(phase="decode"))))
    res = serve(dep, Load(trace=_spaced_trace(tmp_path, 2, 2048, 2)),
                ServeConfig(runtime=IDEAL), oracles=StepTimerCache("direct", roofline),
                waterfall=True)
    st = _steps(res)
    assert st["power"]["busy_s"] == pytest.approx(res.info["power_limit"]["added_s"], rel=1e-9)
    assert st["power"]["ttft_s"] > st["communication"]["ttft_s"]


def test_cli_prints_the_waterfall_and_refuses_it_with_a_sweep():
    r = CliRunner().invoke(main, ["serve", "--chip", "h100", "--model", "llama-3-8b",
                                  "--qps", "2", "--requests", "4", "--prompt", "128", "--gen",
                                  "4", "--waterfall", "--json"])
    assert r.exit_code == 0, r.output
    wf = json.loads(r.output)["waterfall"]
    assert [s["mechanism"] for s in wf["steps"]] == [n for n, _ in STEPS]
    r = CliRunner().invoke(main, ["serve", "--chip", "h100", "--model", "llama-3-8b",
                                  "--sweep-qps", "1:2:2", "--waterfall"])
    assert r.exit_code == 2 and "--waterfall explains one run" in r.output

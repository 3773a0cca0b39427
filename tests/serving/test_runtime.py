"""The serving runtime's host costs (arch/runtime.py) against independent references:
closed forms for lone requests, the golden twin with non-zero profiles, `ideal` leaving
every number as the chip alone gives it, and the CLI's handling of the profile."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from roofline_double import roofline
from test_serving_engine import _golden_of

from diptych.arch.schema import ConfigError
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.step_time import DirectStepTimer
from diptych.sim.serving.requests import parse_length as P
from diptych.arch.runtime import IDEAL, RuntimeProfile, load_runtime, runtime_names
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
from diptych.workloads.serving_step import Step

# closed forms at the nominal clock: the roofline's prefill at full peak is above the h100's
# TDP, whose limit has its own tests (tests/serving/test_serving_power.py)
DEP8 = colocated("h100", "llama-3-8b", power_limit=False)
_ORACLES = StepTimerCache("grid", roofline)

#: a synchronous profile with every term non-zero, and an overlapped one whose fixed host
#: time (8 ms) exceeds a batch-1 decode step of the 8B model (~5 ms) but not a long prefill
SYNC = RuntimeProfile(name="sync", step_host_fixed_us=700.0, step_host_per_seq_us=15.0,
                      step_host_device_fraction=0.07, step_exposed_us=50.0,
                      request_in_us=2500.0, tokenize_us_per_token=3.0, token_out_us=400.0)
OVERLAP = dataclasses.replace(SYNC, name="overlap", overlap=True, step_host_fixed_us=8000.0)


def _spaced(tmp_path, n, prompt, gen, gap_s=10.0):
    p = tmp_path / "spaced.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n"
                 + "".join(f"{i * gap_s},{prompt},{gen}\n" for i in range(n)))
    return str(p)


def _host(rt: RuntimeProfile, device_s: float, seqs: int) -> float:
    """The profile's host time, written out from docs/serving.md's rule."""
    return (rt.step_host_fixed_us + rt.step_host_per_seq_us * seqs) * 1e-6 \
        + rt.step_host_device_fraction * device_s


@pytest.mark.parametrize("rt", [SYNC, OVERLAP], ids=lambda r: r.name)
def test_lone_request_closed_form(tmp_path, rt):
    """Requests 10 s apart run alone: TTFT = request path in (fixed + tokenising the prompt)
    + prefill step (device and host, summed or overlapped, + the exposed host time) + token
    path out; every ITL is one batch-1 decode step."""
    prompt, gen = 512, 24
    res = serve(DEP8, Load(trace=_spaced(tmp_path, 4, prompt, gen)),
                ServeConfig(runtime=rt), oracles=StepTimerCache("direct", roofline))
    o = DirectStepTimer(DEP8.pool.replica, roofline)
    pf = o.cost(Step(prefill=((prompt, 0),))).seconds
    dec = [o.cost(Step(1, prompt + i + 1)).seconds for i in range(gen - 1)]
    gap = rt.step_exposed_us * 1e-6
    if rt.overlap:
        step = [max(d, _host(rt, d, 1)) + gap for d in [pf] + dec]
        assert _host(rt, dec[0], 1) > dec[0]              # the host bounds a decode step
    else:
        step = [d + _host(rt, d, 1) + gap for d in [pf] + dec]
    request_in = (rt.request_in_us + rt.tokenize_us_per_token * prompt) * 1e-6
    ttft = request_in + step[0] + rt.token_out_us * 1e-6
    assert [r.first_t - r.arrival for r in res.reqs] == pytest.approx([ttft] * 4, rel=1e-12)
    itl = np.frombuffer(res.instances[0].itl, dtype=float)
    assert itl.tolist() == pytest.approx(step[1:] * 4, rel=1e-12)
    # TPOT is the decode steps alone: the response path's offset cancels
    assert res.tpot_s["mean"] == pytest.approx(sum(step[1:]) / (gen - 1), rel=1e-12)


OPEN = Load(qps=25, prompt=P("lognormal:mean=700,sigma=0.6"), gen=P("uniform:lo=1,hi=200"),
            requests=80)
CLOSED = Load(concurrency=8, prompt=P("uniform:lo=100,hi=900"), gen=P("uniform:lo=1,hi=80"),
              requests=30)
GOLDEN_CASES = {
    "chunked": (ServeConfig(), OPEN),
    "whole-prompts": (ServeConfig(chunked_prefill=False), OPEN),
    # a burst under a 2,048-token budget: prompts wait whole where split ones would be cut
    "whole-prompts-mixed": (ServeConfig(max_batched_tokens=2048, split_prompts=False),
                            Load(qps=200, prompt=P("lognormal:mean=700,sigma=0.6"),
                                 gen=P("uniform:lo=1,hi=200"), requests=80)),
    "swap": (ServeConfig(max_batched_tokens=512, kv_reserve_fraction=0.78, preemption="swap"),
             Load(qps=40, prompt=P("lognormal:mean=800,sigma=0.6"),
                  gen=P("uniform:lo=1,hi=600"), requests=80)),
    "static-closed-loop": (ServeConfig(scheduler="static", max_batch=6), CLOSED),
    "closed-loop": (ServeConfig(), CLOSED),
}


@pytest.mark.parametrize("rt", [SYNC, OVERLAP], ids=lambda r: r.name)
@pytest.mark.parametrize("case", list(GOLDEN_CASES))
def test_fast_loop_equals_golden_twin_with_host_costs(case, rt):
    base, load = GOLDEN_CASES[case]
    cfg = dataclasses.replace(base, runtime=rt)
    res = serve(DEP8, load, cfg, oracles=_ORACLES)
    g = _golden_of(res, DEP8, cfg, load, _ORACLES)
    fast = {r.rid: (r.arrival, r.first_t, r.finish_t) for r in res.reqs}
    gold = {r.rid: (r.arrival, r.first_t, r.finish_t) for r in g.requests}
    assert fast == gold
    assert list(res.instances[0].rec_dt) == [s[1] for s in g.steps]
    assert res.preemptions == g.preemptions


def test_host_costs_slow_the_mean_request_and_ideal_changes_nothing():
    """Against the same loop without a runtime: each non-zero profile makes the mean TTFT and
    end-to-end time longer and the throughput lower; `ideal` (loaded from its file, or the
    profile object) gives the same floats, step for step."""
    base = serve(DEP8, OPEN, ServeConfig(runtime=IDEAL), oracles=_ORACLES)
    ideal = serve(DEP8, OPEN, ServeConfig(runtime=load_runtime("ideal")), oracles=_ORACLES)
    assert load_runtime("ideal") == IDEAL and IDEAL.is_ideal
    key = lambda res: [(r.rid, r.first_t, r.finish_t) for r in res.reqs]  # noqa: E731
    assert key(ideal) == key(base)
    assert list(ideal.instances[0].rec_dt) == list(base.instances[0].rec_dt)
    assert ideal.energy_j == base.energy_j
    for rt in (SYNC, OVERLAP, *(load_runtime(n) for n in ("trtllm-triton", "vllm-v0",
                                                          "vllm-v1"))):
        slow = serve(DEP8, OPEN, ServeConfig(runtime=rt), oracles=_ORACLES)
        # (not every request: a later admission can meet a step boundary sooner)
        assert slow.ttft_s["mean"] > base.ttft_s["mean"], rt.name
        assert slow.e2e_s["mean"] > base.e2e_s["mean"], rt.name
        assert slow.tokens_per_s < base.tokens_per_s, rt.name


def test_shipped_profiles_load_and_state_their_model():
    names = runtime_names()
    assert {"ideal", "trtllm-triton", "trtllm-bench", "vllm-v0", "vllm-v1"} <= set(names)
    for n in names:
        rt = load_runtime(n)
        assert rt.name == n and rt.description
    # the Throughput rows' benchmark has no HTTP/tokeniser path; vLLM V0's loop is synchronous
    assert load_runtime("trtllm-bench").request_in_us == 0.0
    assert not load_runtime("vllm-v0").overlap
    # each vLLM generation schedules prompts its own way: V0 prefill first, V1 chunked
    assert load_runtime("vllm-v0").chunked_prefill is False
    assert load_runtime("vllm-v1").chunked_prefill is True


def _at_once(tmp_path, n, prompt, gen):
    p = tmp_path / "burst.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n"
                 + f"0,{prompt},{gen}\n" * n)
    return str(p)


def test_whole_prompts_mixed_closed_form(tmp_path):
    """TensorRT-LLM's in-flight batching without context chunking (`split_prompts` false): a
    prompt joins a step whole or waits. Ten 300-token prompts at once (one output token each,
    so no decodes) under a 1,000-token budget run as steps of 3, 3, 3 and 1 whole prompts;
    split, the same 3,000 tokens fill three steps of 1,000, each with a partial prompt."""
    trace = _at_once(tmp_path, 10, 300, 1)
    o = DirectStepTimer(DEP8.pool.replica, roofline)
    three = o.cost(Step(prefill=((300, 0),) * 3)).seconds
    one = o.cost(Step(prefill=((300, 0),))).seconds
    ends = np.cumsum([three, three, three, one])
    cfg = ServeConfig(max_batched_tokens=1000, split_prompts=False, runtime=IDEAL)
    res = serve(DEP8, Load(trace=trace), cfg, oracles=StepTimerCache("direct", roofline))
    assert list(res.instances[0].rec_dt) == pytest.approx([three, three, three, one],
                                                          rel=1e-12)
    assert sorted(r.first_t for r in res.reqs) == pytest.approx(
        [ends[i // 3] for i in range(10)], rel=1e-12)
    assert "whole prompts batched into decode steps" in res.info["scheduling"]
    split = serve(DEP8, Load(trace=trace), dataclasses.replace(cfg, split_prompts=True),
                  oracles=StepTimerCache("direct", roofline))
    assert len(split.instances[0].rec_dt) == 3


def test_whole_prompts_equal_split_when_every_prompt_fits():
    """When no step's prompts exceed the budget (the validation rows at QPS 2-16: at most
    three 467-token prompts a step), whole and split prompts plan the same steps: the same
    floats, request by request."""
    load = Load(qps=6, prompt=P("fixed:467"), gen=P("fixed:40"), requests=40)
    key = lambda res: [(r.rid, r.first_t, r.finish_t) for r in res.reqs]  # noqa: E731
    a = serve(DEP8, load, ServeConfig(split_prompts=True), oracles=_ORACLES)
    b = serve(DEP8, load, ServeConfig(split_prompts=False), oracles=_ORACLES)
    assert key(a) == key(b)
    assert list(a.instances[0].rec_dt) == list(b.instances[0].rec_dt)


def test_split_prompts_checked_and_stated():
    rt = load_runtime("trtllm-triton")
    # the tensorrtllm backend 0.14's default: context chunking off, contexts beside decodes
    assert rt.chunked_prefill is True and rt.split_prompts is False
    assert ServeConfig(runtime=rt).resolved().split_prompts is False
    assert ServeConfig().resolved().split_prompts is True
    assert load_runtime("vllm-v1").split_prompts is None
    with pytest.raises(ValueError, match="split_prompts must be true, false or None, not 'no'"):
        ServeConfig(split_prompts="no")
    long = Load(qps=2, prompt=P("fixed:3000"), gen=P("fixed:8"), requests=4)
    with pytest.raises(ValueError, match="whole prompts.*3008 tokens.*--split-prompts"):
        serve(DEP8, long, ServeConfig(max_batched_tokens=2048, split_prompts=False),
              oracles=_ORACLES)


@pytest.mark.parametrize("kw, why", [
    (dict(chunked_prefill=False, split_prompts=False), "chunked_prefill false"),
    (dict(chunked_prefill=False, split_prompts=True), "chunked_prefill false"),
    (dict(scheduler="static", split_prompts=False), "static scheduler"),
    (dict(scheduler="static", chunked_prefill=True, split_prompts=True), "static scheduler")])
def test_split_prompts_refused_where_it_would_do_nothing(kw, why):
    # review finding 3: prompts are whole there anyway, so an explicit value is an error
    with pytest.raises(ValueError, match=f"split_prompts {str(kw['split_prompts']).lower()}"
                                         f": it applies to chunked prefill.*{why}"):
        ServeConfig(**kw)


def test_split_prompts_inherited_where_it_does_not_apply_stays_silent():
    trt, v0 = load_runtime("trtllm-triton"), load_runtime("vllm-v0")
    # trtllm-triton's whole prompts do not apply to a static or a prefill-first run
    for cfg in (ServeConfig(scheduler="static", runtime=trt),
                ServeConfig(chunked_prefill=False, runtime=trt)):
        r = cfg.resolved()
        assert r.split_prompts is None and r.resolved() == r
    assert ServeConfig(runtime=v0).resolved().split_prompts is None
    # vllm-v0's prefill-first policy makes an explicit value do nothing: refused
    with pytest.raises(ValueError, match="runtime vllm-v0 runs prefill first"):
        ServeConfig(split_prompts=False, runtime=v0).resolved()
    assert ServeConfig(split_prompts=False, chunked_prefill=True,
                       runtime=v0).resolved().split_prompts is False


@pytest.mark.parametrize("args", [("--no-chunked-prefill", "--no-split-prompts"),
                                  ("--scheduler", "static", "--no-split-prompts"),
                                  ("--runtime", "vllm-v0", "--split-prompts")])
def test_cli_refuses_split_prompts_that_would_do_nothing(cli, args):
    r = cli(*BASE, *args, "--json")
    assert r.exit_code == 2 and "split_prompts" in r.output, r.output


def test_cli_split_prompts_flag(cli):
    d = json.loads(cli(*BASE, "--runtime", "trtllm-triton", "--json").output)
    assert d["config"]["split_prompts"] is False and "whole prompts" in d["info"]["scheduling"]
    s = json.loads(cli(*BASE, "--runtime", "trtllm-triton", "--split-prompts",
                       "--json").output)
    assert s["config"]["split_prompts"] is True and "chunked" in s["info"]["scheduling"]


def test_step_rule():
    assert SYNC.step_s(0.01, 3) == pytest.approx(0.01 + 700e-6 + 45e-6 + 0.0007 + 50e-6)
    assert OVERLAP.step_s(0.01, 3) == pytest.approx(0.01 + 50e-6)   # host hidden, gap not
    assert OVERLAP.step_s(0.002, 3) == pytest.approx(8e-3 + 45e-6 + 0.07 * 0.002 + 50e-6)
    assert SYNC.request_in_s(1000) == pytest.approx(2500e-6 + 3000e-6)


@pytest.mark.parametrize("text, match", [
    ("step_host_fixed_us = -1.0", "step_host_fixed_us: expected"),
    ("overlap = 3", "overlap: expected"),
    ('split_prompts = "no"', "split_prompts: expected true or false, got 'no'"),
    ("step_host_per_token_us = 1.0", "unknown key"),
    ('kv_sizing = "spare"', "kv_sizing: expected one of"),
    ("process_gib = -1.0", "process_gib: expected"),
    ("process_gib = 100.0", "process_gib: expected"),
])
def test_bad_profile_file_names_the_field(tmp_path, text, match):
    p = tmp_path / "mine.toml"
    p.write_text(f'name = "mine"\n{text}\n')
    with pytest.raises(ConfigError, match=match):
        load_runtime(str(p))




BASE = ("serve", "--chip", "h100", "--model", "llama-3-8b", "--qps", 4, "--requests", 30)


def test_cli_runtime_in_json_and_bad_values_exit_2(cli, tmp_path):
    r = cli(*BASE, "--runtime", "vllm-v0", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["info"]["runtime"] == "vllm-v0"
    assert d["config"]["runtime"]["step_host_fixed_us"] == 4000.0
    r0 = json.loads(cli(*BASE, "--runtime", "ideal", "--json").output)
    assert r0["info"]["runtime"] == "ideal"
    assert d["ttft_s"]["mean"] > r0["ttft_s"]["mean"]
    # V0 schedules whole prompts first, and says so
    assert d["config"]["chunked_prefill"] is False and "prefill first" in d["info"]["scheduling"]
    r = cli(*BASE, "--runtime", "tensorrt")
    assert r.exit_code == 2
    assert "'tensorrt'" in r.output and "trtllm-triton" in r.output and "vllm-v0" in r.output
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\ntoken_out_us = -5\n')
    r = cli(*BASE, "--runtime", bad)
    assert r.exit_code == 2 and "token_out_us" in r.output and "-5" in r.output
    r = cli(*BASE, "--runtime", tmp_path / "missing.toml")
    assert r.exit_code == 2 and "missing.toml" in r.output


def test_a_gpu_preset_serves_with_its_stack_unless_told(cli):
    """h100 names vLLM V1 (`[overheads] serving_runtime`): the default run equals an explicit
    `--runtime vllm-v1` and states it; `ideal` is a choice; a chip without a stack is ideal."""
    d = json.loads(cli(*BASE, "--json").output)
    v1 = json.loads(cli(*BASE, "--runtime", "vllm-v1", "--json").output)
    ideal = json.loads(cli(*BASE, "--runtime", "ideal", "--json").output)
    assert d["info"]["runtime"] == "vllm-v1" and d["ttft_s"] == v1["ttft_s"]
    assert d["config"]["chunked_prefill"] is True and "chunked" in d["info"]["scheduling"]
    assert d["ttft_s"]["mean"] > ideal["ttft_s"]["mean"]
    assert d["tpot_s"]["mean"] > ideal["tpot_s"]["mean"]
    # the flag overrides the stack's scheduling
    w = json.loads(cli(*BASE, "--no-chunked-prefill", "--json").output)
    assert w["config"]["chunked_prefill"] is False and w["info"]["runtime"] == "vllm-v1"
    tpu = json.loads(cli("serve", "--chip", "tpu-v5e", "--model", "llama-3-8b", "--qps", 2,
                         "--requests", 10, "--json").output)
    assert tpu["info"]["runtime"] == "ideal"


def test_chip_serving_runtime_is_checked_when_the_chip_loads(tmp_path):
    from diptych.arch import load_chip, to_dict
    import tomlkit

    d = to_dict(load_chip("h100"))
    d["overheads"]["serving_runtime"] = "tgi"
    p = tmp_path / "chip.toml"
    p.write_text(tomlkit.dumps(d))
    with pytest.raises(ConfigError, match=r"overheads.serving_runtime: expected one of .*vllm-v1, got 'tgi'"):
        load_chip(str(p))


def test_pools_naming_different_stacks_must_choose():
    from diptych.sim.serving.deployment import Deployment, Pool

    h, t = colocated("h100", "llama-3-8b"), colocated("tpu-v5e", "llama-3-8b")
    dep = Deployment(prefill=Pool(h.pool.replica, 1), decode=Pool(t.pool.replica, 1))
    with pytest.raises(ValueError, match="h100 vllm-v1, tpu-v5e ideal.*--runtime"):
        dep.runtime()

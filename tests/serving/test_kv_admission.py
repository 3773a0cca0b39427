"""KV admission (``ServeConfig.kv_admission``, docs/serving.md "KV admission"): TensorRT-LLM's
GUARANTEED_NO_EVICT ("reserve": a request enters only when its whole prompt + output fits
beside the running requests' reservations) against a closed form and the golden twin, beside
vLLM's on-demand allocation; the runtimes' policies and the refusals."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from roofline_double import roofline
from test_serving_engine import _golden_of

from diptych.arch.runtime import load_runtime
from diptych.sim.serving.config import ServeConfig, Speculation
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve

DEP8 = colocated("h100", "llama-3-8b", power_limit=False)
_ORACLES = StepTimerCache("grid", roofline)
#: most of the 80 GiB held back, so that ~560 blocks are left for the cache: tight
TIGHT = dict(kv_reserve_fraction=0.79, runtime=load_runtime("ideal"))


def _burst(tmp_path, n, prompt, gen):
    p = tmp_path / "burst.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n" + f"0,{prompt},{gen}\n" * n)
    return str(p)


@pytest.mark.parametrize("prompt, gen", [(200, 100), (517, 33)])
def test_reserve_runs_as_many_whole_requests_as_fit_and_never_preempts(tmp_path, prompt, gen):
    """All requests at once on a cache of B blocks: under "reserve" at most ⌊B / ⌈(prompt +
    gen) / 16⌉⌋ run at a time, that many do, and none is preempted; on demand more start
    (each holds only its tokens so far) and the cache runs out under them."""
    load = Load(trace=_burst(tmp_path, 90, prompt, gen))
    res = serve(DEP8, load, ServeConfig(kv_admission="reserve", **TIGHT), oracles=_ORACLES)
    inst = res.instances[0]
    whole = math.ceil((prompt + gen) / 16)
    fit = (inst.total_blocks - inst.prefix_blocks) // whole
    assert 2 <= fit < 90
    assert max(inst.rec_run) == fit
    assert res.preemptions == 0 and inst.claimed == 0      # every reservation given back
    assert max(inst.rec_used) <= fit * whole
    lazy = serve(DEP8, load, ServeConfig(kv_admission="on-demand", **TIGHT), oracles=_ORACLES)
    assert max(lazy.instances[0].rec_run) > fit
    assert lazy.preemptions > 0
    assert "KV reserved for each request's whole prompt + output" in res.info["scheduling"]
    assert "reserved" not in lazy.info["scheduling"]


GOLDEN = {
    "chunked": (ServeConfig(kv_admission="reserve", **TIGHT),
                Load(qps=60, prompt=P("lognormal:mean=500,sigma=0.6"),
                     gen=P("uniform:lo=1,hi=300"), requests=80)),
    "whole-prompts-mixed": (ServeConfig(kv_admission="reserve", max_batched_tokens=2048,
                                        split_prompts=False, **TIGHT),
                            Load(qps=200, prompt=P("lognormal:mean=700,sigma=0.6"),
                                 gen=P("uniform:lo=1,hi=200"), requests=80)),
    "prefill-first": (ServeConfig(kv_admission="reserve", chunked_prefill=False, **TIGHT),
                      Load(qps=60, prompt=P("uniform:lo=100,hi=900"),
                           gen=P("uniform:lo=1,hi=300"), requests=60)),
    "closed-loop": (ServeConfig(kv_admission="reserve", **TIGHT),
                    Load(concurrency=40, prompt=P("uniform:lo=100,hi=900"),
                         gen=P("uniform:lo=1,hi=400"), requests=90)),
}


def _equals_twin_and_binds(dep, cfg, load):
    """The fast loop under ``cfg`` (reserve) equals its golden twin request by request and
    step by step, preempting nothing, and the reservations bind: the same load on demand
    runs more sequences at once."""
    res = serve(dep, load, cfg, oracles=_ORACLES)
    g = _golden_of(res, dep, cfg, load, _ORACLES)
    fast = {r.rid: (r.arrival, r.first_t, r.finish_t) for r in res.reqs}
    gold = {r.rid: (r.arrival, r.first_t, r.finish_t) for r in g.requests}
    assert fast == gold
    assert list(res.instances[0].rec_dt) == [s[1] for s in g.steps]
    assert res.preemptions == g.preemptions == 0
    lazy = serve(dep, load, dataclasses.replace(cfg, kv_admission="on-demand"),
                 oracles=_ORACLES)
    assert max(lazy.instances[0].rec_run) > max(res.instances[0].rec_run)


@pytest.mark.parametrize("case", list(GOLDEN))
def test_reserve_fast_loop_equals_golden_twin(case):
    _equals_twin_and_binds(DEP8, *GOLDEN[case])


#: a model with sliding-window layers (gpt-oss: 12 of its 24 layers keep a 128-token window),
#: on a cache of ~5,500 blocks
DEPW = colocated("h100", "gpt-oss-20b", power_limit=False)
TIGHT_W = dict(kv_reserve_fraction=0.486, max_batched_tokens=2048,
               runtime=load_runtime("ideal"))


def test_reserve_claims_a_windowed_request_by_its_chunks(tmp_path):
    """A sliding-window layer holds at most a chunk and its window, so a 60,000-token prompt
    chunked into 2,048-token steps claims what it can hold then, not what a whole-prompt step
    would (review finding: the whole-prompt claim exceeded the cache and the run stalled)."""
    load = Load(trace=_burst(tmp_path, 1, 60000, 100))
    res = serve(DEPW, load, ServeConfig(kv_admission="reserve", **TIGHT_W), oracles=_ORACLES)
    inst = res.instances[0]
    lay = inst.layout
    assert inst._claim(res.reqs[0], chunked=True) == lay.max_blocks(60100, 0, 2048)
    assert lay.max_blocks(60100, 0, 60000) > inst.total_blocks     # the whole-prompt bound
    assert max(inst.rec_used) <= lay.max_blocks(60100, 0, 2048) and res.preemptions == 0


@pytest.mark.parametrize("whole", [False, True], ids=["chunked", "whole-prompts"])
def test_reserve_fast_loop_equals_golden_twin_with_windows(whole):
    # chunked: 2,048-token steps, so a prompt's claim is its chunk's (whole: 8,192, a step
    # holding the longest prompt)
    cfg = ServeConfig(kv_admission="reserve", split_prompts=not whole,
                      **{**TIGHT_W, "max_batched_tokens": 8192 if whole else 2048})
    load = Load(qps=80, prompt=P("lognormal:mean=1500,sigma=0.5"), gen=P("uniform:lo=1,hi=600"),
                requests=70)
    _equals_twin_and_binds(DEPW, cfg, load)


def test_reserve_changes_nothing_when_every_request_fits():
    """The validation rows' Online loads fit whole (500 x 723 = 361,500 tokens in the 8B's
    ~461,000): reserving plans the same steps, to the last float."""
    load = Load(qps=8, prompt=P("fixed:467"), gen=P("fixed:64"), requests=60)
    key = lambda res: [(r.rid, r.first_t, r.finish_t) for r in res.reqs]  # noqa: E731
    a = serve(DEP8, load, ServeConfig(kv_admission="reserve"), oracles=_ORACLES)
    b = serve(DEP8, load, ServeConfig(kv_admission="on-demand"), oracles=_ORACLES)
    assert key(a) == key(b)
    assert list(a.instances[0].rec_dt) == list(b.instances[0].rec_dt)


def test_runtimes_state_their_admission_and_a_run_can_override_it():
    for name, want in (("trtllm-bench", "reserve"), ("trtllm-triton", "reserve"),
                       ("vllm-v1", "on-demand"), ("vllm-v0", "on-demand")):
        rt = load_runtime(name)
        assert rt.kv_admission == want
        assert ServeConfig(runtime=rt).resolved().kv_admission == want
    assert load_runtime("ideal").kv_admission is None
    assert ServeConfig().resolved().kv_admission == "on-demand"
    trt = load_runtime("trtllm-bench")
    assert ServeConfig(runtime=trt, kv_admission="on-demand").resolved().kv_admission \
        == "on-demand"


@pytest.mark.parametrize("kw, what", [
    (dict(speculative=Speculation(k=2, accept=0.7)), "speculative decoding"),
    (dict(prefix_share=0.5), "prefix caching"),
    (dict(kv_offload="tier"), "memory tiers"),
    (dict(kv_offload="swap"), "memory tiers")])
def test_reserve_refused_beside_what_it_does_not_model(kw, what):
    with pytest.raises(ValueError, match=f"kv_admission reserve is not modelled with .*{what}"
                                         ".*--kv-admission on-demand"):
        ServeConfig(kv_admission="reserve", **kw).resolved()
    # inherited from the runtime: the message says where it came from
    with pytest.raises(ValueError, match="the runtime trtllm-bench's policy"):
        ServeConfig(runtime=load_runtime("trtllm-bench"), **kw).resolved()
    assert ServeConfig(runtime=load_runtime("trtllm-bench"), kv_admission="on-demand",
                       **kw).resolved().kv_admission == "on-demand"


def test_reserve_refused_with_static_batches_and_not_stated_for_disaggregated_pools():
    with pytest.raises(ValueError, match="static batch reserves each sequence's whole"):
        ServeConfig(kv_admission="reserve", scheduler="static")
    from diptych.sim.serving.serve import scheduling_text
    cfg = ServeConfig(kv_admission="reserve").resolved()
    assert "KV reserved" in scheduling_text(cfg)
    assert "KV reserved" not in scheduling_text(cfg, disaggregated=True)


def test_bad_admission_named():
    with pytest.raises(ValueError, match="kv_admission must be one of on-demand, reserve, "
                                         "not 'lazy'"):
        ServeConfig(kv_admission="lazy")


BASE = ("serve", "--chip", "h100", "--model", "llama-3-8b", "--qps", 4, "--requests", 20)


def test_cli_kv_admission(cli):
    r = cli(*BASE, "--kv-admission", "reserve", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["config"]["kv_admission"] == "reserve"
    assert "KV reserved" in d["info"]["scheduling"]
    d = json.loads(cli(*BASE, "--json").output)            # h100 serves with vllm-v1
    assert d["config"]["kv_admission"] == "on-demand"
    bad = cli(*BASE, "--kv-admission", "lazy")
    assert bad.exit_code == 2 and "--kv-admission" in bad.output
    clash = cli(*BASE, "--runtime", "trtllm-bench", "--prefix-share", "0.5", "--json")
    assert clash.exit_code == 2 and "kv_admission reserve" in clash.output, clash.output


def test_serve_plan_takes_kv_admission(cli):
    args = ("serve-plan", "--model", "llama-3-8b", "--chip", "h100", "--chips", 1, "--qps", 2,
            "--requests", 12, "--prompt", 300, "--gen", 8, "--max-batched-tokens", 2048,
            "--prompts", "chunked", "--no-disagg", "--json")
    ok = cli(*args, "--kv-admission", "reserve")
    assert ok.exit_code == 0, ok.output
    assert "KV reserved" in json.loads(ok.output)["best"]["setup"]["scheduling"]
    plain = json.loads(cli(*args).output)              # h100's vllm-v1: on demand
    assert "KV reserved" not in plain["best"]["setup"]["scheduling"]
    bad = cli(*args, "--kv-admission", "lazy")
    assert bad.exit_code == 2 and "--kv-admission" in bad.output


def test_reserve_steps_need_hold_whole_prompts_only():
    """Whole prompts: on demand a step must hold a recomputed sequence (prompt + output);
    reserved, nothing is recomputed, so a 1,500-token prompt with 1,000 output tokens runs
    under a 2,048-token step."""
    load = Load(qps=2, prompt=P("fixed:1500"), gen=P("fixed:1000"), requests=2)
    cfg = ServeConfig(max_batched_tokens=2048, split_prompts=False, runtime=load_runtime("ideal"))
    with pytest.raises(ValueError, match="recomputed sequence.*longest request's 2500 tokens"):
        serve(DEP8, load, dataclasses.replace(cfg, kv_admission="on-demand"), oracles=_ORACLES)
    res = serve(DEP8, load, dataclasses.replace(cfg, kv_admission="reserve"), oracles=_ORACLES)
    assert len(res.reqs) == 2 and res.preemptions == 0
    long = Load(qps=2, prompt=P("fixed:3000"), gen=P("fixed:8"), requests=2)
    with pytest.raises(ValueError, match="must hold a whole prompt: .*longest prompt's 3000"):
        serve(DEP8, long, dataclasses.replace(cfg, kv_admission="reserve"), oracles=_ORACLES)


def test_serve_plan_afd_takes_kv_admission(cli):
    args = ("serve-plan-afd", "--model", "qwen3-30b-a3b", "--chip", "h100", "--chip",
            "infer-2026", "--qps", 40, "--requests", 20, "--prompt", 256, "--gen", 8,
            "--afd-microbatches", 2, "--chips", 2, "--json")
    ok = cli(*args, "--kv-admission", "reserve")
    assert ok.exit_code == 0, ok.output
    assert "KV reserved" in json.loads(ok.output)["best"]["setup"]["scheduling"]
    bad = cli(*args, "--kv-admission", "lazy")
    assert bad.exit_code == 2 and "--kv-admission" in bad.output

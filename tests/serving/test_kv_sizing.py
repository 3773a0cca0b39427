"""How a serving engine sizes its KV cache (a runtime's ``kv_sizing`` and ``process_gib``;
sim/serving/kv.py): vLLM's rule (the reserve a fraction of the chip's capacity) against
TensorRT-LLM's (``KVCacheManager::calculateMaxNumBlocks``: a fraction of what is free once
the engine has loaded), each against its closed form; the profiles' process memory against
the log it is derived from (TensorRT-LLM docs/source/reference/memory.md); serve and the
waterfall carry both; bad values are refused by name (tests/serving/test_runtime.py)."""

from __future__ import annotations

import dataclasses

import pytest
from roofline_double import roofline

from diptych.arch.runtime import load_runtime
from diptych.sim.run.scenario import Scenario
from diptych.sim.serving.kv import kv_budget
from diptych.sim.serving.step_time import make_replica

GIB = 2.0 ** 30
KW = dict(block_tokens=32, max_batched_tokens=2048)


def _replica():
    return make_replica("h100", "llama-3-70b", Scenario.of(phase="decode", weights_dtype="fp8",
                                                            kv_dtype="fp8"))


def test_free_sizing_takes_the_fraction_of_what_the_loaded_engine_leaves():
    r = _replica()
    whole = kv_budget(r, reserve_fraction=0.0, **KW)      # capacity - weights - activations
    left = whole.kv_bytes - 3e8 - 1.5 * GIB                # less the buffers and the process
    b = kv_budget(r, reserve_fraction=0.05, engine_bytes=3e8, sizing="free",
                  process_bytes=1.5 * GIB, **KW)
    assert b.reserve_bytes == pytest.approx(0.05 * left, rel=1e-12)
    assert b.kv_bytes == pytest.approx(0.95 * left, rel=1e-12)
    assert b.blocks == int(0.95 * left // whole.block_bytes)
    assert b.to_dict()["process_bytes"] == 1.5 * GIB
    # vLLM's rule: the same fraction of the whole capacity, the process still first
    c = kv_budget(r, reserve_fraction=0.05, engine_bytes=3e8, process_bytes=1.5 * GIB, **KW)
    assert c.reserve_bytes == 0.05 * c.capacity_bytes
    assert c.kv_bytes == pytest.approx(left - 0.05 * c.capacity_bytes, rel=1e-12)
    # on a nearly full chip the free rule leaves more: 5 % of ~10 GiB, not of 80 GiB
    assert b.blocks > c.blocks
    assert "process_bytes" not in whole.to_dict()


def test_the_rule_and_the_process_are_checked_and_named():
    r = _replica()
    with pytest.raises(ValueError, match="KV sizing 'spare': expected one of capacity, free"):
        kv_budget(r, reserve_fraction=0.05, sizing="spare", **KW)
    whole = kv_budget(r, reserve_fraction=0.0, **KW)
    with pytest.raises(ValueError, match=r"GiB of the engine's process \+"):
        kv_budget(r, reserve_fraction=0.05, sizing="free", process_bytes=whole.kv_bytes, **KW)


def test_profiles_process_memory_is_the_logs_unlisted_memory():
    """memory.md's log: CUDA's total 79.10 GiB of an 80 GiB part, 70.48 GiB available after
    the engine (6,695 MiB), execution context (1,134.01 MiB), runtime buffers (43.29 MiB)
    and decoder (180.30 MiB); diptych lists those, so the rest is the process's."""
    listed = (6695 + 1134.01 + 43.29 + 180.30) / 1024
    derived = (80 - 79.10) + (79.10 - 70.48 - listed)
    for name in ("trtllm-bench", "trtllm-triton"):
        rt = load_runtime(name)
        assert rt.kv_sizing == "free"
        assert rt.process_gib == pytest.approx(derived, abs=0.005)
    for name in ("ideal", "vllm-v0", "vllm-v1"):
        rt = load_runtime(name)
        assert (rt.kv_sizing, rt.process_gib) == ("capacity", 0.0)


def test_serve_sizes_the_cache_as_the_runtimes_engine_does():
    from diptych.sim.serving.config import ServeConfig
    from diptych.sim.serving.requests import parse_length as P
    from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve

    dep = colocated("h100", "llama-3-8b", tp=2)
    load = Load(concurrency=2, prompt=P("64"), gen=P("4"), requests=2)
    oc = StepTimerCache("direct", roofline)
    bench = load_runtime("trtllm-bench")
    plain = dataclasses.replace(bench, kv_sizing="capacity", process_gib=0.0)
    kv = {rt.kv_sizing: serve(dep, load, ServeConfig(runtime=rt, max_batch=64,
                                                     kv_reserve_fraction=0.05),
                              oracles=oc).kv[0] for rt in (bench, plain)}
    free, cap = kv["free"], kv["capacity"]
    left = cap["kv_bytes"] + cap["reserve_bytes"] - 1.66 * GIB
    assert free["process_bytes"] == 1.66 * GIB and "process_bytes" not in cap
    assert free["reserve_bytes"] == pytest.approx(0.05 * left, rel=1e-12)
    assert free["kv_bytes"] == pytest.approx(0.95 * left, rel=1e-12)
    assert free["engine_bytes"] == cap["engine_bytes"] > 0


def test_the_waterfalls_levels_keep_the_engines_kv_sizing_and_batch_tuning():
    from diptych.sim.serving.config import ServeConfig
    from diptych.sim.serving.requests import parse_length as P
    from diptych.sim.serving.serve import (Load, StepTimerCache, colocated, resolve_config,
                                           serve)
    from diptych.sim.serving.waterfall import serving_waterfall

    dep = colocated("h100", "llama-3-8b")
    load = Load(concurrency=1, prompt=P("64"), gen=P("2"), requests=1)
    oc = StepTimerCache("direct", roofline)
    cfg = resolve_config(dep, ServeConfig(runtime=load_runtime("trtllm-bench"), max_batch=64))
    res = serve(dep, load, cfg, oracles=oc)
    seen = []

    def rerun(d, c):
        seen.append(c.runtime)
        return serve(d, load, c, oracles=oc)

    serving_waterfall(res, dep, load, cfg, rerun)
    assert seen and all((rt.kv_sizing, rt.process_gib, rt.batch_size_tuning)
                        == ("free", 1.66, True) for rt in seen)
    assert all(rt.is_ideal for rt in seen)

"""TensorRT-LLM's dynamic batch-size tuning (a runtime's ``batch_size_tuning``;
sim/serving/batch_tuning.py): the table and its fallback against the executor's source
(executor/dynamicBatchConfig.cpp ``kDefaultBatchSizeTable``, dynamicBatchTuner.cpp/.h), and a
serving run whose batch it caps against the closed form (the requests the cache holds, the
table's size for that count), beside the same run without it; the shipped profiles; bad
input refused by name."""

from __future__ import annotations

import dataclasses
import math

import pytest
from roofline_double import roofline

from diptych.arch import ConfigError
from diptych.arch.runtime import load_runtime
from diptych.sim.serving.batch_tuning import runtime_batch_size, tuned_max_batch
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve

DEP8 = colocated("h100", "llama-3-8b", power_limit=False)
_ORACLES = StepTimerCache("grid", roofline)


@pytest.mark.parametrize("capacity, size", [
    # the table, each side of each limit: {144,128} {336,256} {672,512} {832,768}
    # {1280,1024} {1664,1536}
    (0, 128), (143, 128), (144, 256), (335, 256), (336, 512), (671, 512), (672, 768),
    (831, 768), (832, 1024), (1279, 1024), (1280, 1536), (1663, 1536),
    # beyond it: a multiple of 512 when less than 128 above one, else the capacity
    (1664, 1664), (2047, 2047), (2048, 2048), (2175, 2048), (2176, 2176), (5000, 5000),
    (5119, 5119), (5120, 5120), (5247, 5120)])
def test_runtime_batch_size_is_the_executors_table(capacity, size):
    assert runtime_batch_size(capacity) == size


def test_tuned_max_batch_never_exceeds_the_engines():
    assert tuned_max_batch(1792, 1624 * 136, 136) == (1624, 1536)   # rounded down
    assert tuned_max_batch(640, 700 * 10, 10) == (700, 640)         # the table's 768 > 640
    assert tuned_max_batch(4096, 99, 100) == (0, 128)
    with pytest.raises(ValueError, match="blocks_per_request"):
        tuned_max_batch(64, 100, 0)
    with pytest.raises(ValueError, match="max_capacity"):
        runtime_batch_size(-1)


def _burst(tmp_path, n, prompt, gen):
    p = tmp_path / "burst.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n" + f"0,{prompt},{gen}\n" * n)
    return str(p)


def test_a_tuned_runtime_runs_the_tables_batch_not_what_the_cache_holds(tmp_path):
    """400 requests at once of 16 + 32 tokens (three blocks each) on a cache held to 256-335
    requests: under "reserve" without tuning that many run at once; with the tuner the
    batch is the table's 256, as ``trtllm-bench``'s executor caps it."""
    base = load_runtime("ideal")
    load = Load(trace=_burst(tmp_path, 400, 16, 32))
    cfgs = {t: ServeConfig(kv_admission="reserve", kv_reserve_fraction=0.78,
                           runtime=dataclasses.replace(base, batch_size_tuning=t))
            for t in (False, True)}
    plain = serve(DEP8, load, cfgs[False], oracles=_ORACLES)
    inst = plain.instances[0]
    fit = inst.total_blocks // math.ceil((16 + 32) / 16)
    assert 336 > fit >= 256, fit          # the table's {336, 256} entry
    assert max(inst.rec_run) == fit
    assert "batch_size_tuning" not in plain.info
    tuned = serve(DEP8, load, cfgs[True], oracles=_ORACLES)
    assert max(tuned.instances[0].rec_run) == 256
    assert tuned.info["batch_size_tuning"] == {"mixed": {"requests_fit": fit, "max_batch": 256}}
    # the mean lengths, cast to integers as the executor casts its averages
    mixed = Load(trace=_mixed(tmp_path))
    res = serve(DEP8, mixed, cfgs[True], oracles=_ORACLES)
    per = math.ceil((20 + 32) / 16)       # mean prompt 20.5 -> 20, output 32
    assert res.info["batch_size_tuning"]["mixed"]["requests_fit"] == \
        res.instances[0].total_blocks // per


def _mixed(tmp_path):
    p = tmp_path / "mixed.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n" + "0,16,32\n0,25,32\n" * 50)
    return str(p)


def test_the_shipped_profiles():
    """trtllm-bench turns the tuner on (throughput.py ``dynamic_max_batch_size = True``);
    the Triton and vLLM profiles and ``ideal`` do not."""
    assert load_runtime("trtllm-bench").batch_size_tuning is True
    for name in ("ideal", "trtllm-triton", "vllm-v0", "vllm-v1"):
        assert load_runtime(name).batch_size_tuning is False


def test_a_bad_value_is_refused_by_name(tmp_path):
    p = tmp_path / "rt.toml"
    p.write_text('name = "x"\nbatch_size_tuning = "yes"\n')
    with pytest.raises(ConfigError, match="batch_size_tuning"):
        load_runtime(str(p))

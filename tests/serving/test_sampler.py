"""A serving engine's sampler (a runtime's ``sampler``; arch/sampler.py, workloads/sampling.py):
TensorRT-LLM's passes over the FP32 logits against the kernels' bytes read at their source
(54 B per vocabulary element with 16-bit logits: the output cast 2 + 4, the penalty pass
4 + 4 + 4, the softmax's three passes 3 × (4 + 4), top-k stage 1 4 + 4 + 4), lowered after
the head's all-gather on every rank, timed on a step's chain (roofline double: the bytes at
the HBM rate plus a launch each), carried from the profile to the replica; bad names refused."""

from __future__ import annotations

import dataclasses

import pytest
from roofline_double import roofline

from diptych.arch import ConfigError
from diptych.arch.runtime import IDEAL, load_runtime
from diptych.sim.run.scenario import Scenario
from diptych.sim.serving.step_time import DirectStepTimer, Replica, make_replica
from diptych.workloads import load_model
from diptych.workloads.ops import Collective, VectorOp
from diptych.workloads.sampling import sampler_ops
from diptych.workloads.serving_step import Step, lower_step

#: TensorRT-LLM's bytes per vocabulary element of one sampled row (module docstring), 16-bit
#: logits: cast (2 read, 4 written), penalty (logit + zero bias read, 4 written), softmax
#: (three passes, each 4 read + 4 written), top-k stage 1 (copy 4 + 4, max pass 4 read)
TRTLLM_BYTES = (2 + 4) + (4 + 4 + 4) + 3 * (4 + 4) + (4 + 4 + 4)


def test_trtllm_sampler_moves_the_kernels_bytes():
    assert TRTLLM_BYTES == 54
    rows, vocab = 3, 128256
    ops = sampler_ops(rows, vocab, 2.0, "trtllm")
    assert [o.name for o in ops] == ["logits.cast", "sampler.penalty", "sampler.softmax",
                                     "sampler.topk"]
    assert sum(o.read_bytes + o.write_bytes for o in ops) == rows * vocab * TRTLLM_BYTES
    assert all(o.elements == rows * vocab and o.dtype == "fp32" for o in ops)
    # FP32 logits (an FP32 engine) read 4 B in the cast
    assert sum(o.read_bytes + o.write_bytes for o in sampler_ops(1, 10, 4.0, "trtllm")) \
        == 10 * (TRTLLM_BYTES + 2)
    assert sampler_ops(rows, vocab, 2.0, "none") == []


@pytest.mark.parametrize("tp", [1, 4])
def test_the_sampler_follows_the_gathered_logits(tp):
    m = load_model("llama-3-8b")
    st = Step(decode_batch=5, decode_keys=5 * 300)
    base = lower_step(m, st, tp=tp)
    w = lower_step(m, st, tp=tp, sampler="trtllm")
    head0, head = base.blocks[-1], w.blocks[-1]
    n = len(head0.ops)
    assert head.ops[:n] == head0.ops and [b.ops for b in w.blocks[:-1]] == \
        [b.ops for b in base.blocks[:-1]]
    added = head.ops[n:]
    assert all(isinstance(o, VectorOp) for o in added)
    # every rank samples the whole vocabulary of every row (after the all-gather at tp > 1)
    assert sum(o.read_bytes + o.write_bytes for o in added) == 5 * m.vocab_size * TRTLLM_BYTES
    if tp > 1:
        assert isinstance(head0.ops[-1], Collective) and head0.ops[-1].kind == "all_gather"
    # the passes chain: each reads what the one before wrote, the last outlives the step
    acc = dict(zip((o.name for o in head.ops), head.access))
    prev = "logits_all" if tp > 1 else "logits"
    for o in added:
        assert acc[o.name].reads == (prev,) and acc[o.name].writes == (o.name,)
        prev = o.name
    assert [t.name for t in head.tensors if t.live_out] == ["sampler.topk"]
    assert [t.name for t in head0.tensors if t.live_out] == \
        ["logits_all" if tp > 1 else "logits"]


def test_a_decode_step_pays_the_sampler_on_its_chain():
    r = make_replica("h100", "llama-3-8b", Scenario.of(phase="decode"))
    assert r.sampler == "none"
    # 512 rows: no FP32 buffer of theirs (263 MB) fits the residency plan's on-chip budget
    st = Step(decode_batch=512, decode_keys=512 * 1024)
    base = DirectStepTimer(r, roofline).cost(st).seconds
    s = dataclasses.replace(r, sampler="trtllm")
    got = DirectStepTimer(s, roofline).cost(st).seconds - base
    ops = sampler_ops(512, r.model.vocab_size, r.precision.a_bytes, "trtllm")
    bytes_s = 512 * r.model.vocab_size * TRTLLM_BYTES / r.chip.dram_bytes_per_s
    assert bytes_s == pytest.approx(sum(roofline(o, r.chip).seconds for o in ops), rel=1e-9)
    # the bytes at the HBM rate, plus one launch each (h100: 2 us)
    launch = r.chip.overheads.op_launch_us * 1e-6
    assert got == pytest.approx(bytes_s + len(ops) * launch, rel=1e-6)


def test_runtime_profiles_name_their_engines_sampler():
    assert IDEAL.sampler == "none" and load_runtime("ideal").sampler == "none"
    assert load_runtime("trtllm-bench").sampler == load_runtime("trtllm-triton").sampler \
        == "trtllm"
    assert load_runtime("vllm-v0").sampler == load_runtime("vllm-v1").sampler == "none"


def test_serve_runs_the_runtimes_sampler_and_ideal_none():
    from diptych.sim.serving.config import ServeConfig
    from diptych.sim.serving.requests import parse_length as P
    from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve

    dep = colocated("h100", "llama-3-8b")
    load = Load(concurrency=2, prompt=P("64"), gen=P("4"), requests=2)
    oc = StepTimerCache("direct", roofline)
    got = {name: serve(dep, load, ServeConfig(runtime=load_runtime(name)), oracles=oc)
           for name in ("trtllm-bench", "ideal")}
    assert {k: v.instances[0].oracle.replica.sampler for k, v in got.items()} == \
        {"trtllm-bench": "trtllm", "ideal": "none"}


def test_bad_sampler_is_refused_by_name(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text('name = "mine"\nsampler = "flashinfer"\n')
    with pytest.raises(ConfigError, match=r"mine.toml: sampler: expected one of 'none', "
                                          r"'trtllm', got 'flashinfer'"):
        load_runtime(str(p))
    r = make_replica("h100", "llama-3-8b")
    with pytest.raises(ValueError, match=r"sampler must be one of none, trtllm, "
                                         r"not 'flashinfer'"):
        Replica(chip=r.chip, model=r.model, tp=1, precision=r.precision, sampler="flashinfer")
    with pytest.raises(ValueError, match="sampler must be one of"):
        lower_step(r.model, Step(decode_batch=1, decode_keys=2), sampler="greedy")


@pytest.mark.parametrize("tp", [1, 2])
def test_the_oracles_pieces_carry_the_sampler(tp):
    """The grid oracle's frame (its head over the logits rows) holds the sampler: its pieces
    recombine to the direct simulation with it, and differ from the pieces without it."""
    from diptych.sim.serving.grid_timer import GridStepTimer, exact_parts_cost
    r = make_replica("h100", "llama-3-8b", Scenario.of(phase="decode", tp=tp, execution="sum"))
    s = dataclasses.replace(r, sampler="trtllm")
    for st in (Step(7, 7 * 900 + 13, ((300, 200), (1000, 0))), Step(64, 64 * 3000)):
        d = DirectStepTimer(s, roofline).cost(st)
        assert exact_parts_cost(s, st, roofline).seconds == pytest.approx(d.seconds, rel=1e-12)
        assert d.seconds > DirectStepTimer(r, roofline).cost(st).seconds
    v = Step(32, 32 * 14)               # a vertex of the default grid: exact there
    assert GridStepTimer(s, roofline).cost(v).seconds == pytest.approx(
        exact_parts_cost(s, v, roofline).seconds, rel=1e-9)
    assert GridStepTimer(s, roofline).cost(v).seconds > GridStepTimer(r, roofline).cost(v).seconds


# -- the engine's buffers (allocated for its max batch before it sizes its KV cache) ----------

def test_trtllm_engine_buffers_are_five_fp32_vocab_rows_a_slot():
    from diptych.arch.sampler import engine_buffer_bytes
    # logits output, runtime logits, top-k scratch (+ 2·1024·8·4 B), penalty counts, bias
    assert engine_buffer_bytes("trtllm", 4096, 128256, 1) == 4096 * (5 * 4 * 128256 + 65536)
    # the vocabulary padded to a multiple of tp (vocabSizePadded)
    assert engine_buffer_bytes("trtllm", 10, 32001, 2) == 10 * (5 * 4 * 32002 + 65536)
    assert engine_buffer_bytes("none", 4096, 128256, 1) == 0.0
    with pytest.raises(ValueError, match="sampler must be one of"):
        engine_buffer_bytes("vllm", 1, 1, 1)


def test_kv_budget_leaves_the_engines_buffers_out():
    from diptych.sim.serving.kv import kv_budget
    r = make_replica("h100", "llama-3-8b", Scenario.of(phase="decode"))
    kw = dict(block_tokens=32, max_batched_tokens=2048, reserve_fraction=0.05)
    a, b = kv_budget(r, **kw), kv_budget(r, engine_bytes=10e9, **kw)
    assert a.engine_bytes == 0.0 and "engine_bytes" not in a.to_dict()
    assert b.to_dict()["engine_bytes"] == 10e9
    assert b.kv_bytes == pytest.approx(a.kv_bytes - 10e9, rel=1e-12)
    free = a.kv_bytes - 10e9
    assert b.blocks == int(free // a.block_bytes)
    with pytest.raises(ValueError, match=r"GiB of the engine's buffers \+"):
        kv_budget(r, engine_bytes=a.kv_bytes, **kw)


def test_serve_sizes_the_cache_after_the_runtimes_engine_buffers():
    from diptych.arch.sampler import engine_buffer_bytes
    from diptych.sim.serving.config import ServeConfig
    from diptych.sim.serving.requests import parse_length as P
    from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve

    dep = colocated("h100", "llama-3-8b", tp=2)
    load = Load(concurrency=2, prompt=P("64"), gen=P("4"), requests=2)
    oc = StepTimerCache("direct", roofline)
    # the engine's cache sizing left as ideal's, so the buffers alone differ (the sizing:
    # test_kv_sizing.py)
    bench = dataclasses.replace(load_runtime("trtllm-bench"), kv_sizing="capacity",
                                process_gib=0.0)
    kv = {rt.name: serve(dep, load, ServeConfig(runtime=rt, max_batch=640),
                         oracles=oc).kv[0] for rt in (bench, load_runtime("ideal"))}
    want = 640 * (5 * 4 * 128256 + 65536)           # per rank, whatever the tp
    assert want == engine_buffer_bytes("trtllm", 640, 128256, 2)
    assert kv["trtllm-bench"]["engine_bytes"] == want and "engine_bytes" not in kv["ideal"]
    assert kv["trtllm-bench"]["kv_bytes"] == pytest.approx(kv["ideal"]["kv_bytes"] - want,
                                                          rel=1e-12)

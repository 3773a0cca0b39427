"""The memoised lowering (sim/run/node.py ``lower_workload``) equals a fresh lowering by the
workload builders themselves (``prefill``, ``decode_mean``, ``train_step``, called here
directly as the reference) for every scenario field it reads, whatever was lowered before
it: a memo key that missed a field would hand one scenario another's workload."""

from __future__ import annotations

import dataclasses

import pytest

from diptych.sim.run import Scenario
from diptych.sim.run.node import lower_workload
from diptych.workloads import load_model
from diptych.workloads.lower import decode_mean, prefill
from diptych.workloads.moe import Routing
from diptych.workloads.precision import Precision
from diptych.workloads.train import train_step

BASE = {"prefill": Scenario(phase="prefill", batch=2, prompt=256),
        "decode": Scenario(phase="decode", batch=4, prompt=256, gen=8),
        "train": Scenario(phase="train", batch=4, seq=256)}

#: One change of each field the lowering reads (and of two it does not).
CHANGES = [{}, {"batch": 8}, {"prompt": 512}, {"gen": 16}, {"seq": 512},
           {"attention": "unfused"}, {"recompute": "full"}, {"micro_batch": 2},
           {"routing": Routing(capacity_factor=1.25)}, {"power_limit": False},
           {"execution": "sum"}]


def _reference(model, s: Scenario, p: Precision, tp: int, dp: int, sp: bool):
    if s.phase == "prefill":
        return prefill(model, s.batch, s.prompt, precision=p, tp=tp, attention=s.attention,
                       routing=s.routing), s.prompt
    if s.phase == "decode":
        return decode_mean(model, s.batch, s.prompt, s.gen, precision=p, tp=tp,
                           attention=s.attention, routing=s.routing), s.prompt + s.gen
    seq = s.seq if s.seq is not None else s.prompt
    return train_step(model, s.batch, seq, precision=p, tp=tp, dp=dp,
                      recompute=s.recompute == "full", micro_batch=s.micro_batch,
                      attention=s.attention, routing=s.routing, sequence_parallel=sp), seq


@pytest.mark.parametrize("model_name", ["llama-3-8b", "mixtral-8x7b"])
def test_memoised_lowering_equals_a_fresh_one(model_name):
    model = load_model(model_name)
    cases = []
    for phase, base in BASE.items():
        for ch in CHANGES:
            if phase != "train" and ({"seq", "recompute", "micro_batch"} & ch.keys()):
                continue
            if phase == "train" and ({"prompt", "gen"} & ch.keys()):
                continue
            if "routing" in ch and not model.experts:
                continue
            s = dataclasses.replace(base, **ch)
            for p, tp, dp, sp in ((Precision(), 1, 1, False), (Precision(weights="fp8"), 2, 1,
                                                               phase == "train"),
                                  (Precision(), 1, 2, False)):
                if phase != "train" and dp > 1:
                    continue
                cases.append((s, p, tp, dp, sp))
    # twice over, the second pass in reverse: every lowering after others of its kind
    for s, p, tp, dp, sp in cases + cases[::-1]:
        w, ctx = lower_workload(model, s, precision=p, tp=tp, dp=dp, sequence_parallel=sp)
        ref, ref_ctx = _reference(model, s, p, tp, dp, sp)
        assert ctx == ref_ctx
        assert w == ref and w.info == ref.info, (s, p, tp, dp, sp)


def test_missing_sizes_still_refused():
    model = load_model("llama-3-8b")
    for phase, what in (("prefill", "prefill needs --prompt"), ("decode", "decode needs --prompt"),
                        ("train", "train needs --seq")):
        with pytest.raises(ValueError, match=what):
            lower_workload(model, Scenario(phase=phase, batch=1), precision=Precision(), tp=1,
                           dp=1)

"""The tied embedding's gradient all-reduce between the first and last pipeline stage
(sim/cluster/step.py, ``_tied_embedding_sync``) against its hand rule."""

import dataclasses

import pytest
from roofline_double import roofline

from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.sim.cluster.trace import perfetto_trace
from diptych.sim.run import Scenario
from diptych.workloads import load_model


def test_a_tied_embedding_syncs_its_gradient_between_first_and_last_stage():
    """Tied embeddings over two stages (Megatron's finalize_model_grads): one all-reduce of
    vocab × hidden ÷ tp gradients over the two ranks, after both stages' gradient sync and
    before their optimizer: both stages end at the later one's sync + the all-reduce + their
    own optimizer and parameter all-gather; untied, no such collective."""
    model = load_model("llama-3-8b")
    plan = Plan(tp=2, pp=2, dp=1)
    sc = Scenario.of(phase="train", batch=4, seq=2048, execution="sum")
    label = "pp tied embedding grad all_reduce"
    untied = simulate_cluster_step(dataclasses.replace(model, tie_word_embeddings=False),
                                   "h100", "dgx-h100", plan, sc, simulate=roofline)
    assert label not in untied.comm
    tied = simulate_cluster_step(dataclasses.replace(model, tie_word_embeddings=True),
                                 "h100", "dgx-h100", plan, sc, simulate=roofline)
    c = tied.comm[label]
    assert c["group"] == 2 and c["kind"] == "all_reduce"
    assert c["bytes"] == model.vocab_size * model.hidden_size / 2 * 2   # BF16 gradients
    st = tied.stage_seconds
    ready = max(x["finish_s"] + x["grad_reduce_exposed_s"] for x in st)
    for x in st:
        assert x["end_s"] == pytest.approx(ready + c["seconds"] + x["optimizer_s"]
                                           + x["param_all_gather_exposed_s"], rel=1e-12)
    spans = [e for e in perfetto_trace(tied)["traceEvents"]
             if e.get("name") == "tied embedding gradient all-reduce (waited)"]
    assert spans and min(e["dur"] for e in spans) >= c["seconds"] * 1e6 * (1 - 1e-9)

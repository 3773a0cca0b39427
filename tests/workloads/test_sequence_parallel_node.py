"""Sequence parallelism on one node and its switches (issue 21): the scenario's setting and
its default (on for training at TP > 1, as a cluster plan's), the output layer's backward
collectives against Megatron-Core's (closed-form bytes), and the ``run``/``plan`` flags
(bad combinations exit 2 naming the flag). The one-node-vs-cluster equalities with it on and
off are in tests/cluster (test_step, test_energy, test_energy_components, test_tp_overlap,
test_scheduled_layers, test_memory) and tests/workloads/test_cli_cluster.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.sim.cluster import Plan
from diptych.sim.cluster.layers import layer_ops
from diptych.sim.cluster.run import build_plan, run_cluster_step
from diptych.sim.run import Scenario
from diptych.sim.run.scenario import sequence_parallel_on
from diptych.tools.cli import main
from diptych.workloads import load_model, train_step
from diptych.workloads.graph import program_pieces
from diptych.workloads.ops import Collective
from diptych.workloads.program import Program
from diptych.workloads.precision import Precision

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_tensors import check_bytes  # noqa: E402
from tiny_models import TINY, write_config  # noqa: E402


def test_the_default_is_on_for_training_at_tp_above_one_only():
    train = Scenario.of(phase="train", seq=1024, tp=8)
    assert sequence_parallel_on(train, 8) is True
    assert sequence_parallel_on(Scenario.of(phase="train", seq=1024), 1) is False
    assert sequence_parallel_on(Scenario.of(phase="prefill", prompt=128, tp=8), 8) is False
    off = Scenario.of(phase="train", seq=1024, tp=8, sequence_parallel=False)
    assert sequence_parallel_on(off, 8) is False
    # a cluster plan built from the scenario says the same
    assert build_plan(Scenario.of(phase="train", batch=8, seq=1024, tp=8)).sequence_parallel
    assert not build_plan(off).sequence_parallel


@pytest.mark.parametrize("kw,needle", [
    (dict(phase="decode", prompt=128, tp=8, sequence_parallel=True),
     "sequence_parallel=True applies to training; decode"),
    (dict(phase="train", seq=1024, tp=1, sequence_parallel=True),
     "sequence_parallel=True needs tensor parallelism (tp > 1), not tp=1"),
    (dict(phase="train", seq=1024, sequence_parallel="on"),
     "sequence_parallel must be True or False, not 'on'"),
])
def test_bad_settings_are_refused_naming_the_field(kw, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        Scenario.of(**kw)


def test_asked_for_at_one_rank_is_refused_once_the_degree_is_known():
    s = Scenario.of(phase="train", batch=8, seq=1024, sequence_parallel=True)
    with pytest.raises(ValueError, match="needs tensor parallelism"):
        sequence_parallel_on(s, 1)
    with pytest.raises(ValueError, match="needs tensor parallelism"):
        build_plan(s)
    # a plan given beside a scenario that says otherwise
    with pytest.raises(ValueError, match="sequence_parallel .False. disagrees with the plan"):
        run_cluster_step("h100", "llama-3-8b",
                         Scenario.of(phase="train", batch=8, seq=1024,
                                     sequence_parallel=False),
                         plan=Plan(tp=8, micro_batch=1))


@pytest.mark.parametrize("tp,sp", [(8, True), (8, False), (1, False)])
def test_the_output_layer_s_backward_collectives(tp, sp):
    # Megatron-Core core_r0.9.0 tensor_parallel/layers.py: under sequence parallelism the
    # output layer's backward gathers its saved input again (L432-445) and reduce-scatters
    # the input gradient (L468-478); without it the input gradient is all-reduced
    # (L460-465); at TP 1 nothing. Each moves the gathered input's bytes:
    # micro-batch x seq x hidden x 2 B (BF16)
    m, mb, seq = load_model("llama-3-8b"), 2, 2048
    want_bytes = mb * seq * m.hidden_size * 2
    w = train_step(m, 8, seq, tp=tp, micro_batch=mb, sequence_parallel=sp)
    blocks = {b.name: b for b in w.blocks}
    fwd = [o for o in blocks["head"].ops if isinstance(o, Collective)]
    bwd = [o for o in blocks["head.bwd"].ops if isinstance(o, Collective)]
    want = {(8, True): ["all_gather", "reduce_scatter"], (8, False): ["all_reduce"],
            (1, False): []}[(tp, sp)]
    assert [o.kind for o in bwd] == want
    assert [o.kind for o in fwd] == (["all_gather"] if sp else [])
    assert all(o.bytes == want_bytes and o.group == tp for o in fwd + bwd)
    assert w.info["sequence_parallel"] is sp
    # the cluster step's layer ops carry the same backward-only ones (beside the forward
    # all-gather's mirror), none among the compute ops
    lo = layer_ops(m, Precision(), phase="train", tp=tp, cp=1, ep=1, micro_batch=mb,
                   seq=seq, sequence_parallel=sp)["head"]
    extra = {(8, True): [("all_gather", "head_all_gather.regather")],
             (8, False): [("all_reduce", "lm_head.dgrad_all_reduce")], (1, False): []}
    assert [(o.kind, o.name) for o in lo.tp_bwd] == extra[(tp, sp)]
    assert not any(isinstance(o, Collective) for o in lo.backward)


@pytest.mark.parametrize("sp", [True, False])
def test_the_step_s_tensors_agree_and_its_program_validates(sp):
    # the re-gather (reads the saved shard) and the all-reduce (the input gradient in place)
    # against the tensors they name, in the whole one-node step's program
    w = train_step(load_model("llama-3-8b"), 2, 64, tp=2, micro_batch=1, sequence_parallel=sp)
    assert check_bytes(w) == []
    assert all(isinstance(x.program, Program) for x in program_pieces(w))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("models"), TINY, "tiny.json")


def _run(*args):
    return CliRunner().invoke(main, ["run", *args])


TRAIN = ["--chip", "h100", "--phase", "train", "--batch", "2", "--seq", "256", "--tp", "2",
         "--execution", "sum", "--json"]


def test_run_reports_it_on_by_default_and_off_when_asked(tiny):
    on = _run("--model", tiny, *TRAIN)
    assert on.exit_code == 0, on.output
    off = _run("--model", tiny, *TRAIN, "--no-sequence-parallel")
    assert off.exit_code == 0, off.output
    a, b = json.loads(on.output), json.loads(off.output)
    assert a["info"]["stack"]["sequence_parallel"] is True
    assert b["info"]["stack"]["sequence_parallel"] is False
    assert a["seconds"] != b["seconds"]
    # on a cluster the plan says it too
    c = _run("--model", tiny, *TRAIN, "--cluster", "dgx-h100", "--no-sequence-parallel")
    assert c.exit_code == 0, c.output
    d = json.loads(c.output)
    assert d["sequence_parallel"] is False and d["info"]["stack"]["sequence_parallel"] is False


@pytest.mark.parametrize("args,needle", [
    (["--phase", "prefill", "--prompt", "128", "--tp", "2", "--sequence-parallel"],
     "--sequence-parallel applies to a model's training step; prefill"),
    (["--phase", "decode", "--prompt", "128", "--no-sequence-parallel"],
     "--no-sequence-parallel applies to a model's training step; decode"),
    (["--phase", "train", "--seq", "256", "--sequence-parallel"],
     "--sequence-parallel needs tensor parallelism (--tp > 1), not --tp 1"),
    (["--phase", "train", "--seq", "256", "--tp", "1", "--cluster", "dgx-h100",
      "--sequence-parallel"], "--sequence-parallel needs tensor parallelism"),
])
def test_bad_run_flags_exit_2_naming_the_flag(tiny, args, needle):
    r = _run("--chip", "h100", "--model", tiny, *args)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert needle in r.output


def test_bad_plan_flag_exits_2(tiny):
    r = CliRunner().invoke(main, ["plan", "--model", tiny, "--chip", "h100", "--cluster",
                                  "dgx-h100", "--chips", "8", "--batch", "8", "--seq", "256",
                                  "--tp", "1", "--sequence-parallel"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "--sequence-parallel needs plans with tensor parallelism (tp > 1)" in r.output

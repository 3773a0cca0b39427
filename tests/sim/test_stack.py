"""The software-stack settings of a run (sim/run/stack.py): NVLS off is the ring at the
links' measured bus bandwidth, the FlashAttention-2 kernel is the chip's [attention_fa2]
table, userbuffers off is Megatron's NCCL path (tests/cluster/test_tp_overlap.py), and bad
values are refused naming the field (the CLI exits 2)."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from diptych.arch import load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import GroupShape, bind, collective
from diptych.sim.run import Scenario
from diptych.sim.run.stack import scenario_chip, stack_chip
from diptych.tools.cli import main

H100 = load_chip("h100")
B = 2.0**30


def test_defaults_leave_the_chip_as_it_is():
    assert stack_chip(H100) is H100
    assert scenario_chip(H100, Scenario.of(phase="train", seq=128)) is H100


def test_nvls_off_is_the_ring_at_its_measured_bus_bandwidth():
    """NCCL_NVLS_ENABLE=0: a 1 GiB all-reduce over one DGX H100's 8 GPUs runs the ring,
    2(n-1)/n · B at nccl-tests' 0.82 of 450 GB/s plus the Simple protocol's base latency and
    its 14 steps (NCCL's tuning.cc terms in h100.toml [collectives.simple]: 8.4 + 14 × 3.4
    µs), where the chip's default takes NVLS."""
    node = GroupShape(n=8, n_local=8, n_dom=1)
    dgx = load_cluster("dgx-h100")
    on = collective("all_reduce", B, node, bind(dgx, H100))
    off = collective("all_reduce", B, node, bind(dgx, stack_chip(H100, nvls=False)))
    assert on.algorithm == "nvls" and (off.algorithm, off.protocol) == ("ring", "simple")
    assert off.seconds == pytest.approx(2 * 7 / 8 * B / (450e9 * 0.82) + (8.4 + 14 * 3.4) * 1e-6)
    # all-gathers and reduce-scatters never used the switch's reduction: unchanged
    for kind in ("all_gather", "reduce_scatter"):
        assert (collective(kind, B, node, bind(dgx, H100)).seconds
                == collective(kind, B, node, bind(dgx, stack_chip(H100, nvls=False))).seconds)


def test_fa2_runs_the_chips_fa2_table():
    c = stack_chip(H100, attention_kernel="fa2")
    assert c.attention == H100.attention_fa2 and c.attention.mma_fraction < 1.0
    assert c.attention.block_k == 64          # FA2's hdim-128 tile on sm90 (h100.toml)
    tpu = load_chip("tpu-v4")
    with pytest.raises(ValueError, match=r"attention_kernel 'fa2'.*\[attention_fa2\]"):
        stack_chip(tpu, attention_kernel="fa2")


def test_megatron_elementwise_kernels_run_the_chips_megatron_table():
    """The h100 preset offers Megatron-Core's fusions' rates (SwiGLU's forward at the copy
    rate, its backward below it); a chip without the table refuses the setting, naming it."""
    c = stack_chip(H100, elementwise_kernels="megatron")
    assert c.elementwise_kernels == H100.elementwise_kernels_megatron
    assert c.elementwise_kernels.swiglu == 1.0 and c.elementwise_kernels.swiglu_bwd < 1.0
    assert stack_chip(H100, elementwise_kernels="default") is H100
    with pytest.raises(ValueError, match=r"elementwise_kernels 'megatron'.*"
                                         r"\[elementwise_kernels_megatron\]"):
        stack_chip(load_chip("tpu-v4"), elementwise_kernels="megatron")


def test_issue_order_puts_the_compute_kernels_on_one_stream():
    """``kernel_order="issue"`` sets the chip's ``[overheads] kernel_order`` (a chip without
    the table gets one of zero fixed costs), and the list schedule then runs the array and
    vector nodes on one in-order stream, collectives and DMA beside them."""
    from diptych.sim.run.scheduled import in_order_units
    c = stack_chip(H100, kernel_order="issue")
    assert c.overheads.kernel_order == "issue"
    assert c.overheads.op_launch_us == H100.overheads.op_launch_us
    assert in_order_units(c) == ("array", "vector") and in_order_units(H100) == ()
    assert stack_chip(H100, kernel_order="dataflow") is H100     # already its order
    assert stack_chip(c, kernel_order="dataflow").overheads.kernel_order == "dataflow"
    bare = stack_chip(dataclasses.replace(H100, overheads=None), kernel_order="issue")
    assert bare.overheads.kernel_order == "issue" and bare.overheads.op_launch_us == 0.0


def test_one_queue_also_dispatches_every_node_in_order():
    """``kernel_order="one_queue"`` (CUDA_DEVICE_MAX_CONNECTIONS=1): the compute stream of
    ``issue``, and every node unit, collectives and transfers too, on the one queue."""
    from diptych.sim.run.scheduled import in_order_units, queued_units
    from diptych.workloads.program import NODE_UNITS
    c = stack_chip(H100, kernel_order="one_queue")
    assert in_order_units(c) == ("array", "vector") and queued_units(c) == NODE_UNITS
    assert queued_units(stack_chip(H100, kernel_order="issue")) == () == queued_units(H100)


def test_userbuffers_off_marks_the_table_and_leaves_a_chip_without_one():
    assert stack_chip(H100, tp_comm_overlap=False).tp_overlap.userbuffers is False
    bare = dataclasses.replace(H100, tp_overlap=None)
    assert stack_chip(bare, tp_comm_overlap=False) is bare


@pytest.mark.parametrize("field,value,match", [
    ("nvls", "no", "nvls must be true or false, not 'no'"),
    ("tp_comm_overlap", 0, "tp_comm_overlap must be true or false, not 0"),
    ("attention_kernel", "fa3", "attention_kernel must be one of default, fa2, not 'fa3'"),
    ("elementwise_kernels", "liger",
     "elementwise_kernels must be one of default, megatron, not 'liger'"),
    ("kernel_order", "stream",
     "kernel_order must be one of default, dataflow, issue, one_queue, not 'stream'"),
])
def test_bad_settings_are_refused_naming_the_field(field, value, match):
    with pytest.raises(ValueError, match=match):
        Scenario.of(phase="train", seq=128, **{field: value})
    with pytest.raises(ValueError, match=match):
        stack_chip(H100, **{field: value})


@pytest.mark.parametrize("args,needle", [
    (["--attention-kernel", "fa3"], "fa3"),
    (["--chip", "tpu-v4", "--attention-kernel", "fa2"], "attention_fa2"),
    (["--topology", "x.csv", "--no-nvls"], "--no-nvls"),
    (["--cross-entropy", "liger"], "liger"),
    (["--elementwise-kernels", "liger"], "liger"),
    (["--kernel-order", "streams"], "streams"),
    (["--topology", "x.csv", "--kernel-order", "issue"], "--kernel-order"),
    (["--chip", "tpu-v4", "--elementwise-kernels", "megatron"],
     "elementwise_kernels_megatron"),
    (["--phase", "prefill", "--prompt", "128", "--cross-entropy", "unfused"],
     "--cross-entropy unfused"),
])
def test_cli_exits_2_naming_the_bad_setting(args, needle):
    base = ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase", "train",
            "--seq", "128"]
    if "--chip" in args:
        base = base[:1] + base[3:]
    if "--topology" in args:
        base = ["run", "--chip", "h100"]
    r = CliRunner().invoke(main, base + args)
    assert r.exit_code == 2 and "Traceback" not in r.output, (r.output, r.exception)
    assert needle in r.output


def test_a_run_states_its_stack_settings():
    """Every result carries its stack in ``info["stack"]``; the report names the settings that
    differ from the chip's defaults (and prints nothing extra at the defaults)."""
    from diptych.sim.run.stack import stack_info
    from diptych.tools.fmt import stack_text
    s = Scenario.of(phase="prefill", prompt=128, nvls=False, attention_kernel="fa2")
    info = {"stack": stack_info(s)}
    assert info["stack"] == {"nvls": False, "attention_kernel": "fa2", "tp_comm_overlap": True,
                             "collective_algorithms": None, "elementwise_kernels": "default",
                             "kernel_order": "default"}
    assert "NCCL_NVLS_ENABLE=0" in stack_text(info) and "fa2" in stack_text(info)
    assert stack_text({"stack": stack_info(Scenario.of(phase="prefill", prompt=128))}) is None
    r = CliRunner().invoke(main, ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase",
                                  "prefill", "--prompt", "128", "--no-tp-comm-overlap"])
    assert r.exit_code == 0, r.output
    assert "software stack" in r.output and "Megatron's NCCL path" in r.output


def test_a_training_run_states_its_loss_implementation():
    """A training run's stack names its loss (fused by default, the published Llama 3.1
    configs' choice); an inference run has none."""
    from diptych.sim.run.stack import stack_info
    from diptych.tools.fmt import stack_text
    info = {"stack": stack_info(Scenario.of(phase="train", seq=128))}
    assert info["stack"]["cross_entropy"] == "fused"
    assert "fused cross-entropy (cross_entropy_loss_fusion true)" in stack_text(info)
    info = {"stack": stack_info(Scenario.of(phase="train", seq=128, cross_entropy="unfused"))}
    assert "unfused cross-entropy (cross_entropy_loss_fusion false)" in stack_text(info)
    assert "cross_entropy" not in stack_info(Scenario.of(phase="decode", prompt=128))

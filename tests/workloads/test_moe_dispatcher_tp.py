"""A MoE layer's tensor-parallel collectives as Megatron-Core's all-to-all token dispatcher
runs them (workloads/lower.py ``alltoall_tp``): under sequence parallelism with the experts
split over the tensor-parallel group, the rank routes its sequence shard, all-gathers what
the dispatch all-to-all brought and reduce-scatters the experts' partial sums before the
combine (core_v0.10.0 token_dispatcher.py ``MoEAlltoAllTokenDispatcher``); autograd runs
the all-gather as a node of its own, after the whole backward of every linear that reads
its output; shared experts run beside it as a sequence-parallel MLP (shared_experts.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import Plan
from diptych.sim.cluster.collectives import collective
from diptych.sim.cluster.timing import TpLinks, layer_times
from diptych.sim.cluster.topology import bind, group_ranks, group_shape
from diptych.workloads import load_model
from diptych.workloads.lower import EP_TP_GATHER, EP_TP_SCATTER
from diptych.workloads.moe import Routing
from diptych.workloads.ops import Collective
from diptych.workloads.precision import Precision
from diptych.workloads.train import _backward_block, train_forward

PAD = Routing(capacity_factor=1.0, pad=True)
#: Grok-1's shapes, as benchmarks/validate_system.py loads them
GROK1 = str(Path(__file__).parents[2] / "benchmarks" / "models" / "grok-1.json")


def _moe_block(w):
    return next(b for b in w.blocks if any(o.name.startswith("experts_gate_up")
                                           for o in b.ops))


def _ops(w):
    return {o.name: o for o in _moe_block(w).ops}


def test_grok_layout_gathers_and_scatters_the_experts_rows():
    # Grok-1's published layout on Mixtral's routing shape (8 experts top-2, hidden 4096):
    # TP4 (sequence parallel) CP2 EP8, capacity factor 1, padded. Each tensor-parallel rank
    # routes its 8192/2/4 = 1,024 tokens: capacity ⌈1,024·2/8⌉ = 256 rows per expert, 2,048
    # rows sent; its one local expert runs 256·4·8 = 8,192 rows, which the group gathers and
    # scatters back: 8,192 × 4,096 × 2 B each, twice the dense layer's T·d (4,096 tokens)
    m = load_model("mixtral-8x7b")
    d, T, tp = m.hidden_size, 8192 // 2, 4
    ops = _ops(train_forward(m, 1, 8192, tp=tp, cp=2, ep=8, routing=PAD,
                             sequence_parallel=True))
    rows = math.ceil(T // tp * 2 / 8) * tp * 8
    assert rows == 8192
    ag, rs = ops[EP_TP_GATHER], ops[EP_TP_SCATTER]
    assert (ag.kind, rs.kind) == ("all_gather", "reduce_scatter")
    assert ag.bytes == rs.bytes == rows * d * 2 == 2 * T * d * 2
    assert ag.group == rs.group == tp and "tp" in ag.tags and "ep" not in ag.tags
    # no MLP all-reduce: the combine's output is the reduced shard; attention keeps its own
    assert "mlp_all_reduce" not in ops and "attn_all_reduce" in ops
    names = list(ops)
    assert (names.index("ep_dispatch") < names.index(EP_TP_GATHER)
            < names.index("experts_gate_up"))
    assert (names.index("experts_down") < names.index(EP_TP_SCATTER)
            < names.index("ep_combine") < names.index("experts_combine"))
    # the router on the shard; the unpermute reads the shard's 2,048 pairs, writes its
    # 1,024 tokens (restore_shape = the shard's hidden_shape_before_permute)
    assert ops["router"].m == T // tp
    comb = ops["experts_combine"]
    assert comb.elements == T // tp * 2 * d
    assert comb.write_bytes == T // tp * d * 2


def test_dropless_gathers_what_the_busiest_rank_s_experts_run():
    # dropless, EP8 of 8 experts: the busiest rank's one expert runs the most of 8 binomial
    # counts of 8 × 4,096 = 32,768 tokens routed top-2 of 8 (p = ¼ each): mean 8,192, σ =
    # √(32,768·¼·¾) = 78.4, the expected maximum of 8 normals 1.4236 σ above the mean
    m = load_model("mixtral-8x7b")
    ops = _ops(train_forward(m, 1, 8192, tp=4, cp=2, ep=8, sequence_parallel=True))
    up = ops["experts_gate_up"]
    rows = 8192 + 1.4236 * math.sqrt(32768 * 0.25 * 0.75)
    assert up.m * up.batch == pytest.approx(rows, abs=2)
    assert ops[EP_TP_GATHER].bytes == up.m * up.batch * m.hidden_size * 2


def test_grok_1_shapes():
    # Grok-1 as validate_system loads it (hidden 6,144, 8 experts top-2) at its published
    # layout, TP4 CP2 EP8, capacity 1 padded: each rank routes 8,192 / 2 / 4 = 1,024 tokens,
    # 256 rows per expert per source, 256 × 4 × 8 = 8,192 rows gathered: 8,192 × 6,144 × 2 B
    # = 100,663,296 B; the unpermute reads its 1,024 × 2 = 2,048 pairs of 6,144
    m = load_model(GROK1)
    ops = _ops(train_forward(m, 1, 8192, tp=4, cp=2, ep=8, routing=PAD,
                             sequence_parallel=True))
    assert ops[EP_TP_GATHER].bytes == ops[EP_TP_SCATTER].bytes == 100_663_296
    assert ops["router"].m == 1_024
    assert ops["experts_combine"].elements == 2_048 * 6_144


@pytest.mark.parametrize("kw", [dict(tp=4, cp=2, ep=1), dict(tp=1, cp=2, ep=8),
                                dict(tp=4, cp=2, ep=8, sequence_parallel=False)])
def test_other_layouts_keep_the_layer_s_all_reduce(kw):
    # without expert parallelism, tensor parallelism or sequence parallelism the layer's
    # collectives are as before: no dispatcher all-gather or reduce-scatter
    m = load_model("mixtral-8x7b")
    kw = {"sequence_parallel": kw["tp"] > 1, **kw}
    ops = _ops(train_forward(m, 1, 8192, routing=PAD, **kw))
    assert EP_TP_GATHER not in ops and EP_TP_SCATTER not in ops
    assert ("mlp_all_reduce" in ops) == (kw["tp"] > 1)


def test_the_gathers_backward_waits_for_the_expert_weight_gradient():
    # autograd: the gathered input's gradient is reduce-scattered only once the expert
    # linear's backward (data and weight gradient) has returned
    m = load_model("mixtral-8x7b")
    fwd = _moe_block(train_forward(m, 1, 8192, tp=4, cp=2, ep=8, routing=PAD,
                                   sequence_parallel=True))
    bwd = _backward_block(fwd, Precision())
    acc = dict(zip((o.name for o in bwd.ops), bwd.access))
    rs = acc[f"{EP_TP_GATHER}.bwd"]
    assert bwd.ops[[o.name for o in bwd.ops].index(f"{EP_TP_GATHER}.bwd")].kind \
        == "reduce_scatter"
    assert any(u.tensor == "g.w_experts_gate_up" and u.share == 0.0 for u in rs.uses)


def _dispatcher_backward(precision, ep, routing):
    m = load_model("mixtral-8x7b")
    fwd = _moe_block(train_forward(m, 1, 8192, tp=4, cp=2, ep=ep, routing=routing,
                                   sequence_parallel=True, precision=precision))
    bwd = _backward_block(fwd, precision)
    return fwd, dict(zip((o.name for o in bwd.ops), bwd.access))


def _deps(access):
    return {u.tensor for u in access.uses if u.role == "dep"}


def test_the_gathers_backward_waits_for_every_expert_group():
    # dropless EP2 (4 local experts): the busiest rank's pairs split unevenly, one expert with
    # one row more than the other three: two GEMM groups read the gathered rows, and the
    # gradient's reduce-scatter waits for both weight gradients, and only for them; the
    # dispatcher's reduce-scatter feeds the combine all-to-all, not a linear: its backward
    # (an all-gather) waits for nothing but its gradient
    fwd, acc = _dispatcher_backward(Precision(), 2, Routing())
    ups = [o for o in fwd.ops if o.name.startswith("experts_gate_up")]
    assert [(o.name, o.batch) for o in ups] == [("experts_gate_up[0]", 1),
                                                 ("experts_gate_up[1]", 3)]
    assert _deps(acc[f"{EP_TP_GATHER}.bwd"]) == {"g.w_experts_gate_up[0]",
                                                  "g.w_experts_gate_up[1]"}
    assert _deps(acc[f"{EP_TP_SCATTER}.bwd"]) == set()


def test_fp8_casts_the_gathered_rows_and_the_expert_down_projection_is_not_row_parallel():
    # TE's delayed-scaling recipe at Grok's layout on Mixtral (hidden 4,096): the cast reads
    # the 8,192 gathered rows (256 per expert per source × 4 × 8); the experts' down
    # projection is not a sequence-parallel row-parallel linear (its output goes to the
    # dispatcher's reduce-scatter, not the layer's): neither the shard tag nor the
    # transpose of a row-wise-only input that o_proj, the attention's row-parallel linear,
    # carries; the gradient's reduce-scatter waits for the expert weight gradient through
    # the cast
    p = Precision(linear="fp8", recipe="fp8-delayed")
    fwd, acc = _dispatcher_backward(p, 8, PAD)
    ops = {o.name: o for o in fwd.ops}
    assert ops["ep_in_tp.cast"].elements == 8192 * 4096
    assert {"sp_row:4", "x_transpose"} <= set(ops["o_proj"].tags)
    assert not {"sp_row:4", "x_transpose"} & set(ops["experts_down"].tags)
    assert "quantized" in ops["experts_down"].tags
    assert _deps(acc[f"{EP_TP_GATHER}.bwd"]) == {"g.w_experts_gate_up"}


def test_scheduled_layer_exposes_all_four_dispatcher_collectives():
    # one node, TP4 EP2 (8 GPUs), capacity factor 2 padded: the dispatcher's collectives
    # move 4·T·d each, twice the bytes of the attention's all-reduce; forward and backward
    # each run an all-gather and a reduce-scatter on the chain, none beside a GEMM (the
    # input gradient's reduce-scatter waits for the expert's weight gradient)
    m = load_model("mixtral-8x7b")
    chip = load_chip("h100")
    net = bind(load_cluster("dgx-h100"), chip)
    plan = Plan(tp=4, dp=2, ep=2)
    shape = group_shape(group_ranks(plan, "tp"), net)
    lt = layer_times(m, chip, Precision(), phase="train", tp=4, cp=1, ep=2, micro_batch=1,
                     seq=2048, sequence_parallel=True, simulate=roofline,
                     execution="schedule", tp_links=TpLinks(shape, net),
                     routing=Routing(capacity_factor=2.0, pad=True))
    (t,) = [t for t in lt.values() if t.ops.moe]
    secs = {c.name: collective(c.kind, c.bytes, shape, net).seconds for c in t.ops.tp}
    disp = secs[EP_TP_GATHER] + secs[EP_TP_SCATTER]
    assert secs[EP_TP_GATHER] > secs["attn_all_reduce"]
    assert t.tp_exposed_fwd_s == pytest.approx(disp + secs["attn_all_reduce"], rel=1e-6)
    assert disp - 1e-9 <= t.tp_exposed_bwd_s <= disp + secs["attn_all_reduce"] + 1e-9
    assert isinstance(next(o for o in t.ops.tp if o.name == EP_TP_GATHER), Collective)


def _shared_ops(name, precision=None):
    m = load_model(name)
    w = train_forward(m, 1, 4096, tp=4, ep=8, routing=PAD, sequence_parallel=True,
                      precision=precision or Precision())
    fwd = _moe_block(w)
    return m, {o.name: o for o in fwd.ops}, {o.name: a for o, a in zip(fwd.ops, fwd.access)}


def test_shared_experts_run_beside_the_dispatcher_as_a_sequence_parallel_mlp():
    # GLM-4.5-Air (one shared expert, hidden 4,096) at TP4 EP8: the routed experts through
    # the dispatcher's all-gather and reduce-scatter, the shared MLP with a dense layer's
    # all-reduce of its 4,096 tokens × 4,096 × 2 B = 33,554,432 B (Megatron's SharedExpertMLP
    # is a plain MLP: shared_experts.py), summed on the shard into the residual; no MLP
    # all-reduce of the routed output. Under FP8 the shared down projection is the
    # sequence-parallel row-parallel linear a dense layer's is, the experts' is not
    m, ops, acc = _shared_ops("glm-4.5-air")
    assert EP_TP_GATHER in ops and EP_TP_SCATTER in ops and "mlp_all_reduce" not in ops
    ar = ops["shared_all_reduce"]
    assert (ar.kind, ar.group, ar.bytes) == ("all_reduce", 4, 33_554_432)
    assert ops["router"].m == 1_024
    assert {u.tensor for u in acc["mlp_residual"].uses if u.role == "dep"} == {"shared_red"}
    _, ops8, _ = _shared_ops("glm-4.5-air", Precision(linear="fp8", recipe="fp8-delayed"))
    assert "sp_row:4" in ops8["shared_down_proj"].tags
    assert "sp_row:4" not in ops8["experts_down"].tags


def test_gated_shared_expert_gates_the_shard():
    # Qwen3-Next (hidden 2,048, a sigmoid-gated shared expert): the gate reads the rank's
    # 4,096 / 4 = 1,024-token shard and scales the reduced shard, 1,024 × 2,048 elements
    m, ops, acc = _shared_ops("qwen3-next-80b-a3b")
    assert m.hidden_size == 2048
    assert ops["shared_expert_gate"].m == 1_024
    assert ops["shared_gate_scale"].elements == 1_024 * 2_048
    assert ops["shared_all_reduce"].bytes == 4096 * 2048 * 2
    assert any(u.tensor == "shared_red" for u in acc["shared_gate_scale"].uses)

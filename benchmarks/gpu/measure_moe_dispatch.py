"""Time Megatron-Core's MoE routing and token permutation on a real GPU, at the Grok-1 system
row's per-rank shapes (issue 21 item 4: component calibration of the dispatch's cost).
Needs CUDA and PyTorch.

    python benchmarks/gpu/measure_moe_dispatch.py --out DIR

What runs is Megatron-Core core_v0.10.0's code path for Grok-1's recipe (NVIDIA/
dgxc-benchmarking 143b90d ``grok1/grok1_314b.yaml``: 8 experts top-2,
``moe_router_load_balancing_type`` aux_loss (its default) with ``moe_aux_loss_coeff: 0.01``,
``moe_expert_capacity_factor: 1.0``, ``moe_pad_expert_input_to_capacity: true``,
``moe_token_dispatcher_type: alltoall``), restated op for op from
``megatron/core/transformer/moe/router.py`` (``TopKRouter``: ``gating``,
``aux_loss_load_balancing``, ``apply_load_balancing_loss``), ``moe_utils.py``
(``topk_softmax_with_capacity``, ``switch_load_balancing_loss_func``, ``MoEAuxLossAutoScaler``,
``save_to_aux_losses_tracker``, ``permute``, ``unpermute``) and ``token_dispatcher.py``
(``MoEAlltoAllTokenDispatcher.preprocess`` with ``drop_and_pad``): on one rank's sequence
shard of 1,024 tokens × 6,144 (8,192 tokens, CP 2, TP 4 with sequence parallelism),
capacity ⌈1024·2/8⌉ = 256 rows per expert, 2,048 permuted rows. Not on one GPU: the aux
loss's all-reduce of 8 counts over TP × CP, and the all-to-alls and the TP all-gather and
reduce-scatter (diptych times those as collectives).

Each layer is timed inside a stream the GPU is busy with, as in a training step: GEMMs stand
for the work around the dispatch (``pre``: 4 × 1,024 × 6,144 × 6,144, the attention block's
share; ``mid``: 2,048 × 6,144 → 16,384 → 6,144, the expert MLP on the permuted rows;
``post``: 1,024 × 6,144 × 6,144), forward and backward through autograd, ``--iters`` layers
back to back, the wall time per layer. ``megatron`` runs the dispatch above; ``control``
moves the same rows with the same index (one ``index_select`` of the 2,048 rows and one
``index_add_`` back, the gather and sum diptych already charges) and no routing; ``gemms``
runs the GEMMs on the rows as they are. ``megatron − control`` is what Megatron's routing,
masks and the two ``masked_select`` host synchronisations add to a layer's forward and
backward on a busy stream; ``control − gemms`` the data movement diptych charges;
``nosync`` is ``megatron`` with the two ``masked_select`` replaced by ``torch.nonzero_static``
(same values, the count known from the capacity), so ``megatron − nosync`` is what the two
synchronisations cost. ``forward_only_s``: the same without the backward (the forward's
share). ``kernels``: each mode's CUDA kernel count and summed device time
in one layer (torch.profiler).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics

import torch
import torch.nn.functional as F

T, H, E, K = 1024, 6144, 8, 2           # shard tokens, hidden, experts, top-k
CAP = math.ceil(T * K / E * 1.0)        # moe_utils.get_capacity, capacity factor 1.0
COEFF = 0.01                            # moe_aux_loss_coeff


class AuxLossAutoScaler(torch.autograd.Function):
    """moe_utils.MoEAuxLossAutoScaler: passes ``output`` through and gives ``aux_loss`` a
    gradient of ones (the main loss's scale) in the backward."""

    @staticmethod
    def forward(ctx, output, aux_loss):
        ctx.save_for_backward(aux_loss)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (aux_loss,) = ctx.saved_tensors
        return grad_output, torch.ones_like(aux_loss)


def route(x, w_router, tracker):
    """TopKRouter.forward with aux-loss balancing and capacity padding -> (probs, map)."""
    logits = F.linear(x, w_router).view(-1, E)                    # gating
    # topk_softmax_with_capacity(pad_to_capacity=True, drop_policy="probs", post-softmax)
    scores, top_indices = torch.topk(logits, k=K, dim=1)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).type_as(logits)
    topk_masked_gates = torch.zeros_like(logits).scatter(1, top_indices, probs)
    topk_map = torch.zeros_like(logits).int().scatter(1, top_indices, 1).bool()
    tokens_per_expert = topk_map.sum(dim=0)
    _, capacity_indices = torch.topk(topk_masked_gates, k=CAP, dim=0, sorted=False)
    capacity_mask = torch.zeros_like(logits).scatter(0, capacity_indices, 1).bool()
    final_map = capacity_mask
    final_probs = topk_masked_gates * final_map
    # aux_loss_load_balancing (training): softmax scores, switch loss, tracker, autoscaler
    all_scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
    # (the all-reduce of tokens_per_expert over TP x CP is a collective: not timed here)
    num_tokens = all_scores.shape[0] * 8
    aux_loss = torch.sum(all_scores.sum(dim=0) * tokens_per_expert) * (
        E * COEFF / (num_tokens * num_tokens * K))
    tracker += (aux_loss / COEFF).detach()                        # save_to_aux_losses_tracker
    final_probs = AuxLossAutoScaler.apply(final_probs, aux_loss)
    return final_probs, final_map


def masked_select(x, mask, sync=True):
    """``x.masked_select(mask)``, which must read the count back to the host (a
    synchronisation); ``sync=False``: the same values by ``torch.nonzero_static`` with the
    count known ahead (``E·CAP`` under capacity padding), nothing read back."""
    if sync:
        return x.masked_select(mask)
    keep = torch.nonzero_static(mask.reshape(-1), size=E * CAP).squeeze(1)
    return x.reshape(-1)[keep]


def permute(tokens, routing_map, sync=True):
    """moe_utils.permute (its masked_select waits for the GPU: a host synchronisation)."""
    num_tokens, _ = tokens.shape
    routing_map = routing_map.bool().T.contiguous()
    token_indices = torch.arange(num_tokens, device=routing_map.device).unsqueeze(0).expand(E, -1)
    sorted_indices = masked_select(token_indices, routing_map, sync)
    return tokens.index_select(0, sorted_indices), sorted_indices


def unpermute(permuted, sorted_indices, probs, routing_map, sync=True):
    """moe_utils.unpermute with probs (a second masked_select, a second synchronisation)."""
    permuted_probs = masked_select(probs.T.contiguous(), routing_map.T.contiguous(), sync)
    permuted = permuted * permuted_probs.unsqueeze(-1)
    out = torch.zeros((T, H), device=permuted.device, dtype=permuted.dtype)
    out.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, H), permuted)
    return out


class Layer:
    def __init__(self, dev):
        def w(*s):
            return (torch.randn(*s, device=dev, dtype=torch.bfloat16) / math.sqrt(s[-1])
                    ).requires_grad_()
        self.pre = [w(H, H) for _ in range(4)]
        self.fc1, self.fc2, self.post = w(16384, H), w(H, 16384), w(H, H)
        self.router = w(E, H)
        self.tracker = torch.zeros((), device=dev)
        with torch.no_grad():
            _, m = route(torch.randn(T, H, device=dev, dtype=torch.bfloat16), self.router,
                         self.tracker)
            self.fixed_index = permute(torch.zeros(T, 1, device=dev), m)[1]

    def __call__(self, x, mode):
        for wp in self.pre:
            x = F.linear(x, wp)
        sync = mode == "megatron"
        if mode in ("megatron", "nosync"):
            probs, rmap = route(x, self.router, self.tracker)
            rows, idx = permute(x, rmap, sync)
        elif mode == "control":
            rows = x.index_select(0, self.fixed_index)
        else:
            rows = torch.cat((x, x))
        y = F.linear(F.gelu(F.linear(rows, self.fc1)), self.fc2)
        if mode in ("megatron", "nosync"):
            out = unpermute(y, idx, probs, rmap, sync)
        elif mode == "control":
            out = torch.zeros_like(x).index_add_(0, self.fixed_index, y)
        else:
            out = y[:T] + y[T:]
        return F.linear(out, self.post)


def seconds_per_call(fn, iters, warm=3):
    """Wall seconds per call of ``fn`` over ``iters`` calls queued back to back (CUDA events
    around the lot, after ``warm`` calls)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3 / iters


def per_layer(layer, mode, iters, dev, backward=True):
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(T, H, device=dev, dtype=torch.bfloat16)

    def step():
        out = layer(x, mode)
        if backward:
            out.backward(g)

    return seconds_per_call(step, iters)


def kernels(layer, mode, dev):
    """{"forward"/"backward": (CUDA kernels launched, their summed device seconds)} of one
    layer, from torch.profiler, and the forward kernels' names."""
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    layer(x, mode).backward(g)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = layer(x, mode)
        torch.cuda.synchronize()
    fwd = [e for e in prof.events() if e.device_type.name == "CUDA"]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out.backward(g)
        torch.cuda.synchronize()
    bwd = [e for e in prof.events() if e.device_type.name == "CUDA"]
    return {"forward": (len(fwd), sum(e.device_time for e in fwd) / 1e6),
            "backward": (len(bwd), sum(e.device_time for e in bwd) / 1e6),
            "forward_names": sorted({e.name[:60] for e in fwd})}


def pieces_alone(layer, dev, iters):
    """The dispatch's forward and backward on an idle stream (each op as fast as the host
    launches it): an upper bound, for the record."""
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randn(T * K, H, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(T, H, device=dev, dtype=torch.bfloat16)

    def fwd_bwd():
        probs, rmap = route(x, layer.router, layer.tracker)
        rows, idx = permute(x, rmap)
        out = unpermute(y + 0 * rows[:1], idx, probs, rmap)
        out.backward(g)

    return seconds_per_call(fwd_bwd, iters)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dev = "cuda"
    torch.manual_seed(0)
    layer = Layer(dev)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "shape": {"tokens": T, "hidden": H, "experts": E, "top_k": K, "capacity": CAP}}
    modes = ["gemms", "control", "megatron", "nosync"]
    try:
        layer(torch.randn(T, H, device=dev, dtype=torch.bfloat16), "nosync")
    except (RuntimeError, NotImplementedError) as exc:   # nonzero_static not on this build
        print("nosync skipped:", exc)
        modes.remove("nosync")
    times = {m: [] for m in modes}
    for _ in range(args.rounds):                  # interleaved, so drift hits all three
        for m in times:
            times[m].append(per_layer(layer, m, args.iters, dev))
    res["per_layer_s"] = {m: statistics.median(v) for m, v in times.items()}
    fwd = {m: [] for m in modes}
    for _ in range(args.rounds):
        for m in modes:
            fwd[m].append(per_layer(layer, m, args.iters, dev, backward=False))
    res["forward_only_s"] = {m: statistics.median(v) for m, v in fwd.items()}
    res["per_layer_all_s"] = times
    res["dispatch_alone_s"] = pieces_alone(layer, dev, args.iters)
    res["kernels"] = {}
    for m in modes:
        try:
            res["kernels"][m] = kernels(layer, m, dev)
        except Exception as exc:                          # the profiler is a bonus
            res["kernels"][m] = repr(exc)
    p = res["per_layer_s"]
    res["megatron_minus_control_s"] = p["megatron"] - p["control"]
    res["control_minus_gemms_s"] = p["control"] - p["gemms"]
    if "nosync" in p:
        res["megatron_minus_nosync_s"] = p["megatron"] - p["nosync"]
    for k, v in res.items():
        if k != "per_layer_all_s":
            print(k, v, flush=True)
    with open(os.path.join(args.out, "moe_dispatch.json"), "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()

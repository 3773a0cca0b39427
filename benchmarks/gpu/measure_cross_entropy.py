"""Time Megatron-Core's fused vocab-parallel cross-entropy on a real GPU, compiled for the one
shape a rank of diptych's system rows runs (issue 21: component calibration of the h100
preset's ``cross_entropy`` rates), and the gap between dependent kernels on a busy stream.
Needs CUDA and PyTorch (>= 2.2, whose ``torch.compile`` is Megatron-Core's ``jit_fuser``).

    python benchmarks/gpu/measure_cross_entropy.py --out DIR

The loss is ``fused_vocab_parallel_cross_entropy`` of Megatron-Core core_v0.10.0
(``megatron/core/fusions/fused_cross_entropy.py``: ``calculate_logits_max``,
``calculate_predicted_logits``, ``calculate_cross_entropy_loss`` forward,
``calculate_gradients`` backward, each ``@jit_fuser``, over the static methods of
``megatron/core/tensor_parallel/cross_entropy.py`` ``VocabParallelCrossEntropy``), restated op
for op, at TP 1 (the all-reduces of the max and of the sums between them are no-ops there;
at TP 4 they are small collectives diptych times as such). Each case compiles its own copies of
the four functions (a rank compiles once for its shape; a second shape through the same code
object recompiles it with dynamic shapes). BF16 logits ``[rows, V]``; the forward's device time
is its CUDA kernels' (torch.profiler) over calls queued behind an L2-flushing read (the
flush's own reduction left out), likewise the backward with a dense ``grad_output``.

``launch``: ``n`` dependent one-element kernels queued behind GEMMs long enough that the host
is ahead and the launch queue never fills (``n`` 200), (time − GEMMs' time) / n: a kernel's
cost on a busy stream, eager, and replayed from a CUDA graph.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch

from measure_megatron_kernels import launch_gap, own_code, smi

# --- Megatron-Core core_v0.10.0 (restated) ---------------------------------------------------


def calculate_logits_max(vocab_parallel_logits):
    vocab_parallel_logits = vocab_parallel_logits.float()
    logits_max = torch.max(vocab_parallel_logits, dim=-1)[0]
    return vocab_parallel_logits, logits_max


def calculate_predicted_logits(vocab_parallel_logits, target, logits_max,
                               vocab_start_index: int, vocab_end_index: int):
    vocab_parallel_logits -= logits_max.unsqueeze(dim=-1)
    target_mask = (target < vocab_start_index) | (target >= vocab_end_index)
    masked_target = target.clone() - vocab_start_index
    masked_target[target_mask] = 0
    partition_vocab_size = vocab_parallel_logits.size()[-1]
    logits_2d = vocab_parallel_logits.view(-1, partition_vocab_size)
    masked_target_1d = masked_target.view(-1)
    arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
    predicted_logits_1d = logits_2d[arange_1d, masked_target_1d]
    predicted_logits_1d = predicted_logits_1d.clone().contiguous()
    predicted_logits = predicted_logits_1d.view_as(target)
    predicted_logits[target_mask] = 0.0
    exp_logits = vocab_parallel_logits
    torch.exp(vocab_parallel_logits, out=exp_logits)
    sum_exp_logits = exp_logits.sum(dim=-1)
    predicted_logits_sum_exp_logits = torch.cat((predicted_logits, sum_exp_logits))
    return target_mask, masked_target_1d, predicted_logits_sum_exp_logits, exp_logits


def calculate_cross_entropy_loss(exp_logits, predicted_logits_sum_exp_logits):
    split_val = predicted_logits_sum_exp_logits.size()[0] // 2
    predicted_logits, sum_exp_logits = torch.split(predicted_logits_sum_exp_logits, split_val)
    loss = torch.log(sum_exp_logits) - predicted_logits
    exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1))
    return exp_logits, loss


def calculate_gradients(softmax, grad_output, target_mask, masked_target_1d):
    grad_input = softmax
    partition_vocab_size = softmax.size()[-1]
    grad_2d = grad_input.view(-1, partition_vocab_size)
    arange_1d = torch.arange(start=0, end=grad_2d.size()[0], device=grad_2d.device)
    softmax_update = 1.0 - target_mask.view(-1).float()
    grad_2d[arange_1d, masked_target_1d] -= softmax_update
    grad_input.mul_(grad_output.unsqueeze(dim=-1))
    grad_input = grad_input.to(torch.bfloat16)
    return grad_input


#: (name, rows, V per rank): the Llama rows' last stage at TP 1 (8B, CP 2: 4,096 tokens) and TP
#: 4 (70B), and one of Liger-Kernel's points (8,192 rows, V 32,768; its rows after the first V
#: ran a dynamic-shape recompile)
CASES = [("llama-3.1-8b (4096 x 128256)", 4096, 128256),
         ("llama-3.1-70b TP4 (4096 x 32064)", 4096, 32064),
         ("Liger's point (8192 x 32768)", 8192, 32768)]


def _cuda_events(fn):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type.name == "CUDA"]


def device_seconds(fn, flush, calls=10):
    """Device seconds per call of the CUDA kernels ``fn`` launches, queued ``calls`` times
    behind an L2-flushing read each (a float64 sum, whose kernels, named as profiled alone,
    are left out), and kernels per call."""
    sink = torch.empty((), device=flush.device, dtype=torch.float64)

    def flush_read():
        torch.sum(flush, 0, dtype=torch.float64, out=sink)

    flush_read()
    fn()
    torch.cuda.synchronize()
    names = {e.name for e in _cuda_events(flush_read)}

    def queued():
        for _ in range(calls):
            flush_read()
            fn()

    keep = [e for e in _cuda_events(queued) if e.name not in names]
    return sum(e.device_time for e in keep) / 1e6 / calls, len(keep) / calls


def copy_rate(flush) -> float:
    """The device's copy rate, B/s (read + written): a 1 GiB clone's kernels."""
    x = torch.empty(2 ** 30 // 2, device="cuda", dtype=torch.bfloat16).normal_()
    return 2 * x.numel() * 2 / device_seconds(lambda: x.clone(), flush)[0]


def measure_case(name: str, n: int, v: int, flush, rounds: int) -> dict:
    """One case's forward and backward device seconds (median of ``rounds``)."""
    f_max, f_pred, f_loss, f_grad = (torch.compile(own_code(f, f"{name} {f.__name__}"))
                                     for f in (calculate_logits_max, calculate_predicted_logits,
                                               calculate_cross_entropy_loss,
                                               calculate_gradients))
    logits = torch.randn(n, 1, v, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, v, (n, 1), device="cuda")
    grad_out = torch.rand(n, 1, device="cuda")
    saved = {}

    def forward():
        lg, mx = f_max(logits)
        mask, t1d, pse, ex = f_pred(lg, target, mx, 0, v)
        soft, loss = f_loss(ex, pse)
        saved.update(soft=soft, mask=mask, t1d=t1d)
        return loss

    def backward():
        return f_grad(saved["soft"], grad_out, saved["mask"], saved["t1d"])

    fw, bw = [], []
    for _ in range(rounds):
        fw.append(device_seconds(forward, flush))
        bw.append(device_seconds(backward, flush))       # the last forward's softmax
    f_s = statistics.median(t for t, _ in fw)
    b_s = statistics.median(t for t, _ in bw)
    return {"name": name, "rows": n, "vocab": v, "forward_s": f_s, "backward_s": b_s,
            "forward_rounds_s": [t for t, _ in fw], "backward_rounds_s": [t for t, _ in bw],
            "forward_kernels": fw[0][1], "backward_kernels": bw[0][1],
            "forward_TBps_at_22B": n * v * 22 / f_s / 1e12,
            "backward_TBps_at_10B": n * v * 10 / b_s / 1e12}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    flush = torch.empty(2 ** 28 // 4, device="cuda")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "smi": smi(),
           "copy_Bps": copy_rate(flush)}
    torch.cuda.empty_cache()
    print(f"copy {res['copy_Bps'] / 1e12:.3f} TB/s", flush=True)
    rows = []
    for name, n, v in CASES:
        r = measure_case(name, n, v, flush, args.rounds)
        torch.cuda.empty_cache()
        rows.append(r)
        print(f"{name:36s} fwd {r['forward_s'] * 1e3:8.3f} ms ({r['forward_kernels']:.0f} "
              f"kernels, {r['forward_TBps_at_22B']:.2f} TB/s at 22 B/logit)  bwd "
              f"{r['backward_s'] * 1e3:8.3f} ms ({r['backward_kernels']:.0f}, "
              f"{r['backward_TBps_at_10B']:.2f} TB/s at 10 B)  rounds "
              f"{[round(t * 1e3, 3) for t in r['forward_rounds_s']]}", flush=True)
    res["cross_entropy"] = rows
    res["launch"] = launch_gap(n=200, gemms=4, warm=2, runs=7)
    print("launch", res["launch"], flush=True)
    with open(os.path.join(args.out, "cross_entropy.json"), "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()

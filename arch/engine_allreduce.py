"""Inference engines' own all-reduce for tensor-parallel steps (issue 21): which kernel vLLM's
and TensorRT-LLM's custom all-reduce runs for a message of a given size on a group of a given
size, and the cost terms of the one-shot and two-shot kernels. A serving runtime profile names
the engine (``all_reduce`` in ``arch/runtimes/*.toml``); docs/serving.md, "Runtime host costs",
and docs/cluster.md, "Collectives".

Both engines keep NCCL for what their kernels do not take, and both choose **by size, not by
time**: neither compares its kernel with NCCL at run time.

* **vllm** — vLLM's ``CustomAllreduce`` (vllm/distributed/device_communicators/
  custom_all_reduce.py @00d618aab60448acdf3fac3e9c4e2e22d0c6c753): groups of 2, 4, 6 or 8
  GPUs of one node, all NVLink-connected beyond 2 (``fully_connected``), messages below
  ``max_size = 8192 * 1024`` bytes; the kernel (csrc/custom_all_reduce.cuh
  @c9eabec7d862b69d943f516580c883c20bea5a0e, ``REDUCE_CASE``): one-stage on 2 GPUs, and on
  more when ``(world_size <= 4 && bytes < 512 * 1024) || (world_size <= 8 && bytes < 256 *
  1024)``, two-stage otherwise.
* **trtllm** — TensorRT-LLM's ``AllreducePlugin::selectImplementation`` (AUTO strategy,
  cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp, the versions that carry the
  workaround for nvbug 4718747, "we have disabled the two-shot strategy"; NVIDIA/TensorRT-LLM
  #2575, Dec 2024, finds TWOSHOT never selected [assumption: 0.14 and 0.17, the releases behind
  the validation rows, both carry it; no commit of either was pinned]; custom all-reduce is
  chosen automatically since 0.12, NVIDIA/TensorRT-LLM#1601): an
  intra-node NVLink group of an even size, messages up to the workspace
  (cpp/tensorrt_llm/common/customAllReduceUtils.h ``getMaxRequiredWorkspaceSize``:
  16,000,000 bytes on 2 GPUs, 8,000,000 beyond); one-shot on 2 GPUs, on 3–4 below 1,000,000
  bytes, beyond below 500,000 bytes; NCCL above (where the two-shot kernel was switched off).

**Kernel costs** (:data:`ONE_SHOT`, :data:`TWO_SHOT`): a fixed latency plus the bytes through a
rank's port at a share of its raw per-direction bandwidth. One-shot: every rank reads the
``n − 1`` peers' whole buffers (``(n−1)·B`` in through its port) and reduces locally, one
barrier; two-shot: a reduce-scatter then an all-gather through the peers' buffers
(``2(n−1)/n·B``), two barriers. Calibrated [C] on vLLM's own kernel benchmark on H100
(vllm-project/vllm#24111, benchmarks/kernels/benchmark_device_communicators.py, BF16, hidden
8192, ms per all-reduce; ``ca_1stage`` / ``ca_2stage``):

* one-shot, TP2: 0.007 ms at 0.5 MiB, 0.013 at 2 MiB → 5.0 µs + 1 MiB per 4.0 µs (262 GB/s);
  TP6: 0.013 at 0.5 MiB, 0.070 at 4 MiB → 4.9 µs + 5 MiB per 16.3 µs (322 GB/s): 5.0 µs and
  their mean, 292 GB/s = 0.65 of NVLink4's 450 GB/s;
* two-shot, TP2: 0.012 / 0.019 ms → 9.7 µs, 225 GB/s; TP6: 0.015 / 0.037 ms → 11.9 µs, 278
  GB/s: 10.8 µs and 251 GB/s = 0.56 of 450.

Check, not a fit: TP4 one-shot at 0.5 / 1 MiB, 10.4 / 15.8 µs against 0.010 / 0.014 ms
(vllm-project/vllm#24532, the same benchmark). TensorRT-LLM's one-shot kernel (a barrier, the
peers' buffers read and reduced, as vLLM's) takes the same terms [assumption: no kernel-level
latency of TensorRT-LLM 0.14–0.17's custom all-reduce was found; NVIDIA's MultiShot blog gives
ratios only].
"""

from __future__ import annotations

from dataclasses import dataclass

#: The all-reduce a serving runtime's engine runs for tensor-parallel steps: NCCL's alone, or
#: an engine's custom kernels below their size limits (NCCL above).
ENGINE_ALL_REDUCES = ("nccl", "vllm", "trtllm")

KiB = 1024


@dataclass(frozen=True)
class KernelCost:
    """A custom all-reduce kernel's cost: ``fixed_us`` + the bytes through a rank's port at
    ``port_fraction`` of its raw per-direction bandwidth."""

    fixed_us: float
    port_fraction: float


#: [C] vllm-project/vllm#24111, H100 (module docstring).
ONE_SHOT = KernelCost(fixed_us=5.0, port_fraction=0.65)
TWO_SHOT = KernelCost(fixed_us=10.8, port_fraction=0.56)


def check_engine(engine: str) -> str:
    """``engine`` if it names an engine all-reduce, else ValueError naming it."""
    if engine not in ENGINE_ALL_REDUCES:
        raise ValueError(f"all_reduce must be one of {', '.join(ENGINE_ALL_REDUCES)}, not "
                         f"{engine!r}")
    return engine


def engine_algorithm(engine: str, n: int, nbytes: float) -> str:
    """The kernel ``engine`` runs for an all-reduce of ``nbytes`` bytes per rank over ``n``
    NVLink-connected GPUs of one node: ``"one_shot"``, ``"two_shot"`` or ``"nccl"`` (module
    docstring for each engine's rule and its source)."""
    check_engine(engine)
    if engine == "nccl" or n < 2:
        return "nccl"
    if engine == "vllm":
        if n not in (2, 4, 6, 8) or nbytes >= 8192 * KiB:
            return "nccl"
        if n == 2 or (n <= 4 and nbytes < 512 * KiB) or (n <= 8 and nbytes < 256 * KiB):
            return "one_shot"
        return "two_shot"
    # trtllm
    if n % 2 or n > 8 or nbytes > (16_000_000 if n <= 2 else 8_000_000):
        return "nccl"
    if n <= 2 or (n <= 4 and nbytes < 1_000_000) or nbytes < 500_000:
        return "one_shot"
    return "nccl"


def kernel_seconds(algorithm: str, n: int, nbytes: float, port_bytes_per_s: float) -> float:
    """Seconds of a ``"one_shot"`` or ``"two_shot"`` kernel over ``n`` ranks whose ports carry
    ``port_bytes_per_s`` raw per direction (module docstring)."""
    if algorithm == "one_shot":
        c, moved = ONE_SHOT, (n - 1) * nbytes
    elif algorithm == "two_shot":
        c, moved = TWO_SHOT, 2.0 * (n - 1) / n * nbytes
    else:
        raise ValueError(f"algorithm must be one_shot or two_shot, not {algorithm!r}")
    return c.fixed_us * 1e-6 + moved / (port_bytes_per_s * c.port_fraction)

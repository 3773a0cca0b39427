"""A serving engine's sampling kernels (issue 21): the GPU work an engine runs on each step's
logits after its LM head, per vocabulary element of each sampled row. A serving runtime
profile names its engine's sampler (``sampler`` in ``arch/runtimes/*.toml``); the step
lowering adds the passes after the head (:mod:`diptych.workloads.sampling`); docs/serving.md,
"The engine's sampler".

Each pass is ``(name, kind, read bytes, write bytes, ALU ops)`` per vocabulary element of a
row; a read width of ``"a"`` is the logits' own (the activations' dtype). The passes run over
the whole vocabulary on every tensor-parallel rank (the LM head all-gathers its logits).

* **none** — no sampling work (the chip alone: ``ideal`` and the profiles whose engine's
  sampler is not modelled).
* **trtllm** — TensorRT-LLM's TensorRT-engine flow with default sampling parameters (beam
  width 1, no top-k/top-p/temperature/penalties: greedy). Read at v0.16.0 (42a7b092) and a
  v0.17-era commit (7bb9b5f8, 2025-01-30) of NVIDIA/TensorRT-LLM, the kernels at stored
  versions whose commit was not resolved [assumption: v0.14 and v0.17 run the same path; the
  0.17 batch manager was closed source, its decoder hand-off read in the first open-sourced
  one]:

  * ``logits.cast``: the engine's ``logits`` output is FP32 (``PretrainedConfig.logits_dtype``
    default ``'float32'``, tensorrt_llm/models/modeling_utils.py L298;
    ``lm_logits.mark_output('logits', self.config.logits_dtype)`` L1023), cast from the LM
    head's 16-bit, all-gathered output by a Cast layer before the output is marked
    (tensorrt_llm/network.py L239-245, strongly typed networks); ``trtllm-bench build`` does
    not change it (bench/build/build.py). Reads the 16-bit logit, writes FP32: a + 4 B.
  * ``sampler.penalty``: ``PenaltyLayer`` always runs ``invokeBatchApplyPenalty``
    (cpp/tensorrt_llm/layers/penaltyLayer.cpp L323, unconditional for beam width 1), which
    reads each logit and the decoder's zero-filled per-slot embedding bias (FP32,
    gptDecoderBatched.cpp L138, L400, L525-537) and writes the runtime-logits buffer the
    later layers read (L275-277, L330): 8 + 4 B.
  * ``sampler.softmax``: the sampling layer keeps its softmax because the default decoding
    mode is TopKTopP (samplingLayer.cpp L138-144); ``invokeAddBiasSoftMax`` (L153-168;
    kernels/decodingCommon.cu ``addBiasSoftMax``) makes three passes over the row in place
    — the biased logit and its max, the exponential and its sum, the division: 12 + 12 B,
    with an exponential per element.
  * ``sampler.topk``: greedy is top-k with k = 1 (``regularizeTopKTopP`` turns k = 0, p = 0
    into k = 1, p = 1; the top-p layer then skips the request), and
    ``invokeBatchTopKSampling``'s first stage copies the row to a scratch buffer and takes its
    maximum (kernels/samplingTopKKernels.cu ``topKStage1``): 4 + 4 B read, 4 B written. Its
    second stage reads the first's few candidates per row (not charged: bytes per row, not
    per element; its launch, the ban-words and stop-criteria layers' are not charged either).

  54 B per element with 16-bit logits, against the 4 B of one read of the FP32 row. The
  decoder runs on every tensor-parallel rank (each holds the gathered logits) and the next
  step's engine waits for its tokens (gptDecoderBatched.cpp L979, L1019, L1114: the runtime
  stream waits for the decoder stream), so the passes are on the step's chain.
"""

from __future__ import annotations

#: ``name → passes`` (module docstring); every pass ``(name, kind, read B, write B, ops)``
#: per vocabulary element.
SAMPLERS: dict[str, tuple[tuple[str, str, float | str, float, float], ...]] = {
    "none": (),
    "trtllm": (
        ("logits.cast", "copy", "a", 4.0, 1.0),
        ("sampler.penalty", "copy", 8.0, 4.0, 1.0),
        ("sampler.softmax", "softmax", 12.0, 12.0, 4.0),
        ("sampler.topk", "copy", 8.0, 4.0, 1.0),
    ),
}
#: What a runtime charges unless its profile names a sampler.
DEFAULT_SAMPLER = "none"

#: ``name → (FP32 buffers of one engine batch slot × the padded vocabulary, bytes per slot
#: besides)`` that the engine allocates on every rank before it sizes its KV cache from the
#: memory left free (docs/serving.md, "The engine's sampler"). TensorRT-LLM's
#: ``TrtGptModelInflightBatching`` creates its runtime buffers and its decoder before the KV
#: cache manager measures free memory (batch_manager/trtGptModelInflightBatching.cpp
#: @00825c4e L270-278 ``createBuffers``, ``createDecoder``, then L311-312
#: ``calculateFreeMemBytes`` and L332 ``createKvCacheManager``; the same order in a
#: v0.16/0.17-era copy of the then closed source and in the v0.11-era one [assumption: 0.17,
#: closed, is the same]; docs/source/reference/memory.md: "Before KV cache blocks are
#: allocated, some amount of GPU memory are pre-allocated by C++ runtime"). Its five
#: ``[max batch, vocab]`` 4-byte buffers: the engine's ``logits`` output sized by the max
#: batch when no logits are gathered (runtimeBuffers.cpp @092a5a15 L103, L362); the decoding
#: workspace's runtime logits (runtime/decodingLayerWorkspace.cpp @1a43c7d6 L27-30); its
#: scratch space, the largest layer's, top-k's ``sizeof(T)·B·Vpad`` + 2·B·1024·8·4 bytes
#: (``getTopKWorkspaceSizes``, ``TOP_K_MAX`` 1024; the 65,536 bytes a slot); PenaltyLayer's
#: int32 occurrence workspace ``[B, vocab]`` (the default TopKTopP mode includes the
#: penalties); GptDecoderBatched's ``embeddingBias`` ``[B, Vpad]``. Buffers of ``B ×
#: max_seq_len`` integers (cache indirection, ids, log-probs) are not counted (~10 MB).
#: trtllm-bench's page logs more for Llama-2-7B at max batch 4,096 in 0.12 (runtime buffers
#: 1.14 GB + decoder 4.35 GB, where these five come to 2.6 GB of its 32,000-token
#: vocabulary): an older release's extra copies, not taken.
ENGINE_BUFFERS: dict[str, tuple[int, int]] = {"none": (0, 0), "trtllm": (5, 65536)}


def engine_buffer_bytes(sampler: str, max_batch: int, vocab: int, tp: int) -> float:
    """Bytes per rank of ``sampler``'s engine buffers (:data:`ENGINE_BUFFERS`) for an engine
    of ``max_batch`` sequences, ``vocab`` tokens padded to a multiple of ``tp``
    (``vocabSizePadded``)."""
    n, per_slot = ENGINE_BUFFERS[check_sampler(sampler)]
    padded = -(-vocab // tp) * tp
    return float(max_batch * (n * 4 * padded + per_slot))


def check_sampler(name) -> str:
    """``name`` if it is one of :data:`SAMPLERS`, else ValueError naming it and the known
    ones."""
    if name not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, not {name!r}")
    return name

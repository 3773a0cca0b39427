"""Per-tensor FP8 training recipes in the lowering: which GEMMs take FP8 operands, the cast
kernels that quantise them, and what the recipe adds per step (docs/precision.md, "Training
recipes").

Transformer Engine's ``DelayedScaling`` (the default recipe, ``fp8-delayed``) and
``Float8CurrentScaling`` (``fp8-current``) on Hopper, as their source and docs describe them
[P: TE ``module/linear.py``, ``layernorm_linear.py``, ``layernorm_mlp.py``,
``common/cast/dispatch/quantize.cuh``, ``docs/.../performance_considerations.rst``,
``fp8_delayed_scaling.rst``, ``fp8_current_scaling.rst``]:

* **What runs in FP8.** The three GEMMs of every linear layer (fprop ``Y = X·Wᵀ``, dgrad
  ``dX = dY·W``, wgrad ``dW = dYᵀ·X``) take FP8 operands and write BF16 (FP32 or BF16 for
  the weight gradient). Attention, norms, activations, the embedding, the LM head (Megatron's
  output layer is not an FP8 module), the MoE router, the loss, the optimizer (FP32 master
  weights) and the gradient reduction stay in BF16/FP32.
* **Casts**, as NeMo runs them: Megatron-Core's layers on TE 1.x (:data:`FUSABLE_PRODUCERS`
  says where each is read). Hopper runs FP8 GEMMs only in the TN layout, so each quantised
  tensor (an input X, a weight W, an output gradient dY) is needed row- and column-wise. A
  norm's output that only linear GEMMs read (TE's ``LayerNormLinear``) is written by the norm
  kernel in FP8, row-wise only (1 B where BF16 writes 2; the producer op is tagged
  ``fp8_rowwise``), and transposed in the backward before the weight gradient
  (``fp8_transpose``: :func:`transpose_op`, read 1 B, write 1 B; the GEMM is tagged
  ``x_transpose``). Any other input gets a cast op (:func:`cast_op`, TE's
  ``fp8_cast_transpose_fused``: read 2 B, write 1 + 1 B): attention's output, the
  activation's output (Megatron's own BF16 kernel), the tokens routed to the experts; and in
  backward every linear's output gradient (``grad_output_preprocess``; the activation's
  backward writes BF16 too). Delayed scaling takes the scale from the amax history (the cast
  kernel records the new amax); current scaling (TE 2.x) first reads the tensor once more
  for its amax (:func:`amax_op`): TE calls the second read "significant", and it also
  cannot fuse the cast into the producer. Under sequence parallelism a row-parallel linear
  casts its input row-wise only and its output gradient per sequence shard, transposing
  both in backward (:func:`quantize_records`, :func:`backward_gemms`).
* **Weights** are cast once per optimizer step (cached across micro-batches:
  ``is_first_microbatch``): :func:`weight_cast_op`.
* **Scale synchronisation** (delayed only): an all-reduce (MAX) of the amaxes on every exit
  from ``fp8_autocast`` and one in the matching backward, over the tensor-, data- and
  context-parallel ranks (Megatron's amax reduction group): latency-bound, 4 B per tensor
  (:func:`amax_collectives`); Megatron-Core enters the autocast once per forward of each
  model chunk, so a step makes two per micro-batch and chunk (the single-chip step,
  :func:`~diptych.workloads.train.recipe_blocks`, and the cluster step,
  :mod:`diptych.sim.cluster.step`, repeat them so).

In the dataflow a norm's FP8 output is the row-wise half of the BF16-sized tensor it writes
(the GEMM reads it; the transpose reads it and writes the column-wise copy as a tensor of its
own, which the weight gradient reads), a weight's cached pair the whole of its BF16-sized
tensor; a cast op writes the pair as a tensor of its own. The backward
(:mod:`diptych.workloads.train`) passes gradients straight through a cast (an FP8
quantiser's backward is the identity: no op).
"""

from __future__ import annotations

import dataclasses

from ..arch.dtypes import dtype_bytes
from .fused_attention import FusedAttention
from .ops import Collective, Gemm, VectorOp
from .precision import AMAX_RECIPES, Precision
from .program import Access, Tensor, Use

#: ALU ops per element of a per-tensor FP8 cast [counted]: scale multiply, convert, and the
#: running max of |x| the delayed recipe records for its history.
CAST_OPS_PER_ELEMENT = 3.0
#: ALU ops per element of current scaling's separate amax pass [counted]: |x| and max.
AMAX_OPS_PER_ELEMENT = 2.0
#: Bytes of one amax in the delayed recipe's reduction (an FP32 per quantised tensor).
AMAX_BYTES = 4.0
#: Vector-op kinds whose output a linear's cast can be fused into: the norm of TE's
#: ``LayerNormLinear``, which Megatron-Core builds its QKV and first MLP projections from
#: (``TELayerNormColumnParallelLinear``) [S: NVIDIA/Megatron-LM core_r0.9.0 (1afee59)
#: megatron/core/models/gpt/gpt_layer_specs.py, ``linear_fc1=TELayerNormColumnParallelLinear,
#: linear_fc2=TERowParallelLinear``]. The activation between the MLP's GEMMs is Megatron's
#: own BF16 kernel, not TE's ``LayerNormMLP`` [S: same commit, megatron/core/transformer/
#: mlp.py ``MLP.forward``: ``bias_swiglu_impl``/``bias_gelu_impl`` between ``linear_fc1`` and
#: ``linear_fc2``; moe/experts.py ``TEGroupedMLP`` likewise], so its output is cast by TE's
#: ``Linear`` (fc2's input) and its input gradient by ``fp8_cast_transpose_fused`` in fc1's
#: ``grad_output_preprocess`` [S: NVIDIA/TransformerEngine v1.11 (c27ee60)
#: transformer_engine/pytorch/module/linear.py ``_Linear.forward``, module/base.py
#: ``grad_output_preprocess``]: neither is fused.
FUSABLE_PRODUCERS = ("rmsnorm", "layernorm")
#: Linear GEMMs that stay in BF16 under a per-tensor recipe: the LM head, the MoE router and
#: the shared expert's gate (Megatron-Core's ``SharedExpertMLP`` holds the gate as a plain
#: parameter, not a TE module [S: NVIDIA/Megatron-LM megatron/core/transformer/moe/
#: shared_experts.py ``SharedExpertMLP.__init__``: ``self.gate_weight =
#: torch.nn.Parameter(torch.empty((1, self.config.hidden_size)))``];
#: ModelOpt's FP8 configs disable ``*lm_head*``, ``*router*``, ``*mlp.gate.*``,
#: ``*mlp.shared_expert_gate.*`` [S: NVIDIA/TensorRT-Model-Optimizer
#: modelopt/torch/quantization/config.py ``_default_disabled_quantizer_cfg``]), DeepSeek's
#: indexer weights (:mod:`~diptych.workloads.sparse_attention`).
BF16_LINEARS = ("lm_head", "router", "shared_expert_gate", "indexer_weights_proj")
#: Producers of a linear's input that an inference engine writes in FP8 under the static
#: recipe: TensorRT builds an explicitly quantised network's quantize layer into the
#: normalisation or the pointwise activation before it [S: NVIDIA TensorRT developer guide,
#: "Explicit Quantization", Q/DQ fusion: a quantizable operator is fused with its input DQ
#: and output Q nodes (the guide's element-wise example), TensorRT fusing pointwise chains
#: into one kernel; TensorRT-LLM ``FP8Linear.forward`` quantizes ``x`` unless it already
#: arrives in fp8, tensorrt_llm/quantization/layers.py]. Decode attention's output is cast
#: by a kernel of its own [assumption: the XQA plugin's output quantisation not read].
STATIC_FUSABLE_PRODUCERS = FUSABLE_PRODUCERS + ("swiglu", "gelu", "geglu")
#: The recipes whose casts fuse into the producer of a linear's input, and those producers'
#: kinds (the others cast in a kernel of their own).
FUSED_CASTS = {"fp8-delayed": FUSABLE_PRODUCERS, "fp8-static": STATIC_FUSABLE_PRODUCERS}
#: TensorRT-LLM's FP8 context FMHA under ``fp8-static`` with an FP8 KV cache: the prefill's
#: attention quantises Q (and P) to FP8, runs its MMAs in FP8 and writes its output in FP8
#: for the next linear (no cast) [S: NVIDIA/TensorRT-LLM tensorrt_llm/bench/build/build.py
#: ``build_config.plugin_config.use_fp8_context_fmha = True if quant_algo == QuantAlgo.FP8``
#: beside ``use_paged_context_fmha = True``; tensorrt_llm/builder.py turns FP8 context FMHA
#: on whenever paged context FMHA meets an FP8 KV cache ("FP8 Context FMHA is enabled by
#: default to support FP8 Paged Context FMHA")]. The generation phase's XQA kernel computes
#: in FP16/BF16 over the FP8 cache [S: TensorRT-LLM docs/source/advanced/gpt-attention.md,
#: "Support matrix of the XQA optimization: FP16 / BF16 compute data type; FP16 / BF16 / FP8
#: / INT8 KV cache data type"]: decode attention stays 16-bit, its output cast.
FP8_CONTEXT_FMHA = "fp8-static"
#: The tag of a row-parallel linear's FP8 GEMM under sequence parallelism, ``sp_row:<n>``:
#: its input is cast row-wise only and its output gradient arrives in ``n`` sequence shards
#: (:func:`quantize_records`, :func:`backward_gemms`).
SP_TAG = "sp_row:"
#: The tag of a GEMM the recipe runs with a split accumulator (cuBLAS's fast accumulation
#: off): the data- and weight-gradient GEMMs of every FP8 linear, not the forward one [S:
#: NVIDIA/TransformerEngine v1.11 (c27ee60) transformer_engine/pytorch/module/base.py
#: ``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = True``, ``_2X_ACC_WGRAD = True``, passed as
#: ``use_split_accumulator`` by ``linear.py``, ``layernorm_linear.py`` and
#: ``grouped_linear.py``; v2.2-v2.5 common/recipe/__init__.py ``Float8CurrentScaling``:
#: ``fp8_gemm_fprop = MMParams(use_split_accumulator=False)``, dgrad and wgrad ``True``]. What
#: a promotion costs is the chip's (``[split_accumulator]``,
#: :mod:`diptych.sim.run.precision_ops`).
SPLIT_ACC_TAG = "split_acc"


def sp_shards(op) -> int:
    """Sequence shards of an FP8 row-parallel GEMM's output gradient (its ``sp_row:<n>``
    tag), 1 if it has none."""
    for t in getattr(op, "tags", ()):
        if t.startswith(SP_TAG):
            return int(t[len(SP_TAG):])
    return 1


def quantized(op) -> bool:
    """Whether ``op`` is a GEMM of an FP8 recipe's linear layer."""
    return isinstance(op, Gemm) and "quantized" in op.tags


def _ratio(p: Precision, stored: str) -> float:
    """Bytes of an FP8 element over bytes of the stored element it is quantised from."""
    return dtype_bytes(p.linear) / dtype_bytes(stored)


def cast_op(name: str, elements: int, p: Precision, *, columnwise: bool = True) -> VectorOp:
    """A cast kernel quantising ``elements`` BF16 values to FP8: read once, written row-wise
    and (``columnwise``, for the other GEMM of the pair) column-wise."""
    copies = 2 if columnwise else 1
    return VectorOp(name=name, kind="scale", elements=max(1, int(elements)),
                    ops_per_element=CAST_OPS_PER_ELEMENT,
                    read_bytes=elements * dtype_bytes(p.activations),
                    write_bytes=elements * copies * dtype_bytes(p.linear), dtype=p.linear,
                    tags=("recipe", "cast"))


def amax_op(name: str, elements: int, p: Precision) -> VectorOp:
    """Current scaling's amax pass over ``elements`` BF16 values (one FP32 written): a kernel
    of its own (TE ``nvte_compute_amax``), so of kind ``scale``, which the schedule's fusion
    pass never merges into a GEMM's epilogue (an ``elementwise`` op would be)."""
    return VectorOp(name=name, kind="scale", elements=max(1, int(elements)),
                    ops_per_element=AMAX_OPS_PER_ELEMENT,
                    read_bytes=elements * dtype_bytes(p.activations), write_bytes=AMAX_BYTES,
                    dtype="fp32", tags=("recipe", "amax"))


def transpose_op(name: str, elements: int, p: Precision) -> VectorOp:
    """TE 1.x's ``fp8_transpose`` of a row-wise FP8 tensor that only the forward GEMM read:
    the column-wise copy the weight-gradient GEMM reads, made in the backward pass (read 1 B,
    write 1 B per element; a kernel of its own, no arithmetic)."""
    return VectorOp(name=name, kind="scale", elements=max(1, int(elements)),
                    ops_per_element=0.0, read_bytes=elements * dtype_bytes(p.linear),
                    write_bytes=elements * dtype_bytes(p.linear), dtype=p.linear,
                    tags=("recipe", "transpose"))


def rowwise_share(p: Precision) -> float:
    """The share of a BF16-sized tensor that its row-wise FP8 copy takes (bytes of an FP8
    element over bytes of the stored element)."""
    return _ratio(p, p.activations)


def weight_cast_op(name: str, params: float, p: Precision) -> VectorOp:
    """The FP8 row- and column-wise copies of ``params`` weights, once per optimizer step
    (current scaling reads the weights once more for their amax)."""
    reads = 2 if p.recipe == "fp8-current" else 1
    return VectorOp(name=name, kind="scale", elements=max(1, int(params)),
                    ops_per_element=CAST_OPS_PER_ELEMENT,
                    read_bytes=params * reads * dtype_bytes(p.weights),
                    write_bytes=params * 2 * dtype_bytes(p.linear), dtype=p.linear,
                    tags=("recipe", "cast"))


def amax_collectives(p: Precision, tensors: int, group: int) -> list[Collective]:
    """The delayed recipe's two amax all-reduces per step (forward and backward) over
    ``group`` ranks, for ``tensors`` quantised tensors per rank; none for current scaling or
    a single rank."""
    if p.recipe != "fp8-delayed" or group <= 1:
        return []
    return [Collective(name=f"fp8_amax_all_reduce.{w}", kind="all_reduce",
                       bytes=max(1, tensors) * AMAX_BYTES, group=group, tags=("amax",))
            for w in ("fwd", "bwd")]


def _scaled(uses, role: str, f: float) -> tuple[Use, ...]:
    return tuple(dataclasses.replace(u, share=u.share * f) if u.role == role else u
                 for u in uses)


def quantize_records(records: list, tensors: dict, p: Precision, sp: int = 1
                     ) -> tuple[list, dict]:
    """A forward block's ``(op, Access)`` records under ``p``'s FP8 recipe (module docstring):
    each FP8 linear GEMM reads its FP8 operands: the row-wise half of its weight's BF16-sized
    tensor (the cached FP8 pair), and of its input's where the cast is fused into the input's
    producer; any other input gets a cast op (with current scaling an amax op before it) in
    front of the first GEMM that reads it, writing the input's FP8 pair as a tensor of its
    own (``<input>.fp8``) whose row-wise half the GEMMs read. Returns the records and the
    block's tensor table (``tensors``, by name) with the casts' outputs.

    ``sp``: the sequence-parallel shards (``tp`` under Megatron's sequence parallelism, else
    1). Under delayed scaling with ``sp > 1`` TE 1.x's ``Linear`` knows it is
    sequence-parallel, and a row-parallel one (``TERowParallelLinear``: attention's output
    and the MLP's down projection, the GEMMs whose output a tensor-parallel collective
    reduces) casts its input row-wise only (``cast_to_fp8``: read 2 B, write 1 B; the
    ``<input>.fp8`` tensor is that copy) and transposes it in the backward for the wgrad
    (``fp8_transpose``, as a norm's output: the GEMM is tagged ``x_transpose``); its output
    gradient arrives in ``sp`` shards (tag ``sp_row:<sp>``, :func:`backward_gemms`) [S:
    NVIDIA/TransformerEngine v1.11 (c27ee60) transformer_engine/pytorch/module/linear.py
    ``_Linear.forward``: ``fp8_cast_transpose_fused`` only if ``... and not
    sequence_parallel``, else ``cast_to_fp8``; ``_Linear.backward``: ``inputmat_t_total =
    tex.fp8_transpose(inputmat_total, ...)`` before the wgrad; module/base.py
    ``grad_output_preprocess``: ``gather_grad_output = row_parallel_mode and
    ctx.sequence_parallel``; NVIDIA/Megatron-LM core_r0.9.0 (1afee59)
    megatron/core/extensions/transformer_engine.py ``TELinear``: ``sequence_parallel=
    self.config.sequence_parallel``, ``TERowParallelLinear``: ``parallel_mode="row"``; the
    experts' linears are built with ``tp_size=1`` (``explicit_expert_comm``), so TE's
    ``self.sequence_parallel = (self.tp_size > 1) and sequence_parallel`` is False for them:
    their GEMMs' outputs go to the expert all-to-all, not a tensor-parallel collective].
    Current scaling (TE 2.x) keeps its casts [assumption: TE 2.x's quantizer usage under
    sequence parallelism not read].

    Under an inference recipe (:data:`~diptych.workloads.precision.INFERENCE_RECIPES`) no
    backward reads a column-wise copy: every cast writes the row-wise FP8 copy only (read
    2 B, write 1 B per element), a norm's or a pointwise activation's output is written in
    FP8 by its kernel under ``fp8-static`` (:data:`STATIC_FUSABLE_PRODUCERS`), as is the
    prefill attention's over an FP8 cache (:data:`FP8_CONTEXT_FMHA`), every input gets an
    amax pass before its cast under ``fp8-dynamic``, and the weights are stored in FP8 already
    (read whole)."""
    if not p.quantized:
        return records, tensors
    producer = {t: op for op, a in records for t in a.writes}
    writes = {id(op): a.writes for op, a in records}
    readers: dict[str, list] = {}
    for op, a in records:
        for u in a.uses:
            if u.mode == "read" and u.share > 0:
                readers.setdefault(u.tensor, []).append((op, u.role))
    producers = FUSED_CASTS.get(p.recipe)

    def fusable(op) -> bool:
        if producers is None:
            return False
        if isinstance(op, VectorOp):
            return op.kind in producers
        # FP8 context FMHA writes its output in FP8 (its GEMMs take FP8 inputs)
        return isinstance(op, FusedAttention) and any(g.a_dtype == p.linear for g in op.gemms)

    fused = {t for t, op in producer.items() if fusable(op) and len(writes[id(op)]) == 1
             and all(quantized(r) and role == "a" for r, role in readers.get(t, ()))}
    row = set()
    if sp > 1 and p.recipe == "fp8-delayed":
        # (an expert's down projection, whose output Megatron's all-to-all dispatcher
        # reduce-scatters itself, workloads/lower.py ``alltoall_tp``, is not one: above)
        row = {id(op) for op, a in records if quantized(op) and "expert" not in op.tags
               and any(isinstance(r, Collective) and "tp" in r.tags
                       for t in a.writes for r, _ in readers.get(t, ()))}
    rowwise = {t for t, rs in readers.items() if t not in fused
               and (p.inference_recipe or any(id(r) in row for r, _ in rs))
               and all(p.inference_recipe or id(r) in row for r, _ in rs if quantized(r))}
    out, tables, cast = [], dict(tensors), {}
    half = _ratio(p, p.activations)
    for op, a in records:
        if not quantized(op):
            if a.writes and a.writes[0] in fused:     # the norm writes the row-wise FP8 only
                op = dataclasses.replace(op, write_bytes=op.write_bytes * half,
                                         tags=op.tags + ("fp8_rowwise",))
                a = Access(tuple(dataclasses.replace(u, share=u.share * half)
                                 if u.mode == "write" else u for u in a.uses), a.rmw)
            out.append((op, a))
            continue
        if id(op) in row:
            op = dataclasses.replace(op, tags=op.tags + (f"{SP_TAG}{sp}",))
        if not p.inference_recipe and any(u.role == "a" and u.tensor in fused | rowwise
                                           for u in a.uses):
            op = dataclasses.replace(op, tags=op.tags + ("x_transpose",))
        uses = []
        for u in a.uses:
            t = u.tensor
            if u.role == "b":
                uses.append(dataclasses.replace(u, share=u.share * _ratio(p, p.weights)))
                continue
            if u.role != "a" or t in fused:
                uses.append(dataclasses.replace(u, share=u.share * half) if u.role == "a"
                            else u)
                continue
            copies = 1 if t in rowwise else 2
            if t not in cast:
                e = tables[t].bytes / dtype_bytes(p.activations)
                token = f"{t}.fp8"
                tables[token] = Tensor(token, e * copies * dtype_bytes(p.linear))
                pre: tuple[Use, ...] = ()
                if p.recipe in AMAX_RECIPES:
                    tables[f"{t}.amax"] = Tensor(f"{t}.amax", AMAX_BYTES)
                    out.append((amax_op(f"{t}.amax", e, p),
                                Access((Use(t, "read"), Use(f"{t}.amax", "write")))))
                    pre = (Use(f"{t}.amax", "read", 0.0, "dep"),)
                out.append((cast_op(f"{t}.cast", e, p, columnwise=copies == 2),
                            Access((Use(t, "read"),) + pre + (Use(token, "write"),))))
                cast[t] = token
            uses.append(dataclasses.replace(u, tensor=cast[t], share=u.share / copies))
        out.append((op, Access(tuple(uses), a.rmw)))
    return out, tables


def backward_gemms(op: Gemm, p: Precision) -> list:
    """The backward ops of an FP8 recipe's linear GEMM ``op``, in order: the cast of its
    output gradient (with current scaling an amax pass first), then dgrad ``dX = dY·W`` and
    wgrad ``dW = dYᵀ·X`` on FP8 operands, both with a split accumulator
    (:data:`SPLIT_ACC_TAG`).

    A row-parallel GEMM under sequence parallelism (``sp_row:<n>``, :func:`quantize_records`)
    gets its output gradient in ``n`` sequence shards: TE casts the rank's shard row-wise only
    (``cast_to_fp8``: ``1/n`` of the elements, read 2 B, write 1 B), all-gathers it in FP8 and
    transposes the gathered tensor (``fp8_transpose``: read 1 B, write 1 B per element,
    ``<linear>.dy.transpose``) [S: NVIDIA/TransformerEngine v1.11 (c27ee60)
    transformer_engine/pytorch/module/base.py ``grad_output_preprocess``, the branch "FP8
    case with gather: unfused bgrad, cast, transpose for efficient gather"]. The all-gather
    stays the tensor-parallel collective the cluster step charges (in FP8 on a chip with a
    ``[tp_overlap]`` table: docs/cluster.md, "Tensor-parallel overlap")."""
    out: list = []
    e = op.batch * op.m * op.n
    shards = sp_shards(op)
    if p.recipe == "fp8-current":
        out.append(amax_op(f"{op.name}.dy.amax", e, p))
    if shards > 1:
        out += [cast_op(f"{op.name}.dy.cast", e / shards, p, columnwise=False),
                transpose_op(f"{op.name}.dy.transpose", e, p)]
    else:
        out.append(cast_op(f"{op.name}.dy.cast", e, p))
    da = Gemm(name=f"{op.name}.dgrad", m=op.m, k=op.n, n=op.k, batch=op.batch,
              a_dtype=p.linear, b_dtype=op.b_dtype, c_dtype=p.activations,
              acc_dtype=op.acc_dtype, b_is_weight=op.b_is_weight,
              tags=op.tags + ("dgrad", SPLIT_ACC_TAG))
    if "x_transpose" in op.tags:
        da = (da, transpose_op(f"{op.name}.x.transpose", op.batch * op.m * op.k, p))
    db = Gemm(name=f"{op.name}.wgrad", m=op.k, k=op.m, n=op.n, batch=op.batch,
              a_dtype=op.a_dtype, b_dtype=p.linear, c_dtype=p.grads, acc_dtype=op.acc_dtype,
              b_is_weight=op.batch == 1, c_accumulate=True,
              tags=tuple(t for t in op.tags if t != "weight") + ("wgrad", SPLIT_ACC_TAG))
    return out + (list(da) if isinstance(da, tuple) else [da]) + [db]

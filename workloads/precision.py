"""Precision per tensor class: weights, activations, KV cache, accumulation, training state.

Examples: BF16 inference (all ``bf16``); W8A8 with an FP8 KV cache (``weights="fp8",
activations="fp8", kv="fp8"``); weight-only INT4 (``weights="int4"``, activations ``bf16``);
BF16 mixed-precision training with an FP32 master copy and FP32 Adam moments (16 B/param).

**Training recipes** (:data:`RECIPES`, docs/precision.md "Training recipes"): FP8 training
is a recipe, not a storage dtype. ``fp8-delayed`` and ``fp8-current`` are Transformer Engine's
per-tensor recipes (``DelayedScaling``, ``Float8CurrentScaling``): the linear layers' GEMMs
take FP8 operands (``linear``), quantised from BF16 tensors by cast kernels, and everything
else (attention, norms, activations, embedding, LM head, router, loss, optimizer, gradients)
stays in BF16/FP32; ``mxfp8`` stores weights and activations in MXFP8 (the block-scaled
path, :mod:`diptych.sim.run.precision_ops`). :func:`recipe_for` names the recipe a training
run's dtypes ask for.

**Inference recipes** (:data:`INFERENCE_RECIPES`, docs/precision.md "Inference recipes"):
post-training FP8 as serving engines run a quantised checkpoint. The linear layers' weights
are stored in FP8 (``weights`` = ``linear``) and their GEMMs take FP8 inputs, quantised per
tensor from the 16-bit activations, which everything else keeps: the residual stream, the
tensor-parallel collectives, attention's queries, the logits. The weights a quantiser leaves
alone (the embedding, the LM head, the MoE router and shared-expert gate, norms, biases,
convolutions) stay 16-bit (``unquantized_weights``) [S: NVIDIA/TensorRT-Model-Optimizer
modelopt/torch/quantization/config.py ``FP8_DEFAULT_CFG``: ``*weight_quantizer`` and
``*input_quantizer`` ``num_bits (4, 3)``, ``axis None`` (per tensor), ``algorithm "max"``
(a calibrated, static scale), with ``_default_disabled_quantizer_cfg`` disabling
``*lm_head*``, ``*router*``, ``*mlp.gate.*``, ``*mlp.shared_expert_gate.*``,
``*mixer.conv1d*``; only ``nn.Linear``-like modules carry quantizers]. ``fp8-static``: the
input scale is the checkpoint's (TensorRT-LLM's ``FP8Linear``/``FP8RowLinear``: a
``quantize(x, activation_scaling_factor, 'fp8')`` in front of the FP8 GEMM, which the engine
builder fuses into a normalisation that produces ``x``); ``fp8-dynamic``: the scale is the
input's own max, found by a pass of its own before each cast (vLLM's online FP8, where
``scaled_fp8_quant`` without a scale runs ``dynamic_scaled_fp8_quant``: a
``segmented_max_reduction`` kernel, then ``scaled_fp8_quant_kernel`` [S: vllm-project/vllm
csrc/quantization/fp8/common.cu]; no norm writes FP8 [assumption: vLLM's RMSNorm-quant fusion
pass, off by default, not modelled]).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch.dtypes import check_dtype, dtype_bytes
from .loss import DEFAULT as LOSS_DEFAULT, check_implementation
from . import dropout

#: Training precision recipes. Per-tensor FP8 (Transformer Engine's names: delayed scaling,
#: the TE default, and current scaling), and MXFP8 (block-scaled storage, modelled as MXFP8
#: weights and activations throughout).
RECIPES: tuple[str, ...] = ("fp8-delayed", "fp8-current", "mxfp8")
#: The recipes whose linear GEMMs take per-tensor FP8 operands quantised from BF16.
FP8_RECIPES: tuple[str, ...] = ("fp8-delayed", "fp8-current")
#: Inference precision recipes (module docstring): FP8 linear layers (weights stored in FP8,
#: inputs quantised with a static or a dynamic per-tensor scale) over 16-bit activations.
INFERENCE_RECIPES: tuple[str, ...] = ("fp8-static", "fp8-dynamic")
#: The recipes whose scale of a linear's input comes from a pass over the input itself.
AMAX_RECIPES: tuple[str, ...] = ("fp8-current", "fp8-dynamic")


def check_inference_recipe(recipe: str | None, weights: str | None, activations: str | None
                           ) -> None:
    """ValueError naming the recipe when ``recipe`` is not an inference recipe, or when the
    dtypes given (None: not given) contradict it: its linear weights are FP8, its
    activations 16-bit."""
    if recipe is None:
        return
    if recipe not in INFERENCE_RECIPES:
        kind = "a training recipe" if recipe in RECIPES else "not a recipe"
        raise ValueError(f"recipe {recipe!r} is {kind}; inference takes "
                         f"{', '.join(INFERENCE_RECIPES)} (or the dtypes alone)")
    if weights not in (None, "fp8"):
        raise ValueError(f"recipe {recipe!r} stores the linear layers' weights in fp8, not "
                         f"weights {weights}; drop --weights-dtype or the recipe")
    if activations is not None and dtype_bytes(activations) != 2:
        raise ValueError(f"recipe {recipe!r} keeps the activations in 16 bits (bf16 or "
                         f"fp16), not {activations}; drop --act-dtype or the recipe")


def recipe_for(weights: str | None, activations: str | None, recipe: str | None) -> str | None:
    """The training recipe ``weights``/``activations`` dtypes (None: not given) and a named
    ``recipe`` (None: none named) ask for: FP8 weights and activations are ``fp8-delayed``
    unless ``fp8-current`` is named; MXFP8 ones are ``mxfp8``; a named recipe with no dtypes
    implies its own. ValueError naming the recipe when it contradicts the dtypes."""
    if recipe is not None and recipe not in RECIPES:
        kind = " is an inference recipe;" if recipe in INFERENCE_RECIPES else ":"
        raise ValueError(f"recipe {recipe!r}{kind} training takes one of {', '.join(RECIPES)}")
    given = {d for d in (weights, activations) if d is not None}
    if recipe is None:
        if given == {"fp8"} and weights == activations:
            return "fp8-delayed"
        if given == {"mxfp8"} and weights == activations:
            return "mxfp8"
        return None
    want = "fp8" if recipe in FP8_RECIPES else "mxfp8"
    if given - {want}:
        got = ", ".join(f"{n} {d}" for n, d in (("weights", weights),
                                                 ("activations", activations)) if d)
        raise ValueError(f"recipe {recipe!r} trains with {want} weights and activations, not "
                         f"{got}; drop the dtypes or choose a recipe that uses them")
    return recipe


@dataclass(frozen=True, kw_only=True)
class Precision:
    """Storage precision of each tensor class. The array computes a product in the wider of
    its two inputs (:attr:`diptych.workloads.ops.Gemm.compute_dtype`), so weight-only quantisation
    saves bytes, not MACs.

    Training state per parameter is ``weights + grads + master + 2 × moments`` bytes
    (BF16/BF16/FP32/FP32 = 2 + 2 + 4 + 8 = 16 B, as in mixed-precision Adam); ``master=None``
    drops the master copy (pure BF16 training). ``recipe``: the training recipe
    (:data:`RECIPES`), None for none; under an FP8 recipe ``linear`` is the dtype the linear
    layers' GEMM operands are quantised to (module docstring), the other fields the storage.
    ``cross_entropy``: the training loss's implementation (:data:`~diptych.workloads.loss.\
IMPLEMENTATIONS`: Megatron-Core's ``fused`` FP32 cross-entropy or its eager ``unfused`` one),
    which decides the FP32 copies of the logits a step writes and reads.
    ``hidden_dropout``, ``attention_dropout``: the training step's dropout probabilities
    (:mod:`~diptych.workloads.dropout`; 0 by default: none lowered), in [0, 1).
    ``unquantized_weights``: under an inference recipe (:data:`INFERENCE_RECIPES`), the dtype
    of the weights it leaves unquantised (embedding, LM head, router, norms, biases; module
    docstring), ``weights`` being the linear layers' (= ``linear``); None otherwise.
    """

    weights: str = "bf16"
    activations: str = "bf16"
    kv: str = "bf16"
    accumulation: str = "fp32"
    grads: str = "bf16"
    master: str | None = "fp32"
    moments: str = "fp32"
    linear: str | None = None
    recipe: str | None = None
    cross_entropy: str = LOSS_DEFAULT
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    unquantized_weights: str | None = None

    def __post_init__(self):
        check_implementation(self.cross_entropy)
        for name in dropout.FIELDS:
            # a NumPy number stored as the float it is (hashes, JSON)
            object.__setattr__(self, name, dropout.check_probability(name, getattr(self, name)))
        for name in ("weights", "activations", "kv", "accumulation", "grads", "moments"):
            check_dtype(getattr(self, name), f"{name} dtype")
        if self.master is not None:
            check_dtype(self.master, "master dtype")
        if self.recipe is not None and self.recipe not in RECIPES + INFERENCE_RECIPES:
            raise ValueError(f"recipe must be one of {', '.join(RECIPES + INFERENCE_RECIPES)}, "
                             f"not {self.recipe!r}")
        per_tensor = FP8_RECIPES + INFERENCE_RECIPES
        if (self.linear is not None) != (self.recipe in per_tensor):
            raise ValueError(f"linear {self.linear!r} goes with a per-tensor FP8 recipe "
                             f"({', '.join(per_tensor)}), not recipe {self.recipe!r}")
        if self.linear is not None:
            check_dtype(self.linear, "linear dtype")
        inference = self.recipe in INFERENCE_RECIPES
        if inference != (self.unquantized_weights is not None):
            raise ValueError(f"unquantized_weights {self.unquantized_weights!r} goes with an "
                             f"inference recipe ({', '.join(INFERENCE_RECIPES)}), not recipe "
                             f"{self.recipe!r}")
        if inference:
            check_dtype(self.unquantized_weights, "unquantized_weights dtype")
            if self.weights != self.linear:
                raise ValueError(f"recipe {self.recipe!r} stores the linear weights in its "
                                 f"linear dtype {self.linear}, not weights {self.weights}")

    @property
    def w_bytes(self) -> float:
        return dtype_bytes(self.weights)

    @property
    def uw_bytes(self) -> float:
        """Bytes of a weight an inference recipe leaves unquantised (embedding, LM head,
        router, norms, biases); :attr:`w_bytes` without one."""
        return dtype_bytes(self.unquantized_weights or self.weights)

    @property
    def inference_recipe(self) -> bool:
        """Whether an inference recipe (:data:`INFERENCE_RECIPES`) quantises the linears."""
        return self.recipe in INFERENCE_RECIPES

    @property
    def a_bytes(self) -> float:
        return dtype_bytes(self.activations)

    @property
    def kv_bytes(self) -> float:
        return dtype_bytes(self.kv)

    @property
    def g_bytes(self) -> float:
        return dtype_bytes(self.grads)

    @property
    def optimizer_state_bytes_per_param(self) -> float:
        """Master copy plus the two Adam moments, bytes per parameter."""
        master = dtype_bytes(self.master) if self.master else 0.0
        return master + 2 * dtype_bytes(self.moments)

    @property
    def train_state_bytes_per_param(self) -> float:
        """Weights + gradients + master + moments, bytes per parameter (16 by default)."""
        return self.w_bytes + self.g_bytes + self.optimizer_state_bytes_per_param

    @property
    def quantized(self) -> bool:
        """Whether the linear layers' GEMMs take operands quantised by a per-tensor recipe."""
        return self.linear is not None

    def to_dict(self) -> dict[str, str | None]:
        """Every field by name (a run's ``precision`` in ``--json``)."""
        return {"weights": self.weights, "activations": self.activations, "kv": self.kv,
                "accumulation": self.accumulation, "grads": self.grads, "master": self.master,
                "moments": self.moments, "recipe": self.recipe, "linear": self.linear,
                "cross_entropy": self.cross_entropy,
                **{n: getattr(self, n) for n in dropout.FIELDS if getattr(self, n)},
                **({"unquantized_weights": self.unquantized_weights}
                   if self.unquantized_weights else {})}

    def describe(self) -> str:
        out = (f"W {self.weights} / A {self.activations} / KV {self.kv} / "
               f"acc {self.accumulation}")
        if self.unquantized_weights:
            return out + (f" / {self.recipe} (linear {self.linear}, other weights "
                          f"{self.unquantized_weights})")
        return out + (f" / {self.recipe} (linear {self.linear})" if self.linear else "")

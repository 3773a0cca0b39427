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


def recipe_for(weights: str | None, activations: str | None, recipe: str | None) -> str | None:
    """The training recipe ``weights``/``activations`` dtypes (None: not given) and a named
    ``recipe`` (None: none named) ask for: FP8 weights and activations are ``fp8-delayed``
    unless ``fp8-current`` is named; MXFP8 ones are ``mxfp8``; a named recipe with no dtypes
    implies its own. ValueError naming the recipe when it contradicts the dtypes."""
    if recipe is not None and recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {', '.join(RECIPES)}, not {recipe!r}")
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

    def __post_init__(self):
        check_implementation(self.cross_entropy)
        for name in dropout.FIELDS:
            # a NumPy number stored as the float it is (hashes, JSON)
            object.__setattr__(self, name, dropout.check_probability(name, getattr(self, name)))
        for name in ("weights", "activations", "kv", "accumulation", "grads", "moments"):
            check_dtype(getattr(self, name), f"{name} dtype")
        if self.master is not None:
            check_dtype(self.master, "master dtype")
        if self.recipe is not None and self.recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {', '.join(RECIPES)}, not {self.recipe!r}")
        if (self.linear is not None) != (self.recipe in FP8_RECIPES):
            raise ValueError(f"linear {self.linear!r} goes with an FP8 recipe "
                             f"({', '.join(FP8_RECIPES)}), not recipe {self.recipe!r}")
        if self.linear is not None:
            check_dtype(self.linear, "linear dtype")

    @property
    def w_bytes(self) -> float:
        return dtype_bytes(self.weights)

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
                **{n: getattr(self, n) for n in dropout.FIELDS if getattr(self, n)}}

    def describe(self) -> str:
        out = (f"W {self.weights} / A {self.activations} / KV {self.kv} / "
               f"acc {self.accumulation}")
        return out + (f" / {self.recipe} (linear {self.linear})" if self.linear else "")

"""Parameters per rank of each layer kind, from the weight inventory of
:func:`diptych.workloads.weight_tensors`.

Every layer holds its attention, norms and (dense layers) MLP, or (MoE layers) router, shared
experts and its ``experts / ep`` routed experts; tensor-parallel-split tensors count ``÷ tp``,
replicated ones (norms, router, MLA down-projections) in full. The first pipeline stage also
holds the input embedding (and learned positions), the last the final norm and LM head; with
tied embeddings and more than one stage, the last stage keeps its own copy of the embedding
matrix as its head (Megatron).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...workloads.config import ModelConfig
from ...workloads.params import weight_tensors

#: Tensor groups that belong to every layer (attention sinks: one logit per head and layer).
_EVERY = ("attn", "norm", "sink")


@dataclass(frozen=True)
class LayerParams:
    """Parameters one rank holds, by layer kind: ``dense`` and ``moe`` per layer (``moe``
    includes ``moe_experts``, its routed-expert part, which the expert-data-parallel group
    shards), ``embedding`` on the first stage and ``head`` on the last."""

    dense: float
    moe: float
    moe_experts: float
    embedding: float
    head: float

    def of(self, kind: str, moe: bool) -> tuple[float, float]:
        """(parameters, routed-expert parameters) of one copy of a layer kind: ``embedding``,
        ``head``, or a layer (``moe``: with routed experts)."""
        if kind == "embedding":
            return self.embedding, 0.0
        if kind == "head":
            return self.head, 0.0
        return (self.moe, self.moe_experts) if moe else (self.dense, 0.0)

    def stage(self, dense_layers: int, moe_layers: int, first: bool, last: bool
              ) -> tuple[float, float]:
        """(all parameters, routed-expert parameters) of a stage with these layers."""
        total = dense_layers * self.dense + moe_layers * self.moe
        total += (self.embedding if first else 0.0) + (self.head if last else 0.0)
        return total, moe_layers * self.moe_experts


#: Tensor groups of the linear layers (an FP8 recipe's casts; biases excluded), as
#: :func:`diptych.workloads.train.linear_params_per_chip` counts them.
LINEAR_GROUPS = ("attn", "mlp", "expert", "shared_expert")


@lru_cache(maxsize=256)
def layer_params(m: ModelConfig, tp: int, ep: int = 1, pp: int = 1, *,
                 linear: bool = False) -> LayerParams:
    """Per-rank parameters of each layer kind at tensor-parallel degree ``tp`` and expert
    parallel degree ``ep``; ``pp > 1`` with tied embeddings gives the last stage its head.
    ``linear``: only the linear layers' weights (:data:`LINEAR_GROUPS`: what an FP8 recipe
    casts; no embedding or head)."""
    every = dense = moe = experts = emb = head = 0.0
    for t in weight_tensors(m):
        if t.count == 0:          # a kind of layer the model does not have
            continue
        if linear and (t.group not in LINEAR_GROUPS or "bias" in t.name):
            continue
        per = float(t.rank_elements(tp))
        if t.name == "final_norm":
            head += per
        elif t.group in _EVERY:
            every += per * t.count / m.layers
        elif t.group == "mlp":
            dense += per * t.count / m.dense_layers
        elif t.group == "expert":
            experts += per * t.count / m.moe_layers / ep
        elif t.group in ("router", "shared_expert"):
            moe += per * t.count / m.moe_layers
        elif t.group == "embed":
            emb += per * t.count
        elif t.group == "head":
            head += per * t.count
        else:                                         # pragma: no cover - inventory changed
            raise ValueError(f"unknown weight group {t.group!r} of {t.name!r}")
    if m.tie_word_embeddings and pp > 1 and not linear:
        head += m.vocab_size * m.hidden_size / tp
    return LayerParams(dense=every + dense, moe=every + moe + experts, moe_experts=experts,
                       embedding=emb, head=head)


"""A model's multi-token-prediction (MTP) module as a model of its own: the draft of
``serve --speculative draft=mtp``.

DeepSeek-V3's MTP module k (technical report §2.2, arXiv 2412.19437, eq. 21–23) [S] takes the
previous depth's hidden state ``h`` and the next token's embedding, ``h' = M·[RMSNorm(h);
RMSNorm(Emb(t))]`` (``M``: a 2d × d projection, ``eh_proj``), runs one transformer block
``TRM(h')`` and predicts with the output head ``OutHead``; the embedding and the output head
are shared with the main model. vLLM's ``DeepSeekMultiTokenPredictorLayer``
(vllm/model_executor/models/deepseek_mtp.py) [S] has exactly these parts: ``enorm``,
``hnorm``, ``eh_proj = nn.Linear(2·hidden, hidden)`` (replicated on every tensor-parallel
rank; Qwen3-Next's ``fc`` is column-parallel: :func:`~diptych.workloads.params.
mtp_projection_split`), ``shared_head`` (a norm and the head) and ``mtp_block`` (a decoder
layer as the main model's: MLA + MoE for DeepSeek-V3, GLM-4.5's ``Glm4MoeDecoderLayer`` in
glm4_moe_mtp.py, Qwen3-Next's full-attention MoE layer in qwen3_next_mtp.py).

:func:`mtp_module` is that module as a one-layer :class:`ModelConfig` (``mtp_module=True``:
the lowering adds the norms and ``eh_proj`` after its embedding, :func:`~diptych.workloads.
lower._embedding`; :func:`~diptych.workloads.params.weight_tensors` counts ``eh_proj`` and the
two norms and neither the embedding nor the head, which are the target's); a pass of it is a
step of that model. :func:`mtp_params` is what the module holds: ``mtp_layers`` modules, each
its block, projection, norms and head norm. The checkpoint stores the embedding and head
again with every module (DeepSeek-V3's 14 B MTP weights include them: 685 B − 671 B, model
card); they are not counted twice, as the report shares them.
"""

from __future__ import annotations

from dataclasses import replace

from .config import ModelConfig
from .params import params_per_chip

#: Per-token acceptance of an MTP draft when none is given: DeepSeek-V3 reports "the
#: acceptance rate of the second token prediction ranges between 85% and 90% across various
#: generation topics" (technical report §5.4.3, arXiv 2412.19437) [S]; the lower end.
MTP_ACCEPT = 0.85

#: The HF config key a model's MTP modules come from (docs, messages).
MTP_KEY = "num_nextn_predict_layers"


def check_mtp(m: ModelConfig) -> None:
    """Raise ValueError when ``m`` ships no MTP module to draft with."""
    if m.mtp_layers < 1:
        raise ValueError(f"--speculative draft=mtp: model {m.name!r} has no multi-token-"
                         f"prediction module ({MTP_KEY} = {m.mtp_layers} in its config); "
                         f"name a draft model (draft=MODEL) or drop --speculative")


def mtp_module(m: ModelConfig) -> ModelConfig:
    """One of ``m``'s MTP modules as a one-layer model (module docstring): the block is a
    layer as ``m``'s last (MoE when ``m`` is; full attention: Qwen3-Next's MTP layer is a
    gated-attention layer, not a linear one), with ``m``'s attention, norms and vocabulary."""
    check_mtp(m)
    last = m.layer_specs()[-1]
    if last.window is not None:
        raise ValueError(f"model {m.name!r}: an MTP module over a windowed layer is not "
                         f"modelled")
    return replace(m, name=f"{m.name} MTP", layers=1, first_dense_layers=0,
                   layer_attention=("full",) if m.layer_attention else (),
                   layer_moe=(m.is_moe,) if m.layer_moe else (),
                   layer_rope=(), mtp_layers=0, mtp_module=True)


def mtp_params(m: ModelConfig, tp: int = 1) -> float:
    """Parameters (per tensor-parallel rank with ``tp``) of ``m``'s ``mtp_layers`` MTP
    modules, the shared embedding and head left out (module docstring)."""
    return m.mtp_layers * params_per_chip(mtp_module(m), tp)

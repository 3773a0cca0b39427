"""Mixture-of-experts routing statistics for a batch of tokens.

With ``E`` experts, top-``k`` routing and ``T`` tokens routed independently and uniformly
(a balanced router, which load-balancing losses aim for), one expert is missed by one token with
probability ``1 − k/E``, so the expected number of distinct experts touched is
``E · (1 − (1 − k/E)^T)``. Only those experts' weights are read; the ``T·k`` token-expert pairs
are spread over them evenly.
"""

from __future__ import annotations


def expected_experts_touched(experts: int, top_k: int, tokens: int) -> float:
    """``E · (1 − (1 − k/E)^T)``: expected distinct experts used by ``tokens`` tokens."""
    for name, v in (("experts", experts), ("top_k", top_k), ("tokens", tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, not {v!r}")
    if top_k > experts:
        raise ValueError(f"top_k ({top_k}) must be at most experts ({experts})")
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def expert_load(experts: int, top_k: int, tokens: int) -> list[tuple[int, int]]:
    """How the ``T·k`` token-expert pairs fall on the experts, as integer groups.

    Returns ``[(n_experts, tokens_each), ...]``: the expected number of touched experts
    rounded to the nearest integer and clamped to ``[k, min(E, T·k)]`` (a token always uses k
    distinct experts), with the pairs spread as evenly as integers allow (``r`` experts get
    ``q + 1`` tokens and the rest ``q``), so the groups hold exactly ``T·k`` pairs.
    """
    e = expected_experts_touched(experts, top_k, tokens)
    touched = max(top_k, min(experts, tokens * top_k, round(e)))
    q, r = divmod(tokens * top_k, touched)
    return [(n, t) for n, t in ((r, q + 1), (touched - r, q)) if n and t]

"""A floor under a deployment plan's price that needs no serving run: the search skips a plan
whose floor is above the best price its design has already reached (issue 24 item 7;
docs/serving.md, "Deployment search").

A plan's dollars per million output tokens (:func:`~.search.usd_per_mtok`) are its chips'
capital cost per second over its throughput, plus the energy's cost per token:

    usd = 1e6 · (capex_per_s / tokens_per_s + energy_usd_per_token),   energy term ≥ 0.

Every plan of a search serves the same request stream (one seed), known before any run: its
``O`` output tokens and its arrival times. A run completes every request (the event loop runs
to completion; a request that cannot fit is refused before the run, :func:`~.serve._check_fit`)
and measures ``tokens_per_s = O / (last finish − first arrival)``, where the last finish is no
earlier than the last arrival. So ``tokens_per_s ≤ O / span`` (``span``: last arrival − first
arrival), and

    usd ≥ floor = 1e6 · capex_per_s · span / O,

whatever the plan's latencies, energy or settings. A plan whose floor exceeds the price of a
plan already found that meets the SLOs and counts for the same design
(:func:`~.search.design_name`) can be neither that design's best plan nor the best overall (the
best minimises the price; its ties break on goodput only at equal prices). Its row says it was
skipped and why; it is not on the Pareto front the search prints (the front is over the plans
run). A test checks the floor against every plan of an exhaustive search, and that the pruned
search's best plans are the exhaustive one's.
"""

from __future__ import annotations

import numpy as np

from ...arch import load_chip
from ...arch.cost import SECONDS_PER_YEAR, chip_cost
from .requests import Load, draw_requests


def capex_usd_per_s(pools) -> float | None:
    """The chips' capital cost per second of service of ``pools`` (``(chip, chips)`` pairs:
    each chip's cost spread over ``[cost]`` ``utilisation`` × ``lifetime_years``, as
    :func:`~diptych.arch.cost.token_economics` spreads one chip's); None when a chip has no
    ``[cost]`` table."""
    total = 0.0
    for chip, chips in pools:
        c, cc = chip.cost, chip_cost(chip)
        if c is None or cc is None:
            return None
        total += chips * cc.total_usd / (c.utilisation * c.lifetime_years * SECONDS_PER_YEAR)
    return total


def stream_span(load: Load, ctx_limit: int, seed: int) -> tuple[float, int]:
    """``(span_s, output_tokens)`` of the stream every plan serves (drawn as
    :func:`~.serve.serve` draws it, ``seed`` the configuration's): the seconds from its first
    arrival to its last, and its output tokens."""
    arr, _, out, _ = draw_requests(load, ctx_limit, np.random.default_rng(seed))
    return float(np.max(arr) - np.min(arr)), int(np.sum(out))


def usd_floor(roles, span_s: float, output_tokens: int) -> float | None:
    """The floor under the price of a plan of ``roles`` (a :class:`~.search.Plan`'s) on a
    stream of ``span_s`` and ``output_tokens`` (module docstring); None without a price."""
    rate = capex_usd_per_s([(load_chip(r[1]), r[3]) for r in roles])
    if rate is None or output_tokens <= 0:
        return None
    return 1e6 * rate * span_s / output_tokens


def skip_reason(floor: float, best: dict) -> str:
    """Why a plan with price floor ``floor`` is skipped: ``best`` (a row meeting the SLOs, of
    the same design) is already cheaper."""
    return (f"not run: its chips' cost alone is at least {floor:.4g} $/Mtok on this stream, "
            f"more than {best['usd_per_mtok']:.4g} $/Mtok of {best['plan']}")

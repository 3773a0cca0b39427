"""Block copies between a KV cache's ordered memory tiers (fastest first) from one step's
placement to the next (issue 25: ``serve`` KV across three tiers, :mod:`.kv_tier`).

A sequence (or cached prefix) held ``before[i]`` blocks in tier ``i`` at the previous step
and is placed with ``after[i]`` now. Which of its blocks sit where does not matter to the
step (attention reads them all); what costs is the count of blocks that change tier. The
fewest copies that turn ``before`` into ``after``: a block written this step lands where it
is placed, so new blocks fill tiers that gain (the slowest first: the sequence's tail), and a
freed block leaves its tier without a copy (the slowest first: freed blocks are the tail's);
every remaining block over a tier's new count is copied to a tier under its count, matched
nearest tier first (tiers 1 and 2, then 2 and 3, then 1 and 3). With two tiers this is the
count ``|Δ₂|`` less the blocks written or freed in its direction, as before the third tier.
"""

from __future__ import annotations

#: the tier pairs, 0-based, in the order surpluses are matched to deficits
PAIRS = ((0, 1), (1, 2), (0, 2))


def chain_moves(before: tuple[int, ...], after: tuple[int, ...]) -> tuple[int, int, int]:
    """Blocks copied between tiers 1-2, 2-3 and 1-3 (in that order) to go from ``before`` to
    ``after`` (blocks per tier, fastest first, two or three tiers; module docstring)."""
    if len(before) != len(after) or len(before) not in (2, 3):
        raise ValueError(f"kv chain: before {before!r} and after {after!r} must both list "
                         f"2 or 3 tiers")
    if min(before) < 0 or min(after) < 0:
        raise ValueError(f"kv chain: block counts must be >= 0, not {before!r} -> {after!r}")
    n = len(before)
    delta = [a - b for a, b in zip(after, before)]
    gain = [max(0, d) for d in delta]                 # tiers under their new count
    loss = [max(0, -d) for d in delta]                # tiers over it
    grew = sum(after) - sum(before)
    free = grew if grew > 0 else -grew
    side = gain if grew > 0 else loss                 # written into gains, freed from losses
    for i in reversed(range(n)):
        take = min(side[i], free)
        side[i] -= take
        free -= take
    out = [0, 0, 0]
    for k, (i, j) in enumerate(PAIRS):
        if j >= n:
            continue
        x = min(loss[i], gain[j])
        loss[i] -= x
        gain[j] -= x
        y = min(loss[j], gain[i])
        loss[j] -= y
        gain[i] -= y
        out[k] = x + y
    return out[0], out[1], out[2]

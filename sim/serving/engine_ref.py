"""A plain, slow re-implementation of the serving loop for one instance: the golden twin.

It follows the rules of docs/serving.md line by line, for clarity rather than speed: every
request is a dataclass, the KV cache is an explicit list of free block ids (so a block can
never be held twice, and the capacity can never be exceeded: both are asserted), totals are
recomputed from scratch each step, and time simply jumps from one step end (or arrival) to
the next. Tests run it beside :func:`diptych.sim.serving.engine.run_loop` on small cases and
require identical per-request times.

The serving runtime's host costs (``cfg.runtime``) enter in three places, as
docs/serving.md "Runtime host costs" states them: every step's duration is device + host
work, or their maximum when the runtime overlaps them, plus its exposed host time; a request
can be scheduled from ``arrival + request_in_s(prompt)`` on; a token reaches the client
``token_out_s`` after its step ends (``first_t``, ``finish_t``, and a closed-loop client's
next arrival).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...workloads.serving_step import Step
from .config import ServeConfig
from .engine import ServingStalled, stalled_message


def busiest_rank_share(step: Step, ranks: int) -> Step:
    """The share of ``step`` of the busiest of ``ranks`` data-parallel ranks, dealt by hand:
    decode sequences one to each rank in turn; then each prefill chunk, the longest first
    (the longer past first among equal chunks), to a rank with the fewest tokens (the first
    such); the busiest rank is the first with the most tokens; its keys its sequences'
    share of the decode keys, rounded up."""
    if ranks == 1:
        return step
    seqs = [0] * ranks
    for s in range(step.decode_batch):
        seqs[s % ranks] += 1
    load = [n * step.decode_queries for n in seqs]
    mine: list[list] = [[] for _ in range(ranks)]
    for chunk in sorted(step.prefill, reverse=True):
        least = load.index(min(load))
        mine[least].append(chunk)
        load[least] += chunk[0]
    top = load.index(max(load))
    keys = 0
    if seqs[top]:
        keys = max(seqs[top] * step.decode_queries,
                   math.ceil(step.decode_keys * seqs[top] / step.decode_batch))
    return Step(decode_batch=seqs[top], decode_keys=keys, prefill=tuple(mine[top]),
                decode_queries=step.decode_queries)


@dataclass
class GoldenRequest:
    rid: int
    arrival: float
    prompt: int
    output: int
    shared: int = 0          # tokens of the pinned shared prefix
    client: int = -1
    computed: int = 0        # tokens whose K/V are in the cache
    target: int = 0          # tokens the current prefill pass must reach
    generated: int = 0       # output tokens sampled so far
    first_t: float = -1.0
    finish_t: float = -1.0
    preemptions: int = 0
    blocks: list = field(default_factory=list)      # every block id it holds
    table: list = field(default_factory=list)       # per layer kind: slot -> its ids or None
    swapped_out: int = 0     # blocks held in host memory
    swapped_to: int = 0      # where they are: 2 or 3 (a memory tier), 0 (the host link)
    pid: int = -1            # its prefix in the prefix cache (``cached_prefix_blocks``), or -1
    holds_prefix: bool = False   # it holds a reference to that prefix's cached blocks

    def __post_init__(self):
        self.computed = self.shared
        self.target = self.prompt


@dataclass
class GoldenRun:
    requests: list
    steps: list            # (start, seconds, decode batch, chunks)
    peak_blocks: int
    preemptions: int
    tier2_peak: int = 0    # most blocks the second memory tier held
    prefix_hits: tuple = (0, 0, 0)   # prefix cache: hits in tier 1, in tier 2, misses
    tier3_peak: int = 0    # most blocks the third memory tier held
    prefix_hits3: int = 0  # prefix cache: hits on a prefix placed (partly) in tier 3


def golden_serve(reqs: list[GoldenRequest], oracle, cfg: ServeConfig, blocks: int, *,
                 prefix_blocks: int = 0, draft=None,
                 block_bytes: float = 0.0, closed_loop: list[GoldenRequest] | None = None,
                 rng: np.random.Generator | None = None, power=None,
                 layout=None, tier=None, tier3=None, cached_prefix_blocks: int = 0,
                 ranks: int = 1, experts=None) -> GoldenRun:
    """Serve ``reqs`` (arrival-ordered; with ``closed_loop`` the not-yet-issued requests of
    the clients, handed out in order as requests finish) on one instance of ``blocks`` KV
    blocks and return every request's times. ``power(seconds, energy per chip)`` limits each
    step's device cost (target and draft) as the engine does (a
    :class:`~diptych.sim.serving.power.StepPowerLimit`; None: no limit). ``layout``: the
    cache's layer kinds (a :class:`~diptych.sim.serving.kv.KvLayout`; None: one kind, every
    layer in a block, nothing freed before the request ends).

    Each layer kind keeps a block table, one slot per ``kv_block_tokens`` tokens, a slot
    holding ``units`` block ids: as vLLM's ``SlidingWindowManager`` does, before a step that
    starts at ``computed`` tokens a sliding kind frees the ids of every slot wholly before
    token ``computed − window + 1``, a chunked kind those before its chunk's first token
    ``computed // chunk · chunk``; then every kind gets ids for each slot up to the step's
    last token.

    ``tier``: the chip's second memory tier, ``(spec, mode, tier1 blocks, tier2 blocks)``
    with ``spec`` a :class:`~diptych.sim.serving.kv_tier.TierSpec` and ``mode`` ``swap``
    (preempted requests' blocks are copied there while it has room, and back before they
    run again) or ``tier`` (``blocks`` is both tiers' pool; before each step tier 1 is filled
    with the running requests' blocks in admission order, the rest are in tier 2, a block
    whose tier changed is copied, and each stepping request's tier-2 blocks are read at the
    tier's rate), as docs/serving.md "KV across memory tiers" states them.

    ``tier3``: the chip's third tier behind the second, ``(spec3, tier3 blocks)`` (None: none),
    as docs/serving.md "A third tier" states it. ``swap``: a victim goes to tier 2 while it
    has room, else to tier 3 (copied at tier 3's rate), else it is recomputed. ``tier``:
    ``blocks`` is the three tiers' pool, filled in the same order tier 1, then tier 2, then
    tier 3; every key keeps its blocks per tier, and a step's copies are counted block by
    block (:func:`tier_copies`), each pair at its own cost: 1-2 tier 2's, 1-3 tier 3's, 2-3
    through the chip at the slower of the two rates with both latencies; then the stepping
    requests' tier-2 reads, then their tier-3 reads (at tier 3's rate).
    ``cached_prefix_blocks``: the blocks of every prefix of a prefix cache (requests name theirs by
    ``pid``; 0: none), as docs/serving.md "Tiered prefix cache" states its rules: a cached
    prefix is a list of block ids with the set of requests holding it; one nobody holds is
    evicted, the longest unheld first, when blocks are short (copied to the second tier under
    ``swap`` while it has room, its longest-stored entries dropped for room).

    ``ranks`` > 1: the instance is that many lockstep data-parallel attention ranks (expert
    parallelism, docs/serving.md): ``oracle`` times one rank's step, and each step lasts as
    long as its busiest rank's share (:func:`busiest_rank_share`, written out here apart
    from the fast loop's); ``cfg.max_batched_tokens`` is then the ranks' sum, and one prompt
    chunk takes at most one rank's share of it (a request lives on one rank). ``experts``
    (an :class:`~diptych.sim.serving.ep.ExpertPart`, with ``ranks`` > 1): when the ranks'
    tokens differ, the busiest rank's experts are charged the mean rank's tokens
    (``⌈T/ranks⌉``) in place of its own: its step's cost less ``experts.cost(own)`` plus
    ``experts.cost(mean)`` (a draft's steps are timed at the busiest rank's share without
    this split; no golden case runs a draft beside data-parallel ranks)."""
    cfg = cfg.resolved()              # a configuration the caller left open: ideal, chunked
    bs = cfg.kv_block_tokens
    kinds = layout.kinds if layout is not None else (("full", None, 1),)
    # a linear-attention state: block ids a request takes with its first token, kept to its end
    state = layout.state_blocks if layout is not None else 0
    q = 1 + (cfg.speculative.k if cfg.speculative else 0)
    rt = cfg.runtime
    rout = rt.token_out_s

    def rin(r) -> float:
        return rt.request_in_s(r.prompt)
    free_ids = list(range(prefix_blocks, blocks))     # the prefix holds ids 0..prefix-1
    held: set[int] = set(range(prefix_blocks))
    future = list(reqs)                                # not yet arrived
    backlog = list(closed_loop or [])
    waiting: list[GoldenRequest] = []
    swapped: list[GoldenRequest] = []
    running: list[GoldenRequest] = []
    finished: list[GoldenRequest] = []
    steps = []
    peak = prefix_blocks
    preemptions = 0
    t = 0.0
    static_batch: list[GoldenRequest] = []
    static_state = {"pmax": 0, "left": 0, "done": 0}
    spec, tier_mode, c1, c2 = tier if tier is not None else (None, "none", blocks, 0)
    spec3, c3 = tier3 if tier3 is not None else (None, 0)
    in_tier2 = {"swapped": 0, "peak": 0}     # swap: blocks of swapped requests in tier 2
    in_tier3 = {"swapped": 0, "peak": 0}     # and in tier 3
    last_place: dict = {}                    # tier: key -> its blocks in tiers 1, 2, 3
    pb = cached_prefix_blocks                # blocks of every cached prefix
    cached: dict = {}                        # prefix cache: pid -> its block ids (tier 1)
    holders: dict = {}                       # pid -> rids holding it
    unheld_since: dict = {}                  # pid -> tick it was last let go
    in_t2: dict = {}                         # pid -> tick it was stored in tier 2
    in_t3: dict = {}                         # pid -> tick it was stored in tier 3 (swap)
    clock = [0]
    hits = [0, 0, 0]
    hits3 = [0]
    swap_time = [0.0]

    def tier2_used():
        return in_tier2["swapped"] + pb * len(in_t2)

    def tier3_used():
        return in_tier3["swapped"] + pb * len(in_t3)

    def drop_t3_for(n, keep=-1):
        """Three tiers: drop tier-3 prefixes, the longest stored first (not ``keep``), until
        ``n`` fit."""
        for p in sorted(in_t3, key=in_t3.get):
            if tier3_used() + n <= c3:
                break
            if p != keep:
                del in_t3[p]

    def room_in_t2(n, keep=-1):
        """Three tiers, ``swap``: room for ``n`` blocks (a victim, or a prefix being stored):
        in tier 2, its prefixes (the longest stored first, not ``keep``) moved down to tier 3
        (or dropped when tier 3 has no room), when ``n`` can fit there at all; else in tier 3,
        its prefixes dropped. The seconds of the copies from tier 2 to tier 3."""
        others = sorted((p for p in in_t2 if p != keep), key=in_t2.get)
        if tier2_used() - pb * len(others) + n > c2:
            drop_t3_for(n, keep)
            return 0.0
        secs = 0.0
        for p in others:
            if tier2_used() + n <= c2:
                break
            del in_t2[p]
            drop_t3_for(pb, keep)
            if tier3_used() + pb <= c3:
                in_t3[p] = tick()
                in_tier3["peak"] = max(in_tier3["peak"], tier3_used())
                secs += copy_s((1, 2), pb)
        return secs

    def store_prefix3(p, keep):
        """Three tiers, ``swap``: evicted prefix ``p`` kept in tier 2 (room made by
        :func:`room_in_t2`), else in tier 3, else dropped: the seconds of its copies."""
        secs = room_in_t2(pb, keep)
        if tier2_used() + pb <= c2:
            in_t2[p] = tick()
            in_tier2["peak"] = max(in_tier2["peak"], tier2_used())
            return secs + spec.move_s(pb * block_bytes)
        if tier3_used() + pb <= c3:
            in_t3[p] = tick()
            in_tier3["peak"] = max(in_tier3["peak"], tier3_used())
            return secs + spec3.move_s(pb * block_bytes)
        return secs

    def drop_t2_for(n, keep=-1):
        """Drop tier-2 prefixes, the longest stored first (not ``keep``), until ``n`` fit."""
        for p in sorted(in_t2, key=in_t2.get):
            if tier2_used() + n <= c2:
                break
            if p != keep:
                del in_t2[p]

    def tick():
        clock[0] += 1
        return clock[0]

    def get_room(n, keep=-1):
        """Whether ``n`` ids can be free, evicting unheld prefixes (longest unheld first, not
        ``keep``) only when that makes enough."""
        if n <= len(free_ids):
            return True
        unheld = sorted((p for p in cached if not holders[p] and p != keep),
                        key=lambda p: unheld_since[p])
        if len(free_ids) + pb * len(unheld) < n:
            return False
        secs3 = 0.0                         # three tiers: the stores' seconds, summed here
        for p in unheld:
            if len(free_ids) >= n:
                break
            for b in cached.pop(p):
                held.remove(b)
                free_ids.append(b)
            del holders[p]
            if tier_mode == "swap" and spec3 is not None:
                secs3 += store_prefix3(p, keep)
            elif tier_mode == "swap":
                drop_t2_for(pb, keep)
                if tier2_used() + pb <= c2:
                    in_t2[p] = tick()
                    in_tier2["peak"] = max(in_tier2["peak"], tier2_used())
                    swap_time[0] += spec.move_s(pb * block_bytes)
        if secs3:
            swap_time[0] += secs3
        return True

    def let_go(r):
        holders[r.pid].discard(r.rid)
        if not holders[r.pid]:
            unheld_since[r.pid] = tick()
        r.holds_prefix = False

    def swap_cost(n_blocks, where):
        """Seconds to copy ``n_blocks`` out of or into tier 1: to or from the second tier
        (``where`` 2), the third (3), or over the host link (0)."""
        if where == 2:
            return spec.move_s(n_blocks * block_bytes)
        if where == 3:
            return spec3.move_s(n_blocks * block_bytes)
        return n_blocks * block_bytes / cfg.host_link_bytes_per_s

    def copy_s(pair, n_blocks):
        """Seconds to copy ``n_blocks`` between the tiers of ``pair`` (0-based, fastest
        first): 1-2 at tier 2's rate and latency, 1-3 at tier 3's, 2-3 through the chip at
        the slower tier's rate plus both latencies."""
        nbytes = n_blocks * block_bytes
        if pair == (0, 1):
            return spec.move_s(nbytes)
        if pair == (0, 2):
            return spec3.move_s(nbytes)
        return nbytes / min(spec.bytes_per_s, spec3.bytes_per_s) + (spec.latency_s
                                                                    + spec3.latency_s)

    def place_tiers(stepping):
        """``tier``: the seconds the step about to run grows by (copies, then tier-2 reads,
        then tier-3 reads)."""
        used = blocks - len(free_ids)
        # cached prefixes: those held (by pid) before the running requests, the unheld after
        # them, the most recently let go first
        hot = [(("p", p), len(cached[p])) for p in sorted(cached) if holders[p]]
        cold = [(("p", p), len(cached[p])) for p in
                sorted((p for p in cached if not holders[p]), key=lambda p: -unheld_since[p])]
        mine_all = [(r.rid, len(r.blocks)) for r in running]
        outside = used - sum(b for _, b in hot + mine_all + cold)   # the pinned prefix
        room = [c1, c2, c3]
        for k in range(3):                  # the pinned prefix fills the fastest tiers first
            n = min(room[k], outside)
            room[k] -= n
            outside -= n
        assert outside == 0, "the pinned prefix does not fit the tiers"
        place = {}
        for key, mine in hot + mine_all + cold:
            here = [0, 0, 0]
            for k in range(3):
                here[k] = min(room[k], mine - sum(here))
                room[k] -= here[k]
            assert sum(here) == mine, "the tiers hold fewer blocks than the pool"
            place[key] = here
        moved: dict = {}
        for key, here in place.items():
            if key in last_place:
                for pair, n in tier_copies(last_place[key], here).items():
                    moved[pair] = moved.get(pair, 0) + n
        last_place.clear()
        last_place.update(place)
        used2 = min(c2, max(0, used - c1))
        used3 = max(0, used - c1 - c2)
        assert used3 <= c3, "the third tier holds more blocks than it has"
        assert (used2, used3) == (c2 - room[1], c3 - room[2]), "the tiers' counts"
        in_tier2["peak"] = max(in_tier2["peak"], used2)
        in_tier3["peak"] = max(in_tier3["peak"], used3)
        secs = 0.0
        for pair in ((0, 1), (0, 2), (1, 2)):       # the engine's order of the copies
            if moved.get(pair):
                secs += copy_s(pair, moved[pair])
        for k, sp in ((1, spec), (2, spec3)):
            read = sum(place[r.rid][k] + (place[("p", r.pid)][k] if r.holds_prefix else 0)
                       for r in stepping)
            if read:
                secs += sp.read_s(read * block_bytes)
        return secs

    def first_kept_slot(r, kind, start):
        """The first slot of ``kind`` a step starting at ``start`` computed tokens needs (the
        slots of the shared prefix are in the pinned prefix cache)."""
        att, w, _ = kind
        first = r.shared // bs
        if w is None:
            return first
        skipped = max(0, start - w + 1) if att == "sliding" else start // w * w
        return max(first, skipped // bs)

    def blocks_needed(r, tokens, start):
        """Ids ``r`` holds once a step starting at ``start`` has freed and allocated."""
        n = state if tokens > 0 else 0
        for kind in kinds:
            keep = first_kept_slot(r, kind, start)
            for i in range(math.ceil(tokens / bs)):
                if i >= keep:
                    n += kind[2]
        return n

    def take():
        b = free_ids.pop()
        assert b not in held, "a block is held twice"
        held.add(b)
        return b

    def give(r, b):
        held.remove(b)
        r.blocks.remove(b)
        free_ids.append(b)

    def grow(r, tokens, start):
        if not r.table:
            r.table = [[] for _ in kinds]
            if tokens > 0:
                r.blocks.extend(take() for _ in range(state))
        for kind, slots in zip(kinds, r.table):
            keep = first_kept_slot(r, kind, start)
            for i, ids in enumerate(slots):       # out of the window: freed
                if i < keep and ids:
                    for b in ids:
                        give(r, b)
                    slots[i] = None
            while len(slots) < math.ceil(tokens / bs):
                i = len(slots)
                ids = [take() for _ in range(kind[2])] if i >= keep else None
                r.blocks.extend(ids or ())
                slots.append(ids)

    def shrink(r, tokens):
        for slots in r.table:
            while len(slots) > math.ceil(tokens / bs):
                for b in slots.pop() or ():
                    give(r, b)

    def release(r):
        for b in list(r.blocks):
            give(r, b)
        r.table = []

    def preempt(victim, swap_time):
        nonlocal preemptions
        preemptions += 1
        victim.preemptions += 1
        n = len(victim.blocks)
        if tier_mode == "swap" and pb and spec3 is not None:
            swap_time[0] += room_in_t2(n)
        elif tier_mode == "swap" and pb:
            drop_t2_for(n)
        to_tier = 0
        if tier_mode == "swap":
            if tier2_used() + n <= c2:
                to_tier = 2
            elif tier3_used() + n <= c3:
                to_tier = 3
        if cfg.preemption == "swap" or to_tier:
            victim.swapped_out = n
            victim.swapped_to = to_tier
            swap_time[0] += swap_cost(n, to_tier)
            if to_tier == 2:
                in_tier2["swapped"] += n
                in_tier2["peak"] = max(in_tier2["peak"], tier2_used())
            elif to_tier == 3:
                in_tier3["swapped"] += n
                in_tier3["peak"] = max(in_tier3["peak"], tier3_used())
            release(victim)
            if victim.holds_prefix:     # out of tier 1, it holds no cached prefix
                let_go(victim)
            swapped.append(victim)
        else:
            release(victim)
            if victim.holds_prefix:
                let_go(victim)
                victim.shared = 0
            victim.computed = victim.shared
            victim.target = victim.prompt + victim.generated
            waiting.insert(0, victim)

    def fits(r, tokens):
        return get_room(blocks_needed(r, tokens, r.computed) - len(r.blocks))

    def static_blocks(p, g):
        """Ids a static batch reserves per sequence (a windowed layout: the most a sequence
        can hold, KvLayout.max_blocks)."""
        if layout is None or not layout.per_request:
            return math.ceil((p + g) / bs)
        return layout.max_blocks(p + g, 0, p)

    cap = cfg.max_batched_tokens // ranks        # one rank's budget: a chunk's most tokens
    # kv_admission "reserve" (TensorRT-LLM's GUARANTEED_NO_EVICT): a request is admitted only
    # when every running request's whole prompt + output and its own fit the cache
    reserve = cfg.kv_admission == "reserve" and cfg.scheduler == "continuous"
    claims: dict = {}       # rid -> the blocks its admission reserved

    def claim(r, whole):
        """Ids reserved for ``r`` to its completion: its whole prompt + output (a windowed
        layout: the most it holds in a step of its whole prompt, or of one chunk)."""
        if layout is None or not layout.per_request or whole:
            return static_blocks(r.prompt, r.output)
        return layout.max_blocks(r.prompt + r.output, 0, min(r.prompt, cap))

    def plan_continuous(swap_time):
        budget = cfg.max_batched_tokens
        decodes, chunks = [], []
        if not cfg.chunked_prefill:
            # whole prompts first; a prefill-only step when any can be admitted
            if not swapped:
                admit(chunks, budget, whole=True)
            if chunks:
                return decodes, chunks
        preempted = False
        i = 0
        while i < len(running):
            r = running[i]
            is_decode = r.computed >= r.target
            if is_decode:
                if budget < q:
                    i += 1
                    continue
                need = q
            else:
                need = min(r.target - r.computed, budget, cap)
                if need == 0:
                    i += 1
                    continue
            if not fits(r, r.computed + need):
                preempted = True
                while not fits(r, r.computed + need):
                    victim = running.pop()
                    preempt(victim, swap_time)
                    if victim is r:
                        break
                if r not in running:
                    break
            grow(r, r.computed + need, r.computed)
            budget -= need
            (decodes.append(r) if is_decode else chunks.append((r, need)))
            i += 1
        if preempted:
            return decodes, chunks
        if not cfg.chunked_prefill:
            budget = cfg.max_batched_tokens - q * len(decodes)
        while swapped and budget > 0 and len(running) < cfg.max_batch:
            r = swapped[0]
            is_decode = r.computed >= r.target
            need = q if is_decode else min(r.target - r.computed, budget, cap)
            if need > budget:
                break
            kind = where_prefix(r.pid) if pb and r.shared else None
            if kind == "miss":          # its prefix was dropped: its copy is let go, and it
                swapped.pop(0)          # waits, first, to be recomputed
                out_of_tiers(r)
                r.shared = r.computed = 0
                r.target = r.prompt + r.generated
                waiting.insert(0, r)
                continue
            load = pb if kind in ("hit2", "hit3") else 0
            if not get_room(blocks_needed(r, r.computed + need, r.computed) + load, r.pid):
                break
            swapped.pop(0)
            if kind:                    # it takes its prefix again (copied back if stored)
                take_prefix(r, kind)
            swap_time[0] += swap_cost(r.swapped_out, r.swapped_to)
            out_of_tiers(r)
            grow(r, r.computed + need, r.computed)
            running.append(r)
            budget -= need
            (decodes.append(r) if is_decode else chunks.append((r, need)))
        if cfg.chunked_prefill and not swapped:
            admit(chunks, budget, whole=cfg.split_prompts is False)
        return decodes, chunks

    def out_of_tiers(r):
        """Swapped ``r``'s blocks leave the tier holding them."""
        if r.swapped_to == 2:
            in_tier2["swapped"] -= r.swapped_out
        elif r.swapped_to == 3:
            in_tier3["swapped"] -= r.swapped_out
        r.swapped_out = 0

    def where_prefix(p):
        return ("hit1" if p in cached else "hit2" if p in in_t2 else
                "hit3" if p in in_t3 else "miss")

    def take_prefix(r, kind):
        """``r`` holds its cached prefix, found by ``kind`` (a hit): copied back to tier 1
        from tier 2 or 3 first; counted as a hit in the slowest tier holding part of it."""
        if kind == "hit2":
            del in_t2[r.pid]
            cached[r.pid] = [take() for _ in range(pb)]
            holders[r.pid] = set()
            swap_time[0] += spec.move_s(pb * block_bytes)
        if kind == "hit3":          # kept in tier 3 (swap): copied back from there
            del in_t3[r.pid]
            cached[r.pid] = [take() for _ in range(pb)]
            holders[r.pid] = set()
            swap_time[0] += spec3.move_s(pb * block_bytes)
        slowest = 1     # under a pooled tier: the slowest tier holding part of it
        if tier_mode == "tier":
            n1, n2, n3 = last_place.get(("p", r.pid), (0, 0, 0))
            slowest = 3 if n3 else 2 if n2 else 1
        if kind == "hit3" or kind == "hit1" and slowest == 3:
            hits3[0] += 1
        else:
            hits[0 if kind == "hit1" and slowest == 1 else 1] += 1
        holders[r.pid].add(r.rid)
        r.holds_prefix = True

    def admit(chunks, budget, whole):
        """Waiting requests, first come first served, while the budget, the batch limit and
        free blocks allow; ``whole``: a prompt is admitted whole or not at all."""
        while waiting and budget > 0 and len(running) < cfg.max_batch:
            r = waiting[0]
            kind = None
            if pb and r.pid >= 0 and not r.holds_prefix:
                kind = where_prefix(r.pid)
                if kind != "miss":
                    r.shared = r.computed = pb * bs
            rest = r.target - r.computed
            if whole and rest > budget:
                if kind:
                    r.shared = r.computed = 0
                break
            need = rest if whole else min(rest, budget, cap)
            if reserve and (sum(claims[x.rid] for x in running) + claim(r, whole)
                            > blocks - prefix_blocks):
                break        # its whole prompt + output does not fit beside the reservations
            load = pb if kind in ("hit2", "hit3") else 0
            if not get_room(blocks_needed(r, r.computed + need, r.computed) + load,
                            r.pid):
                if kind:
                    r.shared = r.computed = 0
                break
            if kind == "miss":
                hits[2] += 1
            elif kind:
                take_prefix(r, kind)
            waiting.pop(0)
            if reserve:
                claims[r.rid] = claim(r, whole)
            grow(r, r.computed + need, r.computed)
            running.append(r)
            chunks.append((r, need))
            budget -= need

    def keys_of(r):
        return r.computed + q

    def draft_cost(step):
        secs = energy = 0.0
        b = step.decode_batch
        keys0 = step.decode_keys - b * (q - 1)
        for j in range(cfg.speculative.k):
            pf = step.prefill if j == 0 else ()
            if not b and not pf:
                break
            c = draft.cost(busiest_rank_share(Step(b, keys0 + j * b, pf) if b
                                              else Step(prefill=pf), ranks))
            secs += c.seconds
            energy += c.energy_j
        return secs, energy

    def device_s(step):
        """The step's device seconds: target (and draft) at the clock the TDP allows."""
        share = busiest_rank_share(step, ranks)
        c = oracle.cost(share)
        mean = math.ceil(step.tokens / ranks)
        if experts is not None and share.tokens != mean:
            own, avg = experts.cost(share.tokens), experts.cost(mean)
            c = type(c)(c.seconds - own.seconds + avg.seconds,
                        c.energy_j - own.energy_j + avg.energy_j)
        secs, energy = c.seconds, c.energy_j
        if draft is not None:
            ds, de = draft_cost(step)
            secs, energy = secs + ds, energy + de
        return power(secs, energy)[0] if power is not None else secs

    def with_host(device_s, seqs):
        """The step on the engine's clock: device and host work one after the other, or side
        by side when the runtime overlaps them, then the host time the device still waits for
        (docs/serving.md, "Runtime host costs")."""
        if rt.is_ideal:
            return device_s
        host = (rt.step_host_fixed_us * 1e-6 + rt.step_host_per_seq_us * 1e-6 * seqs
                + rt.step_host_device_fraction * device_s)
        return (max(device_s, host) if rt.overlap else device_s + host) \
            + rt.step_exposed_us * 1e-6

    def finish(r, step_end, free_blocks=True):
        when = step_end + rout                        # the client has the last token
        r.finish_t = when
        if free_blocks:
            release(r)
        finished.append(r)
        if backlog:
            nxt = backlog.pop(0)
            nxt.arrival = when
            nxt.client = r.client
            future.append(nxt)

    while future or waiting or running or swapped or static_batch:
        arrived = sorted((r for r in future if r.arrival + rin(r) <= t),
                         key=lambda r: r.arrival + rin(r))
        for r in arrived:
            future.remove(r)
            waiting.append(r)
        swap_time[0] = 0.0
        if cfg.scheduler == "static":
            if not static_batch:
                batch, pmax, gmax = [], 0, 0
                while waiting and len(batch) < cfg.max_batch:
                    r = waiting[0]
                    p2, g2 = max(pmax, r.prompt), max(gmax, r.output)
                    if static_blocks(p2, g2) * (len(batch) + 1) > len(free_ids):
                        break
                    batch.append(waiting.pop(0))
                    pmax, gmax = p2, g2
                if not batch:
                    t = min(r.arrival + rin(r) for r in future)
                    continue
                for r in batch:
                    r.blocks = [take() for _ in range(static_blocks(pmax, gmax))]
                static_batch = batch
                static_state.update(pmax=pmax, left=gmax - 1, done=0)
                step = Step(prefill=tuple((pmax, 0) for _ in batch))
            else:
                ctx = static_state["pmax"] + static_state["done"] + 1
                static_state["done"] += 1
                step = Step(len(static_batch), len(static_batch) * ctx)
            dt = device_s(step)
            dt = with_host(dt, len(static_batch))
            steps.append((t, dt, step.decode_batch, len(step.prefill)))
            peak = max(peak, blocks - len(free_ids))
            t_end = t + dt
            if step.prefill:
                for r in static_batch:
                    r.computed, r.generated, r.first_t = r.prompt, 1, t_end + rout
                    if r.output == 1:
                        finish(r, t_end, free_blocks=False)
            else:
                for r in static_batch:
                    if r.generated < r.output:
                        r.generated += 1
                        if r.generated == r.output:
                            finish(r, t_end, free_blocks=False)
                static_state["left"] -= 1
            if static_state["left"] <= 0:
                for r in static_batch:
                    release(r)
                static_batch = []
            t = t_end
            continue

        before = preemptions
        decodes, chunks = plan_continuous(swap_time)
        if not decodes and not chunks and preemptions > before:   # all preempted, none ran:
            decodes, chunks = plan_continuous(swap_time)            # plan again at once
        if not decodes and not chunks:
            if not future:
                raise ServingStalled(stalled_message(
                    "the golden twin", len(waiting), len(swapped), len(running),
                    len(free_ids), blocks))
            t = min(r.arrival + rin(r) for r in future)
            continue
        if decodes:
            keys = sum(keys_of(r) for r in decodes)
            step = Step(len(decodes), keys, tuple((c, r.computed) for r, c in chunks), q)
        else:
            step = Step(prefill=tuple((c, r.computed) for r, c in chunks))
        dt = device_s(step)
        if tier_mode == "tier":
            swap_time[0] += place_tiers(decodes + [r for r, _ in chunks])
        dt += swap_time[0]
        dt = with_host(dt, len(decodes) + len(chunks))
        used = blocks - len(free_ids)
        assert used <= blocks
        assert tier_mode == "tier" or used <= c1
        peak = max(peak, used)
        steps.append((t, dt, step.decode_batch, len(step.prefill)))
        t_end = t + dt
        if decodes and cfg.speculative:
            u = rng.random(len(decodes))
            p, k = cfg.speculative.accept, cfg.speculative.k
            if cfg.speculative.later:       # position j accepted while 1 − u < Π rates
                gains = []
                for x in u:
                    j, reach = 0, 1.0
                    while j < k:
                        reach *= cfg.speculative.rates[j]
                        if not 1.0 - x < reach:
                            break
                        j += 1
                    gains.append(1 + j)
            elif p <= 0.0:
                gains = [1] * len(decodes)
            elif p >= 1.0:
                gains = [k + 1] * len(decodes)
            else:
                gains = (1 + np.minimum(np.floor(np.log1p(-u) / math.log(p)), k)).tolist()
        else:
            gains = [1] * len(decodes)
        done_now = []
        for r, a in zip(decodes, gains):
            a = min(int(a), r.output - r.generated)
            r.generated += a
            r.computed += a
            if cfg.speculative:
                shrink(r, r.computed)
            if r.generated >= r.output:
                done_now.append(r)
        for r, c in chunks:
            r.computed += c
            if (pb and r.pid >= 0 and not r.holds_prefix and r.computed >= pb * bs
                    and r.pid not in cached and r.pid not in in_t2
                    and r.pid not in in_t3):     # it donates its ids
                ids = [b for slot in r.table[0][:pb] for b in slot]
                r.table[0][:pb] = [None] * pb
                for b in ids:
                    r.blocks.remove(b)
                cached[r.pid] = ids
                holders[r.pid] = {r.rid}
                r.shared = pb * bs
                r.holds_prefix = True
            if r.computed >= r.target:
                r.generated += 1
                if r.first_t < 0:
                    r.first_t = t_end + rout
                if r.generated >= r.output:
                    done_now.append(r)
        for r in done_now:
            running.remove(r)
            finish(r, t_end)
            if r.holds_prefix:
                let_go(r)
        t = t_end
    return GoldenRun(requests=finished, steps=steps, peak_blocks=peak, preemptions=preemptions,
                     tier2_peak=in_tier2["peak"], prefix_hits=tuple(hits),
                     tier3_peak=in_tier3["peak"], prefix_hits3=hits3[0])


def tier_copies(before, after) -> dict:
    """The blocks copied between tiers, ``{(i, j): count}`` (0-based tiers, fastest first),
    when a key's blocks per tier go from ``before`` to ``after``, moved one block at a time as
    docs/serving.md states it: a block written this step is written where it is placed (in the
    slowest tier still short of its new count), a block freed leaves the slowest tier over its
    new count, and every block still over its tier's count is copied to a tier under its own
    (with three tiers the pairs are then forced: one side of the copies is a single tier)."""
    have = list(before)
    want = list(after)
    n = len(want)
    grow = sum(want) - sum(have)
    while grow > 0:
        k = max(i for i in range(n) if have[i] < want[i])
        have[k] += 1
        grow -= 1
    while grow < 0:
        k = max(i for i in range(n) if have[i] > want[i])
        have[k] -= 1
        grow += 1
    out: dict = {}
    while have != want:
        src = next(i for i in range(n) if have[i] > want[i])
        dst = next(i for i in range(n) if have[i] < want[i])
        have[src] -= 1
        have[dst] += 1
        pair = (min(src, dst), max(src, dst))
        out[pair] = out.get(pair, 0) + 1
    return out

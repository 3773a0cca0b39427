"""A tiered prefix cache for ``serve`` (issue 25 item 2): several shared prefixes, kept in the
first memory tier after their requests finish, evicted least recently used first, and (with a
second tier under ``--kv-offload swap``) kept in the second tier when evicted.

The smallest honest version of vLLM's automatic prefix caching (docs "Automatic Prefix
Caching": a block whose request finished stays in the cache, keyed by the hash of its tokens,
until its memory is needed; free blocks are reclaimed least recently used first) plus the
CPU tier of LMCache (arXiv 2510.09665) and vLLM's KV-connector offload
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py``): KV evicted from
the GPU kept in a larger, slower memory and loaded back on a hit instead of recomputed.

Rules (docs/serving.md, "Tiered prefix cache"), per instance, per chip:

* ``--prefixes N`` (``ServeConfig.prefixes``): a request carries one of ``N`` prefixes of
  ``tokens`` tokens each (whole blocks), or none (id −1). 0 is the single pinned prefix of
  ``--prefix-share`` (the engine as before, bit for bit), not this cache.
* The granularity is the whole prefix (``tokens // block`` blocks): an entry is in tier 1,
  in tier 2, or absent. [assumption] vLLM hashes and evicts single blocks (a prefix can be
  partly cached); one prefix's blocks are always used together here, so whole-prefix
  granularity changes only which of several partly evicted prefixes would have survived.
* Admission: an entry in tier 1 is a hit (the request holds a reference; its prefix tokens
  are neither computed nor stored per request); in tier 2 a hit that first copies the entry
  back to tier 1 (``bytes ÷ tier rate + latency`` on the admitting step's chain, joules as
  :meth:`~.kv_tier.TierSpec.move_j`); absent, a miss: the request computes its whole prompt
  in its own blocks, and the first request whose computed tokens reach the prefix's end
  (after the step that computed them) donates those blocks to the cache. [assumption] vLLM
  caches a block as soon as the step computing it is scheduled, so a second request of the
  same prefix admitted meanwhile hits it; here it computes its own copy (freed at its end).
* A request releases its reference when it finishes, is recomputed or is swapped out (and
  takes it again, a hit, when swapped back in: the engine's ``_admit_swapped``); an entry no
  request references is in the LRU, the most recently released last.
* When the scheduler needs blocks that are not free, entries of the LRU are evicted, the
  least recently used first (before any sequence is preempted, as vLLM counts cached blocks
  as free). With a second tier used as swap space (``--kv-offload swap``) an evicted entry
  is copied there (the copy on the chain of the step that needed the blocks; [assumption]
  LMCache stores KV asynchronously as it is computed, so this is the pessimistic end), the
  tier's least recently used entries dropped for room (a swapped sequence's blocks are never
  dropped; a sequence being swapped out drops entries first); without room, or without a
  tier, the entry is dropped and its next use recomputes it. Under ``--kv-offload tier`` the
  pool spans both tiers and the entries live in it: the placement
  (:meth:`~.kv_tier.KvTier.place`, :meth:`PrefixCache.placed`) puts held entries before
  the running sequences and unheld ones after them, the most recently used first, so the
  coldest sink to tier 2 (copied as any block whose tier changes); a hit on an entry placed
  there counts as a tier-2 hit (its copy up is the placement's); an eviction (both tiers
  full) drops the entry.
* A third tier (``[dram3]``, docs/serving.md "Three tiers") under ``--kv-offload swap``: tier
  2 and tier 3 keep evicted entries in one hierarchy, the most recently stored in tier 2. An
  entry that tier 2 would have dropped for room is demoted to tier 3 instead (copied between
  the two through the chip, :func:`~.kv_tier.copy_path`), tier 3's least recently stored
  entries dropped for its room; when tier 2 cannot hold the entry even with its own entries
  demoted (it is full of swapped sequences) the entry is stored in tier 3 directly (copied
  at tier 3's rate), as a swapped sequence spills there. A hit in tier 3 copies the entry
  back to tier 1 at tier 3's rate (``hits_tier3``). A sequence being swapped out takes tier
  2's room first (entries demoted for it) or, when it goes to tier 3, tier 3's (entries
  there dropped). A chip without a third tier keeps the two-tier rules (bit for bit).
"""

from __future__ import annotations

from collections import OrderedDict


def _check_int(name: str, v, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"prefix cache: {name} must be an integer >= {lo}, not {v!r}")


class PrefixCache:
    """One instance's prefix cache of ``count`` prefixes of ``blocks`` blocks each (per chip,
    ``block_bytes`` each); ``store``: the instance's :class:`~.kv_tier.KvTier` in ``swap``
    mode (tier 2 keeps evicted entries), else None (evicted entries are dropped).

    The engine calls :meth:`lookup` then :meth:`acquire` (or :meth:`count_miss`) on
    admission, :meth:`donate` when a missing request has computed the prefix,
    :meth:`release` when a request lets go, :meth:`reclaim` when it needs blocks; the
    seconds each returns go on the step's chain, the joules into ``store.pending_j``."""

    def __init__(self, count: int, blocks: int, block_bytes: float, store=None,
                 tier3: bool = False):
        _check_int("count", count, 1)
        _check_int("blocks", blocks, 1)
        if not block_bytes > 0:
            raise ValueError(f"prefix cache: block_bytes must be > 0, not {block_bytes!r}")
        if store is not None and store.pooled:
            raise ValueError("prefix cache: a pooled tier holds entries in the pool; pass no "
                             "store")
        self.count = count
        self.blocks = blocks
        self.block_bytes = block_bytes
        self.store = store
        self.refs: dict[int, int] = {}                      # tier-1 entries -> references
        self.lru: OrderedDict[int, None] = OrderedDict()    # unreferenced, oldest first
        self.t2: OrderedDict[int, None] = OrderedDict()     # tier-2 entries, oldest first
        self.t3: OrderedDict[int, None] = OrderedDict()     # tier-3 entries (swap), oldest
        self.stored3 = self.demoted3 = self.dropped3 = self.loads3 = 0
        self.tier3 = tier3                                  # a pooled third tier: hits there
        self.hits1 = self.hits2 = self.hits3 = self.misses = self.loads = 0
        self.evicted = self.stored = self.dropped = self.dropped2 = 0
        self.store_s = self.load_s = 0.0

    def lookup(self, pid: int) -> str:
        """``"hit1"``, ``"hit2"``, ``"hit3"`` (kept in a third tier under ``swap``) or
        ``"miss"`` for prefix ``pid`` (no effect)."""
        if pid in self.refs:
            return "hit1"
        if pid in self.t3:
            return "hit3"
        return "hit2" if pid in self.t2 else "miss"

    def acquire(self, pid: int, placed: int = 1) -> tuple[int, float]:
        """A request admitted on a hit takes a reference: the tier-1 blocks it takes from the
        free pool (a tier-2 hit's entry) and the seconds of the copy back. A pooled tier's
        entry is in the pool: ``placed`` (1, 2 or 3: the slowest tier holding part of it,
        :meth:`~.kv_tier.KvTier.tier_of`) counts its hit in that tier (the copy up is the
        placement's, :meth:`~.kv_tier.KvTier.place`)."""
        if pid in self.refs:
            if placed == 3:
                self.hits3 += 1
            elif placed == 2:
                self.hits2 += 1
            else:
                self.hits1 += 1
            self.refs[pid] += 1
            self.lru.pop(pid, None)
            return 0, 0.0
        if pid in self.t3:                  # kept in tier 3 (swap): copied back at its rate
            del self.t3[pid]
            self.hits3 += 1
            self.loads3 += 1
            self.refs[pid] = 1
            self.store.used3 -= self.blocks
            s = self.store._move(self.blocks, self.store.spec3)
            self.load_s += s
            return self.blocks, s
        del self.t2[pid]
        self.hits2 += 1
        self.loads += 1
        self.refs[pid] = 1
        self.store.used2 -= self.blocks
        s = self.store._move(self.blocks)
        self.load_s += s
        return self.blocks, s

    def placed(self) -> tuple[list, list]:
        """The entries for a pooled tier's placement (:meth:`~.kv_tier.KvTier.place`):
        ``(key, blocks)`` of those held, by prefix, then of those none holds, the most
        recently used first."""
        b = self.blocks
        return ([(("p", p), b) for p in sorted(self.refs) if self.refs[p]],
                [(("p", p), b) for p in reversed(self.lru)])

    def count_miss(self) -> None:
        self.misses += 1

    def donate(self, pid: int) -> bool:
        """A request that computed prefix ``pid`` itself hands its blocks to the cache (True),
        unless the prefix is cached already (its copy is then its own until it ends)."""
        if pid in self.refs or pid in self.t2 or pid in self.t3:
            return False
        self.refs[pid] = 1
        return True

    def release(self, pid: int) -> None:
        n = self.refs[pid] - 1
        self.refs[pid] = n
        if n == 0:
            self.lru[pid] = None

    def evictable(self, keep: int = -1) -> int:
        """Tier-1 blocks :meth:`reclaim` could free, ``keep``'s entry aside."""
        return (len(self.lru) - (keep in self.lru)) * self.blocks

    def reclaim(self, short: int, keep: int = -1) -> tuple[int, float]:
        """Evict least recently used entries (not ``keep``) until ``short`` blocks are freed
        or none is left: the blocks freed and the seconds of the copies to tier 2 (``keep``'s
        tier-2 entry, about to be loaded, is not dropped for their room)."""
        freed, secs = 0, 0.0
        for pid in list(self.lru):
            if freed >= short:
                break
            if pid == keep:
                continue
            del self.lru[pid]
            del self.refs[pid]
            freed += self.blocks
            self.evicted += 1
            secs += self._to_tier2(pid, keep)
        return freed, secs

    def _to_tier2(self, pid: int, keep: int) -> float:
        st = self.store
        if st is None:
            self.dropped += 1
            return 0.0
        if st.spec3 is not None:
            return self._to_tiers23(pid, keep)
        self.make_room(self.blocks, keep)
        if st.used2 + self.blocks > st.blocks:
            self.dropped += 1
            return 0.0
        st.used2 += self.blocks
        st.peak2 = max(st.peak2, st.used2)
        self.t2[pid] = None
        self.stored += 1
        s = st._move(self.blocks)
        self.store_s += s
        return s

    def _to_tiers23(self, pid: int, keep: int) -> float:
        """Store evicted ``pid`` with a third tier (module docstring): in tier 2, its oldest
        entries demoted to tier 3 for room, or in tier 3 when tier 2 is full of sequences,
        else drop it; the seconds of the copies."""
        st, b = self.store, self.blocks
        secs = self.make_room(b, keep)
        if st.used2 + b <= st.blocks:
            st.used2 += b
            st.peak2 = max(st.peak2, st.used2)
            self.t2[pid] = None
            self.stored += 1
            s = st._move(b)
        elif st.used3 + b <= st.blocks3:
            st.used3 += b
            st.peak3 = max(st.peak3, st.used3)
            self.t3[pid] = None
            self.stored3 += 1
            s = st._move(b, st.spec3)
        else:
            self.dropped += 1
            return secs
        self.store_s += s
        return secs + s

    def _room3(self, blocks: int, keep: int) -> None:
        """Drop tier-3 entries, the least recently stored first (not ``keep``), until
        ``blocks`` fit in tier 3 beside what it holds."""
        st = self.store
        for pid in list(self.t3):
            if st.used3 + blocks <= st.blocks3:
                break
            if pid != keep:
                del self.t3[pid]
                st.used3 -= self.blocks
                self.dropped3 += 1

    def _make_room23(self, blocks: int, keep: int) -> float:
        """:meth:`make_room` with a third tier: demote tier-2 entries (oldest stored first,
        not ``keep``) to tier 3 until ``blocks`` fit in tier 2, when they can fit there at
        all; else make room in tier 3 (its entries dropped). The seconds of the demotions."""
        st, b = self.store, self.blocks
        movable = (len(self.t2) - (keep in self.t2)) * b
        if st.used2 - movable + blocks > st.blocks:     # it goes to tier 3
            self._room3(blocks, keep)
            return 0.0
        secs = 0.0
        for pid in list(self.t2):
            if st.used2 + blocks <= st.blocks:
                break
            if pid == keep:
                continue
            del self.t2[pid]
            st.used2 -= b
            self._room3(b, keep)
            if st.used3 + b <= st.blocks3:
                st.used3 += b
                st.peak3 = max(st.peak3, st.used3)
                self.t3[pid] = None
                self.demoted3 += 1
                secs += st._move(b, st.link23)
            else:
                self.dropped2 += 1
        self.store_s += secs
        return secs

    def make_room(self, blocks: int, keep: int = -1) -> float:
        """Drop tier-2 entries, the least recently stored first (not ``keep``), until
        ``blocks`` fit in the tier beside what it holds (a sequence being swapped out, an
        entry being stored); with a third tier, demote them there instead
        (:meth:`_make_room23`). The seconds of the copies that makes (0 on two tiers)."""
        st = self.store
        if st.spec3 is not None:
            return self._make_room23(blocks, keep)
        for pid in list(self.t2):
            if st.used2 + blocks <= st.blocks:
                break
            if pid != keep:
                del self.t2[pid]
                st.used2 -= self.blocks
                self.dropped2 += 1
        return 0.0

    def to_dict(self, chips: int) -> dict:
        """Hits per tier, misses, evictions and what the tier-2 copies moved (every chip)."""
        b = self.blocks * self.block_bytes * chips
        return {"prefixes": self.count, "prefix_tokens_blocks": self.blocks,
                "hits_tier1": self.hits1, "hits_tier2": self.hits2, "misses": self.misses,
                "evicted": self.evicted, "stored_tier2": self.stored,
                "dropped": self.dropped, "dropped_tier2": self.dropped2,
                "tier2_store_bytes": self.stored * b, "tier2_load_bytes": self.loads * b,
                "store_s": self.store_s, "load_s": self.load_s,
                "move_j": (self.store.spec.move_j(self.blocks * self.block_bytes)
                           * (self.stored + self.loads) * chips if self.store else 0.0),
                **({"hits_tier3": self.hits3} if self.tier3 else {}),
                **(self._tier3_dict(chips) if self.store is not None
                   and self.store.spec3 is not None else {})}

    def _tier3_dict(self, chips: int) -> dict:
        """A third tier under ``swap``: entries stored there (directly or demoted from tier
        2), dropped from it, loaded back from it, and its copies' bytes and joules (also in
        ``info.kv_tiers``' ``tier3_*`` keys)."""
        b = self.blocks * self.block_bytes
        st = self.store
        return {"stored_tier3": self.stored3, "demoted_tier3": self.demoted3,
                "dropped_tier3": self.dropped3, "tier3_load_bytes": self.loads3 * b * chips,
                "tier3_move_j": (st.spec3.move_j(b) * (self.stored3 + self.loads3)
                                 + st.link23.move_j(b) * self.demoted3) * chips}


def prefix_cache_info(per_instance: list[dict]) -> dict:
    """A serving result's ``info.prefix_cache``: the instances' :meth:`PrefixCache.to_dict`
    summed (counts, bytes, seconds, joules), with the list under ``instances``."""
    out = dict(per_instance[0])
    for d in per_instance:      # a pool without a third tier has no hits_tier3: it adds 0
        out.update((k, 0) for k in d if k not in out)
    for k in out:
        if k not in ("prefixes", "prefix_tokens_blocks"):
            out[k] = sum(d.get(k, 0) for d in per_instance)
    hits = out["hits_tier1"] + out["hits_tier2"] + out.get("hits_tier3", 0)
    lookups = hits + out["misses"]
    out["hit_rate"] = hits / lookups if lookups else 0.0
    out["instances"] = per_instance
    return out

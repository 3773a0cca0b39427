"""The event loop: requests flowing through one or more serving instances.

An :class:`Instance` is one model replica (a tensor-parallel group of chips) running an
iteration-level scheduler over a paged KV cache; :func:`run_loop` moves time from event to
event (arrivals, step ends, KV transfers), dispatching arrivals to the instance with the fewest
outstanding requests. docs/serving.md states the policies; :mod:`.golden` is a plain
re-implementation of the same rules, written for clarity, that tests compare this loop with.

Token accounting of a request (``P`` prompt tokens, ``G`` output tokens):

* ``computed``: tokens whose K/V are in the cache; ``generated``: output tokens sampled.
* A prefill pass computes ``target = P + generated`` tokens (``generated`` is 0 at first, more
  after a recompute preemption) and samples one token. Each decode step feeds the last token
  (and ``k`` draft tokens when speculating), writes their K/V and samples; afterwards
  ``computed = P + generated − 1``. A decode step therefore attends ``computed + 1`` keys per
  sequence, as :func:`diptych.workloads.lower.decode_context` counts them.
* Prefix caching: the first ``shared`` tokens (whole blocks) of a prompt are in the pinned
  prefix cache: they are never computed, and blocks are held only for the rest. With a
  :class:`~diptych.sim.serving.prefix_cache.PrefixCache` a request of prefix ``pid`` has
  ``shared`` = its prefix's tokens while it holds the cached prefix (``pref``), 0 otherwise
  (a miss computes the prefix in its own blocks, then hands them to the cache).
* KV blocks: ``ceil((tokens − shared) / block)`` blocks of every layer; with a windowed
  layout (:class:`~diptych.sim.serving.kv.KvLayout`, sliding or chunked layers) each kind
  holds its own blocks and a windowed kind frees those its next step's queries cannot see.

The serving runtime's host costs (``cfg.runtime``, :mod:`.runtime`): a step lasts
``runtime.step_s(device time, sequences in the step)``; a request enters the scheduler
``request_in_s`` after its arrival, and each of its tokens reaches the client
``token_out_s`` after the step that sampled it ends (``first_t`` and ``finish_t`` are the
client's times; ITL gaps are between step ends, where the constant offset cancels).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from operator import add

import numpy as np

from ...workloads.serving_step import Step
from ..energy_parts import STATIC, VECTOR
from .config import ServeConfig

DRAM = VECTOR.index("dram")       # the energy component the second tier's traffic adds to

STEP_END, KV_DONE, ARRIVE = 0, 1, 2


class ServingStalled(ValueError):
    """The event loop ran out of events with requests unfinished: nothing left can run (the
    KV blocks a queued request needs can never be free). A ValueError: the deployment's
    configuration is the cause, and the CLI reports it with exit code 2."""


def stalled_message(where: str, waiting: int, swapped: int, running: int, free: int,
                    blocks: int) -> str:
    """The message of :class:`ServingStalled` (the event loop's and its golden twin's)."""
    return (f"serve: {where} stopped with {waiting + swapped + running} requests unfinished "
            f"({waiting} waiting, {swapped} swapped out, {running} running) and none can run: "
            f"the next request needs more KV blocks than can be freed ({free} of {blocks} "
            f"free); give the KV cache more room (a chip with more memory, more --tp, a "
            f"smaller --max-batch or --max-batched-tokens) or serve shorter requests")


class Req:
    """One request's state (module docstring for the token accounting)."""

    __slots__ = ("rid", "arrival", "prompt", "output", "shared", "computed", "target",
                 "generated", "first_t", "finish_t", "last_t", "blocks", "preemptions",
                 "client", "pf_start", "pf_end", "swapped", "reserved", "done", "inst", "pid",
                 "pref", "claim")

    def __init__(self, rid: int, arrival: float, prompt: int, output: int, shared: int = 0,
                 client: int = -1):
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.shared = shared
        self.computed = shared
        self.target = prompt
        self.generated = 0
        self.first_t = -1.0
        self.finish_t = -1.0
        self.last_t = -1.0
        self.blocks = 0
        self.preemptions = 0
        self.client = client
        self.pf_start = -1.0
        self.pf_end = -1.0
        self.swapped = 0
        self.reserved = 0
        self.done = False
        self.inst = -1                 # the instance it was dispatched to on arrival
        self.pid = -1                  # its prefix in a prefix cache (prefix_cache.py), or -1
        self.pref = False              # it holds a reference to that prefix's cached blocks
        self.claim = 0                 # kv_admission reserve: the blocks it reserved


class Instance:
    """One replica: scheduler state, KV blocks and the record of its steps.

    ``role``: "mixed" (prefill and decode), "prefill" (hands requests off after their first
    token) or "decode" (receives prefilled requests). ``oracle``/``draft`` time steps;
    ``chips`` is the tensor-parallel degree; ``blocks`` the KV blocks (the pinned prefix's
    ``prefix_blocks`` among them); ``block_bytes`` one block's bytes per chip; ``layout`` how
    tokens map to blocks (a :class:`~diptych.sim.serving.kv.KvLayout`; None: one block per
    ``kv_block_tokens`` tokens of every layer); ``power`` limits each step's device cost to
    what the chip's TDP sustains (:mod:`~diptych.sim.serving.power`; None: no limit); ``tier``
    the chip's second memory tier (a :class:`~diptych.sim.serving.kv_tier.KvTier`: swap space,
    or part of the pool of ``blocks``; None: none); ``prefix_cache`` several prefixes cached
    LRU (a :class:`~diptych.sim.serving.prefix_cache.PrefixCache`; None: the pinned prefix)."""

    def __init__(self, idx: int, role: str, oracle, cfg: ServeConfig, *, chips: int,
                 blocks: int, block_bytes: float, static_w: float, draft=None,
                 rng: np.random.Generator | None = None, prefix_blocks: int = 0,
                 power=None, layout=None, tier=None, prefix_cache=None,
                 chunk_tokens: int | None = None):
        self.idx = idx
        self.pc = prefix_cache
        self.tier = tier
        self.layout = layout
        self._win = layout if layout is not None and layout.per_request else None
        self.power = power            # a StepPowerLimit (sim/serving/power.py), or None
        self.role = role
        self.oracle = oracle
        self.draft = draft
        cfg = cfg.resolved()          # a configuration the caller left open: ideal, chunked
        self.cfg = cfg
        # the most prompt tokens one chunk may take: one data-parallel attention rank's
        # budget when the instance is several ranks (a request lives on one rank), else the
        # step's whole budget. [S] vLLM docs/serving/data_parallel_deployment.md (each DP
        # rank a separate engine core with its own scheduler, whose step holds at most
        # max_num_batched_tokens: vllm/v1/core/sched/scheduler.py); SGLang
        # python/sglang/srt/server_args.py _handle_data_parallelism (under DP attention
        # chunked_prefill_size //= dp_size: each rank's scheduler chunks to its share)
        self.chunk = chunk_tokens or cfg.max_batched_tokens
        self.chips = chips
        self.total_blocks = blocks
        self.prefix_blocks = prefix_blocks
        self.free = blocks - prefix_blocks
        # kv_admission "reserve" (TensorRT-LLM's GUARANTEED_NO_EVICT): a mixed replica admits
        # a request only while the running requests' reservations (each its whole prompt +
        # output, :meth:`_claim`) and its own fit the cache; a request's blocks never
        # exceed its reservation, so nothing is ever preempted. ``claimed``: their sum.
        self.reserve = (cfg.kv_admission == "reserve" and role == "mixed"
                        and cfg.scheduler == "continuous")
        self.claimed = 0
        self.block_bytes = block_bytes
        self.static_w = static_w
        self.rng = rng
        self.bs = cfg.kv_block_tokens
        self.q = cfg.decode_queries
        self.spec = cfg.speculative
        self.runtime = cfg.runtime
        self.out_s = cfg.runtime.token_out_s
        self.waiting: deque[Req] = deque()
        self.swapped: deque[Req] = deque()
        self.running: list[Req] = []
        self.incoming = 0                        # transfers in flight to this instance
        self.busy = False
        self.static_left = 0                     # static mode: decode steps left in the batch
        self.static_pad = (0, 0)                 # static mode: (padded prompt, steps done)
        self.last_end = 0.0
        self.idle_s = 0.0
        self.energy_j = 0.0
        # the steps' energy by component (all its chips; sim/energy_parts.py VECTOR order);
        # ``unattributed``: a step's timer gave none
        self.energy_parts = [0.0] * len(VECTOR)
        self.unattributed = False
        self.preemptions = 0
        self.swap_bytes = 0.0
        # KV prefetch (cfg.kv_prefetch): the copies a step needs, started during the
        # previous step; ``_window`` what that step can hide (its device seconds less the
        # seconds its own tier reads keep the link busy)
        self._fetch_s = 0.0
        self._window = 0.0
        self.prefetch_hidden_s = 0.0
        self.prefetch_exposed_s = 0.0
        self.peak_used = prefix_blocks
        self.used_time = 0.0                     # ∫ used blocks dt over steps
        self.link_free = 0.0                     # outgoing KV link (prefill role)
        self.in_free = 0.0                       # incoming KV link (decode role)
        # per-step record: start, duration, decode seqs, prefill tokens, chunks, waiting,
        # running, used blocks
        self.rec_t = array("d")
        self.rec_dt = array("d")
        self.rec_dec = array("l")
        self.rec_pf = array("l")
        self.rec_chunks = array("l")
        self.rec_wait = array("l")
        self.rec_run = array("l")
        self.rec_used = array("l")
        self.itl = array("d")
        self._dec: list[Req] = []
        self._chunks: list[tuple[Req, int]] = []

    # -- bookkeeping ----------------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped) + self.incoming

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.swapped)

    def blocks_for(self, r: Req, tokens: int, start: int = -1) -> int:
        """Blocks ``r`` holds with ``tokens`` tokens in the cache (its shared prefix is in the
        pinned prefix cache); a windowed layout frees what a step starting at ``start``
        computed tokens (default: ``r.computed``) no longer attends."""
        if self._win is None:
            return -((r.shared - tokens) // self.bs)
        return self._win.blocks(r.shared, tokens, r.computed if start < 0 else start)

    def _static_blocks(self, prompt: int, output: int) -> int:
        """Blocks a static batch reserves per sequence for its whole life (a windowed layout:
        the most it can hold, :meth:`~diptych.sim.serving.kv.KvLayout.max_blocks`)."""
        if self._win is None:
            return -(-(prompt + output) // self.bs)
        return self._win.max_blocks(prompt + output, 0, prompt)

    def _claim(self, r: Req, chunked: bool) -> int:
        """The blocks kv_admission "reserve" claims for ``r`` to its completion: its whole
        prompt + output (TensorRT-LLM's ``getRemainingBlocksToCompletion``); a windowed
        layout, the most it holds in any step, of at most its whole prompt, or of one chunk
        when prompts are chunked (:meth:`~diptych.sim.serving.kv.KvLayout.max_blocks`)."""
        if self._win is None or not chunked:
            return self._static_blocks(r.prompt, r.output)
        return self._win.max_blocks(r.prompt + r.output, 0, min(r.prompt, self.chunk))

    def _preempt(self, victim: Req) -> None:
        self.claimed -= victim.claim     # (never under reserve: its blocks stay within it)
        victim.claim = 0
        self.free += victim.blocks
        victim.preemptions += 1
        self.preemptions += 1
        if self.pc is not None and self._tier_swap:     # live blocks before cached prefixes
            self._swap_s += self.pc.make_room(victim.blocks)     # 0 on two tiers
        s = self.tier.swap_out(victim.blocks, victim.rid) if self._tier_swap else None
        if self.cfg.preemption == "swap" or s is not None:
            # out of tier 1 it holds no cached block: it lets go of its prefix, which stays
            # cached, evictable when nobody else holds it, and takes it again when swapped in
            # (_admit_swapped). [S] vLLM vllm/v1/core/sched/scheduler.py _preempt_request ->
            # KVCacheManager.free -> vllm/v1/core/block_pool.py BlockPool.free_blocks (each
            # block's ref_cnt -= 1; those at 0 join the free queue, their hash kept)
            if victim.pref:
                self.pc.release(victim.pid)
                victim.pref = False
            victim.swapped = victim.blocks
            self.swap_bytes += victim.blocks * self.block_bytes
            self._swap_s += (s if s is not None else
                             victim.blocks * self.block_bytes / self.cfg.host_link_bytes_per_s)
            victim.blocks = 0
            self.swapped.append(victim)
        else:
            victim.blocks = 0
            if victim.pref:           # a recompute lets go of its cached prefix
                self._unref(victim)
            victim.computed = victim.shared
            victim.target = victim.prompt + victim.generated
            self.waiting.appendleft(victim)

    def _make_room(self, i: int, extra: int) -> bool:
        """Preempt from the tail of the running list until ``extra`` blocks are free for
        ``running[i]``; False when that request itself had to go."""
        run = self.running
        r = run[i]
        while extra > self.free and not self._reclaim(extra):
            victim = run.pop()
            self._preempt(victim)
            if victim is r:
                return False
        return True

    # -- one step ----------------------------------------------------------------------------

    def plan(self, now: float):
        """Choose the next step's work and account for it; return its duration in seconds (the
        step, the draft model's share, KV swapping) or None when there is nothing to run."""
        self._swap_s = 0.0
        self._fetch_s = 0.0
        if self.cfg.scheduler == "static":
            step = self._plan_static()
        else:
            before = self.preemptions
            step = self._plan_chunked() if self.cfg.chunked_prefill else self._plan_whole()
            if step is None and self.preemptions > before:
                # it preempted every sequence it could run and ran none: the scheduler plans
                # again at once (vLLM's engine loop steps again), the swap-outs on that step
                step = self._plan_chunked() if self.cfg.chunked_prefill else self._plan_whole()
        if step is None:
            return None
        cost = self.oracle.cost(step)
        secs, energy, parts = cost.seconds, cost.energy_j, cost.parts
        if self.draft is not None:
            ds, de, dp = self._draft_cost(step)
            secs += ds
            energy += de
            parts = tuple(map(add, parts, dp)) if parts and dp else ()
        if self.power is not None:
            secs, energy, parts = self.power.limit(secs, energy, parts)
        tier_j = 0.0
        if self.tier is not None:     # KV in the slower tiers: copies, reads (sim/serving/kv_tier)
            tier_j = self._tier_step()
        if self.cfg.kv_prefetch:
            self._prefetch(secs)
        idle = self.static_w * self._swap_s           # chips idle while blocks cross the link
        secs += self._swap_s
        energy += idle + tier_j
        if not self.runtime.is_ideal:
            dev = secs
            secs = self.runtime.step_s(dev, len(self._dec) + len(self._chunks))
            host = self.static_w * (secs - dev)       # chips idle while the host works
            energy += host
            idle += host
        if parts:
            acc = self.energy_parts
            for i, x in enumerate(parts):
                acc[i] += x * self.chips
            acc[STATIC] += idle * self.chips
            acc[DRAM] += tier_j * self.chips
        else:
            self.unattributed = True
        if now > self.last_end:
            self.idle_s += now - self.last_end
        used = self.total_blocks - self.free
        self.peak_used = max(self.peak_used, used)
        self.used_time += used * secs
        self.energy_j += energy * self.chips
        self.rec_t.append(now)
        self.rec_dt.append(secs)
        self.rec_dec.append(step.decode_batch)
        self.rec_pf.append(step.tokens - step.decode_batch * step.decode_queries)
        self.rec_chunks.append(len(step.prefill))
        self.rec_wait.append(len(self.waiting) + len(self.swapped))
        # in the system: a static batch's finished sequences keep their slot (padding) but
        # their requests are done (Little's law counts requests, not slots)
        self.rec_run.append(len(self.running) if self.cfg.scheduler != "static" else
                            sum(1 for r in self.running if r.finish_t < 0))
        self.rec_used.append(used)
        return secs

    @property
    def _tier_swap(self) -> bool:
        return self.tier is not None and not self.tier.pooled

    def _prefetch(self, device_s: float) -> None:
        """``cfg.kv_prefetch``: this step's prefetchable copies (``_fetch_s``) overlap the
        previous step, which hides up to ``_window`` of them; the rest stays on the chain.
        The next step's window: this one's length on the device (``device_s``: oracle, draft,
        power limit; plus what its tier-2 reads add) less the seconds those reads keep the
        link busy. [assumption] the copies take none of the first tier's bandwidth from the
        step they overlap, and an idle gap before a step hides nothing (errs slow)."""
        hidden = min(self._fetch_s, self._window)
        exposed = self._fetch_s - hidden
        self._swap_s += exposed
        self.prefetch_hidden_s += hidden
        self.prefetch_exposed_s += exposed
        t = self.tier
        if t is not None and t.pooled:
            self._window = max(0.0, device_s + t.last_read_s - t.last_read_busy_s)
        else:
            self._window = device_s

    def _tier_step(self) -> float:
        """The planned step's second-tier work: ``tier``, place the pool's blocks and add the
        copies and tier-2 reads to the step's seconds; both modes record the occupancy.
        Returns the joules per chip."""
        t = self.tier
        used = self.total_blocks - self.free
        if t.pooled:
            s = t.place(self.running, used, self._dec + [r for r, _ in self._chunks],
                        self.pc.placed() if self.pc is not None else ((), ()))
            if self.cfg.kv_prefetch:    # the copies may be fetched ahead, the reads not
                self._fetch_s += t.last_move_s
                self._swap_s += t.last_read_s
            else:
                self._swap_s += s
        else:
            t.record(used)
        return t.take_j()

    def _draft_cost(self, step: Step) -> tuple[float, float, tuple]:
        """The draft model: its share of the prompt chunks plus k proposal steps (seconds,
        energy, energy by component)."""
        k = self.spec.k
        secs = energy = 0.0
        parts = (0.0,) * len(VECTOR)
        b, keys0 = step.decode_batch, step.decode_keys - step.decode_batch * (self.q - 1)
        for j in range(k):
            pf = step.prefill if j == 0 else ()
            if not b and not pf:
                break
            c = self.draft.cost(Step(b, keys0 + j * b, pf) if b else Step(prefill=pf))
            secs += c.seconds
            energy += c.energy_j
            parts = tuple(map(add, parts, c.parts)) if c.parts and parts else ()
        return secs, energy, parts

    def _plan_chunked(self):
        budget = self.cfg.max_batched_tokens
        q = self.q
        dec: list[Req] = []
        chunks: list[tuple[Req, int]] = []
        run = self.running
        preempted = False
        i = 0
        while i < len(run):
            r = run[i]
            decoding = r.computed >= r.target
            if decoding:
                need = q
                if budget < q:
                    i += 1
                    continue
            else:
                need = min(r.target - r.computed, budget, self.chunk)
                if need == 0:
                    i += 1
                    continue
            extra = self.blocks_for(r, r.computed + need) - r.blocks
            if extra > self.free and not self._reclaim(extra):
                preempted = True
                if not self._make_room(i, extra):
                    break
            self.free -= extra
            r.blocks += extra
            budget -= need
            if decoding:
                dec.append(r)
            else:
                chunks.append((r, need))
            i += 1
        if not preempted:
            budget = self._admit_swapped(dec, chunks, budget)
            if not self.swapped:
                # split_prompts False: a prompt joins the step whole or waits (TensorRT-LLM's
                # in-flight batching without context chunking)
                self._admit_waiting(chunks, budget, chunked=self.cfg.split_prompts is not False)
        return self._make_step(dec, chunks)

    def _admit_swapped(self, dec, chunks, budget: int) -> int:
        sw = self.swapped
        q = self.q
        while sw and budget > 0 and len(self.running) < self.cfg.max_batch:
            r = sw[0]
            decoding = r.computed >= r.target
            need = q if decoding else min(r.target - r.computed, budget, self.chunk)
            if need > budget:
                break
            total = self.blocks_for(r, r.computed + need)
            kind = self.pc.lookup(r.pid) if r.shared and self.pc is not None else ""
            if kind == "miss":        # its prefix left every tier: recomputed from scratch
                sw.popleft()
                self._recompute_swapped(r)
                continue
            load = self.pc.blocks if kind in ("hit2", "hit3") else 0
            if total + load > self.free and not self._reclaim(total + load, r.pid):
                break
            sw.popleft()
            if kind:                  # it takes its prefix's reference again
                self._take_prefix(r)
            self.free -= total
            s = (self.tier.swap_in(r.swapped, r.rid) if self._tier_swap else
                 r.swapped * self.block_bytes / self.cfg.host_link_bytes_per_s)
            if self.cfg.kv_prefetch:    # a swapped sequence's blocks, fetched ahead
                self._fetch_s += s
            else:
                self._swap_s += s
            self.swap_bytes += r.swapped * self.block_bytes
            r.swapped = 0
            r.blocks = total
            self.running.append(r)
            budget -= need
            if decoding:
                dec.append(r)
            else:
                chunks.append((r, need))
        return budget

    def _recompute_swapped(self, r: Req) -> None:
        """Swapped ``r`` whose cached prefix was dropped meanwhile: its swapped copy is let
        go (it lacks the prefix's K/V) and it waits, first, to be recomputed."""
        if self._tier_swap:
            self.tier.discard(r.swapped, r.rid)
        r.swapped = 0
        r.shared = r.computed = 0
        r.target = r.prompt + r.generated
        self.waiting.appendleft(r)

    def _admit_waiting(self, chunks, budget: int, chunked: bool) -> int:
        wq = self.waiting
        while wq and budget > 0 and len(self.running) < self.cfg.max_batch:
            r = wq[0]
            if self.pc is not None and r.pid >= 0 and not r.pref:
                need = self._admit_prefix(r, budget, chunked)
                if not need:
                    break
                wq.popleft()
                self.running.append(r)
                chunks.append((r, need))
                budget -= need
                continue
            rest = r.target - r.computed
            if rest > budget and not chunked:
                break
            if self.reserve:
                claim = self._claim(r, chunked)
                if self.claimed + claim > self.total_blocks - self.prefix_blocks:
                    break
            need = min(rest, budget, self.chunk) if chunked else rest
            total = self.blocks_for(r, r.computed + need)
            if total > self.free and not self._reclaim(total):
                break
            wq.popleft()
            if self.reserve:
                r.claim = claim
                self.claimed += claim
            self.free -= total
            r.blocks = total
            self.running.append(r)
            budget -= need
            chunks.append((r, need))
        return budget

    # -- the prefix cache (prefix_cache.py) -------------------------------------------------

    def _reclaim(self, need: int, keep: int = -1) -> bool:
        """Evict cached prefixes no request holds (LRU first, not ``keep``) so that ``need``
        blocks are free: True when done; False, evicting nothing, when they cannot be."""
        pc = self.pc
        if pc is None or pc.evictable(keep) < need - self.free:
            return False
        freed, s = pc.reclaim(need - self.free, keep)
        self.free += freed
        self._swap_s += s
        return True

    def _admit_prefix(self, r: Req, budget: int, chunked: bool) -> int:
        """Admit waiting ``r``, whose prefix the cache may hold: the tokens of its first
        chunk, or 0 when it cannot be admitted now (nothing changed then)."""
        pc = self.pc
        kind = pc.lookup(r.pid)
        if kind != "miss":
            r.shared = r.computed = pc.blocks * self.bs
        rest = r.target - r.computed
        need = rest if rest <= budget else (budget if chunked else 0)
        load = pc.blocks if kind in ("hit2", "hit3") else 0
        total = self.blocks_for(r, r.computed + need) if need else 0
        if not need or (total + load > self.free
                        and not self._reclaim(total + load, r.pid)):
            r.shared = r.computed = 0
            return 0
        if kind == "miss":
            pc.count_miss()
        else:
            self._take_prefix(r)
        self.free -= total
        r.blocks = total
        return need

    def _take_prefix(self, r: Req) -> None:
        """``r`` takes a reference to its cached prefix (a tier-2 or tier-3 entry copied back
        to tier 1; under a pooled tier, a hit on an entry placed in tier 2 or 3 counts there)."""
        up = self.tier.tier_of(("p", r.pid)) if self.tier is not None and self.tier.pooled else 1
        taken, s = self.pc.acquire(r.pid, up)
        self.free -= taken
        self._swap_s += s
        r.pref = True

    def _donate(self, r: Req) -> None:
        """``r`` computed its prefix itself: its first blocks become the cached prefix."""
        s = self.pc.blocks * self.bs
        if r.computed >= s and self.pc.donate(r.pid):
            r.blocks -= self.pc.blocks
            r.shared = s
            r.pref = True

    def _unref(self, r: Req) -> None:
        """``r`` lets go of its cached prefix (finished, or recomputed from scratch)."""
        self.pc.release(r.pid)
        r.pref = False
        if not r.done:
            r.shared = 0

    def _plan_whole(self):
        """Without chunked prefill: whole prompts in prefill-only steps, which take priority
        over decodes (vLLM V0's default scheduler)."""
        chunks: list[tuple[Req, int]] = []
        if not self.swapped:
            self._admit_waiting(chunks, self.cfg.max_batched_tokens, chunked=False)
        if chunks:
            return self._make_step([], chunks)
        q = self.q
        dec: list[Req] = []
        run = self.running
        preempted = False
        i = 0
        while i < len(run):
            r = run[i]
            extra = self.blocks_for(r, r.computed + q) - r.blocks
            if extra > self.free and not self._reclaim(extra):
                preempted = True
                if not self._make_room(i, extra):
                    break
            self.free -= extra
            r.blocks += extra
            dec.append(r)
            i += 1
        if not preempted:
            self._admit_swapped(dec, chunks, self.cfg.max_batched_tokens - q * len(dec))
        return self._make_step(dec, chunks)

    def _plan_static(self):
        """Fixed batches: admit up to max_batch waiting requests when idle, prefill them as
        one batch padded to the longest prompt, decode all of them (padded to the longest
        output) until the last one is done."""
        if not self.running:
            wq = self.waiting
            if not wq:
                return None
            batch: list[Req] = []
            pmax = gmax = 0
            while wq and len(batch) < self.cfg.max_batch:
                r = wq[0]
                p2, g2 = max(pmax, r.prompt), max(gmax, r.output)
                per = self._static_blocks(p2, g2)
                if per * (len(batch) + 1) > self.free:
                    break
                wq.popleft()
                batch.append(r)
                pmax, gmax = p2, g2
            per = self._static_blocks(pmax, gmax)
            for r in batch:
                r.blocks = per
            self.free -= per * len(batch)
            self.running = batch
            self.static_pad = (pmax, gmax)
            self.static_left = gmax - 1
            self._static_step = 0
            return self._make_step([], [(r, pmax) for r in batch], static_prefill=True)
        pmax, _ = self.static_pad
        b = len(self.running)
        ctx = pmax + self._static_step + 1
        self._static_step += 1
        self._dec = list(self.running)
        self._chunks = []
        return Step(b, b * ctx)

    def _make_step(self, dec, chunks, static_prefill: bool = False):
        self._dec = dec
        self._chunks = chunks
        if not dec and not chunks:
            return None
        if static_prefill:
            pf = tuple((c, 0) for _, c in chunks)
        else:
            pf = tuple((c, r.computed) for r, c in chunks)
        if not dec:
            return Step(0, 0, pf)
        q = self.q
        return Step(len(dec), sum(r.computed for r in dec) + q * len(dec), pf, q)

    def commit(self, t: float) -> tuple[list[Req], list[Req]]:
        """Apply the planned step's results at its end time ``t``; return (finished requests,
        requests whose prefill finished on a prefill-role instance)."""
        self.last_end = t
        finished: list[Req] = []
        handed: list[Req] = []
        if self.cfg.scheduler == "static":
            return self._commit_static(t)
        dec = self._dec
        itl = self.itl
        if dec:
            spec = self.spec
            if spec is not None:
                draws = self._accepted(len(dec))
            for j, r in enumerate(dec):
                a = 1 if spec is None else draws[j]
                left = r.output - r.generated
                if a > left:
                    a = left
                r.generated += a
                r.computed += a
                itl.append(t - r.last_t)
                r.last_t = t
                if spec is not None:       # the rejected tokens' slots go back
                    keep = self.blocks_for(r, r.computed, r.computed - a)
                    self.free += r.blocks - keep
                    r.blocks = keep
                if r.generated >= r.output:
                    self._finish(r, t)
                    finished.append(r)
        for r, c in self._chunks:
            if r.pf_start < 0:
                r.pf_start = t - self.rec_dt[-1]
            r.computed += c
            if self.pc is not None and r.pid >= 0 and not r.pref:
                self._donate(r)
            if r.computed >= r.target:
                r.generated += 1
                if r.first_t < 0:
                    r.first_t = t + self.out_s
                    r.pf_end = t
                else:
                    itl.append(t - r.last_t)
                r.last_t = t
                if r.generated >= r.output:
                    self._finish(r, t)
                    finished.append(r)
                elif self.role == "prefill":
                    r.done = True          # leaves this instance's batch
                    handed.append(r)
        if finished or handed:
            self.running = [r for r in self.running if not r.done]
        return finished, handed

    def _commit_static(self, t: float):
        finished: list[Req] = []
        if self._chunks:
            for r, _ in self._chunks:
                r.computed = r.prompt
                r.generated = 1
                r.last_t = r.pf_end = t
                r.first_t = t + self.out_s
                r.pf_start = t - self.rec_dt[-1]
                if r.generated >= r.output:
                    r.finish_t = t + self.out_s
                    finished.append(r)
        else:
            for r in self._dec:
                if r.generated < r.output:
                    r.generated += 1
                    r.computed += 1
                    self.itl.append(t - r.last_t)
                    r.last_t = t
                    if r.generated >= r.output:
                        r.finish_t = t + self.out_s
                        finished.append(r)
            self.static_left -= 1
        if self.static_left <= 0:
            for r in self.running:
                r.done = True
                self.free += r.blocks
                r.blocks = 0
            self.running = []
        return finished, []

    def _finish(self, r: Req, t: float) -> None:
        r.finish_t = t + self.out_s
        r.done = True
        self.free += r.blocks
        r.blocks = 0
        self.claimed -= r.claim
        r.claim = 0
        if r.pref:
            self._unref(r)

    def _accepted(self, n: int) -> list[int]:
        """Tokens each of ``n`` verified sequences gains: 1 + the accepted draft tokens, the
        count of leading successes of Bernoulli(accept) trials, at most k (per-position
        rates: the positions whose reach, :attr:`~.config.Speculation.reach`, exceeds one
        uniform draw)."""
        p, k = self.spec.accept, self.spec.k
        u = self.rng.random(n)
        if self.spec.later:      # per-position rates: accepted while 1 − u < P(reach j)
            reach = np.array(self.spec.reach)
            return (1 + (1.0 - u[:, None] < reach[None, :]).sum(axis=1)).astype(
                np.int64).tolist()
        if p <= 0.0:
            return [1] * n
        if p >= 1.0:
            return [k + 1] * n
        x = np.floor(np.log1p(-u) / math.log(p))   # P(x >= j) = p^j
        return (1 + np.minimum(x, k)).astype(np.int64).tolist()

    # -- disaggregation: KV arriving from a prefill instance ------------------------------

    def try_reserve(self, r: Req) -> bool:
        """Reserve blocks for a prefilled request's cache (decode role)."""
        need = self.blocks_for(r, r.computed)
        if need > self.free or len(self.running) + self.incoming >= self.cfg.max_batch:
            return False
        self.free -= need
        r.reserved = need
        self.incoming += 1
        return True

    def accept(self, r: Req) -> None:
        """A transfer completed: the request joins this instance's batch."""
        self.incoming -= 1
        r.blocks = r.reserved
        r.reserved = 0
        r.done = False
        self.running.append(r)


def run_loop(instances: list[Instance], arrivals: list[Req], *, next_request=None,
             prefill_pool: list[Instance] | None = None,
             decode_pool: list[Instance] | None = None, transfer=None,
             progress=None) -> float:
    """Run the event loop to completion; return the time of the last event.

    ``arrivals``: requests known in advance (open loop, traces), sorted by arrival.
    ``next_request(finished_request, t)``: closed loop; returns the client's next request (its
    ``arrival`` set to ``t``) or None. Without disaggregation every instance is "mixed" and
    arrivals go to the one with the fewest outstanding requests (ties: the lowest index).
    With ``prefill_pool``/``decode_pool``, arrivals go to the prefill pool and prefilled
    requests to the decode pool; ``transfer(r, src, dst, t, overlap)`` returns the time the
    request's KV arrives at ``dst``. ``progress(done)`` is called as requests finish. A
    request enters the scheduler the runtime's ``request_in_s(prompt)`` after its ``arrival``; a
    closed-loop client sends its next request when it has received the last token.
    """
    heap: list = []
    seq = 0
    rt = instances[0].runtime
    rout = rt.token_out_s
    for r in arrivals:
        heap.append((r.arrival + rt.request_in_s(r.prompt), ARRIVE, seq, r))
        seq += 1
    heapq.heapify(heap)
    entry = prefill_pool if prefill_pool is not None else instances
    pending_handoff: list[tuple[Req, Instance]] = []
    done = 0
    t = 0.0
    while heap:
        t = heap[0][0]
        touched: list[Instance] = []
        while heap and heap[0][0] == t:
            _, kind, _, x = heapq.heappop(heap)
            if kind == STEP_END:
                inst = x
                inst.busy = False
                finished, handed = inst.commit(t)
                touched.append(inst)
                for r in handed:
                    pending_handoff.append((r, inst))
                if finished:
                    done += len(finished)
                    if progress is not None:
                        progress(done)
                    if next_request is not None:
                        for r in finished:
                            nr = next_request(r, t + rout)
                            if nr is not None:
                                heapq.heappush(heap, (nr.arrival + rt.request_in_s(nr.prompt),
                                                      ARRIVE, seq, nr))
                                seq += 1
            elif kind == KV_DONE:
                r, src, dst = x
                src.free += r.blocks
                r.blocks = 0
                dst.accept(r)
                touched.append(src)
                touched.append(dst)
            else:
                r = x
                best = entry[0]
                for inst in entry:
                    if inst.outstanding < best.outstanding:
                        best = inst
                r.inst = best.idx
                best.waiting.append(r)
                touched.append(best)
            if decode_pool is not None:
                seq = _handoff(heap, seq, t, pending_handoff, decode_pool, transfer)
        for inst in sorted(set(touched), key=lambda i: i.idx) if len(touched) > 1 else touched:
            if not inst.busy and inst.has_work():
                dt = inst.plan(t)
                if dt is not None:
                    inst.busy = True
                    heapq.heappush(heap, (t + dt, STEP_END, seq, inst))
                    seq += 1
    for inst in instances:
        if t > inst.last_end:
            inst.idle_s += t - inst.last_end
        if inst.has_work() or inst.incoming:
            raise ServingStalled(stalled_message(
                f"instance {inst.idx}", len(inst.waiting), len(inst.swapped),
                len(inst.running) + inst.incoming, inst.free, inst.total_blocks))
    if pending_handoff:
        raise ServingStalled(f"serve: {len(pending_handoff)} prefilled requests never found "
                             f"room in the decode pool; give the decode pool more KV memory")
    return t


def _handoff(heap, seq: int, t: float, pending: list, pool: list[Instance], transfer) -> int:
    """Send prefilled requests, first come first served, to the decode instance with the fewest
    outstanding requests while it has room for their cache; the rest keep waiting (holding
    their blocks on the prefill instance)."""
    n = 0
    for r, src in pending:
        dst = next((i for i in sorted(pool, key=lambda i: (i.outstanding, i.idx))
                    if i.try_reserve(r)), None)
        if dst is None:
            break
        heapq.heappush(heap, (transfer(r, src, dst, t), KV_DONE, seq, (r, src, dst)))
        seq += 1
        n += 1
    if n:
        del pending[:n]
    return seq

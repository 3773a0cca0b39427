"""The paged KV cache across a chip's two memory tiers in ``serve`` (issue 25 item 2).

A chip with a second memory tier (``[dram2]``: LPDDR5X/GDDR7 on the package, or DRAM behind a
CXL, PCIe or C2C link; docs/chips.md, "Memory tiers") gives the serving engine room for KV
blocks beyond what the first tier (HBM) holds. ``--kv-offload`` chooses how it is used:

* ``none``: the cache lives in the first tier only (the engine as before the tier existed).
* ``swap``: a sequence preempted for KV space has its blocks copied to the second tier instead
  of being recomputed, and copied back before its next step (vLLM V0's swap preemption, with
  the second tier as the swap space: ``vllm/core/scheduler.py`` ``PreemptionMode.SWAP``,
  ``--swap-space``). Each copy costs ``bytes ÷ tier bandwidth + tier latency`` on the step
  that makes it (the dependency chain: the sequence cannot run before its blocks are back)
  and ``bytes × 8 × (pJ/bit of tier 1 + tier 2)`` (read on one side, written on the other).
  When the second tier has no room for the victim's blocks it is recomputed.
* ``tier``: the paged cache spans both tiers, one pool of ``C1 + C2`` blocks for the
  scheduler (it preempts only when both are full). At every step the first tier holds the
  pinned prefix, the blocks held outside the batch (a prefill instance's finished prompts
  waiting for their transfer), then the running sequences' blocks in admission order, the
  oldest first; the most recently admitted sequences (those vLLM preempts first) live, wholly
  or in part, in the second tier (with a prefix cache, :mod:`.prefix_cache`, the prefixes
  requests hold come before the running sequences, those nobody holds after them, the most
  recently used first). A step reads each of its sequences' tier-2 blocks at the
  second tier's rate (decode attends its whole context; a prefill chunk its past): the step's
  oracle charged those bytes at the first tier's rate, so the step grows by
  ``B₂ · max(0, 1/bw₂ − 1/bw₁) + latency`` and its energy by ``B₂ · 8 · (pJ₂ − pJ₁)``. Blocks
  whose tier changes between two steps (a sequence pushed down as older ones grow, or promoted
  as they finish) are copied as a swap is, before the step (on its chain). This is KV offload
  with direct access (vLLM's ``--cpu-offload-gb`` reads offloaded weights over the link the
  same way; LMCache and vLLM's KV-connector CPU offload keep evicted KV in host DRAM and load
  it back on reuse: ``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py``,
  LMCache, arXiv 2510.09665).
* ``auto`` (default): ``tier`` on a chip with a second tier under the continuous scheduler,
  else ``none``: a chip without a tier serves bit for bit as before.

Everything here is per chip (a replica's blocks are split evenly over its tensor-parallel
chips, each with its own tiers); :meth:`KvTier.to_dict` reports all chips.

A chip's third tier (``[dram3]``, docs/chips.md "A third tier") extends both modes (issue 25):
under ``tier`` the pool is ``C1 + C2 + C3`` blocks, placed in the same order over the three
(tier 1, then tier 2, then tier 3: the most recently admitted sequences and the coldest cached
prefixes sink to tier 3 first); a step reads its sequences' tier-3 blocks at the third tier's
rate (``B₃ · max(0, 1/bw₃ − 1/bw₁) + latency₃``, joules ``B₃ · 8 · (pJ₃ − pJ₁)``), the
tier-2 ones as before, one after the other on the step's chain. A block whose tier changes
is copied (the fewest copies, :mod:`.kv_chain`): between tiers 1 and 2 as before, between 1
and 3 at the third tier's rate and latency (joules ``pJ₁ + pJ₃``), between 2 and 3 through
the chip at the slower tier's rate with both latencies (joules ``pJ₂ + pJ₃``) [assumption:
the chip copies between two off-package tiers; no direct path]. Under ``swap`` a victim goes
to tier 2 while it has room, else to tier 3 (copied at its rate), else it is recomputed.
A chip without ``[dram3]`` takes exactly the two-tier path (bit-identical results).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

from .kv_chain import chain_moves

OFFLOAD = ("auto", "none", "swap", "tier")


def _num(name: str, v, lo: float, *, inf_ok: bool = False, zero_ok: bool = False) -> None:
    ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and not math.isnan(v)
          and (math.isfinite(v) or (inf_ok and v > 0)) and (v > lo or (zero_ok and v == lo)))
    if not ok:
        what = f"{'>= ' if zero_ok else '> '}{lo:g}" + (" (inf allowed)" if inf_ok else "")
        raise ValueError(f"kv tier: {name} must be a number {what}, not {v!r}")


@dataclass(frozen=True)
class TierSpec:
    """A chip's second tier as the serving engine uses it, per chip: ``capacity_bytes`` for KV
    blocks, the rate it streams at (``bytes_per_s``: the lower of its pins and its links),
    the latency each transfer or read adds (``latency_s``: the link's, 0 on the package), its
    energy per bit; and the first tier's rate and energy per bit, against which the step
    oracle charged every KV byte. ``bytes_per_s`` may be ``inf`` (an ideal tier)."""

    capacity_bytes: float
    bytes_per_s: float
    latency_s: float
    pj_per_bit: float
    tier1_bytes_per_s: float
    tier1_pj_per_bit: float

    def __post_init__(self):
        _num("capacity_bytes", self.capacity_bytes, 0.0)
        _num("bytes_per_s", self.bytes_per_s, 0.0, inf_ok=True)
        _num("latency_s", self.latency_s, 0.0, zero_ok=True)
        _num("pj_per_bit", self.pj_per_bit, 0.0, zero_ok=True)
        _num("tier1_bytes_per_s", self.tier1_bytes_per_s, 0.0, inf_ok=True)
        _num("tier1_pj_per_bit", self.tier1_pj_per_bit, 0.0, zero_ok=True)

    def move_s(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` between the tiers (0 for nothing)."""
        return nbytes / self.bytes_per_s + self.latency_s if nbytes else 0.0

    def move_j(self, nbytes: float) -> float:
        """Joules of that copy: read from one tier, written to the other."""
        return nbytes * 8 * (self.pj_per_bit + self.tier1_pj_per_bit) * 1e-12

    def read_s(self, nbytes: float) -> float:
        """Seconds a step gains reading ``nbytes`` of KV from the second tier rather than the
        first (the oracle charged them at the first tier's rate; a tier faster than the first
        is not credited: the step need not have been bound by those reads)."""
        if not nbytes:
            return 0.0
        gap = 1.0 / self.bytes_per_s - 1.0 / self.tier1_bytes_per_s
        return nbytes * max(0.0, gap) + self.latency_s

    def read_j(self, nbytes: float) -> float:
        """Joules a step gains (or saves) reading ``nbytes`` from the second tier."""
        return nbytes * 8 * (self.pj_per_bit - self.tier1_pj_per_bit) * 1e-12


def tier_spec(chip, table: str = "dram2") -> TierSpec | None:
    """The second tier of ``chip`` (``table`` ``dram3``: its third; None without that table),
    from its chip file: capacity, ``bytes_per_s`` (pins, or the links when lower),
    ``link_latency_ns``, ``pj_per_bit``; the first tier's ``dram_bytes_per_s`` and
    ``[energy] pj_per_dram_bit``."""
    if table not in ("dram2", "dram3"):
        raise ValueError(f"kv tier: table must be dram2 or dram3, not {table!r}")
    t = getattr(chip, table, None)
    if t is None:
        return None
    return TierSpec(capacity_bytes=float(t.capacity_bytes), bytes_per_s=t.bytes_per_s,
                    latency_s=t.link_latency_ns * 1e-9, pj_per_bit=t.pj_per_bit,
                    tier1_bytes_per_s=chip.dram_bytes_per_s,
                    tier1_pj_per_bit=chip.energy.pj_per_dram_bit)


def check_offload(mode: str, chips, scheduler: str) -> None:
    """Refuse ``--kv-offload`` ``mode`` for a deployment on ``chips`` (ValueError naming the
    flag, the mode and the chips): an offload none of them has a second tier for, a pooled
    tier under the static scheduler."""
    if mode not in OFFLOAD:
        raise ValueError(f"--kv-offload must be one of {', '.join(OFFLOAD)}, not {mode!r}")
    if mode in ("swap", "tier") and not any(getattr(c, "dram2", None) for c in chips):
        names = ", ".join(dict.fromkeys(repr(c.name) for c in chips))
        raise ValueError(f"--kv-offload {mode}: chip {names} has no second memory tier "
                         f"([dram2]); use a chip with one (examples/chips/infer-2026-lpddr.toml"
                         f", infer-2026-cxl.toml) or --kv-offload none")
    if mode == "tier" and scheduler != "continuous":
        raise ValueError("--kv-offload tier: the static scheduler reserves each batch's blocks "
                         "for its whole life; use --scheduler continuous or --kv-offload none")


def resolve_offload(mode: str, chip, scheduler: str) -> str:
    """``--kv-offload`` made concrete for a pool on ``chip`` (module docstring; a deployment
    :func:`check_offload` accepted): ``none`` on a chip without a second tier (the other pool
    of a disaggregated deployment may have one), ``auto`` is ``tier`` on one with a tier under
    the continuous scheduler."""
    if getattr(chip, "dram2", None) is None:
        return "none"
    if mode == "auto":
        return "tier" if scheduler == "continuous" else "none"
    return mode


def copy_path(spec2: TierSpec, spec3: TierSpec) -> TierSpec:
    """The copy between the second and the third tier as a :class:`TierSpec` whose
    :meth:`~TierSpec.move_s` / :meth:`~TierSpec.move_j` give its cost: through the chip at
    the slower tier's rate, both latencies, ``pJ₂ + pJ₃`` per bit (module docstring)."""
    return TierSpec(capacity_bytes=spec3.capacity_bytes,
                    bytes_per_s=min(spec2.bytes_per_s, spec3.bytes_per_s),
                    latency_s=spec2.latency_s + spec3.latency_s, pj_per_bit=spec3.pj_per_bit,
                    tier1_bytes_per_s=spec2.bytes_per_s, tier1_pj_per_bit=spec2.pj_per_bit)


def tier_blocks(spec: TierSpec, block_bytes: float) -> int:
    """Whole KV blocks of ``block_bytes`` (per chip) the tier ``spec`` holds."""
    if not block_bytes > 0:
        raise ValueError(f"kv tier: block_bytes must be > 0, not {block_bytes!r}")
    return int(spec.capacity_bytes // block_bytes)


class KvTier:
    """One instance's second tier: its ``blocks`` (per chip, of ``block_bytes``), the first
    tier's ``tier1_blocks``, the policy (``mode`` ``swap`` or ``tier``) and what moved.

    The engine calls :meth:`swap_out` / :meth:`swap_in` (``swap``) or :meth:`place` once per
    step (``tier``); each returns the seconds the step grows by and adds the joules (per chip)
    to :attr:`pending_j`, which the engine takes with :meth:`take_j`. The record: tier-2
    blocks in use after each step's placement (``rec2``), the peak of each tier, bytes
    copied, their seconds and joules, bytes read from tier 2 and what that added."""

    def __init__(self, spec: TierSpec, mode: str, *, blocks: int, tier1_blocks: int,
                 block_bytes: float, spec3: TierSpec | None = None, blocks3: int = 0):
        if mode not in ("swap", "tier"):
            raise ValueError(f"kv tier: mode must be swap or tier, not {mode!r}")
        checks = [("blocks", blocks), ("tier1_blocks", tier1_blocks)]
        if spec3 is not None:
            checks.append(("blocks3", blocks3))
        for n, v in checks:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"kv tier: {n} must be a positive integer, not {v!r}")
        # the third tier (module docstring): its spec, blocks, and the 2-3 copy's path
        self.spec3 = spec3
        self.blocks3 = blocks3 if spec3 is not None else 0
        self.link23 = copy_path(spec, spec3) if spec3 is not None else None
        self.used3 = self.peak3 = 0
        self.moved3_bytes = self.move3_s = self.move3_j = 0.0
        self.read3_bytes = self.read3_s = self.read3_j = 0.0
        self.rec3 = array("l")
        self._in3: set = set()               # swap: keys of victims swapped to tier 3
        self.spec = spec
        self.mode = mode
        self.blocks = blocks
        self.tier1_blocks = tier1_blocks
        self.block_bytes = block_bytes
        self.used2 = 0                       # tier-2 blocks in use now
        self.refused = 0                     # swap: victims recomputed, the tier full
        self.peak1 = 0
        self.peak2 = 0
        self.moved_bytes = 0.0
        self.move_s = 0.0
        self.move_j = 0.0
        self.read_bytes = 0.0
        self.read_s = 0.0
        self.read_j = 0.0
        self.pending_j = 0.0
        # the last placement's parts (``tier``): its copies' seconds, its reads' added
        # seconds, and the seconds the reads keep the tier's link busy (a prefetch's window)
        self.last_move_s = self.last_read_s = self.last_read_busy_s = 0.0
        self.rec_move_s = array("d")         # ``tier``: each placement's copy seconds
        self.rec_busy_s = array("d")         # and its reads' link-busy seconds
        self.rec2 = array("l")
        self.rec1 = array("l")
        self._last: dict[int, tuple[int, int]] = {}     # rid -> (blocks, tier-2 blocks)

    @property
    def pooled(self) -> bool:
        """Whether the scheduler's pool spans both tiers (``tier``)."""
        return self.mode == "tier"

    def take_j(self) -> float:
        j, self.pending_j = self.pending_j, 0.0
        return j

    def _move(self, blocks: int, path: TierSpec | None = None) -> float:
        """Copy ``blocks`` between tiers 1 and 2 (``path``: another pair's copy, one that
        touches tier 3, counted also in the tier-3 totals): the seconds."""
        b = blocks * self.block_bytes
        sp = self.spec if path is None else path
        s, j = sp.move_s(b), sp.move_j(b)
        if path is not None:
            self.moved3_bytes += b
            self.move3_s += s
            self.move3_j += j
        self.moved_bytes += b
        self.move_s += s
        self.move_j += j
        self.pending_j += j
        return s

    def swap_out(self, blocks: int, key=None) -> float | None:
        """A preempted sequence's (``key``'s) ``blocks`` copied to tier 2, or to tier 3 when
        tier 2 has no room: the seconds, or None when neither has (the sequence is then
        recomputed)."""
        if self.used2 + blocks > self.blocks:
            if self.spec3 is not None and self.used3 + blocks <= self.blocks3:
                self.used3 += blocks
                self.peak3 = max(self.peak3, self.used3)
                self._in3.add(key)
                return self._move(blocks, self.spec3)
            self.refused += 1
            return None
        self.used2 += blocks
        self.peak2 = max(self.peak2, self.used2)
        return self._move(blocks)

    def swap_in(self, blocks: int, key=None) -> float:
        """A swapped sequence's (``key``'s) ``blocks`` copied back to tier 1: the seconds."""
        if key in self._in3:
            self._in3.remove(key)
            self.used3 -= blocks
            return self._move(blocks, self.spec3)
        self.used2 -= blocks
        return self._move(blocks)

    def discard(self, blocks: int, key=None) -> None:
        """A swapped sequence's (``key``'s) ``blocks`` let go where they are (not copied)."""
        if key in self._in3:
            self._in3.remove(key)
            self.used3 -= blocks
        else:
            self.used2 -= blocks

    def record(self, used1: int) -> None:
        """The tiers' occupancy after a step was planned (``swap``: tier 1 is the pool)."""
        self.peak1 = max(self.peak1, used1)
        self.rec1.append(used1)
        self.rec2.append(self.used2)
        if self.spec3 is not None:
            self.rec3.append(self.used3)

    def place(self, running, used: int, stepping, cached=((), ())) -> float:
        """``tier``: place the pool's ``used`` blocks for the step about to run (module
        docstring) and return the seconds it grows by: the copies of blocks whose tier changed
        since the previous step, then the reads of ``stepping``'s tier-2 (and tier-3) blocks
        (with a prefix cache, :mod:`.prefix_cache`, also of the cached prefix each holds).
        ``cached``: the prefix cache's entries as ``(key, blocks)``, those requests hold
        (placed before the running sequences) and those none holds, the most recently used
        first (placed after them: the coldest blocks go to the slower tiers first)."""
        c1 = self.tier1_blocks
        three = self.spec3 is not None
        hot, cold = cached
        inside = sum(r.blocks for r in running)
        if hot or cold:
            inside += sum(b for _, b in hot) + sum(b for _, b in cold)
        outside = used - inside
        room = c1 - min(c1, outside)
        room2 = self.blocks - min(self.blocks, max(0, outside - c1)) if three else 0
        now: dict = {}
        moved = m23 = m13 = 0
        last = self._last
        order = [(r.rid, r.blocks) for r in running]
        if hot or cold:
            order = [*hot, *order, *cold]
        for key, blocks in order:
            t1 = min(blocks, room)
            room -= t1
            t2 = blocks - t1
            t3 = 0
            if three:
                t3 = max(0, t2 - room2)
                t2 -= t3
                room2 -= t2
            now[key] = (blocks, t2, t3)
            prev = last.get(key)
            if prev is not None:            # a block written this step lands where it is
                b0, p2, p3 = prev            # placed; freed blocks leave the slowest first
                x12, x23, x13 = chain_moves((b0 - p2 - p3, p2, p3) if three else (b0 - p2, p2),
                                            (t1, t2, t3) if three else (t1, t2))
                moved += x12
                m23 += x23
                m13 += x13
        self._last = now
        used1 = min(used, c1)
        self.used2 = used - used1
        if three:
            self.used3 = max(0, self.used2 - self.blocks)
            self.used2 -= self.used3
            self.peak3 = max(self.peak3, self.used3)
        self.peak2 = max(self.peak2, self.used2)
        self.record(used1)
        secs = self._move(moved) if moved else 0.0
        if m13:
            secs += self._move(m13, self.spec3)
        if m23:
            secs += self._move(m23, self.link23)
        self.last_move_s = secs
        self.last_read_s = self.last_read_busy_s = 0.0
        read = sum(now[r.rid][1] for r in stepping)
        if hot:
            read += sum(now[("p", r.pid)][1] for r in stepping if r.pref)
        read *= self.block_bytes
        if read:
            s, j = self.spec.read_s(read), self.spec.read_j(read)
            self.read_bytes += read
            self.read_s += s
            self.read_j += j
            self.pending_j += j
            secs += s
            self.last_read_s = s
            self.last_read_busy_s = self.spec.move_s(read)
        if three:
            secs += self._read3(now, stepping, hot)
        self.rec_move_s.append(self.last_move_s)
        self.rec_busy_s.append(self.last_read_busy_s)
        return secs

    def _read3(self, now: dict, stepping, hot) -> float:
        """The step's reads of its tier-3 blocks (after its tier-2 reads, on the same chain):
        the seconds they add; the record and :attr:`last_read_s` / ``_busy_s`` grow."""
        read = sum(now[r.rid][2] for r in stepping)
        if hot:
            read += sum(now[("p", r.pid)][2] for r in stepping if r.pref)
        read *= self.block_bytes
        if not read:
            return 0.0
        sp = self.spec3
        s, j = sp.read_s(read), sp.read_j(read)
        self.read3_bytes += read
        self.read3_s += s
        self.read3_j += j
        self.pending_j += j
        self.last_read_s += s
        self.last_read_busy_s += sp.move_s(read)
        return s

    def in_tier2(self, key) -> bool:
        """``tier``: whether any block of ``key`` (a request id, or a cached prefix's
        ``("p", pid)``) was outside tier 1 (in tier 2 or 3) at the last placement."""
        return self.tier_of(key) > 1

    def tier_of(self, key) -> int:
        """``tier``: the slowest tier (1, 2 or 3) holding a block of ``key`` at the last
        placement (1 for a key not placed)."""
        _, t2, t3 = self._last.get(key, (0, 0, 0))
        return 3 if t3 else (2 if t2 else 1)

    def to_dict(self, chips: int) -> dict:
        """What the tiers held and moved, every chip of the instance (bytes, s, J); with a
        third tier also its share: ``moved_bytes``/``move_s``/``move_j`` count every copy,
        the ``tier3_moved_*`` those to or from tier 3 among them."""
        bb = self.block_bytes * chips
        out = {"mode": self.mode, "tier1_blocks": self.tier1_blocks, "tier2_blocks": self.blocks,
               "tier1_peak_bytes": self.peak1 * bb, "tier2_peak_bytes": self.peak2 * bb,
               "moved_bytes": self.moved_bytes * chips, "move_s": self.move_s,
               "move_j": self.move_j * chips, "tier2_read_bytes": self.read_bytes * chips,
               "tier2_read_added_s": self.read_s,
               "tier2_read_added_j": self.read_j * chips}
        if self.spec3 is not None:
            out.update({"tier3_blocks": self.blocks3, "tier3_peak_bytes": self.peak3 * bb,
                        "tier3_moved_bytes": self.moved3_bytes * chips,
                        "tier3_move_s": self.move3_s, "tier3_move_j": self.move3_j * chips,
                        "tier3_read_bytes": self.read3_bytes * chips,
                        "tier3_read_added_s": self.read3_s,
                        "tier3_read_added_j": self.read3_j * chips})
        return out


def kv_tiers_info(per_instance: list[dict]) -> dict:
    """A serving result's ``info.kv_tiers``: the instances' :meth:`KvTier.to_dict` summed
    (peaks summed over instances: each instance's chips have their own tiers), with the
    list itself under ``instances``."""
    out: dict = {"mode": ", ".join(dict.fromkeys(d["mode"] for d in per_instance))}
    keys = dict.fromkeys(k for d in per_instance for k in d if k != "mode")
    for k in keys:          # a pool without a third tier has no tier3_* keys: it adds 0
        out[k] = sum(d.get(k, 0) for d in per_instance)
    out["instances"] = per_instance
    return out

"""Training state offloaded to the chip's second memory tier (ZeRO-Offload-style placement).

A training step holds weights, gradients, optimizer state (FP32 master copy and both Adam
moments) and saved activations. ``offload`` moves some of that state into the chip's second
DRAM tier (``[dram2]``: package LPDDR/GDDR, or DDR behind a CXL, PCIe or C2C link; docs/chips.md,
"Memory tiers"):

* ``"none"``: everything in the first tier (today's run; a step that does not fit it is
  refused on a tiered chip);
* ``"optimizer"``: the optimizer state lives in the second tier (Ren et al., "ZeRO-Offload",
  USENIX ATC 2021, §4: the fp32 master weights and Adam moments, 12 of the 16 bytes per
  parameter, leave the accelerator); weights, gradients and activations stay;
* ``"params"``: the optimizer state and the working-precision weights live in the second
  tier (ZeRO-Infinity's parameter offload, Rajbhandari et al., SC 2021): every forward and
  backward GEMM reads its weights from there.

**Where the update runs.** ZeRO-Offload runs Adam on the host CPU (its CPU-Adam) and moves
fp16 gradients out (2·P bytes) and fp16 parameters back (2·P) each step. diptych has no host
CPU model with a sourced Adam rate, so the update runs on the accelerator's vector unit,
reading and writing the state where it lives: the AdamW op reads the gradient from the first
tier, reads and writes the master copy and both moments in the second, and writes the new
working weights to the tier the weights live in. Per step and per (ZeRO-sharded) parameter
shard of ``P`` parameters the second tier therefore moves :func:`optimizer_tier_bytes`:
``2·K·P`` with ``K`` the optimizer state's bytes per parameter (12 for an fp32 master and fp32
moments: 24·P bytes), plus, with ``"params"``, the update's ``copies·w·P`` bytes of new
weights (each micro-batch's GEMMs then read the weights there too, as the engine tiles them,
prefetched into the scratchpad where the residency plan leaves room:
:mod:`diptych.sim.run.scheduled`, "Weight prefetch").
No gradient leaves the first tier and no parameter comes back: the update is where the state
is. Nothing is overlapped beyond what the schedule allows: the optimizer's ops follow the
last backward (a one-node step's optimizer program runs after its micro-batches).

**A third tier** (``[dram3]``, docs/chips.md "A third tier"): when the second tier is too
small for the offloaded state, what it cannot hold lives in the third (ZeRO-Infinity's NVMe
tier behind CPU memory, Rajbhandari et al., SC 2021, §5, with a slower memory in its place):
the offloaded state fits when the two tiers together hold it
(:func:`offload_capacity_bytes`). A multi-chip step (``plan``/``cluster``) puts the second
tier's capacity of the offloaded state there and the rest, a share
:func:`third_tier_share` of it, in the third, and charges that share of every offloaded
transfer (the update's state traffic, a parameter prefetch) at the third tier's rate and
latency, after the second tier's part on the same chain [assumption: the offloaded traffic
splits as the bytes do, the two parts one after the other; the worst pipeline stage's split
for every stage]. A chip without ``[dram3]``, or whose second tier holds the state, is
timed exactly as before. A one-node ``run`` applies the same share to every op: the
residency planner places the offloaded kinds in the second tier as before, and each op's
second-tier share ``s₂`` becomes ``s₂(1 − s₃)`` there and ``s₂·s₃`` in the third
(:func:`~diptych.sim.run.scheduled.schedule_workload`'s ``tier3_share``; a training step's
second tier holds only offloaded state), the tiers' held bytes split likewise; so every
program of the step (micro-batch, optimizer) splits a tensor alike.

**Timing.** The residency planner places every tensor of an offloaded kind in the second tier
(:func:`~diptych.sim.program.residency.plan_residency`'s ``tier2_kinds``); each op is then timed
with the share of its off-chip bytes the tier moves, the tier streaming at its own rate (pins,
or the lower of pins and links) with its link latency and energy per bit
(:class:`~diptych.sim.run.placed.Tiered`). A tier with the first tier's DRAM and no link gives
the run without offload (a test).
"""

from __future__ import annotations

from ...arch.dtypes import fmt

#: What ``offload`` may name, and the tensor kinds each places in the second tier.
OFFLOADS: tuple[str, ...] = ("none", "optimizer", "params")
OFFLOAD_KINDS: dict[str, frozenset] = {
    "none": frozenset(),
    "optimizer": frozenset({"optimizer_state"}),
    "params": frozenset({"optimizer_state", "weight"}),
}
#: A memory report's breakdown key of each offloadable tensor kind.
BREAKDOWN_KEY = {"optimizer_state": "optimizer_state", "weight": "weights"}

#: Tensor kinds that cannot live in the second tier, and why (the message of a refusal).
NOT_OFFLOADABLE = {
    "activations": "saved activations are written in the forward and read in the backward of "
                   "the same micro-batch: they stay in the first tier",
    "gradients": "the update runs on the accelerator (no sourced host-CPU Adam rate), which "
                 "reads the gradients where the backward wrote them, in the first tier",
    "kv_cache": "a training step keeps no KV cache (decode's KV placement is the residency "
                "planner's, docs/chips.md)",
}


def check_offload(offload: str, *, chip=None, phase: str = "train",
                  execution: str | None = None) -> frozenset:
    """The tensor kinds ``offload`` places in the second tier (:data:`OFFLOAD_KINDS`).
    ValueError naming the value and what was expected: an unknown name (a kind that cannot
    live there says why, :data:`NOT_OFFLOADABLE`), an offload in an inference phase (no
    optimizer state), on a chip without ``[dram2]``, or with ``execution="sum"`` (no residency
    planner to place it)."""
    if offload not in OFFLOADS:
        why = NOT_OFFLOADABLE.get(offload)
        raise ValueError(f"offload must be one of {', '.join(OFFLOADS)}, not {offload!r}"
                         + (f": {why}" if why else ""))
    kinds = OFFLOAD_KINDS[offload]
    if not kinds:
        return kinds
    if phase != "train":
        raise ValueError(f"offload {offload!r} places training state "
                         f"({', '.join(sorted(kinds))}) in the second memory tier; a {phase} "
                         f"run has no optimizer state (an inference phase's tier placement is "
                         f"the residency planner's: leave --offload out)")
    if chip is not None and getattr(chip, "dram2", None) is None:
        raise ValueError(f"offload {offload!r} needs a second memory tier: chip "
                         f"{chip.name!r} has no [dram2] (docs/chips.md, \"Memory tiers\"; "
                         f"examples/chips/infer-2026-cxl.toml has one)")
    if execution == "sum":
        raise ValueError(f"offload {offload!r} is placed by the residency planner, which "
                         f"--execution sum skips: use --execution schedule")
    return kinds


def split_tiers(breakdown: dict, offload: str) -> tuple[dict, dict]:
    """(first tier, second tier): a training memory breakdown (bytes per chip by part)
    split by where ``offload`` puts each part."""
    moved = {BREAKDOWN_KEY[k] for k in OFFLOAD_KINDS[offload]}
    one = {k: v for k, v in breakdown.items() if k not in moved}
    two = {k: v for k, v in breakdown.items() if k in moved}
    return one, two


def tiered_parts(offload: str) -> tuple[str, ...]:
    """The memory breakdown keys ``offload`` puts in the second tier (sorted)."""
    return tuple(sorted(BREAKDOWN_KEY[k] for k in OFFLOAD_KINDS[offload]))


def placement(offload: str) -> dict[str, str]:
    """Which tensors of a training step live where: ``{"weights": "dram" | "dram2", ...}``
    ("dram" the first tier, "dram2" the second)."""
    kinds = OFFLOAD_KINDS[offload]
    return {"weights": "dram2" if "weight" in kinds else "dram", "gradients": "dram",
            "optimizer_state": "dram2" if "optimizer_state" in kinds else "dram",
            "activations": "dram"}


def optimizer_tier_bytes(params: float, p, offload: str) -> float:
    """Bytes the second tier moves in one optimizer step over ``params`` parameters (one
    rank's shard) under ``offload`` (module docstring): the update reads and writes the
    optimizer state there (``2·K·P``, ``K`` = ``p.optimizer_state_bytes_per_param``) and,
    with ``"params"``, writes the new weights there (``copies·w·P``: two copies for a
    block-scaled weight format, :func:`~diptych.workloads.train.adamw_op`). 0 for ``"none"``."""
    kinds = OFFLOAD_KINDS[offload]
    out = 0.0
    if "optimizer_state" in kinds:
        out += 2 * p.optimizer_state_bytes_per_param * params
    if "weight" in kinds:
        out += (2 if fmt(p.weights).block_scaled else 1) * p.w_bytes * params
    return out


def optimizer_tier_share(p, offload: str) -> float:
    """The share of an AdamW update's off-chip bytes (:func:`~diptych.workloads.train.adamw_op`:
    gradient and state read, state and weights written) that the second tier moves under
    ``offload``."""
    copies = 2 if fmt(p.weights).block_scaled else 1
    total = p.g_bytes + 2 * p.optimizer_state_bytes_per_param + copies * p.w_bytes
    return optimizer_tier_bytes(1.0, p, offload) / total


def offload_capacity_bytes(chip) -> float:
    """Bytes per chip the offloaded state may take: the second tier's capacity, plus the
    third's on a chip with ``[dram3]`` (module docstring, "A third tier")."""
    room = chip.dram2.capacity_bytes
    if getattr(chip, "dram3", None) is not None:
        room += chip.dram3.capacity_bytes
    return room


def third_tier_share(chip, offloaded_bytes: float) -> float:
    """The share of ``offloaded_bytes`` (per chip) in ``chip``'s third tier: 0 without
    ``[dram3]`` or when the second tier holds them, else what exceeds the second's capacity
    over the whole (module docstring, "A third tier")."""
    room = chip.dram2.capacity_bytes
    if getattr(chip, "dram3", None) is None or offloaded_bytes <= room:
        return 0.0
    return (offloaded_bytes - room) / offloaded_bytes


def param_fetch_seconds(chip, nbytes: float, share3: float = 0.0) -> float:
    """Seconds to stream ``nbytes`` of weights from ``chip``'s second tier into the first: the
    tier's rate (:attr:`~diptych.arch.chip.MemoryTier.bytes_per_s`, pins or the lower of pins
    and links, at its peak: errs fast) plus one link latency; with a share ``share3`` of them
    in the third tier (:func:`third_tier_share`), that share at the third tier's rate plus
    its latency, after the rest. The cluster step prefetches a layer's weights during the
    previous layer, so a layer takes the slower of its compute and this."""
    t = chip.dram2
    if not share3:
        return nbytes / t.bytes_per_s + t.link_latency_ns * 1e-9 if nbytes else 0.0
    t3 = chip.dram3
    return (nbytes * (1 - share3) / t.bytes_per_s + t.link_latency_ns * 1e-9
            + nbytes * share3 / t3.bytes_per_s + t3.link_latency_ns * 1e-9) if nbytes else 0.0


def tier_report(chip, offload: str, breakdown: dict, moved_bytes: float,
                share3: float = 0.0, third: tuple[float, float] | None = None) -> dict:
    """What a result says about the offload: the choice, which tensors live where, the bytes
    each tier holds, the bytes the second tier moved in the step, and the time those bytes
    take at the tier's rate (pins, or the lower of pins and links; a lower bound on the
    transfer's share of the step) and their energy at its ``pj_per_bit``. On a chip with
    ``[dram3]`` the offloaded bytes and the bytes moved split by ``share3``
    (:func:`third_tier_share`), each part at its tier's rate and energy, and the report adds
    ``tier3_bytes``, ``tier3_bytes_moved``, ``tier3_bytes_per_s``; ``third`` (a one-node
    run's planner knows where each instance went): ``(bytes held, bytes moved)`` in the third
    tier, ``moved_bytes`` then being the second tier's."""
    t = chip.dram2
    one, two = split_tiers(breakdown, offload)
    out = {"offload": offload, "placement": placement(offload),
           "tier1_bytes": sum(one.values()), "tier2_bytes": sum(two.values()),
           "tier2_bytes_moved": moved_bytes,
           "tier2_bytes_per_s": t.bytes_per_s,
           "transfer_seconds": moved_bytes / t.bytes_per_s,
           "transfer_energy_j": moved_bytes * 8 * t.pj_per_bit * 1e-12}
    t3 = getattr(chip, "dram3", None)
    if t3 is None:
        return out
    out.update({"tier3_bytes": 0.0, "tier3_bytes_moved": 0.0, "tier3_bytes_per_s": t3.bytes_per_s})
    if not share3:          # the second tier holds it all: as without the third
        return out
    off = out["tier2_bytes"]
    m2, m3 = moved_bytes * (1 - share3), moved_bytes * share3
    h3 = off * share3
    if third is not None:
        (h3, m3), m2 = third, moved_bytes
    out.update({"tier2_bytes": off - h3, "tier3_bytes": h3,
                "tier2_bytes_moved": m2, "tier3_bytes_moved": m3,
                "tier3_bytes_per_s": t3.bytes_per_s,
                "transfer_seconds": m2 / t.bytes_per_s + m3 / t3.bytes_per_s,
                "transfer_energy_j": (m2 * t.pj_per_bit + m3 * t3.pj_per_bit) * 8e-12})
    return out

"""What an op asks of the chip's resources: a sequence of phases, each holding shares of
resources for a duration (the scheduler's node model).

Resources (:data:`RESOURCES`) are the arrays (all of them, as the engine spreads a GEMM over
every array), the vector unit (all cores), DRAM and the chip-to-chip links. A phase *reserves*
a share of each resource it uses for its whole duration (its average rate: a GEMM streaming
activations at 30 % of the DRAM bandwidth reserves 0.3 of ``dram``); phases that together
ask for more than a whole resource do not run at the same time. A node's first phase may be
``early``: a weight prefetch, which may start before the node's data predecessors finish,
holds ``hold_bytes`` of scratchpad from its start until the node ends, and streams at the DRAM
bandwidth the reserved phases leave free (its ``seconds`` are its time at the whole
bandwidth): prefetching never slows the ops it overlaps.

:func:`op_demand` builds the phases of one op from the engine's standalone result (docs in
docs/program.md, "Node model"):

* ``launch``: the chip's fixed per-op cost (``[overheads] op_launch_us``, once per kernel of
  an op that stands for several, plus ``host_sync_us`` per host synchronisation it makes:
  :mod:`diptych.workloads.host_work`; ``collective_launch_us`` for a collective), holding the
  op's unit;
* ``prefetch`` (early, DRAM only): of the op's DRAM-stall time ``seconds - compute_seconds``,
  the part its prefetchable bytes (weights in DRAM) explain at the streaming bandwidth,
  ``min(prefetch_bytes / stream, seconds - compute_seconds)`` (weights in a second DRAM tier:
  their time at the tier's rate, ``prefetch_seconds``);
* ``main``: the rest of the op's standalone time on its unit, reserving DRAM at the rate of
  its remaining bytes.

The phases sum to the standalone time, so a schedule with nothing to overlap reproduces the
sum of standalone times (plus the fixed costs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

#: Resources a phase can use.
RESOURCES: tuple[str, ...] = ("array", "vector", "dram", "link")

#: The resource an op's main work occupies, by its node unit.
UNIT_RESOURCE = {"array": "array", "vector": "vector", "link": "link", "dma": "dram"}


def _seconds(what: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {v!r}")
    return float(v)


@dataclass(frozen=True)
class Phase:
    """``seconds`` holding ``use`` (resource -> share in (0, 1]); ``early``: may start before
    the node's predecessors finish (only a node's first phase)."""

    seconds: float
    use: tuple[tuple[str, float], ...]
    early: bool = False
    label: str = ""

    def __post_init__(self):
        _seconds(f"phase {self.label or '?'!r}: seconds", self.seconds)
        use = self.use.items() if isinstance(self.use, Mapping) else self.use
        out = []
        for r, u in use:
            if r not in RESOURCES:
                raise ValueError(f"phase {self.label or '?'!r}: unknown resource {r!r} "
                                 f"(expected one of {', '.join(RESOURCES)})")
            if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 < u <= 1:
                raise ValueError(f"phase {self.label or '?'!r}: share of {r!r} must be in "
                                 f"(0, 1], not {u!r}")
            out.append((r, float(u)))
        if len({r for r, _ in out}) != len(out):
            raise ValueError(f"phase {self.label or '?'!r} lists a resource twice: {out!r}")
        object.__setattr__(self, "use", tuple(sorted(out)))


@dataclass(frozen=True)
class Demand:
    """The phases of one op, run in order; ``hold_bytes`` of scratchpad are held from the
    first phase's start to the last phase's end (only with an early first phase)."""

    phases: tuple[Phase, ...]
    hold_bytes: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "phases", tuple(self.phases))
        if not self.phases:
            raise ValueError("a demand needs at least one phase")
        for i, p in enumerate(self.phases):
            if not isinstance(p, Phase):
                raise ValueError(f"phase {i} must be a Phase, not {type(p).__name__}")
            if p.early and i > 0:
                raise ValueError(f"only the first phase may be early (phase {i}, "
                                 f"{p.label!r}, is)")
            if p.early and p.use != (("dram", 1.0),):
                raise ValueError(f"an early phase is a prefetch on DRAM: its use must be "
                                 f"{{'dram': 1.0}} (its seconds at the whole bandwidth), not "
                                 f"{dict(p.use)!r}")
        h = self.hold_bytes
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not math.isfinite(h) \
                or h < 0:
            raise ValueError(f"hold_bytes must be a finite number >= 0, not {h!r}")
        if h > 0 and not self.phases[0].early:
            raise ValueError("hold_bytes > 0 needs an early first phase (a prefetch)")

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.phases)


def op_demand(*, seconds: float, unit: str, dram_bytes: float = 0.0,
              stream_bytes_per_s: float | None = None, compute_seconds: float | None = None,
              prefetch_bytes: float = 0.0, launch_seconds: float = 0.0,
              co_seconds: Mapping[str, float] | None = None,
              prefetch_seconds: float | None = None) -> Demand:
    """The phases of one op from its standalone engine time (see the module docstring).

    ``seconds``: the engine's time for the op alone; ``compute_seconds``: its memory-free
    time (``OpStats.compute_cycles`` ÷ clock); ``dram_bytes``: its DRAM traffic;
    ``stream_bytes_per_s``: the achieved streaming bandwidth (needed when ``dram_bytes`` > 0);
    ``prefetch_bytes``: bytes that may be fetched ahead (weights in DRAM, when the scratchpad
    has room for them); ``launch_seconds``: the fixed per-op cost. ``unit``: array, vector,
    link or dma (a pure transfer on DRAM). ``co_seconds``: work on other resources that runs
    during the main phase (a GEMM's fused epilogue on the vector unit: resource → seconds of
    the whole resource), reserved at its average rate over the main phase.
    ``prefetch_seconds``: a prefetch from another memory (weights in a second DRAM tier,
    :class:`~diptych.sim.run.placed.Tiered`): ``prefetch_bytes`` are held and fetched in
    ``prefetch_seconds`` at the whole rate (at most the op's DRAM-stall time, as above), and
    all of ``dram_bytes`` stays in the main phase."""
    T = _seconds("seconds", seconds)
    if unit not in UNIT_RESOURCE:
        raise ValueError(f"unit must be one of {', '.join(UNIT_RESOURCE)}, not {unit!r}")
    D = _seconds("dram_bytes", dram_bytes)
    W = _seconds("prefetch_bytes", prefetch_bytes)
    launch = _seconds("launch_seconds", launch_seconds)
    if W > D and prefetch_seconds is None:
        raise ValueError(f"prefetch_bytes ({W!r}) cannot exceed dram_bytes ({D!r})")
    if D > 0:
        if stream_bytes_per_s is None or not stream_bytes_per_s > 0:
            raise ValueError(f"stream_bytes_per_s must be > 0 when the op moves DRAM bytes, "
                             f"not {stream_bytes_per_s!r}")
    res = UNIT_RESOURCE[unit]
    phases = []
    if launch > 0:
        phases.append(Phase(launch, {res: 1.0}, label="launch"))
    pre = 0.0
    if W > 0:
        if compute_seconds is None:
            raise ValueError("compute_seconds is needed to split a prefetch off an op")
        tc = min(_seconds("compute_seconds", compute_seconds), T)
        pre = min(W / stream_bytes_per_s if prefetch_seconds is None
                  else _seconds("prefetch_seconds", prefetch_seconds), T - tc)
    main = T - pre
    rest = (D - pre * stream_bytes_per_s if prefetch_seconds is None else D) if D > 0 else 0.0
    use = {res: 1.0}
    if rest > 0 and res != "dram":
        share = min(1.0, rest / stream_bytes_per_s / main) if main > 0 else 1.0
        if share > 0:
            use["dram"] = share
    for r, sec in (co_seconds or {}).items():
        sec = _seconds(f"co_seconds[{r!r}]", sec)
        if r not in RESOURCES:
            raise ValueError(f"co_seconds: unknown resource {r!r} (expected one of "
                             f"{', '.join(RESOURCES)})")
        if sec > 0 and r != res:
            use[r] = max(use.get(r, 0.0), min(1.0, sec / main) if main > 0 else 1.0)
    phases.append(Phase(main, use, label="main"))
    if pre > 0:
        # the prefetch comes first, before the launch: it does not wait for the op's issue
        return Demand((Phase(pre, {"dram": 1.0}, early=True, label="prefetch"), *phases),
                      hold_bytes=W)
    return Demand(tuple(phases))

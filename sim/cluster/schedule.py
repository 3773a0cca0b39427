"""Pipeline schedules: the order of forward/backward work on each stage, a golden event-level
simulation of it, the fast closed form the plan search uses, and activations in flight.

``p`` devices (pipeline stages), ``m`` micro-batches, ``v`` model chunks per device (virtual
stages; model chunk ``c`` of device ``s`` is virtual stage ``c·p + s``). A unit of work is
``(F|B, micro-batch, chunk)``.

* ``gpipe``: all forwards, then all backwards (last micro-batch first);
* ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021): device ``s`` runs ``min(p−s−1, m)``
  warm-up forwards, then alternates one forward and one backward, then drains the backwards;
* ``interleaved`` (Megatron-LM's interleaved 1F1B, ``m`` a multiple of ``p``): forward unit
  ``k`` is chunk ``(k // p) mod v`` of micro-batch ``(k // pv)·p + k mod p`` (backward units
  walk the chunks in reverse); ``min(2(p−s−1) + (v−1)p, m·v)`` warm-up forwards, then 1F1B.

:func:`simulate_pipeline` plays those orders: a unit starts when its device is free and its
input has arrived (the previous virtual stage's forward, or the next one's backward, plus
``send_s``); it is the obviously-correct reference. :func:`fast_pipeline_seconds` is the
closed form the plan search screens with; for equal stages it is ``(m + (p−1)/v)(f+b)``, so
the bubble fraction is ``(p−1)/(m+p−1)`` for 1F1B and GPipe and ``(p−1)/(v·m+p−1)``
interleaved. Tests hold the two to each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _check(schedule: str, p: int, m: int, v: int) -> None:
    for n, x in (("p", p), ("m", m), ("v", v)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{n} must be a positive integer, not {x!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
    if schedule != "interleaved" and v != 1:
        raise ValueError(f"v ({v}) > 1 needs the interleaved schedule, not {schedule!r}")
    if schedule == "interleaved" and m % p:
        raise ValueError(f"the interleaved schedule needs m ({m}) to be a multiple of p ({p})")


def _unit(k: int, p: int, v: int, backward: bool) -> tuple[int, int]:
    """(micro-batch, chunk) of the k-th forward or backward unit of the interleaved order."""
    c = (k // p) % v
    return (k // (p * v)) * p + k % p, (v - 1 - c if backward else c)


def warmup(schedule: str, p: int, m: int, v: int, s: int) -> int:
    """Forward units device ``s`` runs before its first backward."""
    if schedule == "gpipe":
        return m
    if schedule == "1f1b":
        return min(p - s - 1, m)
    return min(2 * (p - s - 1) + (v - 1) * p, m * v)


def stage_order(schedule: str, p: int, m: int, v: int, s: int) -> list[tuple[str, int, int]]:
    """The units device ``s`` runs, in order: ``("F" | "B", micro-batch, chunk)``."""
    _check(schedule, p, m, v)
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in reversed(range(m))]
    n = m * v
    w = warmup(schedule, p, m, v, s)
    fw = [("F", *_unit(k, p, v, False)) for k in range(n)]
    bw = [("B", *_unit(k, p, v, True)) for k in range(n)]
    order = fw[:w]
    for i in range(n - w):
        order += [fw[w + i], bw[i]]
    return order + bw[n - w:]


@dataclass
class PipelineRun:
    """Result of :func:`simulate_pipeline`: per device the units with start and end times,
    the finishing time, the busy time and the peak activations in flight (in units, and
    weighted by ``chunk_weights``)."""

    seconds: float
    units: list[list[tuple[str, int, int, float, float]]]
    busy_s: list[float]
    finish_s: list[float]
    peak_units: list[int]
    peak_weight: list[float] = field(default_factory=list)

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the busiest device over the pipeline's span."""
        return 1.0 - max(self.busy_s) / self.seconds if self.seconds else 0.0


def simulate_pipeline(fwd: list[list[float]], bwd: list[list[float]], m: int, *,
                      schedule: str = "1f1b", send_s: float = 0.0,
                      chunk_weights: list[list[float]] | None = None) -> PipelineRun:
    """Event-level simulation of a pipeline (module docstring). ``fwd[s][c]``/``bwd[s][c]``:
    seconds of chunk ``c`` on device ``s`` for one micro-batch; ``send_s``: time from one
    virtual stage's output to the next one's input (activations forward, gradients back);
    ``chunk_weights[s][c]`` weighs activations in flight (e.g. layers of the chunk)."""
    p, v = len(fwd), len(fwd[0])
    _check(schedule, p, m, v)
    V = p * v
    orders = [stage_order(schedule, p, m, v, s) for s in range(p)]
    done: dict[tuple[str, int, int], float] = {}       # (kind, mb, virtual stage) -> end
    free = [0.0] * p
    ptr = [0] * p
    units: list[list[tuple[str, int, int, float, float]]] = [[] for _ in range(p)]
    busy = [0.0] * p
    live = [0] * p
    live_w = [0.0] * p
    peak = [0] * p
    peak_w = [0.0] * p
    weights = chunk_weights or [[1.0] * v for _ in range(p)]
    remaining = sum(len(o) for o in orders)
    while remaining:
        progress = False
        for s in range(p):
            while ptr[s] < len(orders[s]):
                kind, mb, c = orders[s][ptr[s]]
                vs = c * p + s
                if kind == "F":
                    dep = ("F", mb, vs - 1) if vs > 0 else None
                    extra = send_s
                else:
                    dep = ("B", mb, vs + 1) if vs < V - 1 else ("F", mb, vs)
                    extra = send_s if vs < V - 1 else 0.0
                if dep is not None and dep not in done:
                    break
                ready = done[dep] + extra if dep is not None else 0.0
                dur = fwd[s][c] if kind == "F" else bwd[s][c]
                start = max(free[s], ready)
                end = start + dur
                done[(kind, mb, vs)] = end
                units[s].append((kind, mb, c, start, end))
                free[s] = end
                busy[s] += dur
                sign = 1 if kind == "F" else -1
                live[s] += sign
                live_w[s] += sign * weights[s][c]
                peak[s] = max(peak[s], live[s])
                peak_w[s] = max(peak_w[s], live_w[s])
                ptr[s] += 1
                remaining -= 1
                progress = True
        if not progress:                                 # pragma: no cover - schedule bug
            raise RuntimeError(f"pipeline schedule {schedule!r} deadlocked")
    return PipelineRun(seconds=max(free), units=units, busy_s=busy, finish_s=free,
                       peak_units=peak, peak_weight=peak_w)


def fast_pipeline_seconds(fwd: list[float], bwd: list[float], m: int, v: int = 1,
                          send_s: float = 0.0, schedule: str = "1f1b") -> float:
    """Closed-form pipeline time from each device's forward and backward seconds per
    micro-batch (all its chunks). GPipe, a two-phase flow shop: ``Σ(F+B) + (m−1)(max F +
    max B) + 2(p−1)·send`` (exact). 1F1B and interleaved: ``m·max(F+B) + (Σ(F+B) −
    max(F+B))/v + 2(p−1)·send``, exact for equal stages without sends; with unequal stages
    1F1B's is an upper bound (within 25 % in the tests) and interleaved's within 20 %, and
    sends also stall 1F1B's steady state, which only the event simulation shows."""
    p = len(fwd)
    sends = 2 * (p - 1) * send_s
    if schedule == "gpipe":
        return sum(fwd) + sum(bwd) + (m - 1) * (max(fwd) + max(bwd)) + sends
    per = [f + b for f, b in zip(fwd, bwd)]
    top = max(per)
    return m * top + (sum(per) - top) / v + sends


def in_flight_weight(schedule: str, p: int, m: int, v: int, s: int,
                     chunk_weights: list[float]) -> float:
    """Peak activations device ``s`` holds: the largest sum of ``chunk_weights`` over the
    forward units it has run and not yet run backward for, walking its order (no timing
    needed). GPipe holds all ``m·v`` units; 1F1B ``min(p − s, m)`` micro-batches;
    interleaved its warm-up units plus one, ``p(1 + (p−1)/(pv))`` micro-batches' worth of its
    layers on the first device (Korthikanti et al. 2022 §4.2.3) when chunks are equal."""
    _check(schedule, p, m, v)
    if max(chunk_weights) == min(chunk_weights):           # closed form for equal chunks
        n = m * v
        k = n if schedule == "gpipe" else min(warmup(schedule, p, m, v, s) + 1, n)
        return k * chunk_weights[0]
    live = peak = 0.0
    for kind, _, c in stage_order(schedule, p, m, v, s):
        live += chunk_weights[c] if kind == "F" else -chunk_weights[c]
        peak = max(peak, live)
    return peak

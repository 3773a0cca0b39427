"""The bench's plan (stimulus and expected outputs, cycle by cycle) and its scoreboard.

Pure Python with no heavy imports: the cocotb bench loads pickled plans inside the simulator
process, so that starting a simulation does not import NumPy, Amaranth or the engine. Plans
are made by :mod:`diptych.rtl.bench`.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

__all__ = ["Plan", "pack", "unpack", "score"]


def pack(values, width: int) -> int:
    """Little-endian pack of unsigned element bit patterns into one integer."""
    out = 0
    mask = (1 << width) - 1
    for e, v in enumerate(values):
        out |= (int(v) & mask) << (width * e)
    return out


def unpack(word: int, width: int, count: int) -> tuple[int, ...]:
    """Inverse of :func:`pack`: ``count`` unsigned elements of ``width`` bits."""
    mask = (1 << width) - 1
    return tuple((word >> (width * e)) & mask for e in range(count))


@dataclass
class Plan:
    """Cycle-by-cycle stimulus and expected outputs for one array configuration.

    ``inputs[c]`` maps port names to the (packed, unsigned) value to present in cycle ``c``;
    ``runs`` holds ``(first, last, values)`` stretches in which those values are presented in
    every cycle ``first … last`` (long directed tiles). Ports a cycle does not set are *idle*:
    ``in_valid`` and ``w_load`` low, every other port random (``bubble_data="random"``, derived
    from ``seed`` and the cycle) or zero (``"zero"``). ``expected[c]`` is ``(row, words)``: the
    ``out_row`` (None for WS) and the C output bit patterns that must appear in cycle ``c``;
    in every other cycle ``out_valid`` must be low. ``n_cycles`` covers the last expected
    output plus a margin in which nothing may appear. ``modes[t]`` is tile ``t``'s mode;
    ``lane_bits``, ``mode_port`` and ``block_port`` describe the datapath's ports.
    """

    rows: int
    cols: int
    dtype: str
    dataflow: str
    lane_bits: int
    mode_port: bool
    seed: int = 1
    bubble_data: str = "random"
    inputs: dict[int, dict[str, int]] = field(default_factory=dict)
    runs: list[tuple[int, int, dict[str, int]]] = field(default_factory=list)
    expected: dict[int, tuple[int | None, tuple[int, ...]]] = field(default_factory=dict)
    n_cycles: int = 0
    n_tiles: int = 0
    bubbles: int = 0
    modes: list[str] = field(default_factory=list)
    #: the output cycles predicted by diptych.sim.timing, per tile
    predicted: list[list[int]] = field(default_factory=list)
    #: the datapath takes block scales (the ``mx`` PE): one more input, ``in_block_last``
    block_port: bool = False

    @property
    def input_ports(self) -> tuple[str, ...]:
        ports = (("in_valid", "in_last", "a_data", "b_data") if self.dataflow == "os" else
                 ("in_valid", "in_first", "a_data", "psum_data", "w_load", "w_data"))
        return (ports + (("mode",) if self.mode_port else ())
                + (("in_block_last",) if self.block_port else ()))

    def port_bits(self, name: str) -> int:
        lane = self.lane_bits
        return {"a_data": self.rows * lane, "b_data": self.cols * lane,
                "w_data": self.cols * lane, "psum_data": self.cols * 32, "mode": 3}.get(name, 1)

    def idle_at(self, cycle: int) -> dict[str, int]:
        """Port values of a cycle the plan does not drive: controls low, data random or zero."""
        vals = dict.fromkeys(self.input_ports, 0)
        if self.bubble_data == "random":
            rnd = random.Random((self.seed << 40) ^ (cycle + 7))
            for p in self.input_ports:
                if p not in ("in_valid", "w_load"):
                    vals[p] = rnd.getrandbits(self.port_bits(p))
        return vals

    def inputs_at(self, cycle: int) -> dict[str, int]:
        """Every input port's value in ``cycle``."""
        vals = self.idle_at(cycle)
        if cycle in self.inputs:
            vals.update(self.inputs[cycle])
        elif self.runs:
            i = bisect.bisect_right(self.runs, (cycle, float("inf"))) - 1
            if i >= 0 and self.runs[i][0] <= cycle <= self.runs[i][1]:
                vals.update(self.runs[i][2])
        return vals

    def segments(self):
        """``(cycle, n, values)``: the inputs as stretches of ``n`` cycles with equal values
        (one cycle each, except the plan's ``runs``), from cycle 0 to ``n_cycles``."""
        c = 0
        runs = iter(sorted(self.runs, key=lambda r: r[0]))
        nxt = next(runs, None)
        while c < self.n_cycles:
            if nxt is not None and nxt[0] == c:
                yield c, nxt[1] - c + 1, self.inputs_at(c)
                c = nxt[1] + 1
                nxt = next(runs, None)
            else:
                yield c, 1, self.inputs_at(c)
                c += 1


def score(plan: Plan, observed: list[tuple[int, int | None, tuple[int, ...]]],
          max_errors: int = 20) -> list[str]:
    """Compare monitor observations ``(cycle, out_row, words)`` with the plan.

    Returns human-readable mismatch descriptions (empty means every output appeared in its
    predicted cycle with the right bits, and nothing else appeared).
    """
    errors: list[str] = []
    seen = {}
    for cycle, row, words in observed:
        seen[cycle] = (row, tuple(words))
    for cycle in sorted(set(plan.expected) | set(seen)):
        if len(errors) >= max_errors:
            errors.append("... (more errors suppressed)")
            break
        if cycle not in seen:
            errors.append(f"cycle {cycle}: expected an output (row {plan.expected[cycle][0]}), "
                          "out_valid was low")
            continue
        if cycle not in plan.expected:
            errors.append(f"cycle {cycle}: unexpected output {_fmt(seen[cycle][1])}")
            continue
        erow, ewords = plan.expected[cycle]
        row, words = seen[cycle]
        if erow is not None and row != erow:
            errors.append(f"cycle {cycle}: out_row {row}, expected {erow}")
        if words != ewords:
            bad = [j for j in range(len(ewords)) if words[j] != ewords[j]]
            errors.append(f"cycle {cycle}: columns {bad} got {_fmt(words)}, "
                          f"expected {_fmt(ewords)}")
    return errors


def _fmt(words) -> str:
    return "[" + " ".join(f"{w:08x}" for w in words) + "]"

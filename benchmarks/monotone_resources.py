"""More hardware is never slower: random GEMMs on the presets, one resource increased at a time.

    python benchmarks/monotone_resources.py [--cases 10000] [--top 16384] [--seed 0]
                                            [--resource NAME ...]

For each resource (:data:`RESOURCES`), ``--cases`` random cases: a preset the resource applies
to, a dtype it supports, a GEMM with M, K, N log-uniform in 1..``--top`` (batch 1 mostly, a
weight-shared or independent batch of 2-4 otherwise), and the preset beside a copy with more of
the resource (``Resource.grow``). Both are timed as ``diptych gemm`` times them (operands in DRAM;
on a chip without DRAM resident in the scratchpads, :func:`diptych.sim.api.on_chip_gemm`),
without the result cache. Prints per resource how many bigger chips were slower at all, slower
beyond the mapper's pruning tolerance (the guarantee: docs/engine.md, "More hardware is never
slower"), the cases whose search stopped on its block budget on either chip (not covered by
the guarantee; counted apart), the cases neither chip can run, and the worst ratio; exits 1
when any case breaks the guarantee (``arrays_per_core`` is measured, not guaranteed).

``tests/sim/test_monotone_resources.py`` runs samples of the same cases (this module's
:func:`run`, :func:`draw` and :func:`check`): a small one in the fast tier, a larger one of
small shapes in the slow tier; the full 10,000 cases per resource are this script (5 to 10
CPU minutes per resource at ``--top 16384`` on the development machine, about 1.5 hours in
all).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Callable

from diptych.arch import load_chip, preset_names
from diptych.sim import engine as E
from diptych.sim import mapper as MP
from diptych.sim.api import on_chip_gemm
from diptych.sim.gemm import plan, split_k_reduction
from diptych.workloads.ops import Gemm

#: The comparisons allow the mapper's documented pruning tolerance: its answer is within
#: ``PRUNE_TOLERANCE`` of the best candidate's, so a bigger chip's may be that much above the
#: smaller chip's best (docs/engine.md, "More hardware is never slower").
SLACK = 1.0 / (1.0 - MP.PRUNE_TOLERANCE)

_r = dataclasses.replace


def _no_fabric(chip):
    """``chip`` without its ``[noc]`` and ``[package]``: their mesh and die-to-die charges grow
    with the cores and the die (more hops, a link cap that may bind), a cost of the bigger
    floorplan that the mapper cannot avoid; the core and array counts are compared at a fixed
    (absent) fabric."""
    return _r(chip, noc=None, package=None)


def _factor(rng: random.Random) -> float:
    """A continuous increase: ×(1, 2]."""
    return 1.0 + rng.uniform(1e-3, 1.0)


@dataclass(frozen=True)
class Resource:
    """One resource: which presets have it, how to grow it, and whether the comparison is in
    seconds (the clock) rather than cycles."""

    name: str
    doc: str
    applies: Callable
    grow: Callable          # (chip, rng) -> (base chip, bigger chip)
    seconds: bool = False
    #: whether docs/engine.md guarantees it (arrays per core: measured only, the mapper does
    #: not offer half a core's arrays; see mapper.sub_chips)
    guaranteed: bool = True


RESOURCES: tuple[Resource, ...] = (
    Resource("tensor_cores", "tensor_cores × 2 or × 4 (no [noc], no [package])",
             lambda c: True,
             lambda c, rng: (_no_fabric(c),
                             _r(_no_fabric(c), tensor_cores=c.tensor_cores * rng.choice((2, 4))))),
    Resource("arrays_per_core", "[core] arrays × 2 or × 4 (no [noc], no [package])",
             lambda c: True,
             lambda c, rng: (_no_fabric(c), _r(_no_fabric(c), core=_r(
                 c.core, arrays=c.core.arrays * rng.choice((2, 4))))),
             guaranteed=False),
    Resource("scratchpad", "[core.scratchpad] capacity_mib × (1, 2]",
             lambda c: True,
             lambda c, rng: (c, _r(c, core=_r(c.core, scratchpad=_r(
                 c.core.scratchpad,
                 capacity_mib=c.core.scratchpad.capacity_mib * _factor(rng)))))),
    Resource("scratchpad_bandwidth", "[core.scratchpad] banks × 2 (chips without DRAM: "
             "their operands stream from the scratchpads)",
             lambda c: not c.has_dram,
             lambda c, rng: (c, _r(c, core=_r(c.core, scratchpad=_r(
                 c.core.scratchpad, banks=c.core.scratchpad.banks * 2))))),
    Resource("dram_bandwidth", "[dram] gbps_per_pin × (1, 2]",
             lambda c: c.has_dram,
             lambda c, rng: (c, _r(c, dram=_r(
                 c.dram, gbps_per_pin=min(64.0, c.dram.gbps_per_pin * _factor(rng)))))),
    Resource("dma_bandwidth", "[dma] bytes_per_cycle × (1, 2]",
             lambda c: True,
             lambda c, rng: (c, _r(c, dma=_r(
                 c.dma, bytes_per_cycle=c.dma.bytes_per_cycle * _factor(rng))))),
    Resource("dma_engines", "[dma] engines × 2",
             lambda c: True,
             lambda c, rng: (c, _r(c, dma=_r(c.dma, engines=c.dma.engines * 2)))),
    Resource("shared_buffer_bandwidth", "[shared_buffer] bytes_per_cycle × (1, 2]",
             lambda c: c.shared_buffer is not None,
             lambda c, rng: (c, _r(c, shared_buffer=_r(
                 c.shared_buffer,
                 bytes_per_cycle=c.shared_buffer.bytes_per_cycle * _factor(rng))))),
    Resource("shared_buffer_capacity", "[shared_buffer] capacity_mib × (1, 2]",
             lambda c: c.shared_buffer is not None,
             lambda c, rng: (c, _r(c, shared_buffer=_r(
                 c.shared_buffer,
                 capacity_mib=c.shared_buffer.capacity_mib * _factor(rng))))),
    Resource("noc_bandwidth", "[noc] link_bytes_per_cycle × (1, 2]",
             lambda c: c.noc is not None,
             lambda c, rng: (c, _r(c, noc=_r(
                 c.noc, link_bytes_per_cycle=c.noc.link_bytes_per_cycle * _factor(rng))))),
    Resource("d2d_bandwidth", "[package] d2d_gb_per_s × (1, 2]",
             lambda c: c.package is not None and c.package.d2d_gb_per_s > 0,
             lambda c, rng: (c, _r(c, package=_r(
                 c.package, d2d_gb_per_s=c.package.d2d_gb_per_s * _factor(rng))))),
    Resource("clock", "clock_ghz × (1, 2] (compared in seconds)",
             lambda c: True,
             lambda c, rng: (c, _r(c, clock_ghz=min(10.0, c.clock_ghz * _factor(rng)))),
             seconds=True),
)

BY_NAME = {r.name: r for r in RESOURCES}


@dataclass(frozen=True)
class Case:
    """One comparison: ``op`` on ``base`` and on ``bigger`` (preset ``preset``)."""

    resource: str
    preset: str
    op: Gemm
    base: object
    bigger: object

    def describe(self) -> str:
        o = self.op
        return (f"{self.resource}: {self.preset} {o.a_dtype} M={o.m} K={o.k} N={o.n} "
                f"batch={o.batch} b_is_weight={o.b_is_weight}")


def _presets() -> dict:
    return {p: load_chip(p) for p in preset_names()}


def draw(rng: random.Random, resource: Resource, chips: dict, top: int) -> Case | None:
    """A random case for ``resource`` (``chips``: preset name → chip); None when the grown
    chip is refused (a value beyond the field's bound)."""
    names = sorted(p for p, c in chips.items() if resource.applies(c))
    preset = rng.choice(names)
    chip = chips[preset]
    dt = rng.choice(chip.dtypes)
    m, k, n = (max(1, int(math.exp(rng.uniform(0.0, math.log(top))))) for _ in range(3))
    batch = 1 if rng.random() < 0.75 else rng.randint(2, 4)
    op = Gemm(name="g", m=m, k=k, n=n, batch=batch, b_is_weight=rng.random() < 0.5,
              a_dtype=dt, b_dtype=dt, c_dtype=dt)
    try:
        base, bigger = resource.grow(chip, rng)
    except ValueError:
        return None
    return Case(resource.name, preset, op, base, bigger)


def timed(op: Gemm, chip) -> tuple[int, float, bool]:
    """(cycles, seconds, whether the search stopped on its budget) of ``op`` on ``chip`` as
    ``diptych gemm`` times it: :func:`diptych.sim.gemm.gemm_stats`'s cycles (the chosen
    mapping's run plus a split-K reduction), without its statistics."""
    if not chip.has_dram:
        op = on_chip_gemm(op, chip)
    p = plan(op, chip)
    cycles = int(p["out"][E.O_CYCLES])
    if p["split"].pk > 1:
        cycles += split_k_reduction(op, chip, p["split"]).cycles
    return cycles, cycles / chip.clock_hz, p["budget_hit"]


@dataclass(frozen=True)
class Outcome:
    """A case's result: ``ratio`` bigger ÷ base (cycles, or seconds for the clock); ``skip`` says
    why the guarantee does not cover it ("" when it does)."""

    ratio: float
    skip: str

    @property
    def broken(self) -> bool:
        return not self.skip and self.ratio > SLACK


def check(case: Case) -> Outcome:
    """Time ``case`` on both chips. A GEMM neither chip can map (its minimal tile, or on a
    chip without DRAM its operands, do not fit) is skipped; one only the bigger chip cannot
    map breaks the guarantee (ratio inf)."""
    seconds = BY_NAME[case.resource].seconds
    try:
        a = timed(case.op, case.base)
    except ValueError:
        try:
            timed(case.op, case.bigger)
        except ValueError:
            return Outcome(1.0, "no mapping")
        return Outcome(1.0, "")
    try:
        b = timed(case.op, case.bigger)
    except ValueError:
        return Outcome(math.inf, "")
    if a[2] or b[2]:
        return Outcome(b[1] / a[1] if seconds else b[0] / a[0], "budget")
    return Outcome(b[1] / a[1] if seconds else b[0] / a[0], "")


def run(resource: Resource, cases: int, top: int, seed: int, chips: dict | None = None,
        verbose: bool = False) -> dict:
    """``cases`` cases of ``resource``; the counts :func:`main` prints."""
    chips = chips or _presets()
    rng = random.Random(f"{seed}:{resource.name}")
    out = dict(cases=0, slower=0, broken=0, budget=0, budget_slower=0, no_mapping=0,
               refused=0, worst=1.0, worst_case="", failures=[])
    for _ in range(cases):
        case = draw(rng, resource, chips, top)
        out["cases"] += 1
        if case is None:
            out["refused"] += 1
            continue
        res = check(case)
        if res.skip == "no mapping":
            out["no_mapping"] += 1
            continue
        if res.skip == "budget":
            out["budget"] += 1
            out["budget_slower"] += res.ratio > SLACK
            continue
        if res.ratio > 1.0:
            out["slower"] += 1
        if res.broken:
            out["broken"] += 1
            out["failures"].append(f"{case.describe()}: ×{res.ratio:.6f}")
            if verbose:
                print("  BROKEN", out["failures"][-1], flush=True)
        if res.ratio > out["worst"]:
            out["worst"], out["worst_case"] = res.ratio, case.describe()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000, help="cases per resource")
    ap.add_argument("--top", type=int, default=16384, help="largest M, K, N")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resource", action="append", choices=sorted(BY_NAME),
                    help="only these resources (repeatable; default: all)")
    args = ap.parse_args(argv)
    os.environ["DIPTYCH_NO_CACHE"] = "1"
    chips = _presets()
    bad = 0
    for name in args.resource or [r.name for r in RESOURCES]:
        res = BY_NAME[name]
        t = time.process_time()
        o = run(res, args.cases, args.top, args.seed, chips, verbose=True)
        bad += o["broken"] if res.guaranteed else 0
        print(f"{name:<24} {o['cases']:6d} cases: {o['slower']:5d} slower at all, "
              f"{o['broken']:3d} beyond the tolerance (×{SLACK:.6f}); "
              f"{o['budget']:4d} on the search budget ({o['budget_slower']} of them slower), "
              f"{o['no_mapping']:4d} not mappable, {o['refused']} grown chips refused; "
              f"worst ×{o['worst']:.6f}"
              f"{' (' + o['worst_case'] + ')' if o['worst_case'] else ''}; "
              f"{time.process_time() - t:.0f} CPU s  [{res.doc}]"
              f"{'' if res.guaranteed else ' (measured, not guaranteed)'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Compiling the engine's kernels ahead of a first simulation (issue 23 item 2,
docs/limits.md "First run"): which kernel modules have nothing compiled on disk for this
machine, and a warm-up that compiles them (``diptych warmup``, and setup.py's build step that
compiles them into the wheel). Apart from :mod:`.jit` (the flags) so that the kernel modules, which
import :mod:`.jit`, are not imported back from it."""

from __future__ import annotations

import numba

#: The modules whose kernels the engine compiles (each ``@jit`` dispatcher in them).
KERNEL_MODULES = ("diptych.sim.engine", "diptych.sim.dram", "diptych.sim.dram_counts",
                  "diptych.sim.mapper_kernels")


def kernel_dispatchers() -> list:
    """Every cached Numba dispatcher of :data:`KERNEL_MODULES` (imports them; compiles
    nothing)."""
    import importlib

    from numba.core.registry import CPUDispatcher

    out = []
    for name in KERNEL_MODULES:
        m = importlib.import_module(name)
        out += [v for v in vars(m).values()
                if isinstance(v, CPUDispatcher) and getattr(v, "_cache", None) is not None
                and v.__module__ == m.__name__]
    return out


def cold_kernels() -> list[str]:
    """The kernel modules (:data:`KERNEL_MODULES`, short names) with no kernel compiled for
    this machine on disk (a fresh install, an edited kernel module, another Python, Numba or
    CPU: a wheel's cache built elsewhere, setup.py): the first simulation compiles them,
    ~15-25 s of CPU on 2 cores (issue 27; docs/limits.md, "First run"). A module counts as
    warm when any of its kernels has a cache index with an entry for this host's code
    generator (Numba's ``magic_tuple``: target triple, CPU name and features; the index is
    already empty for another Numba or an edited source); helpers inlined into others never
    get one of their own. Empty when Numba's JIT is disabled or its cache cannot be
    inspected."""
    if numba.config.DISABLE_JIT:
        return []
    from numba.core.registry import cpu_target

    here = cpu_target.target_context.codegen().magic_tuple()
    warm: dict[str, bool] = {}
    for d in kernel_dispatchers():
        mod = d.__module__.rsplit(".", 1)[-1]
        if warm.get(mod):
            continue
        try:
            index = d._cache._cache_file._load_index()
        except AttributeError:      # another Numba's internals: say nothing
            return []
        except Exception:           # noqa: BLE001 - an unreadable index is a cold one
            index = {}
        warm[mod] = any(isinstance(k, tuple) and len(k) > 1 and k[1] == here for k in index)
    return [m for m, ok in warm.items() if not ok]


def warmup(progress=None) -> float:
    """Compile (or load from the cache) every engine kernel ahead of the first simulation by
    simulating small work on every preset: GEMMs in each dataflow and dtype its arrays take, a
    vector op and a DRAM stream. ``progress(done, total, label)`` is told before each chip.
    Returns the seconds taken. The persistent result cache is bypassed meanwhile (a cached
    result would skip the kernels)."""
    import os
    import time

    from ..arch import load_chip, preset_names
    from ..workloads.ops import Gemm, VectorOp
    from .api import simulate

    t0 = time.perf_counter()
    names = preset_names()
    before = os.environ.get("DIPTYCH_NO_CACHE")
    os.environ["DIPTYCH_NO_CACHE"] = "1"     # a cached result would skip the kernels
    try:
        for i, name in enumerate(names):
            if progress is not None:
                progress(i, len(names), f"compiling: {name}")
            chip = load_chip(name)
            if not chip.has_dram:     # all-SRAM: the same kernels, operands resident
                continue
            dt = chip.default_dtype
            for df in chip.core.array.dataflows:
                simulate(Gemm(name="warm", m=96, k=80, n=72, a_dtype=dt, b_dtype=dt,
                              c_dtype=dt), chip, dataflow=df)
            simulate(VectorOp(name="warm", kind="add", elements=4096, ops_per_element=1.0,
                              read_bytes=8192.0, write_bytes=4096.0), chip)
    finally:
        if before is None:
            os.environ.pop("DIPTYCH_NO_CACHE", None)
        else:
            os.environ["DIPTYCH_NO_CACHE"] = before
    if progress is not None:
        progress(len(names), len(names), "done")
    return time.perf_counter() - t0

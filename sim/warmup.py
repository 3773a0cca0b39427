"""Compiling the engine's kernels ahead of a first simulation (issue 23 item 2,
docs/limits.md "First run"): which kernel modules have nothing compiled on disk for this
machine, and a warm-up that compiles them (``diptych warmup``, and setup.py's build step that
compiles them into the wheel). Apart from :mod:`.jit` (the flags) so that the kernel modules, which
import :mod:`.jit`, are not imported back from it."""

from __future__ import annotations

import numba

#: The modules whose kernels the engine compiles (each ``@jit`` dispatcher in them).
KERNEL_MODULES = ("diptych.sim.engine", "diptych.sim.dram", "diptych.sim.dram_counts",
                  "diptych.sim.mapper_kernels", "diptych.sim.split_kernels")


def cold_kernels() -> list[str]:
    """The kernel modules (:data:`KERNEL_MODULES`, short names) with no kernel compiled for
    this machine on disk (a fresh install, an edited kernel module, another Python, Numba or
    CPU: a wheel's cache built elsewhere, setup.py): the first simulation compiles them,
    ~20-30 s of CPU on 2 cores (issue 27; docs/limits.md, "First run"). A module counts as
    warm when one of its kernels' cache indexes, in a folder where Numba looks for this
    module's cache, is of this Numba and Python, stamped with the module's source as it is
    now, and has an entry for this host's code generator (``magic_tuple``: target triple, CPU
    name and features). Read from the files, without importing the kernel modules (whose
    import compiles the counting cfunc), so that a command can say it is compiling before it
    does. Not seen: a cache that the import will clear because a module a kernel module
    depends on was edited (:func:`.jit.invalidate_stale_cache`; a development tree only).
    Empty when Numba's JIT is disabled or its cache cannot be inspected."""
    import importlib.util
    import os
    import sys

    if numba.config.DISABLE_JIT:
        return []
    try:
        from numba.core import caching
        from numba.core.registry import cpu_target

        here = cpu_target.target_context.codegen().magic_tuple()
        locators = ((caching.UserProvidedCacheLocator,) if numba.config.CACHE_DIR else
                    (caching.InTreeCacheLocator, caching.UserWideCacheLocator))
    except (ImportError, AttributeError):      # another Numba's internals: say nothing
        return []
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    cold = []
    for name in KERNEL_MODULES:
        path = importlib.util.find_spec(name).origin
        stem = name.rsplit(".", 1)[-1]
        warm = False
        for cls in locators:
            try:
                loc = cls(cold_kernels, path)   # the module's cache folder (the function is a
                folder = loc.get_cache_path()   # stand-in: only its line number is read)
                stamp = loc.get_source_stamp()
            except (OSError, AttributeError, TypeError):
                return []
            if not os.path.isdir(folder):
                continue
            warm = any(_has_entry(os.path.join(folder, f), stamp, here)
                       for f in sorted(os.listdir(folder))
                       if f.startswith(stem + ".") and f.endswith(".nbi") and f".{tag}" in f)
            if warm:
                break
        if not warm:
            cold.append(stem)
    return cold


def _has_entry(index_path: str, stamp, here) -> bool:
    """Whether Numba's cache index ``index_path`` (its version, then the pickled source stamp
    and ``{(signature, magic_tuple, code hashes): data file}``, as
    ``numba.core.caching.IndexDataCacheFile`` writes it) holds a kernel compiled by this Numba
    from this source for ``here``."""
    import pickle

    try:
        with open(index_path, "rb") as fh:
            version = pickle.load(fh)
            if version != numba.__version__:
                return False
            saved, overloads = pickle.loads(fh.read())
    except Exception:  # noqa: BLE001 - an unreadable index is a cold one
        return False
    return saved == stamp and any(isinstance(k, tuple) and len(k) > 1 and k[1] == here
                                  for k in overloads)


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

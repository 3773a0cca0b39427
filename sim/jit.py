"""The one place where Numba JIT flags live.

Every compiled kernel in diptych is decorated with :func:`jit` (or ``numba.njit(**JIT)``).
``cache=True`` writes the compiled machine code next to the source so that a second process
starts in well under a second; ``nogil=True`` lets sweeps run kernels from threads;
``fastmath`` stays off so that the Numba kernels and their pure-Python golden twins give
bit-identical floating-point results (the tests require it).
"""

from __future__ import annotations

import numba

#: Flags shared by every kernel.
JIT = dict(cache=True, nogil=True, fastmath=False, error_model="numpy")


def jit(fn=None, **overrides):
    """``numba.njit`` with :data:`JIT` flags; usable as ``@jit`` or ``@jit(boundscheck=True)``."""
    opts = {**JIT, **overrides}
    if fn is None:
        return lambda f: numba.njit(**opts)(f)
    return numba.njit(**opts)(fn)


_REGISTERED: set = set()
_COMPILED: dict = {}


def compile_pure(module, names):
    """Compile the plain functions ``names`` of ``module`` (a module that must not import
    Numba, e.g. :mod:`diptych.sim.timing`) for use in kernels; returns their dispatchers in
    order (inlined into the kernels that call them: small functions cost more to compile on
    their own). Every function the module lists in ``KERNEL_FUNCTIONS`` is first registered
    with Numba, so that they may call one another by name. With ``NUMBA_DISABLE_JIT=1`` the
    plain functions themselves are returned, looked up when this is called: a test may
    replace one in ``module`` before importing the kernels' module."""
    import numba
    from numba.extending import register_jitable

    fns = [getattr(module, n) for n in names]
    if numba.config.DISABLE_JIT:
        return tuple(fns)
    for n in module.KERNEL_FUNCTIONS:
        f = getattr(module, n)
        if id(f) not in _REGISTERED:
            register_jitable(f)
            _REGISTERED.add(id(f))
    out = []
    for f in fns:     # one dispatcher per function, shared by the kernel modules
        if f not in _COMPILED:
            _COMPILED[f] = jit(f, inline="always")
        out.append(_COMPILED[f])
    return tuple(out)


def invalidate_stale_cache(module_file: str, *deps: str) -> None:
    """Drop Numba's on-disk cache of ``module_file`` when it or one of ``deps`` changed.

    Numba keys a cached kernel on its own source file only, so a kernel that calls kernels of
    another module would keep running stale machine code after that module is edited. Kernel
    modules call this at import with the files their kernels use; the cache next to the source
    (``__pycache__``, the development case, or the one under ``NUMBA_CACHE_DIR``) is cleared
    when their combined hash changes.
    Failures (read-only installs, races between processes) are ignored: Numba then recompiles.
    """
    import glob
    import hashlib
    import os

    h = hashlib.sha1()
    for path in (module_file, *deps):
        try:
            with open(path, "rb") as fh:
                h.update(fh.read())
        except OSError:
            return
    digest = h.hexdigest()
    cache_dir = os.path.join(os.path.dirname(os.path.abspath(module_file)), "__pycache__")
    if numba.config.CACHE_DIR:   # NUMBA_CACHE_DIR: Numba keeps the cache there instead
        from numba.core.caching import UserProvidedCacheLocator
        cache_dir = os.path.join(numba.config.CACHE_DIR,
                                 UserProvidedCacheLocator.get_suitable_cache_subpath(module_file))
    stem = os.path.splitext(os.path.basename(module_file))[0]
    stamp = os.path.join(cache_dir, f"{stem}.deps-sha1")
    try:
        with open(stamp) as fh:
            if fh.read() == digest:
                return
    except OSError:
        pass
    try:
        for f in glob.glob(os.path.join(cache_dir, f"{stem}.*.nb[ic]")):
            os.remove(f)
        os.makedirs(cache_dir, exist_ok=True)
        with open(stamp, "w") as fh:
            fh.write(digest)
    except OSError:
        pass


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
    """The kernel modules (:data:`KERNEL_MODULES`, short names) with no compiled kernel on
    disk (a fresh install, an edited kernel module, another Python): the first simulation
    compiles them, ~1-3 min on 2 cores. A module counts as warm when any of its kernels has
    a cache index (helpers inlined into others never get one of their own). Empty when Numba's
    JIT is disabled or its cache cannot be inspected."""
    import os

    if numba.config.DISABLE_JIT:
        return []
    warm: dict[str, bool] = {}
    for d in kernel_dispatchers():
        try:
            path = d._cache._cache_file._index_path
        except AttributeError:      # another Numba's internals: say nothing
            return []
        mod = d.__module__.rsplit(".", 1)[-1]
        warm[mod] = warm.get(mod, False) or os.path.exists(path)
    return [m for m, ok in warm.items() if not ok]


def warmup(progress=None) -> float:
    """Compile (or load from the cache) every engine kernel ahead of the first simulation by
    simulating small work on every preset: GEMMs in each dataflow and dtype its arrays take, a
    vector op and a DRAM stream. ``progress(done, total, label)`` is told before each chip.
    Returns the seconds taken. Results go through the normal result cache."""
    import time

    from ..arch import load_chip, preset_names
    from ..workloads.ops import Gemm, VectorOp
    from .api import simulate

    import os

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

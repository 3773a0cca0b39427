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


#: The Numba releases (major, minor), from inclusive to exclusive, whose
#: ``FunctionCache.load_overload`` is exactly "``target_context.refresh()``, then
#: ``_load_overload`` under ``_guard_against_spurious_io_errors``" (read in
#: numba/core/caching.py of 0.68.1, the installed one): :func:`_no_refresh_cache_class`
#: reimplements that body without the refresh, so it is used only with these; any other
#: Numba (a later one may add locking or index checks there) keeps its own load.
_VERIFIED_NUMBA = ((0, 68), (0, 69))


def _numba_minor() -> tuple:
    """(major, minor) of the imported Numba; (0, 0) when its version does not parse."""
    try:
        major, minor = numba.__version__.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


def _no_refresh_cache_class():
    """Numba's on-disk cache of one kernel, whose loads skip the target context's
    ``refresh()``; None when this Numba's cache lacks the private methods it calls (then the
    kernels keep Numba's own and nothing changes but time).

    Numba's ``Cache.load_overload`` refreshes the CPU target context before every load: the
    first one in a process imports and installs every implementation registry (numba.cpython,
    numba.np, numba.typed, the third-party entry points, ...), 0.16-0.27 s CPU of each command
    that only runs cached kernels (measured: docs/engine.md, Speed). A cached kernel does not
    need them: its machine code is linked against the process's C helpers (registered when
    Numba is imported) and the NRT (its symbols registered by ``rtsys.initialize``, which this
    load still calls); the registries serve typing and lowering, i.e. compilation, and Numba's
    compiler refreshes the context itself before it compiles (``CompilerBase``), so a cache
    miss compiles exactly as before. The same machine code runs: results are identical
    (golden set, tests/sim/golden_set.py). Only diptych's kernels get it (:func:`jit`,
    :func:`cached_cfunc`): other Numba code in the process loads as Numba has it. None too
    outside :data:`_VERIFIED_NUMBA` (the load it replaces is Numba's private code)."""
    from numba.core import caching
    from numba.core.runtime import nrt

    if not _VERIFIED_NUMBA[0] <= _numba_minor() < _VERIFIED_NUMBA[1]:
        return None
    base = caching.FunctionCache
    if not (hasattr(base, "_load_overload") and hasattr(base, "_guard_against_spurious_io_errors")
            and hasattr(nrt, "rtsys")):
        return None

    class LoadWithoutRefresh(base):
        def load_overload(self, sig, target_context):
            nrt.rtsys.initialize(target_context)     # the NRT's symbols, as refresh() would
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
            # None when the guard swallowed an I/O error: the caller compiles

    LoadWithoutRefresh.__doc__ = _no_refresh_cache_class.__doc__
    return LoadWithoutRefresh


_NO_REFRESH = None if numba.config.DISABLE_JIT else _no_refresh_cache_class()

#: Whether diptych's kernels load from Numba's cache without the context refresh.
LOAD_WITHOUT_REFRESH = _NO_REFRESH is not None


def _loads_without_refresh(kernel):
    """``kernel`` (a dispatcher or cfunc) with :data:`_NO_REFRESH` as its cache's class (the
    subclass adds no state); unchanged when it has no on-disk cache."""
    if _NO_REFRESH is not None and type(getattr(kernel, "_cache", None)) is _NO_REFRESH.__base__:
        kernel._cache.__class__ = _NO_REFRESH
    return kernel


def jit(fn=None, **overrides):
    """``numba.njit`` with :data:`JIT` flags; usable as ``@jit`` or ``@jit(boundscheck=True)``."""
    opts = {**JIT, **overrides}
    if fn is None:
        return lambda f: _loads_without_refresh(numba.njit(**opts)(f))
    return _loads_without_refresh(numba.njit(**opts)(fn))


def cached_cfunc(sig, fn):
    """``numba.cfunc(sig, cache=True)(fn)``, its cache loading as :func:`jit`'s kernels do
    (built here: Numba's decorator loads or compiles before a caller could change its
    cache). Numba's own decorator with ``NUMBA_DISABLE_JIT=1``, outside the verified Numba
    releases, or when Numba's private ``CFunc`` constructor no longer takes these arguments."""
    if _NO_REFRESH is None:
        return numba.cfunc(sig, cache=True)(fn)
    try:     # Numba's private constructor: if it changed, Numba's own decorator
        from numba.core import sigutils
        from numba.core.ccallback import CFunc

        res = CFunc(fn, sigutils.normalize_signature(sig), locals={}, options={})
        res.enable_caching()
    except (TypeError, AttributeError, ImportError):
        return numba.cfunc(sig, cache=True)(fn)
    _loads_without_refresh(res)
    res.compile()
    return res


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


def _borrowed_intrinsic():
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def borrowed(typingctx, arr):
        def codegen(context, builder, signature, args):
            src = context.make_array(signature.args[0])(context, builder, value=args[0])
            view = context.make_array(signature.return_type)(context, builder)
            for field in ("nitems", "itemsize", "data", "shape", "strides"):
                setattr(view, field, getattr(src, field))
            view.meminfo = cgutils.get_null_value(view.meminfo.type)
            view.parent = cgutils.get_null_value(view.parent.type)
            return view._getvalue()
        return arr(arr), codegen
    return borrowed


def _identity(arr):
    return arr


#: ``borrowed(a)`` inside a kernel: the same array (same type, data, shape and strides) without
#: an owner, so that passing it to a non-inlined kernel, unpacking it from a tuple or slicing it
#: costs no reference counting (Numba updates an owned array's count with an atomic
#: instruction at each of those: ~100 per DRAM transfer of the engine, most of its fixed
#: cost). The caller must keep ``a`` itself alive (used after) for as long as the view is used.
#: The identity with ``NUMBA_DISABLE_JIT=1``.
borrowed = _identity if numba.config.DISABLE_JIT else _borrowed_intrinsic()


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

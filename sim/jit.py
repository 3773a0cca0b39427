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


def _fast_flag_values() -> None:
    """Numba's compile-time ``TargetConfig.values`` (the compiler flags as a dict) without
    going through one property per option: the same dict, built from the flags' own values
    and the options' defaults, as each option's property getter does.

    Numba keys its cache of every ``@overload`` implementation on the current flags, and
    hashes and compares them with ``values()`` at each typed call of a NumPy function or
    builtin (~125 k times in the cold headline; ~6 % of its first-run CPU, bench_compile.py).
    Compile time only: the flags, hence the machine code, are the same. Left as is when this
    Numba's ``TargetConfig`` is not shaped as expected."""
    from numba.core import targetconfig

    cls = targetconfig.TargetConfig
    if getattr(cls, "_diptych_fast_values", False):
        return
    probe = getattr(cls, "values", None)
    if probe is None or "_values" not in getattr(cls, "__slots__", ()):
        return

    def values(self):
        get = self._values.get
        return {k: get(k, opt.default) for k, opt in self.options.items()}

    def __eq__(self, other):
        if type(other) is not type(self):
            return orig_eq(self, other)
        a, b = self._values, other._values
        if a == b:
            return True            # the same set values: the same values()
        opts = self.options        # values() differ only where a or b sets an option
        return all(a.get(k, opts[k].default) == b.get(k, opts[k].default)
                   for k in a.keys() | b.keys())

    def __hash__(self):
        # Numba hashes ``tuple(sorted(self.values()))``: the sorted option *names*, fixed per
        # class; the same number, without building the dict
        return hash(tuple(sorted(self.options)))

    orig_eq = cls.__eq__
    cls.values = values
    cls.__eq__ = __eq__
    cls.__hash__ = __hash__
    cls._diptych_fast_values = True


_fast_flag_values()


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

"""What the ``diptych`` console command sets up before its command imports NumPy, Numba and
the simulator (issue 27, start-up). Only the console command calls :func:`prepare`
(:mod:`diptych.tools.cli`, when the process is the command's own), never a CLI called
in-process, and nothing here changes a result.

**One BLAS thread.** NumPy's wheels link OpenBLAS, which starts a pool of threads when NumPy
is imported; each idle thread busy-waits (``sched_yield``) for ``2^THREAD_TIMEOUT`` TSC
cycles, ``THREAD_TIMEOUT`` = 28 by default (~0.1 s at 2.7 GHz), before it sleeps
[S] https://github.com/OpenMathLib/OpenBLAS/blob/develop/driver/others/blas_server.c
(``thread_timeout``, ``blas_thread_server``) and
https://github.com/OpenMathLib/OpenBLAS/issues/5171 (the busy loop in ``perf``). diptych calls
no BLAS routine (its arrays are integer and elementwise work and Numba kernels; the one
``einsum`` in ``diptych rtl`` does not call BLAS), so that spin is CPU time of every command
for nothing: 4.7 % of `perf`'s samples of a `run` of the train step on this 2-core machine
(``blas_thread_server``), 25 ms CPU of ``python -c "import numpy"`` at load 5 (docs/engine.md,
Speed), more on an idle machine with more cores. :func:`single_threaded_blas` sets
``OPENBLAS_NUM_THREADS=1`` unless the environment sets it (a user's choice is kept) or NumPy
is already imported (then it has no effect). Child processes (sweep workers) inherit it:
they call no BLAS either.

**Dataclass code cache.** ``@dataclass`` writes the source of each method it adds
(``__init__``, ``__repr__``, ``__eq__``, a frozen class's ``__hash__``, ``__setattr__`` and
``__delattr__``) and compiles it with ``exec`` when the class is created, every time its module
is imported; Python caches the bytecode of modules, not of these methods. A ``run`` creates
~104 of diptych's dataclasses with ~616 such ``exec`` calls: 57-66 ms CPU of the command
(measured with ``dataclasses._create_fn`` wrapped, docs/engine.md, Speed). :class:`CodeCache`
keeps the compiled code of those sources on disk, beside this module's own bytecode
(:func:`importlib.util.cache_from_source`, so ``PYTHONPYCACHEPREFIX`` and ``-O`` apply, and
written only when Python writes bytecode: not with ``PYTHONDONTWRITEBYTECODE``), keyed by the
source text itself: a hit runs the code compiled from exactly that text, by this Python (the
file starts with :data:`importlib.util.MAGIC_NUMBER` and a format tag), with the flags ``exec`` of a string
uses there (``dont_inherit``: dataclasses.py has no ``__future__`` import), so every class
gets the same methods, bit for bit, and a changed class simply misses. It is
installed as the ``exec`` that dataclasses.py looks up in its module's globals (it calls
``exec(text, globals, ns)`` with a ``str`` in :data:`VERIFIED_PYTHON`, read in CPython
3.11.7, 3.12.1 and 3.13.0's Lib/dataclasses.py: ``_create_fn``,
``_FuncBuilder.add_fns_to_class``); with any other Python, or without a cache file to read
or write, dataclasses compile as before. Every dataclass the process creates after
:func:`prepare` goes through it (NumPy's, Numba's and the others' too: the same source gives
the same code whoever defines the class).

**Numba without PyYAML.** ``numba.core.config`` imports PyYAML when it is installed (a
dependency of Dask's ``distributed``, so it is), only to read a ``.numba_config.yaml`` in the
working directory if there is one [S] numba/core/config.py of Numba 0.68.1 (``_HAVE_YAML``,
``_EnvReloader.update``): 12 ms CPU of every simulating command (``import yaml``, measured
in-process). :func:`skip_yaml_for_numba` makes that one import fail, as if PyYAML were not
installed, when there is no such file (with one, nothing changes); any other import of
``yaml``, before or after, is untouched.

**No transparent huge pages.** Linux backs a large anonymous allocation with 2 MiB pages when
transparent huge pages are ``always`` on (this machine: ``/sys/kernel/mm/transparent_hugepage
/enabled``), and zeroes a whole 2 MiB page on the first touch of any byte in it
[S] https://docs.kernel.org/admin-guide/mm/transhuge.html. The engine's DRAM pattern caches
are such allocations (:func:`diptych.sim.dram.pattern_cache`: up to 64 MiB per DRAM geometry,
rows of per-pseudo-channel counts filled at hashed entries), so a command that fills a few
thousand entries has the kernel zero most of them: ``clear_page_erms`` was 9.3 % of `perf`'s
samples of the headline ``compare``, its system time 0.12-0.27 s. Touching 20,000 random
768-byte rows of four 12.6 MB arrays takes 0.128 s of system time with huge pages and 0.021 s
without (measured here). :func:`no_huge_pages` turns them off for the process
(``prctl(PR_SET_THP_DISABLE)``, inherited by its children [S]
https://man7.org/linux/man-pages/man2/PR_SET_THP_DISABLE.2const.html); elsewhere, or if the
call fails, nothing changes. Replaying the headline's 162 GEMM searches in one process, the
engine's CPU with cold pattern caches falls from 1.09-1.11 s to 0.89-0.91 s and with warm
ones stays within the noise (0.69-0.73 s both), as do bench_gemm.py's 1000 mixed GEMMs
(3.30-3.47 s both; docs/engine.md, Speed).
"""

from __future__ import annotations

import builtins
import marshal
import os
import sys

#: The environment variable OpenBLAS reads its thread count from when it is loaded.
BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def single_threaded_blas() -> bool:
    """Ask NumPy's OpenBLAS for one thread (see the module's docstring); True when set here."""
    if "numpy" in sys.modules or BLAS_THREADS in os.environ:
        return False
    os.environ[BLAS_THREADS] = "1"
    return True


#: Python versions (from, to exclusive) whose dataclasses.py compiles each class's methods with
#: ``exec(text, globals, ns)``, ``exec`` looked up in its module's globals (see above).
VERIFIED_PYTHON = ((3, 11), (3, 14))
#: At most this many sources are kept in the file: a larger merged set is cut to the ones this
#: process used (sources of changed classes would otherwise pile up over edits).
MAX_ENTRIES = 4096


class CodeCache:
    """Compiled code of ``exec``'s sources, read from and written back to ``path`` (see the
    module's docstring): :meth:`exec` is a drop-in ``exec(source, globals, locals)`` for a
    ``str`` source; :meth:`save` writes the file back when this process compiled a source
    that was not in it. A file that is missing, unreadable or not one of this Python's is
    treated as empty. ``codes`` maps a source to its code marshalled, unmarshalled on a hit
    only: reading the file is then ~1 ms, not the ~17 ms of building every code object (a
    command that creates few dataclasses, ``models show``, pays for those few)."""

    def __init__(self, path: str | None):
        self.path = path
        self.codes: dict = {}
        self.used: set = set()
        self.new = 0
        if path is None:
            return
        try:
            with open(path, "rb") as fh:
                magic = fh.read(len(_MAGIC))
                codes = marshal.load(fh) if magic == _MAGIC else {}
        except (OSError, EOFError, ValueError, TypeError):
            codes = {}
        if isinstance(codes, dict) and all(isinstance(v, bytes) for v in codes.values()):
            self.codes = codes

    def exec(self, source, globals=None, locals=None):
        """``exec(source, globals, locals)``, the code of a ``str`` source compiled once."""
        if not isinstance(source, str):
            return builtins.exec(source, globals, locals)  # noqa: S102 - dataclasses' own call
        code = None
        blob = self.codes.get(source)
        if blob is not None:
            try:
                code = marshal.loads(blob)
            except (EOFError, ValueError, TypeError):     # (a damaged entry: compiled again)
                code = None
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            self.codes[source] = marshal.dumps(code)
            self.new += 1
        self.used.add(source)
        return builtins.exec(code, globals, locals)  # noqa: S102 - compiled from its text

    def save(self) -> bool:
        """Write the file back if this process compiled new sources (to a temporary file in
        the same folder, then renamed: a reader sees the old file or the new one); False when
        there was nothing to write or it could not be written (a read-only install)."""
        if self.path is None or not self.new:
            return False
        codes = self.codes
        if len(codes) > MAX_ENTRIES:
            codes = {k: v for k, v in codes.items() if k in self.used}
        folder = os.path.dirname(self.path)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            os.makedirs(folder, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(_MAGIC)
                marshal.dump(codes, fh)
            os.replace(tmp, self.path)
        except (OSError, ValueError):
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        self.new = 0
        return True


def _magic() -> bytes:
    from importlib.util import MAGIC_NUMBER
    return MAGIC_NUMBER


#: The file's first bytes: this Python's bytecode magic number and this format's tag (values
#: are marshalled code objects).
_MAGIC = _magic() + b"dc2\n"


def cache_path() -> str | None:
    """Where the dataclass code cache lives: beside this module's bytecode
    (``tools/__pycache__/startup.cpython-311.dataclasses``); None where Python keeps no
    bytecode (no cache tag)."""
    from importlib.util import cache_from_source
    try:
        pyc = cache_from_source(os.path.abspath(__file__))
    except NotImplementedError:
        return None
    return pyc[:-len(".pyc")] + ".dataclasses"


_INSTALLED: CodeCache | None = None


def cache_dataclass_code(path: str | None = None, write: bool | None = None):
    """Install a :class:`CodeCache` (of ``path``, default :func:`cache_path`) as
    dataclasses.py's ``exec``, saved at exit when ``write`` (default: unless
    ``sys.dont_write_bytecode``); returns it, or None where :data:`VERIFIED_PYTHON` does
    not hold (nothing changes) or one is installed already."""
    global _INSTALLED
    import dataclasses

    if not VERIFIED_PYTHON[0] <= sys.version_info[:2] < VERIFIED_PYTHON[1]:
        return None
    if _INSTALLED is not None or "exec" in vars(dataclasses):
        return None
    cache = CodeCache(cache_path() if path is None else path)
    dataclasses.exec = cache.exec
    _INSTALLED = cache
    if (not sys.dont_write_bytecode) if write is None else write:
        import atexit
        atexit.register(cache.save)
    return cache


def uncache_dataclass_code() -> None:
    """Undo :func:`cache_dataclass_code` (dataclasses compile with the builtin ``exec``
    again; the cache is not saved)."""
    global _INSTALLED
    import atexit
    import dataclasses

    if _INSTALLED is not None:
        atexit.unregister(_INSTALLED.save)
        if vars(dataclasses).get("exec") == _INSTALLED.exec:
            del dataclasses.exec
        _INSTALLED = None


#: Numba's module that imports PyYAML for its config file, and that file's name.
NUMBA_CONFIG, NUMBA_CONFIG_FILE = "numba.core.config", ".numba_config.yaml"


class _NoYamlForNumbaConfig:
    """A meta path finder that fails ``import yaml`` when :data:`NUMBA_CONFIG` (and no other
    module) is the importer, once, and then leaves ``sys.meta_path``."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "yaml":
            return
        cls.remove()
        f = sys._getframe(1)
        while f is not None and f.f_globals.get("__name__", "").startswith("importlib"):
            f = f.f_back           # (the import machinery's own frames)
        if f is not None and f.f_globals.get("__name__") == NUMBA_CONFIG \
                and not os.path.isfile(NUMBA_CONFIG_FILE):
            raise ModuleNotFoundError("diptych: Numba's config file reader is not needed",
                                      name=name)
        return

    @classmethod
    def remove(cls):
        try:
            sys.meta_path.remove(cls)
        except ValueError:
            pass


def skip_yaml_for_numba() -> bool:
    """Install :class:`_NoYamlForNumbaConfig` unless Numba or PyYAML is imported already or
    the working directory has a Numba config file; True when installed."""
    if NUMBA_CONFIG in sys.modules or "yaml" in sys.modules or os.path.isfile(NUMBA_CONFIG_FILE):
        return False
    if _NoYamlForNumbaConfig not in sys.meta_path:
        sys.meta_path.insert(0, _NoYamlForNumbaConfig)
    return True


#: ``prctl`` option: this process and its children get no transparent huge pages.
PR_SET_THP_DISABLE = 41


def no_huge_pages() -> bool:
    """Turn transparent huge pages off for this process (Linux; see above); True when done."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def prepare() -> None:
    """Everything above, for the console command's process (called before the command
    imports anything heavy)."""
    single_threaded_blas()
    cache_dataclass_code()
    skip_yaml_for_numba()
    no_huge_pages()

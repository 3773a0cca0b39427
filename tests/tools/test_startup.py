"""tools/startup.py: what the console command sets up before its imports changes no class,
no result, and nothing a user chose.

The reference for the dataclass code cache is CPython's own ``@dataclass`` without it: every
method it generates must have the same code object (marshalled bytes: instructions, constants,
names, line table, file and qualified names), in a fresh process reading the cache file as in
the process that wrote it."""

import json
import marshal
import os
import subprocess
import sys

import pytest
from diptych.tools import startup

# Dataclasses covering what @dataclass generates: defaults, factories, init=False, frozen
# (__hash__, __setattr__, __delattr__), order, slots, keyword-only fields, unsafe_hash,
# a __post_init__ with InitVar, and a class defined under `from __future__ import annotations`.
CLASSES = '''
from __future__ import annotations
import dataclasses
from dataclasses import InitVar, dataclass, field, KW_ONLY


@dataclass
class Plain:
    a: int
    b: float = 1.5
    c: list = field(default_factory=list)
    d: int = field(default=3, init=False, repr=False, compare=False)


@dataclass(frozen=True, order=True)
class Frozen:
    x: int
    y: str = "y"


@dataclass(slots=True, kw_only=True)
class Slots:
    p: int
    q: tuple = ()


@dataclass(unsafe_hash=True)
class Mixed:
    a: int
    _: KW_ONLY
    k: int = 0
    scale: InitVar[float] = 1.0

    def __post_init__(self, scale):
        self.k = int(self.k * scale)


@dataclass(eq=False, repr=False)
class Bare:
    z: object = None
'''

DUMP = r'''
import dataclasses, json, marshal, sys
ATTRS = ("co_code", "co_names", "co_varnames", "co_freevars", "co_cellvars", "co_filename",
         "co_name", "co_qualname", "co_firstlineno", "co_linetable", "co_exceptiontable",
         "co_flags", "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_stacksize",
         "co_nlocals")
def fingerprint(code):
    """Every attribute of a code object that defines it, nested code objects included (its
    marshalled bytes also depend on reference counts, so they are not compared)."""
    consts = tuple(fingerprint(c) if hasattr(c, "co_code") else (type(c).__name__, repr(c))
                   for c in code.co_consts)
    return repr((consts,) + tuple(getattr(code, a) for a in ATTRS if hasattr(code, a)))
def methods(cls):
    out = {}
    for name, fn in sorted(vars(cls).items()):
        code = getattr(fn, "__code__", None)
        if code is not None:
            out[name] = fingerprint(code)
    return out
'''


#: This tree's root: a subprocess run in another folder imports the same diptych (the
#: development install's finder maps ``diptych`` to ``DIPTYCH_SRC``, else to the tree of the
#: working directory).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(startup.__file__)))


def _run(code: str, *args, cwd=None, env=None) -> str:
    e = {**os.environ, "DIPTYCH_SRC": ROOT, **(env or {})}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=True, cwd=cwd, env=e).stdout


def _classes_script(folder, cache: str | None) -> str:
    """A script that imports :data:`CLASSES` (written to ``folder/dcmod.py``) and prints
    their methods' code and a few uses."""
    (folder / "dcmod.py").write_text(CLASSES)
    install = ("" if cache is None else
               "from diptych.tools import startup\n"
               f"c = startup.cache_dataclass_code({cache!r}, write=True)\n"
               "assert c is not None\n")
    return (install + DUMP + f"sys.path.insert(0, {str(folder)!r})\n"
            "import dcmod as ns\n"
            "print(json.dumps({n: methods(getattr(ns, n)) for n in "
            "('Plain', 'Frozen', 'Slots', 'Mixed', 'Bare')}))\n"
            "m = ns.Mixed(2, k=3, scale=2.0); f = ns.Frozen(1)\n"
            "print(repr(m), m == ns.Mixed(2, k=6), hash(m) == hash(ns.Mixed(2, k=6)),"
            " f < ns.Frozen(2), repr(ns.Slots(p=1)), ns.Plain(1))\n")


@pytest.mark.skipif(not startup.VERIFIED_PYTHON[0] <= sys.version_info[:2]
                    < startup.VERIFIED_PYTHON[1], reason="the cache is off on this Python")
def test_dataclass_methods_are_the_same_code_with_the_cache_cold_and_warm(tmp_path):
    path = str(tmp_path / "fns.dataclasses")
    want = _run(_classes_script(tmp_path, None), env={"PYTHONDONTWRITEBYTECODE": "1"})
    cold = _run(_classes_script(tmp_path, path))   # compiles and writes the file at exit
    assert os.path.getsize(path) > 0
    with open(path, "rb") as fh:
        assert fh.read(len(startup._MAGIC)) == startup._MAGIC
        assert len(marshal.load(fh)) >= 5 * 3      # every generated method's source
    warm = _run(_classes_script(tmp_path, path))   # reads them
    assert cold == want and warm == want
    assert "Mixed(a=2, k=6) True True True Slots(p=1, q=()) Plain(a=1, b=1.5, c=[])" in want
    methods = json.loads(want.splitlines()[0])
    assert set(methods["Frozen"]) >= {"__init__", "__repr__", "__eq__", "__lt__", "__hash__",
                                      "__setattr__", "__delattr__"}


@pytest.mark.skipif(not startup.VERIFIED_PYTHON[0] <= sys.version_info[:2]
                    < startup.VERIFIED_PYTHON[1], reason="the cache is off on this Python")
def test_diptychs_records_are_the_same_code_with_the_cache(tmp_path):
    """Every dataclass of the modules a `run` imports, with the cache warm, against CPython's
    own: the same methods, bit for bit."""
    path = str(tmp_path / "fns.dataclasses")
    mods = ["diptych.arch.chip", "diptych.workloads.program", "diptych.sim.run.node",
            "diptych.sim.run.scenario", "diptych.sim.program.residency", "diptych.sim.stats"]
    body = (DUMP + "import importlib, inspect\nout = {}\n"
            f"for m in {mods!r}:\n"
            "    mod = importlib.import_module(m)\n"
            "    for n, c in sorted(vars(mod).items()):\n"
            "        if inspect.isclass(c) and dataclasses.is_dataclass(c) "
            "and c.__module__ == m:\n"
            "            out[m + '.' + n] = methods(c)\n"
            "print(json.dumps(out, sort_keys=True))\n")
    install = ("from diptych.tools import startup\n"
               f"assert startup.cache_dataclass_code({path!r}, write=True) is not None\n")
    want = _run(body)
    _run(install + body)                      # writes the cache
    warm = _run(install + body + "print(startup._INSTALLED.new, len(startup._INSTALLED.used))\n")
    warm, counts = warm.rsplit("\n", 2)[0] + "\n", warm.split()[-2:]
    assert warm == want and len(json.loads(want)) > 30
    assert counts[0] == "0" and int(counts[1]) > 100       # every source a hit


def test_a_broken_or_foreign_cache_file_is_ignored_and_rewritten(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(startup._MAGIC + b"\x00garbage")
    other = tmp_path / "other"
    other.write_bytes(b"\x00\x00\x0d\x0a"
                      + marshal.dumps({"x = 1": marshal.dumps(compile("x = 2", "", "exec"))}))
    for p in (bad, other):
        c = startup.CodeCache(str(p))
        assert c.codes == {}
        ns = {}
        c.exec("x = 1", ns)
        assert ns["x"] == 1 and c.new == 1
        assert c.save()
        assert startup.CodeCache(str(p)).codes.keys() == {"x = 1"}
    assert startup.CodeCache(None).save() is False
    assert startup.CodeCache(str(tmp_path / "missing")).codes == {}


def test_the_cache_keeps_what_this_process_used_when_it_grows_too_large(tmp_path, monkeypatch):
    monkeypatch.setattr(startup, "MAX_ENTRIES", 3)
    p = str(tmp_path / "c")
    c = startup.CodeCache(p)
    for i in range(4):
        c.exec(f"x = {i}", {})
    assert c.save() and len(startup.CodeCache(p).codes) == 4      # (this process's own)
    c2 = startup.CodeCache(p)          # 4 entries on disk, more than 3
    c2.exec("y = 1", {})
    c2.exec("x = 0", {})
    assert c2.save()
    assert set(startup.CodeCache(p).codes) == {"y = 1", "x = 0"}


def test_a_read_only_folder_only_loses_the_cache(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        c = startup.CodeCache(str(ro / "c"))
        c.exec("x = 1", {})
        if os.access(ro, os.W_OK):       # (root writes anyway)
            pytest.skip("this user can write a read-only folder")
        assert c.save() is False
        assert not list(ro.iterdir())
    finally:
        ro.chmod(0o700)


def test_the_cache_is_written_only_where_python_writes_bytecode(tmp_path):
    """Installed by the console command's prepare(); saved at exit unless Python writes no
    bytecode (PYTHONDONTWRITEBYTECODE), and nothing is installed twice."""
    code = ("import sys\nfrom diptych.tools import startup\n"
            f"startup.cache_path = lambda: {str(tmp_path / 'c')!r}\n"
            "startup.prepare(); startup.prepare()\n"
            "import dataclasses\n"
            "print(dataclasses.exec == startup._INSTALLED.exec)\n"
            "@dataclasses.dataclass\nclass A:\n    a: int\n")
    assert _run(code, env={"PYTHONDONTWRITEBYTECODE": "1"}).split() == ["True"]
    assert not (tmp_path / "c").exists()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    assert (tmp_path / "c").exists()


def test_uncache_restores_the_builtin_exec():
    import dataclasses
    if startup._INSTALLED is not None:
        pytest.skip("a cache is installed in this process")
    c = startup.cache_dataclass_code(None, write=False)
    if c is None:
        pytest.skip("the cache is off on this Python")
    try:
        assert dataclasses.exec == c.exec
    finally:
        startup.uncache_dataclass_code()
    assert "exec" not in vars(dataclasses) and startup._INSTALLED is None


BLAS = ("import os, sys\nfrom diptych.tools import startup\n"
        "{pre}print(startup.single_threaded_blas(), os.environ.get('OPENBLAS_NUM_THREADS'))\n")


def test_one_blas_thread_unless_the_user_chose_or_numpy_is_loaded():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def run(pre="", **extra):
        return subprocess.run([sys.executable, "-c", BLAS.format(pre=pre)], env={**env, **extra},
                              capture_output=True, text=True, check=True).stdout.split()
    assert run() == ["True", "1"]
    assert run(OPENBLAS_NUM_THREADS="4") == ["False", "4"]
    assert run(pre="import numpy\n") == ["False", "None"]


def test_the_console_command_runs_with_one_blas_thread_and_numba_without_yaml(tmp_path):
    """`python -m diptych.tools.cli` (the console command): OpenBLAS is asked for one thread,
    Numba's config imports no PyYAML (there is no .numba_config.yaml here) and yaml still
    imports afterwards."""
    code = ("import atexit, os, sys\n"
            "def report():\n"
            "    import numba.core.config as c\n"
            "    had = 'yaml' in sys.modules\n"
            "    import yaml\n"
            "    print(os.environ.get('OPENBLAS_NUM_THREADS'), c._HAVE_YAML, had, "
            "yaml.__name__, file=sys.stderr)\n"
            "atexit.register(report)\n"
            "sys.argv = ['diptych', 'gemm', '128', '128', '128', '--chip', 'tpu-v4'"
            "]\n"
            "from diptych.tools.cli import main\n"
            "main()\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                       cwd=tmp_path, env={**env, "DIPTYCH_NO_CACHE": "1", "DIPTYCH_SRC": ROOT})
    assert r.returncode == 0, r.stderr
    assert r.stderr.split()[-4:] == ["1", "False", "False", "yaml"]


def test_a_numba_config_file_is_still_read(tmp_path):
    """With a .numba_config.yaml in the working directory Numba imports PyYAML and reads it,
    as without the finder."""
    pytest.importorskip("yaml")
    (tmp_path / ".numba_config.yaml").write_text("debug_cache: 0\n")
    code = ("import sys\nfrom diptych.tools import startup\n"
            "print(startup.skip_yaml_for_numba())\n"
            "import numba.core.config as c\n"
            "print(c._HAVE_YAML, 'yaml' in sys.modules)\n")
    assert _run(code, cwd=tmp_path).split() == ["False", "True", "True"]


def test_only_numbas_config_is_refused_yaml(tmp_path):
    """Another module's ``import yaml`` while the finder is installed imports it."""
    pytest.importorskip("yaml")
    code = ("import sys\nfrom diptych.tools import startup\n"
            "print(startup.skip_yaml_for_numba())\n"
            "import yaml\n"
            "print(yaml.__name__, startup._NoYamlForNumbaConfig in sys.meta_path)\n")
    assert _run(code, cwd=tmp_path).split() == ["True", "yaml", "False"]


def _thp_enabled(status: str):
    for line in status.splitlines():
        if line.startswith("THP_enabled:"):
            return line.split()[1]
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_no_huge_pages_for_the_process_and_its_children():
    """The kernel reports the process's flag in /proc/PID/status (Linux 5.0 and later)."""
    code = ("import subprocess, sys\nfrom diptych.tools import startup\n"
            "print(open('/proc/self/status').read())\n"
            "print('@@', startup.no_huge_pages(), '@@')\n"
            "print(open('/proc/self/status').read())\n"
            "print('@@')\n"
            "print(subprocess.run(['cat', '/proc/self/status'], capture_output=True, "
            "text=True).stdout)\n")
    before, done, after, child = _run(code).split("@@")
    if _thp_enabled(before) is None:
        pytest.skip("this kernel does not report THP_enabled")
    assert done.split()[0] == "True"
    assert (_thp_enabled(before), _thp_enabled(after), _thp_enabled(child)) == ("1", "0", "0")


def test_a_damaged_entry_is_compiled_again(tmp_path):
    p = tmp_path / "c"
    p.write_bytes(startup._MAGIC + marshal.dumps({"x = 1": b"\x00\x01not code"}))
    c = startup.CodeCache(str(p))
    ns = {}
    c.exec("x = 1", ns)
    assert ns["x"] == 1 and c.new == 1

"""tools/gc_pause.py: a command's imports run without cyclic collections and end frozen; the
CLI hands the frozen objects back when the command ends."""

import gc
import subprocess
import sys

from click.testing import CliRunner

from diptych.tools import gc_pause
from diptych.tools.cli import main


class _Cycle:
    def __init__(self):
        self.me = self


def test_imports_pause_then_freeze_and_release_unfreezes():
    assert gc.isenabled()
    before = gc.get_freeze_count()
    collections = gc.get_stats()[0]["collections"]
    with gc_pause.imports():
        assert not gc.isenabled()
        junk = [_Cycle() for _ in range(20_000)]   # far past the 700 that trigger a collection
        assert gc.get_stats()[0]["collections"] == collections
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(junk)
    gc_pause.release()
    assert gc.get_freeze_count() == 0
    gc_pause.release()              # idempotent
    assert gc.get_freeze_count() == 0


def test_imports_keep_a_disabled_collector_disabled():
    gc.disable()
    try:
        with gc_pause.imports():
            pass
        assert not gc.isenabled()
    finally:
        gc_pause.release()
        gc.enable()


def test_a_command_freezes_its_imports_and_leaves_nothing_frozen(monkeypatch):
    """`compare` pauses the collector for its imports (tools/compare_cmd.py); once the CLI
    returns, the process collects as before (an unknown chip: the command stops early, after
    its imports)."""
    frozen_at_release = []
    release = gc_pause.release

    def spy():
        frozen_at_release.append(gc.get_freeze_count())
        release()
    monkeypatch.setattr(gc_pause, "release", spy)
    r = CliRunner().invoke(main, ["--no-cache", "compare", "no-such-chip", "h100", "--model",
                                  "llama-3-8b"])
    assert r.exit_code == 2, r.output
    assert frozen_at_release and frozen_at_release[0] > 1000
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_freeze_at_exit_freezes_every_object_when_the_process_ends():
    """Registered once; at exit (before the finalization's collection) every object is in
    the permanent generation. A handler registered before it runs after it (LIFO)."""
    code = ("import atexit, gc\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 1000))\n"
            "from diptych.tools import gc_pause\n"
            "n = atexit._ncallbacks()\n"
            "gc_pause.freeze_at_exit(); gc_pause.freeze_at_exit()\n"
            "print('registered', atexit._ncallbacks() - n, 'now', gc.get_freeze_count())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[:2] == ["registered 1 now 0", "frozen True"]


def test_an_in_process_command_registers_no_exit_freeze(monkeypatch):
    """CliRunner calls ``main`` with its arguments: the interpreter is not the command's, so
    no exit handler is registered (the console command's is, see the subprocess test below)."""
    import atexit

    registered, register = [], atexit.register

    def spy(f, *args, **kwargs):
        registered.append(f)
        return register(f, *args, **kwargs)
    monkeypatch.setattr(atexit, "register", spy)
    monkeypatch.setattr(gc_pause, "_at_exit", False)
    r = CliRunner().invoke(main, ["chips", "list"])
    assert r.exit_code == 0, r.output
    assert gc.freeze not in registered
    assert not gc_pause._at_exit


def test_the_console_command_freezes_at_exit():
    """``main()`` reading ``sys.argv``, as the ``diptych`` script and ``python -m
    diptych.tools.cli`` call it, registers the exit freeze: at exit every object is in the
    permanent generation."""
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 1000))\n"
            "sys.argv = ['diptych', 'chips', 'list']\n"
            "from diptych.tools.cli import main\n"
            "main()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().split("\n")[-1] == "frozen True"


def test_a_hosts_own_frozen_objects_stay_frozen_after_a_command():
    """A host that froze its objects (``gc.freeze()``) before calling the CLI: the command's
    release must not ``gc.unfreeze()`` them (an unknown chip: `compare` stops after its
    imports, which it froze)."""
    host = [_Cycle() for _ in range(1000)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        r = CliRunner().invoke(main, ["--no-cache", "compare", "no-such-chip", "h100",
                                      "--model", "llama-3-8b"])
        assert r.exit_code == 2, r.output
        assert gc.get_freeze_count() >= frozen    # gc.unfreeze() would have made it 0
        assert len(host) == 1000
    finally:
        gc.unfreeze()
    assert not gc_pause._frozen


def test_fewer_collections_raises_generation_0_and_restores_it():
    """Inside the block generation 0 waits for COMMAND_THRESHOLD0 allocations (5,000 cyclic
    objects trigger no collection at that threshold, where 700 would trigger ~7); the
    thresholds as they were come back after it, also when the block raises."""
    old = gc.get_threshold()
    assert old[0] < gc_pause.COMMAND_THRESHOLD0
    collections = gc.get_stats()[0]["collections"]
    try:
        with gc_pause.fewer_collections():
            assert gc.get_threshold() == (gc_pause.COMMAND_THRESHOLD0, *old[1:])
            gc.collect(0)
            collections = gc.get_stats()[0]["collections"]
            junk = [_Cycle() for _ in range(gc_pause.COMMAND_THRESHOLD0 // 4)]
            assert gc.get_stats()[0]["collections"] == collections
            raise RuntimeError("leaves the block")
    except RuntimeError:
        pass
    assert gc.get_threshold() == old
    del junk


def test_fewer_collections_keeps_a_larger_or_disabled_threshold():
    old = gc.get_threshold()
    try:
        for t0 in (0, 10 * gc_pause.COMMAND_THRESHOLD0):
            gc.set_threshold(t0, *old[1:])
            with gc_pause.fewer_collections():
                assert gc.get_threshold()[0] == t0
            assert gc.get_threshold()[0] == t0
    finally:
        gc.set_threshold(*old)


def test_a_command_runs_with_fewer_collections(monkeypatch):
    """The CLI's ``main`` wraps the command: `compare`'s imports see the raised threshold;
    after the CLI returns the process has its own threshold again."""
    seen = []
    imports = gc_pause.imports

    def spy():
        seen.append(gc.get_threshold()[0])
        return imports()
    monkeypatch.setattr(gc_pause, "imports", spy)
    old = gc.get_threshold()
    r = CliRunner().invoke(main, ["--no-cache", "compare", "no-such-chip", "h100", "--model",
                                  "llama-3-8b"])
    assert r.exit_code == 2, r.output
    assert seen == [gc_pause.COMMAND_THRESHOLD0]
    assert gc.get_threshold() == old

"""tools/startup.py: what the console command sets up before its imports changes no result
and nothing a user chose."""

import os
import subprocess
import sys

import pytest
from diptych.tools import startup

#: This tree's root: a subprocess run in another folder imports the same diptych (the
#: development install's finder maps ``diptych`` to ``DIPTYCH_SRC``, else to the tree of the
#: working directory).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(startup.__file__)))


def _run(code: str, *args, cwd=None, env=None) -> str:
    e = {**os.environ, "DIPTYCH_SRC": ROOT, **(env or {})}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=True, cwd=cwd, env=e).stdout


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


def test_the_console_command_runs_with_one_blas_thread(tmp_path):
    """`python -m diptych.tools.cli` (the console command): OpenBLAS is asked for one
    thread."""
    code = ("import atexit, os, sys\n"
            "def report():\n"
            "    print(os.environ.get('OPENBLAS_NUM_THREADS'), file=sys.stderr)\n"
            "atexit.register(report)\n"
            "sys.argv = ['diptych', 'gemm', '128', '128', '128', '--chip', 'tpu-v4'"
            "]\n"
            "from diptych.tools.cli import main\n"
            "main()\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                       cwd=tmp_path, env={**env, "DIPTYCH_NO_CACHE": "1", "DIPTYCH_SRC": ROOT})
    assert r.returncode == 0, r.stderr
    assert r.stderr.split()[-1:] == ["1"]


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

"""Ctrl-C stops any command within a second, with exit code 130 and one line, even while a
Numba kernel compiled ``nogil`` runs (Python signal handlers cannot run until it returns)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

SPIN = textwrap.dedent("""
    import numba
    from diptych.tools.interrupt import install

    @numba.njit(nogil=True, cache=False)
    def spin(n):
        x = 0.0
        for i in range(n):
            x += (i % 7) * 1e-9
        return x

    spin(10)
    install()
    print("ready", flush=True)
    print(spin(10**13))  # hours, never back in the interpreter
""")


def interrupt(proc, wait_for_line: bool) -> tuple[float, str]:
    if wait_for_line:
        assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=30)
    return time.monotonic() - t0, err


def test_ctrl_c_ends_a_nogil_kernel_within_a_second():
    proc = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        dt, err = interrupt(proc, True)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert dt < 10  # the kernel runs for hours: any bound this far below that is a pass
    assert err.strip() == "diptych: interrupted"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc), 0 if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def test_ctrl_c_ends_a_long_command():
    # a plan search over thousands of parallel layouts: tens of seconds of work, not cached
    proc = subprocess.Popen([sys.executable, "-m", "diptych.tools.cli", "plan", "--model",
                             "llama-3.1-405b", "--chip", "h100", "--cluster", "dgx-h100",
                             "--chips", "16384", "--batch", "2048", "--seq", "8192", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait until it is past start-up (imports take ~1.3 s of CPU) and into the search:
        # CPU time, not wall time, so a busy machine is no race
        deadline = time.monotonic() + 120
        while cpu_seconds(proc.pid) < 4.0 and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is not None:
            pytest.skip("the command finished before it could be interrupted")
        dt, err = interrupt(proc, False)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert dt < 10  # the search has tens of seconds left to run
    assert err.strip() == "diptych: interrupted"

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
    _, err = proc.communicate(timeout=10)
    return time.monotonic() - t0, err


def test_ctrl_c_ends_a_nogil_kernel_within_a_second():
    proc = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        dt, err = interrupt(proc, True)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert dt < 1.5
    assert err.strip() == "diptych: interrupted"


def test_ctrl_c_ends_a_long_gemm_command():
    proc = subprocess.Popen([sys.executable, "-m", "diptych.tools.cli", "gemm", "98304",
                             "98304", "98304", "--chip", "tpu-v4"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.0)  # imports, chip, into the mapper and engine (~8 s of work in all)
        if proc.poll() is not None:
            pytest.skip("the GEMM finished before it could be interrupted")
        dt, err = interrupt(proc, False)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert dt < 1.5
    assert err.strip() == "diptych: interrupted"

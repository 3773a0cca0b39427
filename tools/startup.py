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
    no_huge_pages()

"""Where a sweep's work runs: a local process pool that can be rebuilt, or a Dask cluster.

* **Local pool**: a :class:`~concurrent.futures.ProcessPoolExecutor` whose workers ignore
  Ctrl-C (the parent handles it) and **die with their parent**: on Linux the kernel sends
  them SIGKILL when the parent exits (``prctl(PR_SET_PDEATHSIG)``), and on every platform a
  watchdog thread ends a worker within :data:`WATCHDOG_S` once its parent process is gone
  (re-parented). When a worker dies (out-of-memory kill, segfault) the pool is broken;
  :meth:`Pool.rebuild` replaces it.
* **Dask** (``--scheduler``): ``distributed.Client(address).get_executor()``. Dask itself
  retries a task whose worker died and gives up with ``KilledWorker``. A Dask scheduler runs
  code on its workers and unpickles the results they send back: connect only to a cluster
  you trust.
* **A given executor** (tests, embedding): used as is; it cannot be rebuilt.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import threading
import time

#: Seconds between a worker's checks that its parent is still alive.
WATCHDOG_S = 0.5

_PR_SET_PDEATHSIG = 1


def _die_with_parent(expected_ppid: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the watchdog remains
            pass
    if os.getppid() != expected_ppid:  # the parent died before prctl took effect
        os._exit(1)

    def watchdog():
        while True:
            time.sleep(WATCHDOG_S)
            if os.getppid() != expected_ppid:
                os._exit(1)

    threading.Thread(target=watchdog, name="diptych-parent-watchdog", daemon=True).start()


def worker_init(parent_pid: int, start_method: str) -> None:
    """Initializer of local pool workers: ignore SIGINT, die with the parent process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # forked workers are children of the sweep; forkserver ones of the fork server, which
    # exits with the sweep
    _die_with_parent(parent_pid if start_method == "fork" else os.getppid())


def local_workers(jobs: int | None, points: int, *, oversubscribe: bool = False,
                  log=None) -> int:
    """Local worker processes for ``points`` points: ``jobs`` (default one per CPU), capped at
    the CPU count unless ``oversubscribe`` (``log`` is told of the cap) and at ``points``
    (a fork-started pool forks every worker up front: ``-j 10000`` for one point would fork
    10,000). At least 1."""
    cpus = os.cpu_count() or 1
    n = jobs or cpus
    if n > cpus and not oversubscribe:
        if log is not None:
            log(f"-j {n:,} capped at this machine's {cpus} CPUs (--oversubscribe runs more)")
        n = cpus
    return max(1, min(n, points))


class Pool:
    """The executor of one sweep (see the module docstring).

    ``workers`` is how many tasks run at once; the sweep keeps that many in flight, so that
    when a worker dies only those tasks are suspects.
    """

    def __init__(self, *, scheduler: str | None = None, jobs: int | None = None,
                 executor: cf.Executor | None = None):
        self._client = None
        self.rebuildable = False
        if executor is not None:
            self.executor = executor
            self.workers = getattr(executor, "_max_workers", None) or os.cpu_count() or 1
        elif scheduler:
            self._connect(scheduler)
        else:
            self.workers = jobs or os.cpu_count() or 1
            self.rebuildable = True
            self.executor = self._local()

    def _local(self) -> cf.ProcessPoolExecutor:
        import multiprocessing as mp

        ctx = mp.get_context()
        return cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx,
                                      initializer=worker_init,
                                      initargs=(os.getpid(), ctx.get_start_method()))

    def _connect(self, scheduler: str) -> None:
        try:
            from distributed import Client
        except ImportError as exc:  # pragma: no cover - distributed is a dependency
            raise ValueError(f"--scheduler needs dask.distributed ({exc})") from None
        probe(scheduler)
        try:
            self._client = Client(scheduler, timeout="10s")
        except OSError as exc:
            raise ValueError(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
        self.executor = self._client.get_executor(pure=False)
        self.workers = sum(self._client.nthreads().values()) or 1

    def rebuild(self) -> bool:
        """Replace a broken local pool (True), or say that this executor cannot be (False)."""
        if not self.rebuildable:
            return False
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = self._local()
        return True

    def close(self, *, wait: bool = True) -> None:
        """Shut the executor down. ``wait=False`` is the way out of an interrupted or failed
        sweep: queued tasks are cancelled and local workers, which ignore SIGINT, are
        terminated, so a point still running cannot hold the exit (the interpreter would
        otherwise join the pool's threads until every running point had finished)."""
        if self._client is not None:
            self.executor.shutdown(wait=wait)
            self._client.close()
        elif self.rebuildable:
            workers = list((getattr(self.executor, "_processes", None) or {}).values())
            manager = getattr(self.executor, "_executor_manager_thread", None)
            self.executor.shutdown(wait=wait, cancel_futures=True)
            if not wait:
                for proc in workers:
                    proc.terminate()
                _forget_manager(manager)


def _forget_manager(manager) -> None:
    """Let the pool's management thread end (it does once its workers are gone) and drop it
    from ``concurrent.futures.process``'s exit hook. CPython 3.11's ``_python_exit`` wakes every
    registered manager through its pipe, which a manager that has already ended has closed:
    the interpreter then prints an ``OSError: [Errno 9] Bad file descriptor`` traceback on the
    way out of an interrupted sweep."""
    if manager is None:
        return
    manager.join(timeout=5)
    if manager.is_alive():
        return
    from concurrent.futures import process

    registry = getattr(process, "_threads_wakeups", None)
    if registry is not None:
        registry.pop(manager, None)


def probe(address: str) -> None:
    """Fail fast, with a clear message, when nothing listens at a tcp://HOST:PORT address."""
    import socket
    from urllib.parse import urlsplit

    try:
        u = urlsplit(address if "://" in address else f"tcp://{address}")
        host, port = u.hostname, u.port
    except ValueError:  # a port that is not a number or out of range
        host = port = None
        u = None
    if u is None or u.scheme != "tcp" or not host or not port:
        raise ValueError(f"--scheduler must be written tcp://HOST:PORT, not {address!r}")
    try:
        socket.create_connection((host, port), timeout=5).close()
    except (OSError, UnicodeError) as exc:  # UnicodeError: a host name IDNA cannot encode
        raise ValueError(f"cannot reach the Dask scheduler at {address} ({exc})") from None

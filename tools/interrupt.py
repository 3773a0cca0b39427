"""Ctrl-C stops any ``diptych`` command within a second: exit code 130 and one line.

Python runs a signal handler only between bytecodes, so a long Numba kernel (compiled
``nogil``) would otherwise ignore Ctrl-C until it returns. :func:`install` therefore does two
things for the duration of a command:

* the SIGINT handler raises :class:`KeyboardInterrupt` as usual, so pure-Python work unwinds
  (closing pools, removing temporary files) and the CLI reports it (:func:`report`);
* ``signal.set_wakeup_fd`` makes the C-level handler write a byte to a pipe that a watcher
  thread reads at once (a ``nogil`` kernel does not hold the GIL). If the process is still
  alive :data:`GRACE_S` later, the watcher prints the message, terminates child processes and
  ends the process with ``os._exit(130)``.

Forked children (process pools) inherit the handler; in them it exits silently with 130, so
they print no tracebacks. Sweep workers ignore SIGINT and die with their parent instead.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: Seconds the main thread gets to unwind after Ctrl-C before the process is ended.
GRACE_S = 0.5
#: The conventional exit status of a process ended by SIGINT (128 + 2).
EXIT_CODE = 128 + signal.SIGINT
MESSAGE = "diptych: interrupted"

_lock = threading.Lock()
_state = {"pipe": None, "owner": None, "reported": False, "active": False}


def report() -> None:
    """Print :data:`MESSAGE` to stderr, once per process."""
    with _lock:
        if _state["reported"]:
            return
        _state["reported"] = True
    try:
        sys.stderr.write(MESSAGE + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _terminate_children() -> None:
    try:
        import multiprocessing

        for child in multiprocessing.active_children():
            child.terminate()
    except Exception:  # noqa: BLE001 - best effort on the way out
        pass


def _watch(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if _state["active"] and signal.SIGINT in data:
            time.sleep(GRACE_S)
            report()
            _terminate_children()
            os._exit(EXIT_CODE)


def _on_sigint(signum, frame):
    if os.getpid() != _state["owner"]:
        os._exit(EXIT_CODE)  # a forked child: the parent reports
    raise KeyboardInterrupt


def install():
    """Install the Ctrl-C behaviour (see the module docstring) if called from the main
    thread; returns a callable that restores the previous handler and wakeup fd."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    if _state["pipe"] is None or _state["owner"] != os.getpid():
        r, w = os.pipe()
        os.set_blocking(w, False)
        _state["pipe"] = (r, w)
        threading.Thread(target=_watch, args=(r,), name="diptych-interrupt",
                         daemon=True).start()
    _state["owner"] = os.getpid()
    _state["reported"] = False
    previous = signal.signal(signal.SIGINT, _on_sigint)
    old_fd = signal.set_wakeup_fd(_state["pipe"][1], warn_on_full_buffer=False)
    _state["active"] = True

    def restore():
        _state["active"] = False
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGINT, previous)

    return restore

"""Python's garbage collector while a command imports the engine (issue 27).

CPython's cyclic collector runs after every 700 net allocations of container objects
(generation 0) and scans the older generations every 10 collections of the younger one
[S] https://docs.python.org/3/library/gc.html#gc.set_threshold. Importing NumPy, Numba and
the simulator creates ~70 k long-lived objects (modules, classes, functions, Numba types) and
many short-lived ones: ~190 collections, the older ones scanning every object made so far,
40-110 ms CPU of each `run` or `compare` (measured with ``gc.callbacks``: docs/engine.md,
Speed). They free nothing that matters: the modules live until the process ends.

:func:`imports` pauses the collector for the command's imports, then moves every object
alive to the permanent generation with ``gc.freeze()``, which no collection scans
[S] https://docs.python.org/3/library/gc.html#gc.freeze, so that the simulation's
collections scan only its own objects. :func:`release` (the CLI's ``main``, once the command
ends) hands those objects back with ``gc.unfreeze()``: a process that runs several commands
(the tests' ``CliRunner``) collects as before. Nothing here changes a result, only when
Python looks for garbage cycles.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

_frozen = False


@contextmanager
def imports():
    """Run the ``with`` block (a command's imports) without cyclic collections, then freeze
    every object alive into the permanent generation; the collector is on again after it
    (if it was before)."""
    global _frozen
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        _frozen = True
        if was:
            gc.enable()


def release() -> None:
    """Undo :func:`imports`' freeze (the objects join the oldest generation again)."""
    global _frozen
    if _frozen:
        gc.unfreeze()
        _frozen = False

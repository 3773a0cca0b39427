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
(the tests' ``CliRunner``) collects as before. ``gc.unfreeze()`` thaws every frozen object, so
when the process had frozen objects of its own before the command (a host application that
calls the CLI and uses ``gc.freeze()`` itself) :func:`release` leaves the permanent
generation alone: the host's objects stay frozen (and the command's with them).

At exit, Python's finalization clears every module and collects the cycles that leaves: with
the engine loaded, 0.1-0.15 s CPU of a `run` after its output is written (measured against
the same command ending in ``gc.freeze()``, docs/engine.md, Speed). :func:`freeze_at_exit`
registers an exit handler that freezes every object first, so that finalization collects
none of them: the memory goes back to the system with the process. Only the console command
registers it (:mod:`diptych.tools.cli`: ``diptych``, ``python -m diptych.tools.cli``), never a
CLI called in-process, whose interpreter is not the command's to finish. Python does not promise
to finalize objects that are alive at exit anyway ("It is not guaranteed that __del__()
methods are called for objects that still exist when the interpreter exits"
[S] https://docs.python.org/3/reference/datamodel.html#object.__del__); acyclic objects are
still freed by reference counting as the modules are cleared, and the standard streams are
flushed as before.

While a command runs (:func:`fewer_collections`, the CLI's ``main``), generation 0 is
collected after :data:`COMMAND_THRESHOLD0` net allocations instead of CPython's 700: a
simulation allocates millions of short-lived tuples, lists and NumPy scalars that reference
counting frees, and the collector's passes over them find almost no cycles. Measured on the
examples' trace cold (``serve --trace examples/trace-small.csv``, llama-3-8b on h100, load
~1): 29.3-29.9 s user CPU at 700, 27.5 at 20,000, 27.4 with the collector off, peak RSS
315-317 MB in all three (docs/engine.md, Speed). The older generations keep their thresholds
(each still runs after 10 collections of the younger one), and the previous thresholds come
back when the command ends.

Nothing here changes a result, only when Python looks for garbage cycles.
"""

from __future__ import annotations

import atexit
import gc
from contextlib import contextmanager

#: Generation-0 threshold while a command runs (:func:`fewer_collections`).
COMMAND_THRESHOLD0 = 20_000

_frozen = False
_unfreeze = False     # whether release() may unfreeze: nothing was frozen before imports()
_at_exit = False


@contextmanager
def imports():
    """Run the ``with`` block (a command's imports) without cyclic collections, then freeze
    every object alive into the permanent generation; the collector is on again after it
    (if it was before)."""
    global _frozen, _unfreeze
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if not _frozen:       # the first freeze since release(): was anything frozen before?
            _unfreeze = gc.get_freeze_count() == 0
        gc.freeze()
        _frozen = True
        if was:
            gc.enable()


@contextmanager
def fewer_collections():
    """Run the ``with`` block (a whole command) with generation 0 collected every
    :data:`COMMAND_THRESHOLD0` allocations (CPython's default is 700), unless the process set
    a larger threshold or turned automatic collection off (threshold 0); the thresholds as
    they were come back after it."""
    old = gc.get_threshold()
    if 0 < old[0] < COMMAND_THRESHOLD0:
        gc.set_threshold(COMMAND_THRESHOLD0, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def release() -> None:
    """Undo :func:`imports`' freeze (the objects join the oldest generation again), unless
    objects were frozen before it (``gc.get_freeze_count()`` > 0): ``gc.unfreeze()`` would
    thaw those too, so then everything stays frozen."""
    global _frozen
    if _frozen:
        if _unfreeze:
            gc.unfreeze()
        _frozen = False


def freeze_at_exit() -> None:
    """Freeze every object when the interpreter exits (registered once per process; exit
    handlers run before the finalization's collection)."""
    global _at_exit
    if not _at_exit:
        atexit.register(gc.freeze)
        _at_exit = True

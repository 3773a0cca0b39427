"""A serving engine's tensor-parallel all-reduce on a chip's links: the engine's custom kernel
where its source takes the message (:func:`~diptych.arch.engine_allreduce.engine_algorithm`),
NCCL's terms otherwise (:func:`~diptych.sim.run.links.collective_seconds`). docs/serving.md,
"Runtime host costs".

The custom kernels need a node's GPUs on NVLink with peer access, which a chip states by a
collective library table on switched links (:func:`~diptych.sim.run.links.library_timed`: h100);
elsewhere (a torus, links without the table, ``--ideal``'s raw links) every collective keeps
the links' own rule. The kernels' times are whole calls (the measurement they are calibrated on
includes the launch), so no ``collective_launch_us`` is added, as for NCCL's own kernels. The
link energy stays the ring's bytes [not modelled: a one-shot kernel moves ``(n−1)·B`` per rank,
more than the ring's ``2(n−1)/n·B``].
"""

from __future__ import annotations

from collections.abc import Callable

from ...arch.engine_allreduce import check_engine, engine_algorithm, kernel_seconds
from ...workloads.ops import Collective
from ..run.links import collective_seconds, library_timed


def engine_all_reduce(op: Collective, chip, engine: str) -> tuple[str, float] | None:
    """(kernel, seconds) of ``op`` when ``engine``'s custom all-reduce runs it on ``chip``;
    None when NCCL does (another kind, a size or group the engine leaves to NCCL, a chip
    without NVLink peers)."""
    check_engine(engine)
    if op.kind != "all_reduce" or engine == "nccl" or not library_timed(op.kind, chip):
        return None
    algo = engine_algorithm(engine, op.group, op.bytes)
    if algo == "nccl":
        return None
    port = chip.interconnect.bytes_per_s_per_direction
    return algo, kernel_seconds(algo, op.group, op.bytes, port)


def engine_timer(engine: str, chip) -> Callable[[Collective], float]:
    """A collective timer (``collective_time`` of the run path): ``engine``'s custom
    all-reduce where it runs the op, the chip's links (NCCL) otherwise."""
    check_engine(engine)

    def timer(op: Collective) -> float:
        got = engine_all_reduce(op, chip, engine)
        return got[1] if got is not None else collective_seconds(op, chip)
    return timer

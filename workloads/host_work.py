"""Host-side work an op carries beyond its one kernel launch (issue 21: a training step's
host path, component-calibrated).

Most ops of a lowering are one kernel each and pay the chip's ``[overheads] op_launch_us``
once (sim/run/scheduled.py, sim/run/summed.py). An op that stands for a framework's run of
many small kernels, or that makes the host wait for the device, says so in its tags:

* ``kernels:<n>``: the op's forward is ``n`` kernel launches (``n × op_launch_us``);
* ``bwd_kernels:<n>``: its backward (the op train.py derives, tagged
  :data:`~diptych.workloads.ops.BACKWARD_TAG`) is ``n`` launches;
* ``host_syncs:<n>``: its forward makes the host wait for the device ``n`` times (a
  device-to-host read whose size the host needs, e.g. PyTorch's ``masked_select``): each
  costs the chip's ``[overheads] host_sync_us``, the time the device then idles while the
  host launches the next kernels (arch/chip.py ``Overheads``). Backward passes run no
  synchronisation of the forward's.

Absent tags: one launch, no synchronisation, as before these tags existed. An op with
either is never fused into a GEMM's prologue or epilogue (sim/program/fusion.py).

The scheduler charges both as the op's fixed issue cost, on the op's own unit
(sim/run/scheduled.py ``_launch``; sim/program/demand.py ``launch``). A synchronisation is
therefore not a barrier: under the chip's ``kernel_order`` ``dataflow`` independent work may
run beside it, which a host that waits could not have launched [assumption]; with ``issue``
or ``one_queue`` (every PyTorch step's, and the system rows') the stream is in order and it
is exact. The summed model (``--execution sum``) charges no fixed costs at all, these
included.
"""

from __future__ import annotations

from .ops import BACKWARD_TAG

KERNELS = "kernels:"
BWD_KERNELS = "bwd_kernels:"
HOST_SYNCS = "host_syncs:"


def tags(kernels: int = 1, bwd_kernels: int = 1, host_syncs: int = 0) -> tuple[str, ...]:
    """The tags of an op that launches ``kernels`` kernels forward and ``bwd_kernels``
    backward and synchronises with the host ``host_syncs`` times forward (ValueError
    naming a count that is not a whole number >= 0, or a kernel count below 1)."""
    for name, v, lo in (("kernels", kernels, 1), ("bwd_kernels", bwd_kernels, 1),
                        ("host_syncs", host_syncs, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be a whole number >= {lo}, not {v!r}")
    out = []
    if kernels != 1:
        out.append(f"{KERNELS}{kernels}")
    if bwd_kernels != 1:
        out.append(f"{BWD_KERNELS}{bwd_kernels}")
    if host_syncs:
        out.append(f"{HOST_SYNCS}{host_syncs}")
    return tuple(out)


def _count(op, prefix: str, default: int) -> int:
    for t in getattr(op, "tags", ()):
        if t.startswith(prefix):
            return int(t[len(prefix):])
    return default


def kernel_count(op) -> int:
    """Kernel launches ``op`` stands for: its ``bwd_kernels`` tag's on a backward op, its
    ``kernels`` tag's otherwise, 1 without the tag."""
    if BACKWARD_TAG in getattr(op, "tags", ()):
        return _count(op, BWD_KERNELS, 1)
    return _count(op, KERNELS, 1)


def host_sync_count(op) -> int:
    """Host synchronisations ``op`` makes: its ``host_syncs`` tag's on a forward op, 0 on a
    backward one or without the tag."""
    if BACKWARD_TAG in getattr(op, "tags", ()):
        return 0
    return _count(op, HOST_SYNCS, 0)

"""Per-op statistics returned by :func:`diptych.sim.simulate`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .plain import as_plain_dict


@dataclass(frozen=True)
class OpStats:
    """What one op cost on one chip.

    Times: ``cycles`` (core clock) and ``seconds``. ``compute_cycles`` is the same schedule
    with unlimited memory bandwidth (fill and drain included, per the timing contract);
    ``array_busy_cycles`` the cycles in which an array took in inputs; ``stall_cycles`` =
    ``cycles − array_busy_cycles``, split in ``stall_breakdown`` into ``fill_drain`` (pipeline
    fill/drain and issue-rule gaps), ``dram`` (waiting for DRAM data) and ``writeback``
    (waiting for an output buffer or for the final write-back). ``utilization`` = ``macs`` ÷
    (``cycles`` × the chip's peak MACs per cycle in the op's dtype). Bytes are whole-chip totals
    (``shared_buffer_read_bytes``: operand re-reads served by the chip's shared buffer);
    ``dram_bytes_per_s`` is the achieved DRAM bandwidth. ``energy_breakdown`` in joules has
    keys ``mac``, ``sram``, ``dram``, ``vector``, ``static``. ``bound`` is ``"memory"`` when
    the DRAM was busier (fraction of peak) than the arrays, else ``"compute"``.
    """

    name: str
    kind: str
    cycles: int
    seconds: float
    compute_cycles: int
    array_busy_cycles: int
    stall_cycles: int
    stall_breakdown: dict = field(hash=False)
    macs: int
    flops: float
    utilization: float
    dram_read_bytes: float
    dram_write_bytes: float
    sram_read_bytes: float
    sram_write_bytes: float
    dram_bytes_per_s: float
    energy_j: float
    energy_breakdown: dict = field(hash=False)
    bound: str
    mapping: dict = field(hash=False)
    shared_buffer_read_bytes: float = 0.0

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    def to_dict(self) -> dict:
        """JSON-ready dict of every field: exactly ``dataclasses.asdict(self)``, copied
        faster (:func:`~diptych.sim.plain.as_plain_dict`)."""
        return as_plain_dict(self)

"""Vector-unit ops (elementwise, softmax, RMSNorm/LayerNorm) with their DRAM traffic.

Resident tensors (the op's ``scratchpad_*_bytes``/``shared_buffer_*_bytes``) do not cross
DRAM: they move at the scratchpads' bandwidth (all cores) and the shared buffer's, overlapped
with the DRAM stream of the rest; an op with no DRAM byte runs on a chip without DRAM.

A :class:`~diptych.workloads.ops.VectorOp` is spread evenly over the tensor cores. Each core streams
its share of ``read_bytes`` in and ``write_bytes`` out through the scratchpad in
:data:`CHUNK_BYTES` pieces, double-buffered, while its vector unit does ``elements ×
ops_per_element`` ALU ops at ``lanes × ops_per_lane_per_cycle`` per cycle. The DRAM side is the
fast model of :mod:`.dram` (a sequential read stream, then the write stream, on all
pseudo-channels, capped by the NoC and D2D bandwidth and delayed by their latency:
:mod:`.fabric`); the pipeline takes ``max(compute, memory)`` plus one chunk of the shorter
side to fill and drain. A chip whose stack runs a kind's kernel below the copy rate (its
``[elementwise_kernels]`` table) takes its DRAM stream ``1 / fraction`` times as long. The
helper constructors give the op counts we assume per element.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ..arch.dtypes import dtype_bytes
from .dram import FastDram
from .fabric import fabric
from ..workloads import loss
from ..workloads.dropout import TAG as DROPOUT_TAG
from ..workloads.ops import BACKWARD_TAG, VectorOp
from .regime import memory_roof_bytes_per_s, regime
from .stats import OpStats

#: Streaming granularity of vector ops through the scratchpad (bytes per chunk per core).
CHUNK_BYTES = 64 * 1024

#: ALU ops per element (documented assumptions): softmax = max, subtract, exp, sum, divide;
#: RMSNorm = square, sum, rsqrt-scale, weight multiply; LayerNorm = sum, subtract, square,
#: sum, scale, weight multiply, bias add.
OPS_PER_ELEMENT = {"softmax": 5.0, "rmsnorm": 4.0, "layernorm": 7.0, "elementwise": 1.0,
                   "add": 1.0, "mul": 1.0, "silu": 4.0, "gelu": 8.0, "geglu": 9.0, "swiglu": 5.0,
                   "rope": 6.0, "copy": 0.0}


def elementwise_op(name: str, elements: int, *, inputs: int = 1, kind: str = "elementwise",
                   dtype: str = "bf16") -> VectorOp:
    """``inputs`` tensors of ``elements`` in, one out."""
    b = dtype_bytes(dtype)
    return VectorOp(name=name, kind=kind, elements=elements, ops_per_element=OPS_PER_ELEMENT[kind],
                    read_bytes=inputs * elements * b, write_bytes=elements * b, dtype=dtype)


def softmax_op(name: str, rows: int, cols: int, dtype: str = "bf16") -> VectorOp:
    """Row softmax of a ``rows × cols`` tensor (one pass: each row fits the scratchpad)."""
    b = dtype_bytes(dtype)
    n = rows * cols
    return VectorOp(name=name, kind="softmax", elements=n, ops_per_element=OPS_PER_ELEMENT["softmax"],
                    read_bytes=n * b, write_bytes=n * b, dtype=dtype)


def norm_op(name: str, rows: int, cols: int, kind: str = "rmsnorm", dtype: str = "bf16") -> VectorOp:
    """RMSNorm or LayerNorm over the last dimension, reading the weight (and bias) vectors."""
    b = dtype_bytes(dtype)
    n = rows * cols
    params = cols * b * (2 if kind == "layernorm" else 1)
    return VectorOp(name=name, kind=kind, elements=n, ops_per_element=OPS_PER_ELEMENT[kind],
                    read_bytes=n * b + params, write_bytes=n * b, dtype=dtype)


def stream_fraction(op: VectorOp, chip) -> float:
    """The fraction of the copy rate at which ``chip``'s software stack streams ``op``'s DRAM
    bytes: its ``[elementwise_kernels]`` entry for the op's kind and direction (a backward
    pass carries :data:`BACKWARD_TAG`; arch/chip.py ``ElementwiseKernels``), or for the LM
    loss's implementation when ``op`` is one of its passes (workloads/loss.py), 1 without
    the table."""
    rates = getattr(chip, "elementwise_kernels", None)
    if rates is None:
        return 1.0
    return rates.fraction(op.kind, BACKWARD_TAG in op.tags, loss.implementation_of(op.tags),
                          dropout=DROPOUT_TAG in op.tags)


@lru_cache(maxsize=4096)
def stream_ns(dram, fabric_ns_per_byte: float, read_bytes: int, write_bytes: int,
              chunk: int) -> float:
    """When a vector op's DRAM streams finish (ns) on a fresh :class:`~.dram.FastDram` of
    ``dram`` (with the fabric cap ``fabric_ns_per_byte``): the read stream from address 0,
    then the write stream from 2^40, ``chunk`` bytes at a time (0.0 when both are empty).
    Memoised: a fresh model's streams are a function of these arguments alone (its pattern
    cache holds exact counts), and a sweep's chips share their DRAM and their vector ops'
    sizes (layer norms, activations, split-K reductions: the same streams on every chip of
    the same DRAM and fabric cap, and again in the power limit's re-run at another clock on
    chips whose fabric cap does not bind; where a NoC cap binds, ``fabric_ns_per_byte``
    follows the clock, ``arch/noc.py``, and a re-run's streams are new)."""
    model = FastDram(dram, fabric_ns_per_byte)
    done = 0.0
    for addr, total, write in ((0, read_bytes, False), (1 << 40, write_bytes, True)):
        if total > 0:
            done = model.stream(0.0, addr, total, chunk, write)
    return done


def _sizes(op: VectorOp, chip, cores: int) -> tuple:
    """What :func:`vector_stats` derives without the DRAM model: (ALU ops, vector-unit
    cycles, resident bytes, DRAM read bytes, DRAM write bytes, DMA bytes per cycle) of
    ``op`` on ``cores`` tensor cores."""
    v = chip.core.vector
    ops = op.elements * op.ops_per_element
    compute = math.ceil(ops / (cores * v.lanes * v.ops_per_lane_per_cycle))
    on_chip = (op.scratchpad_read_bytes + op.shared_buffer_read_bytes
               + op.scratchpad_write_bytes + op.shared_buffer_write_bytes)
    if on_chip:   # resident tensors: only the rest crosses DRAM
        rd, wr = op.dram_read_bytes, op.dram_write_bytes
    else:
        rd, wr = float(op.read_bytes), float(op.write_bytes)
    return ops, compute, on_chip, rd, wr, chip.dma.engines * chip.dma.bytes_per_cycle * cores


def _setup_cycles(chip, fab, dram_bytes: float) -> int:
    """The DMA setup (and NoC/D2D latency) cycles of a vector op moving ``dram_bytes``."""
    if dram_bytes <= 0:
        return 0
    return chip.dma.setup_cycles + (math.ceil(fab.dram_setup_ns * chip.clock_ghz)
                                    if fab.dram_setup_ns else 0)


def vector_floor_cycles(op: VectorOp, chip, cores: int) -> int:
    """A lower bound of ``vector_stats(op, chip, cores).cycles`` that runs no DRAM model:
    :func:`vector_stats` with the DRAM stream's time taken as 0 (its memory cycles are the
    larger of the stream's and the DMA ports', plus the setup, and at least the resident
    bytes' cycles, so they are at least the ports' plus the setup; its cycles,
    ``max(compute, mem) + ceil(min(compute, mem) / chunks)``, do not fall as ``mem`` rises).
    ``split_k_reduction`` skips a core count whose floor cannot beat the best so far."""
    _, compute, on_chip, rd, wr, dma_bpc = _sizes(op, chip, cores)
    mem = math.ceil((rd + wr) / dma_bpc) + _setup_cycles(chip, fabric(chip), rd + wr)
    nchunks = max(1, math.ceil((rd + wr + on_chip) / (CHUNK_BYTES * cores)))
    return max(max(compute, mem) + math.ceil(min(compute, mem) / nchunks), 1)


def vector_stats(op: VectorOp, chip, cores: int | None = None) -> OpStats:
    """Time a vector op on ``chip`` (uncached; see :func:`diptych.sim.simulate`), spread over
    ``cores`` of its tensor cores (default: all of them)."""
    cores = chip.tensor_cores if cores is None else cores
    if not 1 <= cores <= chip.tensor_cores:
        raise ValueError(f"cores must be 1..{chip.tensor_cores}, not {cores!r}")
    ops, compute, on_chip, rd, wr, dma_bpc = _sizes(op, chip, cores)
    fab = fabric(chip)
    chunk = CHUNK_BYTES * cores
    done = 0.0
    if rd + wr > 0:
        done = stream_ns(chip.dram, fab.ns_per_byte, int(math.ceil(rd)), int(math.ceil(wr)),
                         chunk)
    # the stack's own kernel of this kind may stream below the copy rate
    mem_ns = done / stream_fraction(op, chip)
    setup = _setup_cycles(chip, fab, rd + wr)
    mem = max(math.ceil(mem_ns * chip.clock_ghz), math.ceil((rd + wr) / dma_bpc)) + setup
    if on_chip:
        # resident bytes at the scratchpads' bandwidth (every core) and the shared buffer's
        sp = op.scratchpad_read_bytes + op.scratchpad_write_bytes
        sb = op.shared_buffer_read_bytes + op.shared_buffer_write_bytes
        local = sp / (cores * chip.core.scratchpad.bytes_per_cycle)
        if sb:
            local += sb / chip.shared_buffer.bytes_per_cycle
        mem = max(mem, math.ceil(local))
    nchunks = max(1, math.ceil((rd + wr + on_chip) / chunk))
    cycles = max(compute, mem) + math.ceil(min(compute, mem) / nchunks)
    cycles = max(cycles, 1)
    seconds = cycles / chip.clock_hz
    en = chip.energy
    # DRAM bytes pass the scratchpad twice (in, out to the unit), resident bytes once
    sram = 2.0 * (rd + wr) + on_chip
    e = {"mac": 0.0, "sram": sram * en.pj_per_sram_byte * 1e-12,
         "dram": (rd + wr) * 8 * en.pj_per_dram_bit * 1e-12,
         "vector": ops * en.pj_per_vector_op * 1e-12, "static": en.static_w * seconds,
         **fab.energy_j(rd + wr, rd + wr)}
    mem_bound = mem > compute
    return OpStats(
        name=op.name, kind="vector", cycles=cycles, seconds=seconds, compute_cycles=compute,
        array_busy_cycles=compute, stall_cycles=cycles - compute,
        stall_breakdown={"fill_drain": cycles - max(compute, mem) if not mem_bound else 0,
                         "dram": (mem - compute) + (cycles - mem) if mem_bound else 0,
                         "writeback": 0},
        macs=0, flops=float(ops), utilization=0.0, dram_read_bytes=rd, dram_write_bytes=wr,
        sram_read_bytes=sram / 2, sram_write_bytes=sram / 2,
        dram_bytes_per_s=(rd + wr) / seconds, energy_j=sum(e.values()), energy_breakdown=e,
        bound=regime(compute / cycles, (rd + wr) / memory_roof_bytes_per_s(chip) / seconds
                     if chip.has_dram else 0.0),
        mapping={"unit": "vector", "cores": cores, "chunk_bytes": CHUNK_BYTES,
                 "vector_cycles": compute, "memory_cycles": mem})

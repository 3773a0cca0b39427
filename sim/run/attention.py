"""Timing a fused (FlashAttention-style) attention record on a chip, from its parts.

The record (:class:`~diptych.workloads.fused_attention.FusedAttention`) carries the ops the
kernel runs on chip (the QKᵀ and PV GEMMs and the softmax, with their unfused shapes) and the
fused kernel's own DRAM traffic; the rule (:func:`fused_stats`)::

    seconds = max(Σ compute time of the parts,  dram_bytes ÷ streaming bandwidth)

where a part's compute time is the engine's ``compute_cycles`` (the same schedule with
unlimited DRAM bandwidth, fill and drain included) ÷ the clock, and the streaming bandwidth is
the highest DRAM bandwidth the engine achieves on any of the parts (the same kind of data
movement at larger size; capped at the chip's peak), × ``core.vector.in_kernel_expand_stream``
when the kernel expands a KV cache narrower than its queries in registers
(:func:`expand_stream_fraction`). On a chip with an ``[attention]`` table a
record with kernel calls (training, prefill) takes the compute time of its tiles instead
(:mod:`diptych.sim.run.attention_tiles`: whole key blocks, a fixed cost per tile, the
exponentials on the special-function units, overlapped or not).
"""

from __future__ import annotations

from types import SimpleNamespace

from ...workloads.fused_attention import FusedAttention, on_chip
from ...workloads.ops import Gemm
from ..support import dequant_place
from .. import energy_parts as EP
from ..regime import roof_regime
from .attention_tiles import tile_shaped_parts, tiled, tiled_compute_seconds, work_scale


def expand_stream_fraction(op: FusedAttention, chip) -> float:
    """The share of its streaming rate ``op`` keeps on ``chip``: the chip's
    ``core.vector.in_kernel_expand_stream`` when the kernel expands a cache narrower than its
    queries in registers on the way into the arrays (a part whose B operand the vector unit
    dequantises, ``core.vector.on_array_input_path``: :mod:`.precision_ops`), else 1."""
    v = chip.core.vector
    if v.in_kernel_expand_stream == 1.0 or not v.on_array_input_path:
        return 1.0
    if any(dequant_place(chip, g) == "vector" for g in op.gemms):
        return v.in_kernel_expand_stream
    return 1.0


def on_chip_seconds(op: FusedAttention, chip) -> float:
    """Time ``op``'s resident traffic takes at the scratchpads' (every core) and the shared
    buffer's bandwidth."""
    t = op.scratchpad_bytes / (chip.tensor_cores * chip.core.scratchpad.bytes_per_cycle)
    if op.shared_buffer_bytes:
        t += op.shared_buffer_bytes / chip.shared_buffer.bytes_per_cycle
    return t / chip.clock_hz


def _compute_seconds(st, chip) -> float:
    cc = getattr(st, "compute_cycles", None)
    if cc is None:               # a test double without an unlimited-bandwidth schedule
        return st.seconds
    return cc / chip.clock_hz


def _kernel_mac_energy_j(op: FusedAttention, chip, shaped, work: float) -> float:
    """The tiled kernel's energy per MAC beyond the chip's (``[attention] pj_per_mac``) over
    the MACs its tiles compute: the matrix-product parts' MACs scaled by the tile rule's
    work (whole key blocks), J; 0 for a chip without a tiled kernel or that energy."""
    if not tiled(op, chip) or not chip.attention.pj_per_mac:
        return 0.0
    macs = sum(p.batch * p.m * p.n * p.k for p in shaped if isinstance(p, Gemm))
    return macs * work * chip.attention.pj_per_mac * 1e-12


def fused_stats(op: FusedAttention, chip, simulate) -> SimpleNamespace:
    """Time, energy and bound of ``op`` on ``chip`` by the rule in the module docstring.

    Energy: the parts' energy without their DRAM and static shares (by the tiles' work over
    the parts' under the tile rule: whole key blocks are computed), plus the fused traffic at
    the parts' mean DRAM energy per byte, plus static power (the parts' mean) × the time;
    ``energy_parts`` the same by component (:mod:`diptych.sim.energy_parts`): the parts'
    MAC, vector and SRAM energy, their DRAM, NoC and D2D energy each scaled to the fused
    traffic, the static over the time, the resident bytes' SRAM energy."""
    shaped = tile_shaped_parts(op, chip) if tiled(op, chip) else op.parts
    sts = [simulate(p if chip.has_dram else on_chip(p), chip) for p in shaped]
    if tiled(op, chip):
        t_comp = tiled_compute_seconds(op, chip, sts, _compute_seconds)
    else:
        t_comp = sum(_compute_seconds(st, chip) for st in sts)
    peak_bw = chip.dram_bytes_per_s
    achieved = [min(st.dram_bytes_per_s, peak_bw) for st in sts
                if getattr(st, "dram_bytes_per_s", 0.0) > 0.0]
    bw = (max(achieved) if achieved else peak_bw) * expand_stream_fraction(op, chip)
    t_mem = op.dram_bytes / bw if op.dram_bytes else 0.0
    if op.scratchpad_bytes or op.shared_buffer_bytes:   # resident operands (per operand)
        t_mem = max(t_mem, on_chip_seconds(op, chip))
    seconds = max(t_comp, t_mem)
    bound = roof_regime(chip, seconds=seconds, mac_flops=op.gemm_flops,
                        dtype=op.compute_dtype, vector_ops=op.vector_flops,
                        dram_bytes=op.dram_bytes)
    parts = EP.summed((EP.of_stats(st), 1.0) for st in sts)
    # the core energy (MACs, SRAM, vector) of the blocks the tiles compute, not of the parts'
    # mean span (1 when not tiled)
    work = work_scale(op, chip) if tiled(op, chip) else 1.0
    if all(getattr(st, "energy_breakdown", None) for st in sts):
        part_bytes = sum(st.dram_read_bytes + st.dram_write_bytes for st in sts)
        dram_e = sum(sum(st.energy_breakdown.get(k, 0.0) for k in ("dram", "noc", "d2d"))
                     for st in sts)   # per-byte energies: DRAM, and the NoC/D2D it crosses
        static_e = sum(st.energy_breakdown.get("static", 0.0) for st in sts)
        part_s = sum(st.seconds for st in sts)
        energy = ((sum(st.energy_j for st in sts) - dram_e - static_e) * work
                  + (dram_e / part_bytes * op.dram_bytes if part_bytes else 0.0)
                  + (static_e / part_s * seconds if part_s else 0.0))
        per_byte = op.dram_bytes / part_bytes if part_bytes else 0.0
        for k in ("dram", "noc", "d2d"):
            parts[k] *= per_byte
        if work != 1.0:
            for k in parts:
                if k not in ("dram", "noc", "d2d", "static"):
                    parts[k] *= work
        parts["static"] = static_e / part_s * seconds if part_s else 0.0
        if op.scratchpad_bytes or op.shared_buffer_bytes:
            resident_j = ((op.scratchpad_bytes + op.shared_buffer_bytes)
                          * chip.energy.pj_per_sram_byte * 1e-12)
            energy += resident_j
            parts["sram"] += resident_j
        extra = _kernel_mac_energy_j(op, chip, shaped, work)
        energy += extra
        parts["mac"] += extra
    else:                        # a test double: no breakdown to re-cost
        energy = sum(st.energy_j for st in sts)
    peak = chip.peak_ops_per_s[op.compute_dtype]
    return SimpleNamespace(seconds=seconds, compute_seconds=t_comp, memory_seconds=t_mem,
                           stream_bytes_per_s=bw, bound=bound, energy_j=energy,
                           energy_parts=parts,
                           flops=op.flops,
                           utilization=op.gemm_flops / (peak * seconds) if seconds else 0.0)

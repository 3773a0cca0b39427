"""Small chips and direct engine runs for the sim tests."""

from __future__ import annotations

import dataclasses

from diptych.arch import load_chip
from diptych.sim import mapper as MP
from diptych.sim.array import array_rates
from diptych.sim.gemm import _groups, run_engine
from diptych.workloads.ops import Gemm


def small_chip(rows=8, cols=8, cores=1, arrays=1, spad_mib=1.0, gbps=None, dataflows=("os", "ws", "is"),
               base="tpu-v4", sb_mib=None, sb_bpc=64.0, load_rows=1, swap="wave"):
    """A small chip derived from ``base`` (one die); ``sb_mib`` adds a shared buffer (None:
    none); ``load_rows`` and ``swap``: the array's WS weight-install path
    (``weight_load_rows_per_cycle``, ``weight_swap``; at most ``rows`` rows)."""
    from diptych.arch import SharedBuffer
    c = load_chip(base)
    sbuf = None if sb_mib is None else SharedBuffer(capacity_mib=sb_mib, bytes_per_cycle=sb_bpc)
    arr = dataclasses.replace(c.core.array, rows=rows, cols=cols, dataflows=tuple(dataflows),
                              weight_load_rows_per_cycle=min(load_rows, rows), weight_swap=swap)
    sp = dataclasses.replace(c.core.scratchpad, capacity_mib=spad_mib, accumulator_mib=0.0)
    core = dataclasses.replace(c.core, array=arr, scratchpad=sp, arrays=arrays)
    dram = c.dram if gbps is None else dataclasses.replace(c.dram, gbps_per_pin=gbps)
    # one die (a chiplet [package] of the base would not split these cores)
    return dataclasses.replace(c, core=core, tensor_cores=cores, dram=dram, area_budget_mm2=0.0,
                               shared_buffer=sbuf, package=None)


def one_array_run(chip, m, k, n, dataflow, mb, kb, nb, order=0, memory=False, dtype="bf16",
                  batch=1, b_is_weight=True, active=1, arrays_per_core=1):
    """Run the engine on one array with a forced blocking; returns the output vector."""
    op = Gemm(name="t", m=m, k=k, n=n, batch=batch, a_dtype=dtype, b_dtype=dtype, c_dtype=dtype,
              b_is_weight=b_is_weight)
    mt = m * batch if b_is_weight else m
    bt = 1 if b_is_weight else batch
    split = MP.Split(pb=1, pm=1, pn=1, batch=bt, m=mt, n=n, active=active,
                     arrays_per_core=arrays_per_core)

    class V:
        pass
    v = V()
    v.a_dtype, v.b_dtype, v.c_dtype, v.acc_dtype = op.a_dtype, op.b_dtype, op.c_dtype, op.acc_dtype
    v.k, v.n, v.b_is_weight, v.batch, v.m = k, n, b_is_weight, bt, mt
    pb = MP.orient(v, dataflow, split, mt)
    rates = array_rates(chip, dtype)
    out, _, _ = run_engine(chip, pb, MP.Blocks(mb, kb, nb, order), rates, split, memory)
    return out, pb, rates, split


def golden_problem(chip, pb, blk, rates, split, memory):
    from diptych.sim import engine_ref as G
    from diptych.sim.fabric import fabric
    arr = chip.core.array
    eng, per = MP.dma_share(chip, split)
    t = pb.transposed
    return G.Problem(
        dataflow="os" if pb.dataflow == "os" else "ws", rows=arr.rows, cols=arr.cols, m=pb.m,
        k=pb.k, n=pb.n, batch=pb.batch, mb=blk.mb, kb=blk.kb, nb=blk.nb,
        order="mnk" if blk.order == 0 else "nmk", os_rate=(rates.os_num, rates.os_den),
        ws_rate=(rates.ws_num, rates.ws_den), stationary_rows=rates.stationary_rows,
        x=G.Operand(pb.x_base, pb.x_ld, pb.x_bits, t, pb.x_bstride),
        w=G.Operand(pb.w_base, pb.w_ld, pb.w_bits, t, pb.w_bstride),
        o=G.Operand(pb.o_base, pb.o_ld, pb.o_bits, t, pb.o_bstride), acc_bits=pb.acc_bits,
        engines=eng, max_outstanding=chip.dma.max_outstanding, setup_cycles=chip.dma.setup_cycles,
        memory=memory, clock_ghz=chip.clock_ghz, dma_bytes_per_cycle=per, share=float(split.active),
        x_sb=blk.x_sb, w_sb=blk.w_sb, x_dup=float(pb.x_dup), w_dup=float(pb.w_dup),
        sb_bytes_per_cycle=MP.shared_buffer_bpc(chip, split),
        x_src=_LOC[pb.x_src], w_src=_LOC[pb.w_src], o_dst=_LOC[pb.o_dst],
        sp_bytes_per_cycle=MP.scratchpad_bpc(chip, split),
        dram_setup_ns=fabric(chip).dram_setup_ns, fabric_ns_per_byte=fabric(chip).ns_per_byte,
        x_cdup=float(pb.x_cdup), w_cdup=float(pb.w_cdup), tail_from=split.tail_from,
        share_tail=float(split.tail_active or split.active),
        ws_load_rows_per_cycle=arr.weight_load_rows_per_cycle,
        ws_swap_wave=arr.weight_swap == "wave")


_LOC = {0: "dram", 1: "scratchpad", 2: "shared_buffer"}


def check_more_bandwidth_or_scratchpad(op, chip, slack: float) -> None:
    """Twice the DRAM pin rate, or twice the scratchpad, is never slower (within ``slack``)."""
    from diptych.sim.gemm import gemm_stats
    base = gemm_stats(op, chip).cycles * slack
    fast = dataclasses.replace(chip, dram=dataclasses.replace(
        chip.dram, gbps_per_pin=chip.dram.gbps_per_pin * 2))
    assert gemm_stats(op, fast).cycles <= base
    sp = chip.core.scratchpad
    big = dataclasses.replace(chip, core=dataclasses.replace(
        chip.core, scratchpad=dataclasses.replace(sp, capacity_mib=sp.capacity_mib * 2)))
    assert gemm_stats(op, big).cycles <= base


def picked_candidates(chip, op, per_group: int, stride: int, rng):
    """The mapper's candidates a test plays on ``chip`` for GEMM ``op``: of every
    ``stride``-th group of the search, the first, the last and ``per_group`` random rows of
    its candidate table (groups whose scratchpad fits no blocking skipped). Yields
    ``(placed block, candidate, rates, split)``, the arguments ``gemm.run_engine`` takes."""
    rates = array_rates(chip, op.compute_dtype)
    folded = op.b_is_weight and op.batch > 1
    m_total, b = (op.m * op.batch, 1) if folded else (op.m, op.batch)
    groups = _groups(op, chip, rates, chip.core.array.dataflows, m_total, b)
    for g in groups[::stride]:
        split, peak, df, (view, mt, layout) = g[3], g[4], g[6], g[7]
        pb = MP.orient(view, df, split, mt, chip.tensor_cores, layout)
        try:
            cs, _, _ = MP.candidate_table(chip, pb, rates, split, peak)
        except ValueError:
            continue
        picks = {0, len(cs) - 1} | {rng.randrange(len(cs)) for _ in range(per_group)}
        for i in picks:
            yield pb, cs, i, rates, split, df


def _gemm_case_draws() -> dict:
    from hypothesis import strategies as st
    return dict(base=st.sampled_from(["infer-2026", "h100", "tpu-v4"]),
                rows=st.sampled_from([4, 8, 16]), cols=st.sampled_from([4, 8, 16]),
                cores=st.sampled_from([1, 3, 4]), arrays=st.sampled_from([1, 2, 4]),
                load_rows=st.sampled_from([1, 4]), swap=st.sampled_from(["wave", "global"]),
                sb=st.booleans(), m=st.integers(1, 70), k=st.integers(1, 300),
                n=st.integers(1, 90), batch=st.integers(1, 4), weight=st.booleans(),
                dtype=st.sampled_from(["bf16", "int8", "fp8", "int4"]),
                res=st.sampled_from(["dram", "a_sp", "c_sp", "b_sb", "c_sb"]))


#: hypothesis strategies for :func:`random_gemm_case`'s arguments (``@given(**GEMM_CASE_DRAWS)``)
GEMM_CASE_DRAWS = _gemm_case_draws()


def random_gemm_case(base, rows, cols, cores, arrays, load_rows, swap, sb, m, k, n, batch,
                     weight, dtype, res):
    """A small chip derived from preset ``base`` and a GEMM on it, from a property test's
    draws: ``dtype`` mapped to one ``base`` supports, ``res`` the operand residency
    (``dram``, ``a_sp``/``c_sp`` scratchpad, ``b_sb``/``c_sb`` shared buffer, the latter
    only with ``sb``). Returns ``(chip, op)``."""
    if base != "infer-2026":
        dtype = {"fp8": "bf16" if base == "tpu-v4" else "fp8", "int4": "int8"}.get(dtype, dtype)
    chip = small_chip(rows=rows, cols=cols, cores=cores, arrays=arrays, spad_mib=0.05,
                      base=base, sb_mib=0.5 if sb else None, load_rows=load_rows, swap=swap)
    kw = {"a_sp": dict(a_source="scratchpad", resident_bytes=1 << 12),
          "c_sp": dict(c_dest="scratchpad", resident_bytes=1 << 12),
          "b_sb": dict(b_source="shared_buffer"), "c_sb": dict(c_dest="shared_buffer"),
          "dram": {}}[res if sb or res[2:] != "sb" else "dram"]
    op = Gemm(name="g", m=m, k=k, n=n, batch=batch, b_is_weight=weight, a_dtype=dtype,
              b_dtype=dtype, c_dtype="bf16", **kw)
    return chip, op

"""Chrome / Perfetto trace-event JSON of one GEMM's schedule (opens in ui.perfetto.dev).

The engine simulates one representative array: every active array plays the same schedule on
its own slice of the GEMM (docs/engine.md, "Tiles, waves and cores"). The trace shows that: one
process per active array (``array 3 (core 1)``), each with a track for DMA-in of X blocks,
DMA-in of W blocks, compute and write-back, one span per block, at the representative's
times. Every span's ``args`` carry the block's indices within its array (``block``), the
element ranges of the GEMM it covers (``gemm_range``, half-open, in C = A·B coordinates), the
bytes it moves (DMA) or the MACs it computes, and where a DMA-in reads from (DRAM or the shared
buffer). The last process is DRAM: one track per pseudo-channel with the representative
array's busy spans (each active array gets ``1/active`` of every channel). The file's
``otherData`` says all this and how many blocks are shown. Times are microseconds from the
start of the op.
"""

from __future__ import annotations

import json

from . import engine as E
from .api import simulate_gemm
from .gemm import plan, run_engine
from ..workloads.ops import Gemm

#: Blocks of the representative array the engine records.
MAX_BLOCKS = 20000
#: DRAM busy spans the engine records.
MAX_SPANS = 200000
#: Blocks shown over all arrays together (each array shows the same first blocks; the file
#: stays under ~40 MB): ``otherData.blocks_shown_per_array`` says how many of how many.
MAX_SHOWN_BLOCKS = 40000

_NOTE = ("The engine simulates one representative array; every active array runs the same "
         "schedule on its own slice of the GEMM (its tiles, wave after wave; a core's arrays "
         "share the operand blocks of its tile), so the arrays' tracks have the same times. "
         "args.block: the block's indices within its array; args.gemm_range: the half-open "
         "element ranges of C = A[m×k]·B[k×n] it covers. The DRAM tracks are the "
         "representative array's transfers; every array gets an equal share of each "
         "pseudo-channel.")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _block_bytes(rows: int, cols: int, bits: int, transposed: bool) -> int:
    """Bytes of an operand block of ``rows × cols`` elements as the engine's descriptor moves
    it (row-major, or column-major for the transposed operands of input stationary)."""
    if transposed:
        rows, cols = cols, rows
    return rows * _cdiv(cols * bits, 8)


def _share(nbytes: int, cdup: int):
    """One array's part of a block loaded once for the ``cdup`` arrays of its core."""
    return nbytes if cdup == 1 else nbytes / cdup


def _source(mode: int, dup: int, again: bool) -> str:
    """Where a DMA-in reads from, by the block's shared-buffer mode (mapper.Blocks)."""
    if mode == 0:
        return "DRAM"
    if mode == 2 and again:
        return "shared buffer (re-read)"
    return f"DRAM, read once for the {dup} arrays sharing it (copies via the shared buffer)"


def _arrays(split):
    """``(index, unit, qi, qj)`` of every array busy in a full wave: unit ``u`` (an array, or a
    core whose arrays take the ``qm × qn`` sub-tiles ``(qi, qj)`` of its tile)."""
    a = 0
    for u in range(split.units):
        for qi in range(split.qm):
            for qj in range(split.qn):
                yield a, u, qi, qj
                a += 1


def _origin(split, tile: int, qi: int, qj: int, m: int, n: int, k: int, batch: int):
    """``(batch0, m0, n0, k0)`` of an array's sub-tile of tile ``tile`` (raster order over
    batch, M, N and the split-K shares, the last fastest), clamped to the GEMM."""
    bs = split.batch // split.waves
    tile, kq = divmod(tile, split.pk)
    ib, r = divmod(tile, split.pm * split.pn)
    im, jn = divmod(r, split.pn)
    return (min(ib * bs, batch), min(im * split.m * split.qm + qi * split.m, m),
            min(jn * split.n * split.qn + qj * split.n, n), min(kq * split.k, k))


def gemm_trace(m, k, n, chip, *, dtype=None, dataflow=None) -> dict:
    """The trace file's content: ``{"traceEvents", "displayTimeUnit", "otherData"}``."""
    dtype = chip.default_dtype if dtype is None else dtype
    simulate_gemm(m, k, n, chip, dtype=dtype, dataflow=dataflow)  # validates the inputs
    op = Gemm(name="gemm", m=m, k=k, n=n, a_dtype=dtype, b_dtype=dtype, c_dtype=dtype,
              acc_dtype="fp32")
    p = plan(op, chip, dataflow)
    pb, blk, split = p["problem"], p["blocks"], p["split"]
    out, tb, tp = run_engine(chip, pb, blk, p["rates"], split, True, MAX_BLOCKS, MAX_SPANS)
    ghz = chip.clock_ghz
    recorded = int(out[E.O_NTRACE_BLOCKS])
    active = split.active
    shown = min(recorded, max(1, MAX_SHOWN_BLOCKS // active))
    dram_pid = active + 1
    ev: list[dict] = []

    def meta(pid, name, value, tid=None):
        e = {"ph": "M", "pid": pid, "name": name, "args": value}
        if tid is not None:
            e["tid"] = tid
        ev.append(e)

    def span(pid, tid, name, s_us, e_us, args):
        if e_us > s_us:
            ev.append({"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": s_us,
                       "dur": e_us - s_us, "args": args})

    t = pb.transposed
    bs = split.batch // split.waves          # batch elements of one tile
    for a, u, qi, qj in _arrays(split):
        b0, m0, n0, _ = _origin(split, u, qi, qj, m, n, k, op.batch)
        pid = a + 1
        core = a // split.arrays_per_core
        meta(pid, "process_name", {"name": f"array {a} (core {core})"})
        meta(pid, "process_sort_index", {"sort_index": pid})
        meta(pid, "process_labels", {"labels": f"C[{m0}:{min(m, m0 + split.m)}, "
                                               f"{n0}:{min(n, n0 + split.n)}]"})
        for tid, name in ((1, "DMA-in X"), (2, "DMA-in W"), (3, "compute"), (4, "write-back")):
            meta(pid, "thread_name", {"name": name}, tid)
        for b in range(shown):
            r = tb[b]
            bt, i, j, kk = (int(r[c]) for c in (E.T_BT, E.T_I, E.T_J, E.T_K))
            # the array's (bt // bs)-th tile is tile u + (bt // bs)·units of the grid (waves)
            tile = u + (bt // bs) * split.units
            if tile >= split.tiles:
                continue                     # this array has no tile in the last wave
            b0, m0, n0, k0 = _origin(split, tile, qi, qj, m, n, k, op.batch)
            # the block in the array's oriented problem (input stationary swaps M and N)
            mb = min(blk.mb, pb.m - i * blk.mb)
            kb = min(blk.kb, pb.k - kk * blk.kb)
            nb = min(blk.nb, pb.n - j * blk.nb)
            rows0, cols0 = (n0, m0) if t else (m0, n0)
            lim_r, lim_c = (n, m) if t else (m, n)
            r_rng = [min(lim_r, rows0 + i * blk.mb), min(lim_r, rows0 + i * blk.mb + mb)]
            c_rng = [min(lim_c, cols0 + j * blk.nb), min(lim_c, cols0 + j * blk.nb + nb)]
            rng = {"m": c_rng if t else r_rng, "n": r_rng if t else c_rng,
                   "k": [k0 + kk * blk.kb, k0 + kk * blk.kb + kb]}
            if op.batch > 1:
                rng["batch"] = [b0 + bt % bs, b0 + bt % bs + 1]
            base = {"block": {"batch": bt, "m": i, "n": j, "k": kk}, "gemm_range": rng}
            lab = (f"block b{bt} " if op.batch > 1 else "block ") + f"m{i} n{j} k{kk}"
            x_src = _source(blk.x_sb, pb.x_dup, j > 0)
            w_src = _source(blk.w_sb, pb.w_dup, i > 0)
            # a block the core's arrays share is loaded once for them: this array's part
            span(pid, 1, lab, r[E.T_XS] / 1e3, r[E.T_XE] / 1e3,
                 {**base, "bytes": _share(_block_bytes(mb, kb, pb.x_bits, t), pb.x_cdup),
                  "source": x_src})
            span(pid, 2, lab, r[E.T_WS] / 1e3, r[E.T_WE] / 1e3,
                 {**base, "bytes": _share(_block_bytes(kb, nb, pb.w_bits, t), pb.w_cdup),
                  "source": w_src})
            span(pid, 3, lab, r[E.T_CS] / ghz / 1e3, r[E.T_CE] / ghz / 1e3,
                 {**base, "macs": mb * kb * nb})
            span(pid, 4, lab, r[E.T_OS] / 1e3, r[E.T_OE] / 1e3,
                 {**base, "bytes": _block_bytes(mb, nb, pb.o_bits, t)})
    meta(dram_pid, "process_name", {"name": "DRAM (array 0's transfers)"})
    meta(dram_pid, "process_sort_index", {"sort_index": dram_pid})
    pcs = set()
    for s in range(int(out[E.O_NTRACE_PC])):
        pc, a_, b_, w = tp[s]
        pcs.add(int(pc))
        span(dram_pid, int(pc), "write" if w else "read", a_ / 1e3, b_ / 1e3, {})
    for pc in sorted(pcs):
        meta(dram_pid, "thread_name", {"name": f"pseudo-channel {pc}"}, pc)
    other = {
        "gemm": f"C[{m}×{n}] = A[{m}×{k}]·B[{k}×{n}]", "chip": chip.name, "dtype": dtype,
        "dataflow": pb.dataflow, "active_arrays": active,
        "split": {"batch": split.pb, "m": split.pm, "n": split.pn},
        "waves": split.waves, "core_tile": {"m": split.qm, "n": split.qn},
        "block": {"m": blk.mb, "k": blk.kb, "n": blk.nb},
        "blocks_per_array": int(out[E.O_BLOCKS]), "blocks_shown_per_array": shown,
        "note": _NOTE,
    }
    return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": other}


def gemm_trace_events(m, k, n, chip, *, dtype=None, dataflow=None) -> list[dict]:
    """The trace events of :func:`gemm_trace`."""
    return gemm_trace(m, k, n, chip, dtype=dtype, dataflow=dataflow)["traceEvents"]


def write_gemm_trace(path, m, k, n, chip, *, dtype=None, dataflow=None) -> None:
    """Write :func:`gemm_trace` to ``path`` (its folder is created if missing)."""
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(gemm_trace(m, k, n, chip, dtype=dtype, dataflow=dataflow), fh)

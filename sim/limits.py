"""Size limits: what the simulator refuses to time, checked before it starts (docs/limits.md).

The engine plays a GEMM block by block and a vector op chunk by chunk, so its run time grows
with those counts (about 0.1-0.2 M blocks/s and 0.25 M chunks/s on one loaded core). Rather
than run for hours, a problem past a limit is refused with a message that states the limit.
The limits sit far above real workloads: a 405B-parameter model's prefill of 64 × 8k tokens
needs ~9·10³ blocks per array on ``infer-2026`` and a 16M-token training batch ~3·10⁵, while a
10¹⁸-MAC GEMM needs ~2·10⁷.

* :data:`MAX_ENGINE_BLOCKS`: GEMM blocks per array, estimated by :func:`min_blocks`;
* :data:`MAX_VECTOR_CHUNKS`: DRAM chunks of one vector op;
* :data:`MAX_OPERAND_BYTES`: bytes of one GEMM operand (addresses stay far from int64 overflow);
* :data:`MAX_BATCH`, :data:`MAX_TOKENS`: workload sizes (sequences; tokens of a prompt, a
  context, a generation or a training sequence), checked by ``run_workload``;
* serving (``diptych serve``, :mod:`diptych.sim.serving.requests`): :data:`MAX_REQUESTS`
  requests in a run (drawn, defaulted, estimated from ``qps × duration`` or read from a
  trace) and clients in a closed loop; arrival rates within :data:`QPS_RANGE` and their
  burstiness within :data:`BURSTINESS_RANGE`; no arrival
  later than :data:`MAX_ARRIVAL_S`, so that a clock in float64 seconds keeps a resolution of
  2 ns or better (10⁷ s × 2⁻⁵²) and a TTFT or TPOT never rounds to 0;
  :data:`MAX_SWEEP_POINTS` rates in a ``--sweep-qps`` curve; :data:`MAX_REPLICAS` replicas
  in a pool (``--replicas``, ``--prefill-chips`` / ``--decode-chips`` over the pool's TP);
* ``diptych plan``: at most :data:`MAX_REFINE` plans re-simulated with the engine
  (``--refine``, ``--top``).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..arch.dtypes import DTYPE_BYTES

MAX_ENGINE_BLOCKS = 2**20          # 1,048,576: ~5-10 s of engine time per GEMM
MAX_VECTOR_CHUNKS = 2**21          # ~8 s per vector op
MAX_OPERAND_BYTES = 2**48          # 256 TiB
MAX_BATCH = 2**20                  # 1,048,576 sequences
MAX_TOKENS = 2**24                 # 16,777,216 tokens (the longest published contexts are 10M)
#: Serving: the event loop advances ~75 requests of simulated traffic per second on a loaded
#: core (20,000 requests of llama-3-8b at 50 req/s: 4.5 min), so 10^5 is ~20-30 min.
MAX_REQUESTS = 100_000
QPS_RANGE = (1e-6, 1e9)            # requests per second
#: The gamma shape of bursty arrivals (vLLM's --burstiness; 1 = Poisson): gaps with a
#: coefficient of variation from ~32 (1e-3) to ~0.03 (1e3). Past the ends the gamma draw
#: underflows (5e-324: every gap NaN) or is a clock, not a load.
BURSTINESS_RANGE = (1e-3, 1e3)
MAX_ARRIVAL_S = 1e7                # ~116 days of simulated arrivals
MAX_SWEEP_POINTS = 100             # arrival rates of one --sweep-qps curve (each a full run)
#: Replicas (engine instances) in one serving pool: the largest cluster preset's pod (a TPU v4
#: pod, 4,096 chips). The event loop scans every replica of the entry pool per arrival:
#: 4,096 replicas of llama-3-8b took 33 s for 10,000 requests on a loaded core.
MAX_REPLICAS = 4096
MAX_REFINE = 256                   # plans re-simulated by `plan` (~0.4 s each, warm)


@lru_cache(maxsize=1024)
def _grid(extent: int) -> np.ndarray:
    """Candidate block extents: powers of √2 up to ``extent``, and ``extent`` itself, ascending
    and distinct (read-only: memoised per extent). The same array as :func:`_grid_ref`
    (``np.unique``, which imports ``numpy.ma``, ~45 ms of a command's start-up; compared in
    tests/sim/test_limits_memo.py)."""
    top = max(0.0, math.log2(extent))
    pts = np.exp2(np.arange(0.0, top + 0.5, 0.5))
    g = np.sort(np.append(np.minimum(np.floor(pts), extent), extent))
    g = g[np.concatenate(([True], g[1:] != g[:-1]))]
    g.setflags(write=False)
    return g


def _grid_ref(extent: int) -> np.ndarray:
    """The reference of :func:`_grid`."""
    top = max(0.0, math.log2(extent))
    pts = np.exp2(np.arange(0.0, top + 0.5, 0.5))
    return np.unique(np.append(np.minimum(np.floor(pts), extent), extent))


def min_blocks(op, chip) -> int:
    """An estimate of the blocks one array plays for the GEMM ``op`` spread over every array
    (the mapper's choice for any GEMM large enough to matter here): its share of the MACs
    (``op.macs`` ÷ arrays) over the largest block ``mb·kb·nb`` whose double-buffered operands
    (shared by the core's arrays in any sub-grid) fit one array's share of its core's
    scratchpad (the output in the accumulator SRAM when the
    chip has one and it fits there, else in the scratchpad). The mapper's blocks are aligned to
    the array, so it plays up to ~2× more. Memoised on the numbers it reads (an op is checked
    when lowered and again when simulated; tests/sim/test_limits_memo.py compares it with
    the unmemoised original)."""
    sp = chip.core.scratchpad
    return _min_blocks(sp.capacity_mib, sp.accumulator_mib, chip.core.arrays, chip.arrays,
                       op.a_dtype, op.b_dtype, op.acc_dtype,
                       op.m * op.batch if op.b_is_weight else op.m, op.k, op.n, op.macs)


@lru_cache(maxsize=4096)
def _min_blocks(capacity_mib, accumulator_mib, per_core: int, arrays: int, a_dtype: str,
                b_dtype: str, acc_dtype: str, m_ext: int, k: int, n: int, macs: int) -> int:
    cap = capacity_mib * 2**20 / per_core
    acc = accumulator_mib * 2**20 / per_core
    xb, wb = DTYPE_BYTES[a_dtype], DTYPE_BYTES[b_dtype]
    ab = DTYPE_BYTES[acc_dtype]
    mb = _grid(m_ext)[:, None]
    nb = _grid(n)[None, :]
    out = 2.0 * mb * nb * ab
    room = np.where(out <= acc, cap, cap - out)
    vol = 0.0
    # a core's arrays may share its operand blocks as qm × qn sub-tiles (docs/engine.md, "Tiles,
    # waves and cores"): an X block then counts 1/qn of its bytes per array, a W block 1/qm
    subs = [(1, 1)] + [(q, per_core // q) for q in range(1, per_core + 1) if per_core % q == 0]
    for qm, qn in subs:
        if qm > m_ext or qn > n:
            continue       # a sub-tile per array needs that many rows and columns
        with np.errstate(divide="ignore", invalid="ignore"):
            kb = np.minimum(k, room / (2.0 * (mb * xb / qn + nb * wb / qm)))
        vol = max(vol, np.where(kb >= 1.0, mb * nb * kb, 0.0).max())
    if vol <= 0:
        return 1  # not even a minimal block fits: the mapper says so with its own message
    return max(1, math.ceil(macs / arrays / vol))


def check_sources(op, chip) -> None:
    """ValueError if ``op`` reads or writes a memory ``chip`` lacks: DRAM on an all-SRAM chip
    (the operand must be resident: the residency planner places every tensor of such a chip
    on chip), or the shared buffer on a chip without one."""
    from ..workloads.ops import Gemm
    if isinstance(op, Gemm):
        what = f"GEMM {op.m}×{op.k}×{op.n}"
        ends = (("A", op.a_source, op.a_bytes), ("B", op.b_source, op.b_bytes),
                ("C", op.c_dest, op.c_bytes))
    else:
        what = f"vector op {op.kind} over {op.elements:,} elements"
        sb = op.shared_buffer_read_bytes + op.shared_buffer_write_bytes
        ends = (("its reads", "dram", op.dram_read_bytes),
                ("its writes", "dram", op.dram_write_bytes),
                ("its on-chip bytes", "shared_buffer" if sb else "dram", sb))
    for name, loc, nbytes in ends:
        if loc == "dram" and nbytes > 0 and not chip.has_dram:
            raise ValueError(f"{what}: {name} ({nbytes:,.0f} bytes) in DRAM, but chip "
                             f"{chip.name!r} has no DRAM (an all-SRAM chip): every operand "
                             f"must be resident on chip")
        if loc == "shared_buffer" and nbytes > 0 and chip.shared_buffer is None:
            raise ValueError(f"{what}: {name} in the shared buffer, but chip {chip.name!r} "
                             f"has no [shared_buffer]")


def check_gemm(op, chip, sources: bool = True) -> None:
    """ValueError stating the limit if ``op`` is past :data:`MAX_OPERAND_BYTES` or
    :data:`MAX_ENGINE_BLOCKS` on ``chip``, or reads a memory the chip lacks
    (:func:`check_sources`; ``sources=False`` skips that: a lowered op before residency)."""
    if sources:
        check_sources(op, chip)
    shape = f"GEMM {op.m}×{op.k}×{op.n}" + (f" (batch {op.batch})" if op.batch > 1 else "")
    big = max(op.a_bytes, op.b_bytes, op.c_bytes)
    if big > MAX_OPERAND_BYTES:
        raise ValueError(f"{shape}: an operand of {big:.3g} bytes is larger than the "
                         f"{MAX_OPERAND_BYTES:.3g} bytes (256 TiB) the simulator addresses")
    blocks = min_blocks(op, chip)
    if blocks > MAX_ENGINE_BLOCKS:
        raise ValueError(f"{shape}: needs about {blocks:,} blocks per array on {chip.name} "
                         f"(at the largest block its scratchpad holds); the engine plays at "
                         f"most {MAX_ENGINE_BLOCKS:,} (sim/limits.py): split it into smaller "
                         "GEMMs or use a smaller problem")


def vector_chunks(op, chip) -> int:
    """DRAM chunks the vector model plays for ``op`` (see :mod:`diptych.sim.vector`)."""
    from .vector import CHUNK_BYTES

    return math.ceil((float(op.read_bytes) + float(op.write_bytes))
                     / (CHUNK_BYTES * chip.tensor_cores))


def check_vector(op, chip, sources: bool = True) -> None:
    """ValueError stating the limit if ``op`` is past :data:`MAX_VECTOR_CHUNKS` on ``chip``, or
    reads a memory the chip lacks (:func:`check_sources`, unless ``sources`` is False)."""
    if sources:
        check_sources(op, chip)
    chunks = vector_chunks(op, chip)
    if chunks > MAX_VECTOR_CHUNKS:
        nbytes = float(op.read_bytes) + float(op.write_bytes)
        raise ValueError(f"vector op {op.kind} over {op.elements:,} elements moves {nbytes:.3g} "
                         f"bytes: {chunks:,} DRAM chunks on {chip.name}, more than the "
                         f"{MAX_VECTOR_CHUNKS:,} the simulator plays (sim/limits.py)")


def check_ops(ops, chip) -> None:
    """:func:`check_gemm` / :func:`check_vector` of every distinct GEMM and vector op in
    ``ops`` (others are skipped): a workload is refused before its first op is simulated.
    Where the operands live is not checked here (the residency plan decides it later)."""
    import dataclasses

    from ..workloads.ops import Gemm, VectorOp

    seen = set()
    for op in ops:
        if isinstance(op, (Gemm, VectorOp)):
            key = dataclasses.replace(op, name="", tags=())
            if key not in seen:
                seen.add(key)
                (check_gemm if isinstance(op, Gemm) else check_vector)(op, chip, False)


def check_sizes(**sizes: int | None) -> None:
    """ValueError naming the first size past its limit: ``batch`` and ``micro_batch`` against
    :data:`MAX_BATCH`, every other keyword (prompt, gen, seq, context ...) against
    :data:`MAX_TOKENS`. None is skipped; positivity and type are the caller's checks."""
    for name, v in sizes.items():
        if v is None or isinstance(v, bool) or not isinstance(v, int):
            continue
        limit, unit = ((MAX_BATCH, "sequences") if "batch" in name else (MAX_TOKENS, "tokens"))
        if v > limit:
            raise ValueError(f"{name} must be at most {limit:,} {unit} (sim/limits.py), "
                             f"not {v:,}")

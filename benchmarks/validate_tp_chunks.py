"""Transformer Engine's comm-GEMM overlap chunks against the whole GEMM (issue 21; docs/cluster.md,
"Tensor-parallel overlap", "The chunks"; sim/run/tp_overlap.py): how much longer a GEMM takes
as the equal chunks TE's userbuffers split it into, on the h100 preset's engine, against the
same ratio in XLA's measured H100 GEMM table (component rows: single GEMMs, no collective).

    python benchmarks/validate_tp_chunks.py [--out FILE]     # ~10 s warm

The measurement: XLA's default matmul performance table for ``sm_90`` (H100), BF16 FLOPS of
single dots by (b, m, n, k) [S: tensorflow/tensorflow 372d578
third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h, ``kDefaultMatmulPTable``
(``C[m×n] = A[m×k]·B[k×n]``)]. For a whole GEMM and its chunk, both in the table, the chunks
take ``chunks · t_chunk / t_whole = chunks · (flops_chunk / F_chunk) / (flops_whole /
F_whole) = F_whole / F_chunk`` of the whole (equal FLOPs in all): the ring exchange's row
chunks (``m / 4``, every chunk multiplying the whole weight) and the pipeline's output-column
chunks (``n / 4``, every chunk reading the whole input). The table stops at 4096 (the system
rows' GEMMs are 8k-12k wide), and its GEMMs ran one at a time: it measures each chunk alone,
what ``diptych``'s ``serial`` column computes; the ``streams`` column is the chunks as TE
issues them on its three streams (:func:`~diptych.sim.run.tp_overlap.chunked_s`; the same
here, every chunk being at least one full wave).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from diptych.arch.loader import load_chip
from diptych.sim.api import simulate
from diptych.sim.run.tp_overlap import chunked_s
from diptych.workloads.ops import Gemm

#: XLA's measured BF16 FLOPS on sm_90, b = 1, by (m, n, k) (module docstring)
XLA_SM90_BF16 = {
    (4096, 4096, 4096): 783328793548203, (1024, 4096, 4096): 738474431911967,
    (2048, 4096, 4096): 753643516181744, (512, 4096, 4096): 644116271145770,
    (4096, 2048, 4096): 758434522012648, (1024, 2048, 4096): 653525151552039,
    (2048, 2048, 4096): 737966889347079, (512, 2048, 4096): 430530001603849,
    (4096, 4096, 2048): 738736406437117, (1024, 4096, 2048): 634224349675132,
    (2048, 4096, 2048): 715350982011992, (512, 4096, 2048): 522247968871595,
    (4096, 1024, 4096): 738474431911967, (2048, 1024, 4096): 653127630170316,
    (4096, 1024, 2048): 631984593290170,
}
CHUNKS = 4
#: (whole (m, n, k), how it is split: "rows" = ring exchange, "cols" = pipelined
#: reduce-scatter), every whole GEMM whose quarter the table also holds
PAIRS = [((4096, 4096, 4096), "rows"), ((2048, 4096, 4096), "rows"),
         ((4096, 2048, 4096), "rows"), ((2048, 2048, 4096), "rows"),
         ((4096, 4096, 2048), "rows"), ((2048, 4096, 2048), "rows"),
         ((4096, 4096, 4096), "cols"), ((2048, 4096, 4096), "cols"),
         ((4096, 4096, 2048), "cols")]


def chunk_of(whole: tuple, split: str) -> tuple:
    m, n, k = whole
    return (m // CHUNKS, n, k) if split == "rows" else (m, n // CHUNKS, k)


def ratios(chip) -> list[tuple]:
    """(whole, split, chunk, measured, diptych serial, diptych on TE's streams) per pair:
    the chunks' seconds over the whole GEMM's."""
    def run(mnk):
        m, n, k = mnk
        return simulate(Gemm(name="g", m=m, k=k, n=n), chip)

    out = []
    for whole, split in PAIRS:
        chunk = chunk_of(whole, split)
        w, c = run(whole), run(chunk)
        measured = XLA_SM90_BF16[whole] / XLA_SM90_BF16[chunk]
        streams = chunked_s(c.seconds, c.mapping, CHUNKS, chip.tensor_cores) / w.seconds
        out.append((whole, split, chunk, measured, CHUNKS * c.seconds / w.seconds, streams))
    return out


def table(chip) -> str:
    rows = ["| whole m × n × k (XLA) | split | chunk | measured (XLA sm_90) | diptych serial "
            "| diptych ÷ measured | diptych on TE's 3 streams |", "|---|---|---|---|---|---|---|"]
    for whole, split, chunk, meas, serial, streams in ratios(chip):
        rows.append(f"| {' × '.join(map(str, whole))} | {split} | "
                    f"{' × '.join(map(str, chunk))} | {meas:.3f} | {serial:.3f} | "
                    f"{serial / meas:.3f} | {streams:.3f} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    args = ap.parse_args()
    text = (f"{CHUNKS} chunks' seconds ÷ the whole GEMM's, BF16, h100 preset\n\n"
            f"{table(load_chip('h100'))}\n")
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

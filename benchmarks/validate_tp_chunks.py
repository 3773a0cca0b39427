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
chunks (``n / 4``, every chunk reading the whole input). The pairs are built from the table
by one rule (:func:`pairs`): b = 1, the whole GEMM and its quarter chunk both in the table,
every dimension of the whole at least 2048 (16 pairs: both splits of every whole GEMM in
{2048, 4096}³; the system rows' GEMMs are 8k-12k wide, beyond the table's 4096). The
headline is the chunks' extra time, ``(diptych − 1) / (measured − 1)`` per pair (0: the
chunks at the whole GEMM's rate); the trend at smaller shapes (every dimension at least
1024) is printed too. The table's GEMMs ran one at a time: it measures each chunk alone,
what ``diptych``'s ``serial`` column computes; the ``streams`` column is the chunks as TE
issues them on its three streams (:func:`~diptych.sim.run.tp_overlap.chunked_s`; the same
here, every chunk being at least one full wave).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from diptych.arch.loader import load_chip
from diptych.sim.api import simulate
from diptych.sim.run.tp_overlap import chunked_s
from diptych.workloads.ops import Gemm

#: XLA's measured BF16 FLOPS on sm_90, b = 1, by (m, n, k): every b = 1 entry of the table
#: (each of m, n, k in 256, 512, 1024, 2048, 4096; module docstring)
XLA_SM90_BF16 = {
    (256, 256, 256): 6452775384615, (256, 256, 512): 11459846994535,
    (256, 256, 1024): 19463127610208, (256, 256, 2048): 31126560296846,
    (256, 256, 4096): 84307618090452, (256, 512, 256): 11459846994535,
    (256, 512, 512): 21959706806282, (256, 512, 1024): 39107729603729,
    (256, 512, 2048): 62368832713754, (256, 512, 4096): 91678775956284,
    (256, 1024, 256): 22671913513513, (256, 1024, 512): 41838443890274,
    (256, 1024, 1024): 72471775377969, (256, 1024, 2048): 118987347517730,
    (256, 1024, 4096): 172294901155327, (256, 2048, 256): 41838443890274,
    (256, 2048, 512): 78215459207459, (256, 2048, 1024): 138084082304526,
    (256, 2048, 2048): 215784128617363, (256, 2048, 4096): 285873755058572,
    (256, 4096, 256): 78033562790697, (256, 4096, 512): 138084082304526,
    (256, 4096, 1024): 225197530201342, (256, 4096, 2048): 324589426844014,
    (256, 4096, 4096): 412026793553338, (512, 256, 256): 11459846994535,
    (512, 256, 512): 21788592207792, (512, 256, 1024): 39290903981264,
    (512, 256, 2048): 60133390681003, (512, 256, 4096): 91056803256445,
    (512, 512, 256): 21620123711340, (512, 512, 512): 40721398058252,
    (512, 512, 1024): 71240832271762, (512, 512, 2048): 114716006837606,
    (512, 512, 4096): 174535407022106, (512, 1024, 256): 43464290155440,
    (512, 1024, 512): 80466263788968, (512, 1024, 1024): 138654677685950,
    (512, 1024, 2048): 216480206451612, (512, 1024, 4096): 309614136101499,
    (512, 2048, 256): 79324898345153, (512, 2048, 512): 143395008547008,
    (512, 2048, 1024): 232613046793760, (512, 2048, 2048): 342392163265306,
    (512, 2048, 4096): 430530001603849, (512, 4096, 256): 134217728000000,
    (512, 4096, 512): 236298816901408, (512, 4096, 1024): 373345557719054,
    (512, 4096, 2048): 522247968871595, (512, 4096, 4096): 644116271145770,
    (1024, 256, 256): 21959706806282, (1024, 256, 512): 40920039024390,
    (1024, 256, 1024): 68338965376782, (1024, 256, 2048): 113168404721753,
    (1024, 256, 4096): 169681072060682, (1024, 512, 256): 42908480818414,
    (1024, 512, 512): 82241254901960, (1024, 512, 1024): 141281818947368,
    (1024, 512, 2048): 220029062295081, (1024, 512, 4096): 298925897550111,
    (1024, 1024, 256): 82040176039119, (1024, 1024, 512): 145572373101952,
    (1024, 1024, 1024): 236298816901408, (1024, 1024, 2048): 349981037809648,
    (1024, 1024, 4096): 470114633975481, (1024, 2048, 256): 139519467775467,
    (1024, 2048, 512): 237553500884955, (1024, 2048, 1024): 373345557719054,
    (1024, 2048, 2048): 524288000000000, (1024, 2048, 4096): 653525151552039,
    (1024, 4096, 256): 209715200000000, (1024, 4096, 512): 338933656565656,
    (1024, 4096, 1024): 490293070319634, (1024, 4096, 2048): 634224349675132,
    (1024, 4096, 4096): 738474431911967, (2048, 256, 256): 43577184415584,
    (2048, 256, 512): 77314359447004, (2048, 256, 1024): 135847902834008,
    (2048, 256, 2048): 216131607085346, (2048, 256, 4096): 307486203894616,
    (2048, 512, 256): 83886080000000, (2048, 512, 512): 142784817021276,
    (2048, 512, 1024): 235883528998242, (2048, 512, 2048): 347714321243523,
    (2048, 512, 4096): 451152026890756, (2048, 1024, 256): 141579881856540,
    (2048, 1024, 512): 238397385435168, (2048, 1024, 1024): 373345557719054,
    (2048, 1024, 2048): 523265996101364, (2048, 1024, 4096): 653127630170316,
    (2048, 2048, 256): 213044012698412, (2048, 2048, 512): 345476777348777,
    (2048, 2048, 1024): 493901482980680, (2048, 2048, 2048): 631984593290170,
    (2048, 2048, 4096): 737966889347079, (2048, 4096, 256): 299259148272017,
    (2048, 4096, 512): 450395060402684, (2048, 4096, 1024): 594212409518539,
    (2048, 4096, 2048): 715350982011992, (2048, 4096, 4096): 753643516181744,
    (4096, 256, 256): 82241254901960, (4096, 256, 512): 137236940695296,
    (4096, 256, 1024): 217180789644012, (4096, 256, 2048): 304694047673098,
    (4096, 256, 4096): 376223484232655, (4096, 512, 256): 142481664543524,
    (4096, 512, 512): 238821580071174, (4096, 512, 1024): 370767204419889,
    (4096, 512, 2048): 521740439261418, (4096, 512, 4096): 649964784503632,
    (4096, 1024, 256): 216480206451612, (4096, 1024, 512): 343707370038412,
    (4096, 1024, 1024): 488064465454545, (4096, 1024, 2048): 631984593290170,
    (4096, 1024, 4096): 738474431911967, (4096, 2048, 256): 304003913929784,
    (4096, 2048, 512): 447019910074937, (4096, 2048, 1024): 593227527071823,
    (4096, 2048, 2048): 716066571523841, (4096, 2048, 4096): 758434522012648,
    (4096, 4096, 256): 392162828341855, (4096, 4096, 512): 543116754678806,
    (4096, 4096, 1024): 677439636593059, (4096, 4096, 2048): 738736406437117,
    (4096, 4096, 4096): 783328793548203,
}
CHUNKS = 4
#: The smallest dimension of the checked whole GEMMs (the system rows' GEMMs are larger still)
MIN_DIM = 2048


def chunk_of(whole: tuple, split: str) -> tuple:
    m, n, k = whole
    return (m // CHUNKS, n, k) if split == "rows" else (m, n // CHUNKS, k)


def pairs(min_dim: int = MIN_DIM) -> list[tuple]:
    """(whole (m, n, k), split) for every whole GEMM of the table (b = 1) with every dimension
    at least ``min_dim`` whose quarter chunk the table also holds, both splits: ``rows``
    (the ring exchange, ``m / 4``) and ``cols`` (the pipelined reduce-scatter, ``n / 4``)."""
    return [(whole, split) for whole in sorted(XLA_SM90_BF16) if min(whole) >= min_dim
            for split in ("rows", "cols") if chunk_of(whole, split) in XLA_SM90_BF16]


def extra_ratio(serial: float, measured: float) -> float:
    """The chunks' extra time over the whole GEMM's, diptych's over the measured:
    ``(diptych − 1) / (measured − 1)`` (0: chunks at the whole GEMM's rate)."""
    return (serial - 1.0) / (measured - 1.0)


def ratios(chip, min_dim: int = MIN_DIM) -> list[tuple]:
    """(whole, split, chunk, measured, diptych serial, diptych on TE's streams) per pair of
    :func:`pairs`: the chunks' seconds over the whole GEMM's."""
    def run(mnk):
        m, n, k = mnk
        return simulate(Gemm(name="g", m=m, k=k, n=n), chip)

    out = []
    for whole, split in pairs(min_dim):
        chunk = chunk_of(whole, split)
        w, c = run(whole), run(chunk)
        measured = XLA_SM90_BF16[whole] / XLA_SM90_BF16[chunk]
        streams = chunked_s(c.seconds, c.mapping, CHUNKS, chip.tensor_cores) / w.seconds
        out.append((whole, split, chunk, measured, CHUNKS * c.seconds / w.seconds, streams))
    return out


def summary(got: list[tuple]) -> str:
    """One line: how many pairs, diptych's extra time over the measured (headline) and the
    chunks' time over the measured, each min-max and median."""
    ext = [extra_ratio(serial, meas) for _, _, _, meas, serial, _ in got]
    rel = [serial / meas for _, _, _, meas, serial, _ in got]
    return (f"{len(got)} pairs: extra time diptych ÷ measured {min(ext):.2f}-{max(ext):.2f} "
            f"(median {statistics.median(ext):.3f}; summed {sum(s - 1 for *_, s, _ in got):.2f} "
            f"of {sum(m - 1 for *_, m, _, _ in got):.2f}); chunks' time diptych ÷ measured "
            f"{min(rel):.3f}-{max(rel):.3f} (median {statistics.median(rel):.3f})")


def table(chip) -> str:
    rows = ["| whole m × n × k (XLA) | split | chunk | measured (XLA sm_90) | diptych serial "
            "| extra time diptych ÷ measured | diptych ÷ measured | diptych on TE's 3 streams |",
            "|---|---|---|---|---|---|---|---|"]
    for whole, split, chunk, meas, serial, streams in ratios(chip):
        rows.append(f"| {' × '.join(map(str, whole))} | {split} | "
                    f"{' × '.join(map(str, chunk))} | {meas:.3f} | {serial:.3f} | "
                    f"{extra_ratio(serial, meas):.3f} | {serial / meas:.3f} | {streams:.3f} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    args = ap.parse_args()
    chip = load_chip("h100")
    text = (f"{CHUNKS} chunks' seconds ÷ the whole GEMM's, BF16, h100 preset\n\n"
            f"every dimension >= {MIN_DIM}: {summary(ratios(chip))}\n"
            f"every dimension >= 1024: {summary(ratios(chip, 1024))}\n\n"
            f"{table(chip)}\n")
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

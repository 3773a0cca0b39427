"""Existing workload formats: SCALE-Sim topology CSVs and plain GEMM lists.

Accepted (the header row decides; trailing commas and blank lines are ignored):

* SCALE-Sim convolution topology: ``Layer name, IFMAP Height, IFMAP Width, Filter Height,
  Filter Width, Channels, Num Filter, Strides[, Strides W]``. Lowered by im2col as SCALE-Sim
  does (no padding): ``OFMAP = (IFMAP − Filter) // Stride + 1``, ``M = OFMAP_H·OFMAP_W``,
  ``K = Filter_H·Filter_W·Channels``, ``N = Num Filter``; the filters are the weights.
* SCALE-Sim GEMM topology (``Layer, M, N, K``): ``C[M×N] = A[M×K]·B[K×N]``, B the weights
  (SCALE-Sim maps it to a conv with IFMAP ``M×K`` and ``N`` filters of ``1×K``).
* A plain GEMM list: any header naming ``m``, ``n`` and ``k`` columns (any order, any case),
  optionally ``name`` and ``batch``.

Malformed rows raise ValueError naming the file and line number.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ..arch.schema import check_columns, read_text_file
from .ops import Gemm

_CONV_COLS = ("ifmap height", "ifmap width", "filter height", "filter width", "channels",
              "num filter")


def _norm(h: str) -> str:
    return " ".join(h.strip().lower().replace("_", " ").split())


def _int(path, line: int, col: str, text: str) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        shown = text.strip() if len(text.strip()) <= 40 else text.strip()[:40] + "..."
        raise ValueError(f"{path}:{line}: column {col!r} must be an integer, not "
                         f"{shown!r}") from None
    if v < 1:
        raise ValueError(f"{path}:{line}: column {col!r} must be a positive integer, not {v}")
    return v


def load_topology(path: str | Path, *, dtype: str = "bf16", acc_dtype: str = "fp32"
                  ) -> list[Gemm]:
    """The GEMMs of a topology CSV (see the module docstring), in file order."""
    path = Path(path)
    text = read_text_file(path, "topology file", error=ValueError)
    reader = csv.reader(text.splitlines())
    try:  # csv.Error: a field over csv.field_size_limit() (128 KiB), a NUL byte ...
        rows = [(reader.line_num, r) for r in reader]
    except csv.Error as exc:
        raise ValueError(f"{path}:{reader.line_num}: invalid CSV ({exc})") from None
    rows = [(n, [c for c in r]) for n, r in rows if any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"{path}: empty topology file")
    hline, header = rows[0]
    while header and not header[-1].strip():
        header = header[:-1]
    cols = [_norm(h) for h in header]
    check_columns(path, hline, cols, error=ValueError)
    out: list[Gemm] = []
    is_conv = all(c in cols for c in _CONV_COLS)
    if not is_conv and not all(c in cols for c in ("m", "n", "k")):
        raise ValueError(f"{path}:{hline}: unrecognised header {', '.join(header)!r}: expected "
                         f"a SCALE-Sim conv header (Layer name, IFMAP Height, IFMAP Width, "
                         f"Filter Height, Filter Width, Channels, Num Filter, Strides) or "
                         f"columns M, N, K")
    stride_cols = [i for i, c in enumerate(cols) if c.startswith("stride")]
    name_col = next((i for i, c in enumerate(cols) if c in ("layer name", "layer", "name")), None)
    for line, r in rows[1:]:
        while r and not r[-1].strip() and len(r) > len(cols):
            r = r[:-1]
        if len(r) < len(cols):
            raise ValueError(f"{path}:{line}: expected {len(cols)} columns "
                             f"({', '.join(header)}), got {len(r)}")
        get = lambda c: r[cols.index(c)]  # noqa: E731
        name = r[name_col].strip() if name_col is not None else f"gemm{len(out)}"
        if is_conv:
            ih, iw, fh, fw, ch, nf = (_int(path, line, c, get(c)) for c in _CONV_COLS)
            sh = _int(path, line, cols[stride_cols[0]], r[stride_cols[0]]) if stride_cols else 1
            sw = (_int(path, line, cols[stride_cols[1]], r[stride_cols[1]])
                  if len(stride_cols) > 1 else sh)
            if fh > ih or fw > iw:
                raise ValueError(f"{path}:{line}: filter ({fh}x{fw}) is larger than the IFMAP "
                                 f"({ih}x{iw})")
            oh, ow = (ih - fh) // sh + 1, (iw - fw) // sw + 1
            m, k, n, batch = oh * ow, fh * fw * ch, nf, 1
        else:
            m, n, k = (_int(path, line, c.upper(), get(c)) for c in ("m", "n", "k"))
            batch = _int(path, line, "batch", get("batch")) if "batch" in cols else 1
        out.append(Gemm(name=name, m=m, k=k, n=n, batch=batch, a_dtype=dtype, b_dtype=dtype,
                        c_dtype=dtype, acc_dtype=acc_dtype, tags=("weight", "topology")))
    if not out:
        raise ValueError(f"{path}: no layers after the header")
    return out

"""CSV cells that spreadsheets do not run as formulas (CSV/formula injection).

Excel, LibreOffice and Google Sheets treat a cell that begins with ``=``, ``+``, ``-`` or ``@``
(and, in some, a tab or carriage return) as a formula. Every CSV diptych writes passes its
string cells through :func:`safe_cell`: such a cell gets a leading single quote, which
spreadsheets show as text and do not display. Numbers, and strings that read as numbers
("-1.5"), are unchanged.
"""

from __future__ import annotations

from typing import Any

_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def safe_cell(v: Any) -> Any:
    """``v`` unchanged unless it is a string a spreadsheet would run; then ``"'" + v``."""
    if isinstance(v, str) and v.startswith(_TRIGGERS) and not _is_number(v):
        return "'" + v
    return v


def safe_rows(rows: list[dict]) -> list[dict]:
    """``rows`` with :func:`safe_cell` applied to every value (and key)."""
    return [{safe_cell(k): safe_cell(v) for k, v in r.items()} for r in rows]


def safe_table(table):
    """A ``pyarrow.Table`` with :func:`safe_cell` applied to its string columns and names."""
    import pyarrow as pa

    cols = []
    for col in table.columns:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = pa.array([safe_cell(v) for v in col.to_pylist()], type=col.type)
        cols.append(col)
    return pa.Table.from_arrays(cols, names=[safe_cell(n) for n in table.column_names])

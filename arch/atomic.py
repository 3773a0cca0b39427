"""Atomic output files: written under a temporary name in the same directory, synced, then
renamed into place, so an interrupted or failed write (Ctrl-C, a full disk) never leaves a
partial or empty file under the final name, and the error names the file.

It sits beside the checked reader (:func:`diptych.arch.schema.read_text_file`) at the bottom
of the layers, so that the simulator's own writers (the serving profile export, the QPS
plot, traces) and the tools use the same one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


def fsync_dir(path: Path) -> None:
    """Make a rename in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(final: str | Path, write: Callable) -> Path:
    """Write ``final`` through ``write(binary file object)``: to ``.NAME.tmp`` beside it,
    fsync, rename. On failure the temporary file is removed and an OSError names ``final``
    (``No space left on device: writing out/compare.csv``)."""
    final = Path(final)
    tmp = final.parent / f".{final.name}.tmp"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise OSError(exc.errno, f"{exc.strerror or exc}: writing {final}") from None
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_dir(final.parent)
    return final


def atomic_text(final: str | Path, text: str) -> Path:
    """:func:`atomic_write` of ``text`` as UTF-8."""
    return atomic_write(final, lambda fh: fh.write(text.encode("utf-8")))


def atomic_csv(final: str | Path, fieldnames: list[str], rows) -> Path:
    """:func:`atomic_write` of ``rows`` (dicts) as a UTF-8 CSV with the header
    ``fieldnames``."""
    import csv
    import io

    def write(fh):
        t = io.TextIOWrapper(fh, encoding="utf-8", newline="")
        w = csv.DictWriter(t, fieldnames=fieldnames)
        w.writeheader()
        w.writerows(rows)
        t.flush()
        t.detach()
    return atomic_write(final, write)

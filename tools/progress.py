"""A rich progress display on stderr for commands that take more than a moment.

The library reports progress through ``progress(done, total, label)`` callbacks and never
prints; :func:`progress_display` turns such a callback into a live bar with the current step,
a spinner and the elapsed time. It stays quiet (the callback does nothing) when ``enabled`` is
false (``--json``) or when stderr is not a terminal (pipes, files, CI logs, tests).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

ProgressFn = Callable[[int, int, str], None]


def _noop(done: int, total: int, label: str) -> None:
    return None


@contextlib.contextmanager
def progress_display(title: str, *, enabled: bool = True,
                     console=None) -> Iterator[ProgressFn]:
    """``with progress_display("compare") as progress: work(progress=progress)``.

    The bar disappears when the block ends (the command's own output follows); a step that
    takes long keeps the spinner and the clock moving. ``console``: a rich Console to draw
    on (default: stderr)."""
    if not enabled:          # --json: no bar, and no rich import (~20-30 ms, issue 27)
        yield _noop
        return
    from rich.console import Console

    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield _noop
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                               TextColumn, TimeElapsedColumn)

    with Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[title]}[/]"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"),
                  console=console, transient=True) as bar:
        task = bar.add_task("starting", total=None, title=title)

        def update(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        yield update

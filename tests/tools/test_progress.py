"""The progress display draws on a terminal only, and never under --json."""

from __future__ import annotations

import io

from rich.console import Console

from diptych.tools.progress import progress_display


def _draw(enabled: bool, terminal: bool) -> str:
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=terminal, width=120)
    with progress_display("compare", enabled=enabled, console=con) as progress:
        progress(0, 3, "infer-2026: train")
        progress(2, 3, "infer-2026: decode b=8 ctx=1024")
        progress(3, 3, "done")
    return buf.getvalue()


def test_draws_on_a_terminal():
    out = _draw(enabled=True, terminal=True)
    assert "compare" in out and "3/3" in out and "done" in out   # the last state drawn


def test_quiet_when_not_a_terminal_or_disabled():
    assert _draw(enabled=True, terminal=False) == ""
    assert _draw(enabled=False, terminal=True) == ""

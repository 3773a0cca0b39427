"""``diptych warmup``: compile the engine's kernels ahead of the first simulation."""

from __future__ import annotations

import click

from .errors import friendly


@click.command("warmup")
@friendly
def warmup():
    """Compile the engine's Numba kernels now (once per install; ~20-30 s of CPU), so that
    the first `run`, `compare` or `serve` starts at once. Compiled code is cached on disk
    (next to the sources, or under NUMBA_CACHE_DIR); docs/limits.md, "First run"."""
    from ..sim.warmup import cold_kernels, warmup as do_warmup
    from .progress import progress_display

    cold = cold_kernels()
    with progress_display("warmup", enabled=True) as progress:
        seconds = do_warmup(progress)
    state = (f"compiled {', '.join(cold)}" if cold else "already compiled: loaded from the "
             "cache")
    click.echo(f"engine kernels ready in {seconds:.1f} s ({state})")

"""``diptych cache``: the persistent result cache (see diptych.sim.cache)."""

from __future__ import annotations

import json

import click

from .errors import friendly


@click.group("cache")
def cache():
    """The persistent cache of simulated op results and serving step-time pieces.

    Op results are kept per (op shape and dtypes, chip, dataflow, diptych version and source),
    `serve`'s grid pieces per (piece, replica, diptych version and source), in
    $DIPTYCH_CACHE_DIR, else $XDG_CACHE_HOME/diptych, else ~/.cache/diptych. Turn it off for
    one command with `diptych --no-cache ...` or for a shell with DIPTYCH_NO_CACHE=1.
    """


@cache.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@friendly
def info(as_json):
    """Where the cache is, how many results it holds and their size."""
    from ..sim import cache as C

    d = C.info()
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    click.echo(f"location  {d['location']}")
    click.echo(f"entries   {d['entries']}")
    click.echo(f"size      {d['bytes'] / 2**20:.2f} MiB")
    click.echo(f"enabled   {'yes' if d['enabled'] else 'no (DIPTYCH_NO_CACHE or --no-cache)'}")


@cache.command("clear")
@friendly
def clear():
    """Delete every cached result."""
    from ..sim import cache as C

    n = C.clear()
    click.echo(f"removed {n} cached result{'s' if n != 1 else ''} from {C.cache_dir()}")

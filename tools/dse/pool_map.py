"""A ``map`` over the sweep's executor (:class:`~.pool.Pool`: a local process pool or Dask)
for library code that takes one: ``diptych serve-plan --jobs/--scheduler`` hands it to
:func:`diptych.sim.serving.search.search` (sim/ may not import tools/, so the executor comes
down as a callable).

:func:`pool_mapper` yields None (run here, serially) for one local job and no scheduler, else
``mapper(fn, items)``, which submits every item at once and yields ``fn(item)`` as each
finishes (any order). On the way out of an interrupted or failed run (Ctrl-C, an error in a
task) the pool is closed without waiting: queued tasks are cancelled and local workers, which
ignore SIGINT, are terminated (:meth:`Pool.close`). A local worker that dies (out of memory,
a segfault) breaks the pool: the run stops with a ClickException saying so (the step pieces
simulated so far stay in the user's cache, so a rerun resumes from them).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import click

from .pool import Pool, local_workers


def scheduler_option(what: str):
    """The ``--scheduler tcp://HOST:PORT`` click option of a command whose work can run on
    a Dask cluster (``diptych sweep``, ``serve-plan``); ``what`` ends "Run ... on this Dask
    distributed scheduler"."""
    return click.option(
        "--scheduler", default=None, metavar="tcp://HOST:PORT",
        help=f"Run {what} on this Dask distributed scheduler. The cluster runs the code it is "
             f"sent and diptych unpickles the results it returns: use only a cluster you "
             f"trust.")


@contextmanager
def pool_mapper(jobs: int | None, scheduler: str | None, items: int, *,
                oversubscribe: bool = False, log=None,
                executor: cf.Executor | None = None) -> Iterator[Callable | None]:
    """The mapper of ``jobs`` local workers (capped as :func:`~.pool.local_workers` caps a
    sweep's, ``items`` the tasks to run), of the Dask ``scheduler``, or of a given
    ``executor`` (tests); None for ``jobs`` 1 (or None) without either."""
    if executor is None and not scheduler and (jobs or 1) == 1:
        yield None
        return
    if executor is None and not scheduler:
        jobs = local_workers(jobs, items, oversubscribe=oversubscribe, log=log)
    pool = Pool(scheduler=scheduler, jobs=jobs, executor=executor)

    def mapper(fn: Callable, tasks: list) -> Iterable:
        futures = [pool.executor.submit(fn, t) for t in tasks]
        for fut in cf.as_completed(futures):
            try:
                yield fut.result()
            except cf.BrokenExecutor as exc:
                raise click.ClickException(
                    f"a worker process died ({exc}); the pieces simulated so far are in the "
                    f"cache: run the command again") from None

    try:
        yield mapper
    except BaseException:
        pool.close(wait=False)
        raise
    pool.close()

"""The ``diptych`` command: a thin click layer over the library API.

Subcommands register themselves here; each lives in its own module under ``tools/``.
"""

from __future__ import annotations

import importlib

import click

#: (module under diptych.tools, attribute) of every subcommand, imported on first use; a
#: module that is missing is skipped so that partial installs still work.
COMMANDS = [
    ("chips_cmd", "chips"),
    ("gemm_cmd", "gemm"),
    ("models_cmd", "models"),
    ("run_cmd", "run"),
    ("serve_cmd", "serve"),
    ("serve_plan_cmd", "serve-plan"),
    ("serve_plan_afd_cmd", "serve-plan-afd"),
    ("rtl_cmd", "rtl"),
    ("floorplan_cmd", "floorplan"),
    ("compare_cmd", "compare"),
    ("sweep_cmd", "sweep"),
    ("sweep_cmd", "pareto"),
    ("plan_cmd", "plan"),
    ("cache_cmd", "cache"),
    ("warmup_cmd", "warmup"),
]

#: Commands that simulate, so that a first run compiles the engine's kernels: they say so.
SIMULATING = frozenset({"run", "compare", "serve", "serve-plan", "serve-plan-afd", "gemm", "plan",
                        "sweep"})


class LazyGroup(click.Group):
    """A group whose subcommands (:data:`COMMANDS`) are imported only when they are used or
    listed, so that ``diptych chips list`` does not import the engine (or Numba)."""

    def __init__(self, *args, lazy=(), **kwargs):
        super().__init__(*args, **kwargs)
        self._lazy = {name: mod for mod, name in lazy}

    def list_commands(self, ctx):
        for name in list(self._lazy):
            self._load(name)
        return super().list_commands(ctx)

    def get_command(self, ctx, name):
        return super().get_command(ctx, name) or self._load(name)

    def _load(self, name):
        mod = self._lazy.get(name)
        if mod is None:
            return None
        try:
            m = importlib.import_module(f"{__package__}.{mod}")
        except ModuleNotFoundError as exc:  # a partial install: skip the command
            if exc.name != f"{__package__}.{mod}":
                raise
            self._lazy.pop(name)
            return None
        cmd = getattr(m, name.replace("-", "_"))     # serve-plan: serve_plan
        self.add_command(cmd, name)
        self._lazy.pop(name)
        return cmd


class _Main(LazyGroup):
    """The root group: Ctrl-C ends any command within a second with exit code 130 and one
    line (see :mod:`diptych.tools.interrupt`); the result cache's warnings print as one line
    (:func:`diptych.tools.errors.one_line_warnings`); the command runs with generation 0
    collected less often (:func:`diptych.tools.gc_pause.fewer_collections`). As the console
    command (:func:`_is_console`) it also freezes every object at exit
    (:func:`diptych.tools.gc_pause.freeze_at_exit`) and prepares the process before the
    command imports NumPy (:func:`diptych.tools.startup.prepare`: one BLAS thread, no
    transparent huge pages)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **kwargs):
        from .errors import one_line_warnings
        from .gc_pause import fewer_collections, freeze_at_exit, release
        from .interrupt import install

        if _is_console(args, standalone_mode):
            from .startup import prepare

            prepare()
            freeze_at_exit()
        restore = install()
        restore_warnings = one_line_warnings()
        try:
            with fewer_collections():     # the command's garbage cycles, collected less often
                return super().main(args=args, prog_name=prog_name,
                                    complete_var=complete_var,
                                    standalone_mode=standalone_mode, **kwargs)
        finally:
            release()      # a command's frozen objects back to the collector
            restore_warnings()
            restore()

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            from .interrupt import EXIT_CODE, report

            report()
            ctx.exit(EXIT_CODE)


@click.group(cls=_Main, lazy=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=lambda ctx, _p, v: _print_version(ctx) if v else None,
              help="Show the version and exit.")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.option("--no-cache", is_flag=True,
              help="Neither read nor write the persistent result cache (see `diptych cache`).")
@click.pass_context
def main(ctx: click.Context, debug: bool, no_cache: bool):
    """diptych: a cycle-approximate AI-accelerator simulator.

    What does this chip do for training, for prefill, for decode?
    """
    ctx.obj = {"debug": debug}
    if no_cache:   # through the environment, so that sweep workers see it too
        import os
        os.environ["DIPTYCH_NO_CACHE"] = "1"
    if ctx.invoked_subcommand in SIMULATING and not ctx.resilient_parsing:
        _first_run_notice()


def _is_console(args, standalone_mode) -> bool:
    """Whether ``main`` runs as the process's own command: the ``diptych`` console script
    (``[project.scripts]``: ``sys.exit(main())``) and ``python -m diptych.tools.cli`` call it
    with no arguments, so that click reads ``sys.argv`` and ends the process itself
    (standalone mode). An in-process caller (click's ``CliRunner``, a notebook, a host
    application) passes its arguments, or ``standalone_mode=False``: its interpreter is not
    the command's to finish."""
    return args is None and bool(standalone_mode)


def _print_version(ctx: click.Context) -> None:
    """``diptych --version``; the version is looked up only here (importlib.metadata is slow
    to import, issue 27)."""
    if ctx.resilient_parsing:
        return
    from . import installed_version
    click.echo(f"diptych, version {installed_version()}")
    ctx.exit()


def _stderr_is_tty() -> bool:
    import sys
    return sys.stderr.isatty()


def _first_run_notice() -> None:
    """One line on stderr, for a person at a terminal, when the engine's kernels are not
    compiled yet (a fresh install): the command will spend its first seconds compiling
    (docs/limits.md, "First run"). Scripts reading a redirected stderr get nothing."""
    if not _stderr_is_tty():
        return
    try:
        from ..sim.warmup import cold_kernels
        cold = cold_kernels()
    except Exception:  # noqa: BLE001 - a notice must never stop a command
        return
    if cold:
        click.echo("note: first run: compiling the engine's kernels (once per install, "
                   "~20-30 s of CPU; `diptych warmup` does it ahead)", err=True)


if __name__ == "__main__":  # pragma: no cover
    main()

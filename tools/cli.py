"""The ``diptych`` command: a thin click layer over the library API.

Subcommands register themselves here; each lives in its own module under ``tools/``.
"""

from __future__ import annotations

import importlib

import click

from . import __version__

#: (module under diptych.tools, attribute) of every subcommand; a module that is missing is
#: skipped so that partial installs still work.
COMMANDS = [
    ("chips_cmd", "chips"),
    ("gemm_cmd", "gemm"),
    ("models_cmd", "models"),
    ("run_cmd", "run"),
    ("serve_cmd", "serve"),
    ("rtl_cmd", "rtl"),
    ("floorplan_cmd", "floorplan"),
    ("compare_cmd", "compare"),
    ("sweep_cmd", "sweep"),
    ("sweep_cmd", "pareto"),
    ("plan_cmd", "plan"),
]


class _Main(click.Group):
    """The root group: Ctrl-C ends any command within a second with exit code 130 and one
    line (see :mod:`diptych.tools.interrupt`)."""

    def main(self, *args, **kwargs):
        from .interrupt import install

        restore = install()
        try:
            return super().main(*args, **kwargs)
        finally:
            restore()

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            from .interrupt import EXIT_CODE, report

            report()
            ctx.exit(EXIT_CODE)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="diptych")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool):
    """diptych: a cycle-approximate AI-accelerator simulator.

    What does this chip do for training, for prefill, for decode?
    """
    ctx.obj = {"debug": debug}


for _mod, _attr in COMMANDS:
    try:
        _m = importlib.import_module(f"{__package__}.{_mod}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"{__package__}.{_mod}":
            raise
        continue
    main.add_command(getattr(_m, _attr))


if __name__ == "__main__":  # pragma: no cover
    main()

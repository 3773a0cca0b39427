"""How the CLI turns library errors into short messages and exit code 2."""

from __future__ import annotations

import functools
import sys

import click


class UsageError(click.ClickException):
    """A bad input, reported as ``Error: <message>`` with exit code 2."""

    exit_code = 2


def friendly(fn):
    """Decorator for click commands: ValueError/OSError become exit 2 with a short message.

    With ``diptych --debug`` the traceback is shown instead.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except (ValueError, OSError, KeyError) as exc:
            ctx = click.get_current_context(silent=True)
            if ctx is not None and (ctx.find_root().obj or {}).get("debug"):
                raise
            msg = str(exc) if not isinstance(exc, KeyError) else str(exc.args[0])
            raise UsageError(msg) from None

    return wrapper


def echo_err(msg: str) -> None:
    click.echo(msg, err=True)
    sys.stderr.flush()

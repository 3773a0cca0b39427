"""How the CLI turns errors into short messages: one line, never a traceback.

* Bad input (``ValueError`` incl. ``ConfigError``, ``OSError``, ``KeyError``) → ``Error:
  <message>`` and exit code 2.
* Anything else is a bug in diptych: ``Error: internal error: <type>: <message> (rerun with
  diptych --debug ...)`` and exit code 1, as a last-resort net; its root cause is to be fixed.
* ``diptych --debug`` shows the traceback instead.
* A warning whose category says ``one_line`` (the result cache's :class:`CacheWarning`) is
  printed as ``Warning: <message>``, as ``run`` echoes the warnings it collects
  (:func:`one_line_warnings`); every other warning keeps Python's form.
"""

from __future__ import annotations

import functools
import sys
import warnings

import click


class UsageError(click.ClickException):
    """A bad input, reported as ``Error: <message>`` with exit code 2."""

    exit_code = 2


class InternalError(click.ClickException):
    """An unexpected exception (a bug), reported in one line with exit code 1."""

    exit_code = 1


def one_line(msg: str) -> str:
    """``msg`` with its lines joined by "; " (messages stay one line)."""
    return "; ".join(part.strip() for part in str(msg).splitlines() if part.strip())


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    return ctx is not None and bool((ctx.find_root().obj or {}).get("debug"))


def friendly(fn):
    """Decorator for click commands: errors become one line and an exit code (module
    docstring); with ``diptych --debug`` the traceback is shown instead."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except (ValueError, OSError, KeyError) as exc:
            if _debug():
                raise
            msg = str(exc) if not isinstance(exc, KeyError) else str(exc.args[0])
            raise UsageError(one_line(msg)) from None
        except Exception as exc:  # noqa: BLE001 - the last-resort net
            if _debug():
                raise
            raise InternalError(one_line(
                f"internal error: {type(exc).__name__}: {exc} (a bug in diptych; rerun with "
                "`diptych --debug ...` for the traceback and report it)")) from None

    return wrapper


def echo_err(msg: str) -> None:
    click.echo(msg, err=True)
    sys.stderr.flush()


def one_line_warnings():
    """While the CLI runs, print each warning whose category has a true ``one_line``
    attribute (:class:`diptych.sim.cache.CacheWarning`) as one line, ``Warning: <message>``,
    instead of Python's ``path:line: Category: message`` and the source line. Only the
    formatting changes: filters, ``warnings.catch_warnings`` and ``pytest.warns`` see the same
    warnings. Returns a callable that puts the previous formatter back."""
    previous = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None):
        if getattr(category, "one_line", False):
            return f"Warning: {one_line(message)}\n"
        return previous(message, category, filename, lineno, line)

    warnings.formatwarning = formatwarning

    def restore():
        warnings.formatwarning = previous

    return restore

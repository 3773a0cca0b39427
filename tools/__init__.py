"""diptych.tools: the ``diptych`` command line, reports, plots and design-space sweeps.

``diptych`` itself is the small Python API in ``tools/facade/`` (``import diptych``; see
docs/api.md); its subpackages live in the repository's top-level folders (``arch/``, ``sim/``,
``rtl/``, ``workloads/``, ``tools/``) and are mapped into it by ``pyproject.toml``.
"""



def installed_version() -> str:
    """The installed distribution's version; ``0.0.0+unknown`` in a source tree that was
    never installed."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("diptych")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def __getattr__(name: str):
    # ``__version__`` on first use: importlib.metadata costs ~30 ms of every command's
    # start-up (issue 27), and only --version, reports and provenance ask for it
    if name == "__version__":
        globals()["__version__"] = v = installed_version()
        return v
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

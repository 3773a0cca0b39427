"""diptych.tools: the ``diptych`` command line, reports, plots and design-space sweeps.

``diptych`` itself is the small Python API in ``tools/facade/`` (``import diptych``; see
docs/api.md); its subpackages live in the repository's top-level folders (``arch/``, ``sim/``,
``rtl/``, ``workloads/``, ``tools/``) and are mapped into it by ``pyproject.toml``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("diptych")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

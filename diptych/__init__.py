"""diptych: a cycle-approximate AI-accelerator microarchitecture simulator.

The subpackages live in the repository's top-level folders (``arch/``, ``sim/``, ``rtl/``,
``workloads/``, ``tools/``) and are mapped into this namespace by ``pyproject.toml``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("diptych")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

"""Build hook: compile the engine's Numba kernels into the wheel (issue 27 item 1).

Everything else about the package is in pyproject.toml. A regular (not editable) build runs
``diptych.sim.warmup.warmup`` on the freshly built package in a subprocess, so that Numba
writes its cache (``.nbi``/``.nbc`` files) into the built ``diptych/sim/__pycache__``, and
the wheel carries it: after ``pip install .`` (or a pip install from the source distribution)
the first simulation loads the kernels instead of compiling them (docs/limits.md, "First
run"). Numba 0.68 keys a cached kernel on the sha256 of its source file, its Numba version,
its Python version and the host CPU (name and features), not on paths or modification
times, so the cache is found at the installed path; on another CPU, Numba or Python it is
ignored and the kernels compile on first use as without it. ``DIPTYCH_BUILD_NO_WARMUP=1``
skips the step (a distributor building wheels for other machines); any failure only warns:
the wheel is the same without the cache.
"""

from __future__ import annotations

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

#: The check the subprocess runs: the package imported is the built one, then the warm-up.
_WARMUP = ("import os, sys, diptych.sim as s; "
           "sys.exit(3) if not os.path.abspath(s.__file__).startswith(sys.argv[1]) else None; "
           "from diptych.sim.warmup import warmup; print(f'{warmup():.1f}')")


class BuildPyWithKernels(build_py):
    """``build_py`` that then compiles the engine's kernels into the build directory."""

    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):
            self.compile_kernels()

    def compile_kernels(self) -> bool:
        """Run the warm-up on the package in ``build_lib``; True when the kernels were
        compiled there. Prints what it did; never raises (the wheel is valid without)."""
        if os.environ.get("DIPTYCH_BUILD_NO_WARMUP"):
            return False
        lib = os.path.abspath(self.build_lib)
        env = {k: v for k, v in os.environ.items()
               if k not in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT", "DIPTYCH_SRC")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (lib, os.environ.get("PYTHONPATH"))
                                            if p)
        env["DIPTYCH_NO_CACHE"] = "1"       # the result cache would skip the kernels
        print("diptych: compiling the engine's kernels into the wheel (~20-30 s of CPU; "
              "DIPTYCH_BUILD_NO_WARMUP=1 skips it)", flush=True)
        try:
            r = subprocess.run([sys.executable, "-c", _WARMUP, lib], env=env, cwd=lib,
                               capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.SubprocessError) as e:
            print(f"diptych: kernels not compiled ({e}); they compile on first use",
                  flush=True)
            return False
        if r.returncode != 0:
            why = ("the package imported is not the one built" if r.returncode == 3 else
                   ((r.stderr or r.stdout).strip().splitlines() or [f"exit {r.returncode}"])[-1])
            print(f"diptych: kernels not compiled ({why}); they compile on first use",
                  flush=True)
            return False
        print(f"diptych: kernels compiled in {r.stdout.strip()} s", flush=True)
        return True


if __name__ == "__main__":      # setuptools.build_meta runs this file as __main__
    setup(cmdclass={"build_py": BuildPyWithKernels})

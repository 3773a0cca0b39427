"""A tiny closed-form evaluator for testing the sweep machinery without the engine.

Not a performance model: time = max(compute, weight traffic) for a fixed 8e9-parameter toy, so
that rows depend on the chip and workload in an obvious way. ``batch == 13`` raises, to test
failure recording; ``FAKE_EVAL_DELAY_S`` slows each point down, to test killing a sweep.
"""

from __future__ import annotations

import os
import time

PARAMS = 8e9


def toy_eval(chip, workload):
    delay = float(os.environ.get("FAKE_EVAL_DELAY_S", "0"))
    if delay:
        time.sleep(delay)
    batch = workload.get("batch", 1)
    if batch == 13:
        raise RuntimeError("unlucky batch 13")
    tokens = batch * (workload.get("prompt", 2048) if workload["phase"] == "prefill" else 1)
    flops = 2 * PARAMS * tokens
    peak = chip.peak_ops_per_s[chip.default_dtype]
    seconds = max(flops / peak, PARAMS * 2 / chip.dram_bytes_per_s)
    energy = 0.5 * chip.tdp_w * seconds
    return {"seconds": seconds, "tokens_per_s": tokens / seconds, "energy_j": energy,
            "power_w": energy / seconds, "bound": "compute" if flops / peak > seconds / 2
            else "memory", "fits": True}


# ---- the engine replaced by the shared roofline double (tests/roofline_double.py)


def roofline_eval(chip, workload):
    """The default sweep evaluator with the engine replaced by :func:`roofline`."""
    from diptych.tools.dse.evaluate import result_metrics, run_phase
    from roofline_double import roofline

    return result_metrics(chip, run_phase(chip, workload, simulate=roofline))


def roofline_run(chip, model, *, variant=None, **kw):
    """``run_workload`` with the engine replaced by :func:`roofline` (for compare tests),
    under ``variant`` (None: as it is)."""
    from diptych.sim.run import Scenario, run_workload
    from roofline_double import roofline

    return run_workload(chip, model, Scenario.of(**kw), simulate=roofline, variant=variant)


# ---- evaluators that misbehave, for the reliability tests


def dying_eval(chip, workload):
    """:func:`toy_eval`, except that a point with ``batch == FAKE_EVAL_DIE_BATCH`` kills its own
    process with SIGKILL (as the kernel's out-of-memory killer or a segfault would): every
    time, or only the first time when ``FAKE_EVAL_DIE_ONCE`` names a directory for markers."""
    import signal
    from pathlib import Path

    die = os.environ.get("FAKE_EVAL_DIE_BATCH")
    if die and workload.get("batch") == int(die):
        marks = os.environ.get("FAKE_EVAL_DIE_ONCE")
        mark = Path(marks) / f"{chip.name}-{workload['phase']}" if marks else None
        if mark is None or not mark.exists():
            if mark is not None:
                mark.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    return toy_eval(chip, workload)


def late_metric_eval(chip, workload):
    """:func:`toy_eval` plus metrics no evaluator declares: ``late`` only for batch 8 (an int
    for prefill, a float for decode), ``label`` a string that starts like a formula."""
    out = toy_eval(chip, workload)
    if workload.get("batch") == 8:
        out["late"] = 3 if workload["phase"] == "prefill" else 2.5
    out["label"] = f"=HYPERLINK(\"x\",\"{workload['phase']}\")"
    return out


def oom_once_eval(chip, workload):
    """:func:`toy_eval`, except that a point with ``batch == FAKE_EVAL_OOM_BATCH`` raises
    MemoryError the first time (a marker per chip and phase in ``FAKE_EVAL_OOM_DIR``)."""
    from pathlib import Path

    oom = os.environ.get("FAKE_EVAL_OOM_BATCH")
    if oom and workload.get("batch") == int(oom):
        mark = Path(os.environ["FAKE_EVAL_OOM_DIR"]) / f"{chip.name}-{workload['phase']}"
        if not mark.exists():
            mark.touch()
            raise MemoryError("Unable to allocate 7.45 GiB")
    return toy_eval(chip, workload)


def nan_eval(chip, workload):
    """:func:`toy_eval` whose batch-8 points report a NaN time (a broken evaluator)."""
    out = toy_eval(chip, workload)
    if workload.get("batch") == 8:
        out["seconds"] = float("nan")
    return out

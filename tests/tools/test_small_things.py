"""Issue 23's small things a user hits, each with its test: advice that names only what
changes, every dtype in `gemm --help`, readable rates, the template's dtype tables."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from click.testing import CliRunner

from diptych.arch.dtypes import DTYPES
from diptych.tools.cli import main


def _run(*args):
    return CliRunner().invoke(main, list(args))


def test_fit_advice_names_only_the_dtypes_that_change():
    base = ["run", "--chip", "h100", "--model", "llama-3-70b", "--phase", "decode",
            "--batch", "8", "--prompt", "8000", "--json", "--no-waterfall"]
    bf16 = json.loads(_run(*base).output)["memory"]["advice"]
    assert "--weights-dtype fp8 --kv-dtype fp8" in bf16
    fp8w = json.loads(_run(*base, "--weights-dtype", "fp8").output)["memory"]["advice"]
    assert "--kv-dtype fp8" in fp8w and "--weights-dtype" not in fp8w


def test_gemm_help_lists_every_dtype():
    out = _run("gemm", "--help").output.replace("\n", "").replace(" ", "")
    assert "|".join(DTYPES) in out


def test_rates_read_as_numbers():
    out = _run("run", "--chip", "h100", "--model", "llama-3-8b", "--phase", "prefill",
               "--batch", "1", "--prompt", "512", "--no-waterfall").output
    line = next(x for x in out.splitlines() if "│ tokens/s " in x)
    assert "," in line and ".0 (" not in line      # 44,203 (44,203 per chip)


def test_template_does_not_count_the_dtypes_wrong(tmp_path):
    path = tmp_path / "mine.toml"
    r = _run("chips", "template", "h100", "-o", str(path))
    assert r.exit_code == 0, r.output
    text = path.read_text()
    assert "all six dtypes" not in text and "every dtype table lists every dtype" in text


def test_a_missing_rtl_extra_is_exit_2_with_both_install_forms(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "pyosys", None)     # import pyosys -> ImportError
    r = _run("rtl", "area", "--dtype", "int8")
    assert r.exit_code == 2, r.output
    assert 'pip install "diptych[rtl]"' in r.output and 'pip install ".[rtl]"' in r.output


def test_a_chip_name_must_be_a_name_and_long_values_are_cut_in_messages(tmp_path):
    from pathlib import Path
    import diptych.arch as arch
    src = (Path(arch.__file__).parent / "chips" / "h100.toml").read_text()
    for bad, why in (('""', "a non-empty string"), ('"   "', "a non-empty string"),
                     ('"a\\u0007b"', "printable characters"),
                     ('"' + "x" * 100_000 + '"', "at most 128 characters")):
        p = tmp_path / "c.toml"
        p.write_text(src.replace('name = "h100"', f"name = {bad}", 1))
        r = _run("chips", "validate", str(p))
        assert r.exit_code == 2 and why in r.output, r.output[:300]
        assert len(r.output) < 600                 # the 100 kB value is cut, its length said
    assert "(100,002 characters)" in r.output


def test_a_quantised_checkpoint_is_read_and_said(tmp_path):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tiny_models import TINY, write_config
    from diptych.workloads import load_model
    m = load_model("gpt-oss-20b")
    assert m.checkpoint_quant == "mxfp4"
    assert "mxfp4 weights (quantization_config)" in _run("models", "show",
                                                         "gpt-oss-20b").output
    run = ["run", "--chip", "h100", "--model", "gpt-oss-20b", "--phase", "decode",
           "--batch", "1", "--prompt", "256", "--no-waterfall", "--json"]
    warned = json.loads(_run(*run).stdout)["warnings"]
    assert any("ships mxfp4 weights" in w and "--weights-dtype mxfp4" in w for w in warned)
    quiet = json.loads(_run(*run, "--weights-dtype", "mxfp4").stdout)["warnings"]
    assert not any("ships mxfp4" in w for w in quiet)
    bad = write_config(tmp_path, {**TINY, "torch_dtype": "bfloat17"})
    r = _run("models", "show", bad)
    assert r.exit_code == 2 and "torch_dtype" in r.output and "bfloat17" in r.output
    bad = write_config(tmp_path, {**TINY, "quantization_config": {"bits": 4}}, "q.json")
    r = _run("models", "show", bad)
    assert r.exit_code == 2 and "quant_method" in r.output
    odd = write_config(tmp_path, {**TINY, "quantization_config": {"quant_method": "magic"}},
                       "o.json")
    r = _run("models", "show", odd)
    assert r.exit_code == 0 and "not a method transformers knows" in r.output


def test_gemm_prints_units_not_reprs():
    out = _run("gemm", "--chip", "tpu-v4", "2048", "2048", "2048").output
    assert "{'" not in out and "'m':" not in out          # no dict repr for the mapping
    assert "tile m " in out and "output split" in out
    energy = next(x for x in out.splitlines() if "│ energy" in x)
    assert any(u in energy for u in (" mJ", " J", " µJ")) and ",." not in energy


def test_outputs_are_atomic_and_a_failed_write_names_the_file(tmp_path, monkeypatch):
    import errno
    import os
    import pytest
    from diptych.arch import atomic

    target = tmp_path / "compare.csv"
    target.write_text("old, complete")

    def full_disk(fh):
        fh.write(b"half a ro")
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(OSError, match="No space left on device: writing .*compare.csv"):
        atomic.atomic_write(target, full_disk)
    assert target.read_text() == "old, complete"          # the old file, not a partial one
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    atomic.atomic_text(target, "new")
    assert target.read_text() == "new"
    # the report's files go through it: a full disk on compare.csv leaves no 0-byte file
    real = os.fsync

    def enospc(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(atomic.os, "fsync", enospc)
    from diptych.tools.dse.compare import CompareSettings, compare
    from diptych.tools.dse.report import write_report
    c = compare(["tpu-v5e"], "llama-3-8b", CompareSettings(prompts=(256,), batches=(1,),
                                                          contexts=(512,), ref_batch=1,
                                                          train_tp=1, train_batch=2,
                                                          train_seq=256))
    with pytest.raises(OSError, match="writing .*compare.csv"):
        write_report(c, tmp_path / "r")
    assert not (tmp_path / "r" / "compare.csv").exists()
    monkeypatch.setattr(atomic.os, "fsync", real)
    assert {p.name for p in write_report(c, tmp_path / "r")} >= {"compare.csv", "index.html",
                                                                  "roofline.svg"}


def test_impossible_results_are_refused_naming_the_metric():
    """Issue 22 item 2: the last check before a result is shown refuses a non-finite or
    negative time, energy, power or rate (a bug), naming the metric; settings and absent
    metrics pass."""
    from diptych.tools.result_check import ImpossibleResult, check_result

    good = {"seconds": 1.0, "energy_j": 2.0, "ttft_s": {"mean": 0.1, "p99": None},
            "mfu": 0.5, "config": {"step_host_fixed_us": -1.0},
            "waterfall": {"steps": [{"seconds": -1e-9}]}, "tokens_per_j": None}
    assert check_result(good, "run") is good
    for bad, name in (({"seconds": float("nan")}, "seconds = nan"),
                      ({"energy_j": -3.0}, "energy_j = -3.0"),
                      ({"ttft_s": {"p99": float("inf")}}, "ttft_s/p99 = inf"),
                      ({"curve": [{"tokens_per_s": -1.0}]}, "curve[0]/tokens_per_s")):
        with pytest.raises(ImpossibleResult, match=re.escape(name)):
            check_result(bad, "serve")


def test_an_impossible_result_is_an_internal_error_exit_1(monkeypatch):
    import diptych.sim as g

    real = g.simulate_gemm

    def broken(*a, **k):
        st = real(*a, **k)
        return dataclasses.replace(st, energy_j=-1.0)

    monkeypatch.setattr(g, "simulate_gemm", broken)
    r = CliRunner().invoke(main, ["gemm", "64", "64", "64", "--chip", "h100", "--json"])
    assert r.exit_code == 1, r.output
    assert "internal error: ImpossibleResult" in r.output and "energy_j = -1.0" in r.output


def test_the_serving_profile_export_is_atomic(tmp_path, monkeypatch):
    """Issue 22 item 8: `serve --export-profile` writes each file through arch/atomic.py; a
    full disk leaves no half-written CSV and the error names the file."""
    import errno
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from roofline_double import roofline
    from diptych.arch import atomic
    from diptych.sim.serving.profile import export_profile
    from diptych.sim.serving.step_time import make_replica

    r = make_replica("h100", "llama-3-8b")

    def enospc(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(atomic.os, "fsync", enospc)
    out = tmp_path / "prof"
    with pytest.raises(OSError, match="writing .*mlp.csv"):
        export_profile(r, out, max_tokens=32, max_batch=2, max_context=64, simulate=roofline)
    assert list(out.iterdir()) == []
    monkeypatch.undo()
    files = export_profile(r, out, max_tokens=32, max_batch=2, max_context=64,
                           simulate=roofline)
    assert {f.name for f in files} >= {"mlp.csv", "attention.csv", "steps.csv", "profile.json"}
    assert all(f.stat().st_size > 0 for f in files)


def test_a_first_run_says_it_is_compiling(monkeypatch):
    """Issue 23 item 2: a simulating command on a machine whose kernels are not compiled says
    so, once, on stderr; other commands and a warm machine say nothing."""
    import diptych.sim.warmup as jit
    import diptych.tools.cli as cli

    monkeypatch.setattr(cli, "_stderr_is_tty", lambda: True)     # a person at a terminal
    monkeypatch.setattr(jit, "cold_kernels", lambda: ["engine"])
    r = CliRunner().invoke(main, ["gemm", "64", "64", "64", "--chip", "h100", "--json"])
    assert r.exit_code == 0
    assert "first run: compiling the engine's kernels" in r.stderr
    json.loads(r.stdout)                              # the JSON itself is untouched
    r = CliRunner().invoke(main, ["chips", "list"])
    assert "first run" not in r.output
    monkeypatch.setattr(jit, "cold_kernels", lambda: [])
    r = CliRunner().invoke(main, ["gemm", "64", "64", "64", "--chip", "h100"])
    assert "first run" not in r.stderr


def test_cold_kernels_sees_an_empty_cache(tmp_path):
    """In a process whose Numba cache is an empty directory every kernel module is cold
    (read from the cache files: no kernel module is imported, so nothing compiles before the
    note is printed); in this one, after a simulation, the engine is warm."""
    import os
    import subprocess
    import sys

    from diptych.sim.warmup import KERNEL_MODULES, cold_kernels

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    code = ("import sys; from diptych.sim.warmup import KERNEL_MODULES, cold_kernels; "
            "print(','.join(cold_kernels())); print(any(m in sys.modules for m in KERNEL_MODULES))")
    out, imported = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                   text=True, check=True).stdout.split()
    out = out.split(",")
    assert set(out) == {m.rsplit(".", 1)[-1] for m in KERNEL_MODULES}
    assert imported == "False"
    from diptych.sim import simulate
    from diptych.arch import load_chip
    from diptych.workloads.ops import Gemm
    simulate(Gemm(name="g", m=64, k=64, n=64, a_dtype="bf16", b_dtype="bf16",
                  c_dtype="bf16"), load_chip("h100"))
    assert "engine" not in cold_kernels()


def test_a_cache_compiled_for_another_cpu_reads_cold(monkeypatch):
    """A kernel cache made on another machine (a wheel built elsewhere carries one, setup.py)
    holds entries keyed on that machine's CPU: Numba ignores them and compiles, so the
    first-run note must still be given (issue 27 item 1)."""
    from numba.core.registry import cpu_target

    from diptych.arch import load_chip
    from diptych.sim import simulate
    from diptych.sim.warmup import cold_kernels
    from diptych.workloads.ops import Gemm

    simulate(Gemm(name="g", m=64, k=64, n=64, a_dtype="bf16", b_dtype="bf16",
                  c_dtype="bf16"), load_chip("h100"))
    assert "engine" not in cold_kernels()
    codegen = cpu_target.target_context.codegen()
    triple, _, features = codegen.magic_tuple()
    monkeypatch.setattr(type(codegen), "magic_tuple",
                        lambda self: (triple, "another-cpu", features))
    assert "engine" in cold_kernels()


def test_warmup_visits_every_preset():
    from diptych.arch import preset_names
    from diptych.sim.warmup import warmup

    seen = []
    secs = warmup(lambda done, total, label: seen.append(label))
    assert secs >= 0 and seen[-1] == "done"
    assert [s.split(": ")[1] for s in seen[:-1]] == preset_names()


def test_the_serve_plot_labels_both_curves_of_its_first_panel(tmp_path, monkeypatch):
    """Issue 23 item 8: the throughput panel's two curves (tokens/s, goodput on a twin axis)
    share one legend; the plot is written atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from diptych.sim.serving.sweep import plot_sweep

    figs = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig) or real_close(fig))
    stats = {"p50": 0.01, "p99": 0.02}
    pts = [{"qps": q, "tokens_per_s": 100.0 * q, "goodput_rps": q, "ttft_s": stats,
            "tpot_s": stats, "meets_slo": True} for q in (1.0, 2.0)]
    out = tmp_path / "curve.svg"
    plot_sweep({"points": pts, "max_qps_meeting_slo": 2.0}, str(out), "t",
               {"ttft_s": 2.0, "tpot_s": 0.2})
    assert out.stat().st_size > 0
    legend = figs[0].axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "output tokens/s", "goodput (req/s meeting SLOs)"]


def test_plan_refuses_an_export_it_cannot_write_before_searching(tmp_path, monkeypatch):
    """Issue 23 item 8: --export-et over 4,096 ranks is refused before the search (it used
    to search for 100 s first): the search is never called."""
    import diptych.sim.cluster.search as search

    def no_search(*a, **k):
        raise AssertionError("the search ran")
    monkeypatch.setattr(search, "search_plans", no_search)
    r = _run("plan", "--chip", "h100", "--model", "llama-3-8b", "--cluster", "dgx-h100",
             "--chips", "16384", "--batch", "16384", "--seq", "2048", "--export-et",
             str(tmp_path / "et"))
    assert r.exit_code == 2 and "at most 4,096 ranks, not --chips 16,384" in r.output
    assert not (tmp_path / "et").exists()


def test_a_multimodal_checkpoint_says_its_vision_tower_is_not_simulated():
    """Issue 23 item 8: Gemma 3 and Llama 4 ship a vision tower (vision_config) that diptych
    does not simulate; `models show` and a run say so, a text-only model says nothing."""
    import warnings

    from diptych.sim.run import Scenario, run_workload
    from diptych.workloads import load_model

    assert load_model("gemma-3-12b").vision_tower and load_model("llama-4-scout").vision_tower
    assert not load_model("llama-3-8b").vision_tower
    out = _run("models", "show", "gemma-3-12b").output
    assert "vision tower" in out and "not simulated" in out
    from roofline_double import roofline
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        r = run_workload("h100", "gemma-3-12b", Scenario(phase="decode", batch=1, prompt=256),
                         simulate=roofline)
    assert any("vision tower is not simulated" in w for w in r.warnings)


def test_pareto_axes_read_as_quantities_and_the_front_is_labelled(tmp_path, monkeypatch):
    """Issue 23 item 8: the pareto plot's axes say the quantity and its unit, not the raw
    column name, and each point of the front is labelled with its design parameters."""
    from diptych.tools import fmt
    import diptych.tools.dse.plots as plots

    assert fmt.column_label("area_mm2") == "area (mm²)"
    assert fmt.column_label("decode_tokens_per_s") == "decode tokens/s"
    assert fmt.column_label("energy_j_per_token") == "energy per token (J)"
    assert fmt.column_label("usd_per_mtok") == "$ per million tokens"
    seen = {}
    real = plots.pareto_plot

    def spy(*a, **k):
        seen.update(k)
        return real(*a, **k)
    monkeypatch.setattr(plots, "pareto_plot", spy)
    rows = tmp_path / "r.csv"
    rows.write_text("point_id,array_dim,chip,area_mm2,decode_tokens_per_s\n"
                    "a,64,c1,100,10\nb,128,c2,200,30\nc,256,c3,300,20\n")
    r = _run("pareto", str(rows), "-o", str(tmp_path / "p.svg"))
    assert r.exit_code == 0, r.output
    assert seen["x_label"] == "area (mm²)" and seen["y_label"] == "decode tokens/s"
    labelled = [t for t in seen["annotations"] if t]
    assert len(labelled) == 2 and all("array_dim=" in t for t in labelled)   # a and b


def test_models_show_and_chips_show_import_only_what_they_print():
    """Issue 27 start-up: ``models show`` loads neither the lowering nor the chip loader,
    ``chips show`` no workload, and neither Numba, NumPy or importlib.metadata (the version
    is looked up for --version only); ``diptych --version`` still prints it."""
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['diptych'] + sys.argv[1:]\n"
            "from diptych.tools.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)))\n")
    heavy = {"numba", "numpy", "importlib.metadata"}
    for args, absent in ((["models", "show", "llama-3-70b", "--json"],
                          {"diptych.workloads.lower", "diptych.workloads.graph",
                           "diptych.arch.loader"}),
                         (["chips", "show", "h100", "--json"], {"diptych.workloads"})):
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                           text=True, check=True)
        json.loads(r.stdout)
        loaded = set(r.stderr.rsplit("MODULES ", 1)[1].split())
        assert not (heavy | absent) & loaded, (args, (heavy | absent) & loaded)
    from diptych.tools import installed_version
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and r.output == f"diptych, version {installed_version()}\n"

"""The deployment search on an executor (`diptych serve-plan -j/--scheduler`;
sim/serving/search.py, tools/dse/pool_map.py) on the roofline double: the same plans and the
same numbers, bit for bit, as the serial search, whatever order the plans are evaluated in
and on whichever process."""

from __future__ import annotations

import concurrent.futures as cf
import json

import pytest
from roofline_double import roofline

import diptych.sim.serving.search as search_mod
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.requests import Load, parse_length
from diptych.sim.serving.search import SearchSpace, _key, search
from diptych.sim.serving.serve import StepTimerCache
from diptych.tools.dse.pool_map import pool_mapper

SPACE = SearchSpace(designs=("infer-2026",), chips=2, max_batched_tokens=(1024, 2048),
                    chunked_prefill=(True, False))
LOAD = Load(qps=6.0, prompt=parse_length("lognormal:mean=512,sigma=0.5", "prompt"),
            gen=parse_length("64", "gen"), requests=40)
CFG = ServeConfig(slo_ttft_s=0.5, slo_tpot_s=0.05)


def _by_plan(res: dict) -> dict:
    return {r["plan"]: r for r in res["evaluated"]}


@pytest.fixture(scope="module")
def serial():
    return search("llama-3-8b", SPACE, LOAD, CFG, oracles=StepTimerCache("grid", roofline))


def test_reversed_order_on_fresh_timers_gives_the_same_rows(serial):
    """Each batch on step timers that saw no other plan, last batch first: the rows are the
    serial search's (a grid's cells depend on the query only)."""
    def backwards(fn, batches):
        for b in reversed(batches):
            yield search_mod.evaluate_batch(b, StepTimerCache("grid", roofline))

    seen = []
    res = search("llama-3-8b", SPACE, LOAD, CFG, oracles=StepTimerCache("grid", roofline),
                 mapper=backwards, progress=lambda i, n, r: seen.append((i, n)))
    assert res["evaluated"] == serial["evaluated"]        # same order, same numbers
    assert res["best"] == serial["best"] and res["pareto"] == serial["pareto"]
    n = serial["candidates"]
    assert seen == [(i, n) for i in range(1, n + 1)]


def test_a_process_pool_gives_the_serial_search(serial):
    with cf.ProcessPoolExecutor(2) as ex:
        with pool_mapper(None, None, 0, executor=ex) as mapper:
            res = search("llama-3-8b", SPACE, LOAD, CFG,
                         oracles=StepTimerCache("grid", roofline), mapper=mapper)
    assert json.dumps(_by_plan(res), sort_keys=True) == json.dumps(_by_plan(serial),
                                                                    sort_keys=True)
    assert res["evaluated"] == serial["evaluated"]
    assert res["best_per_design"] == serial["best_per_design"]
    ok = [r for r in res["evaluated"] if r["meets_slo"]]
    assert all(_key(res["best"]) <= _key(r) for r in ok)


def test_an_exhaustive_search_on_a_pool_gives_the_serial_one(serial):
    """Without pruning every plan goes to the executor at once: the same rows as serial."""
    mine = StepTimerCache("grid", roofline)
    alone = search("llama-3-8b", SPACE, LOAD, CFG, oracles=mine, prune=False)
    with cf.ProcessPoolExecutor(2) as ex:
        with pool_mapper(None, None, 0, executor=ex) as mapper:
            res = search("llama-3-8b", SPACE, LOAD, CFG,
                         oracles=StepTimerCache("grid", roofline), mapper=mapper, prune=False)
    assert res["pruned"] == 0 and res["evaluated"] == alone["evaluated"]
    assert res["best_per_design"] == serial["best_per_design"]


def test_one_job_runs_here():
    with pool_mapper(1, None, 10) as mapper:
        assert mapper is None


def test_an_error_in_a_task_closes_the_pool_and_propagates():
    def boom(_):
        raise ValueError("bad plan")

    with cf.ThreadPoolExecutor(2) as ex:
        with pytest.raises(ValueError, match="bad plan"):
            with pool_mapper(None, None, 0, executor=ex) as mapper:
                list(mapper(boom, [1, 2, 3]))


def test_cli_jobs_match_the_serial_json(cli):
    args = ("serve-plan", "--model", "llama-3-8b", "--chip", "h100", "--chips", 2, "--qps", 4,
            "--requests", 40, "--max-batched-tokens", 2048, "--json")
    one, two = cli(*args), cli(*args, "-j", 2)
    assert one.exit_code == 0 and two.exit_code == 0, (one.output, two.output)
    assert json.loads(one.output) == json.loads(two.output)
    bad = cli(*args[:-1], "--scheduler", "nowhere")
    assert bad.exit_code == 2 and "tcp://HOST:PORT" in bad.output


def test_compare_serving_search_states_each_designs_plan_and_what_binds(cli, monkeypatch):
    """`compare --serving` (once `--serving-search`): each chip's best plan from the search
    (the same rows as the library's) and its binding constraint; a chip none of whose plans
    holds the model is kept, saying so."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dse"))
    import fake_eval

    import diptych.tools.dse.compare as compare_mod
    monkeypatch.setattr(compare_mod, "_default_run", fake_eval.roofline_run)
    args = ["compare", "infer-2026", "h100", "--model", "llama-3-8b", "--prompts", "512",
            "--batches", "1,8", "--contexts", "1024", "--ref-batch", "8", "--train-tp", "1",
            "--train-batch", "2", "--train-seq", "512", "--serving",
            "--serving-chips", 1, "--serving-qps", 1, "--serving-requests", 20]
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)["serving"]
    assert set(d["per_design"]) == {"infer-2026", "h100"}
    for name, v in d["per_design"].items():
        b = v["best"]
        if b is None:
            assert "SLO" in v["binding"] or "no plan" in v["binding"]
            continue
        assert b["meets_slo"] and {p["chip"] for p in b["pools"]} == {name}
        assert b["ttft_p99_s"] <= 2.0 and b["tpot_p99_s"] <= 0.2
        assert "of its SLO" in v["binding"] and "most chips allowed (1)" in v["binding"]
        mine = [r for r in d["evaluated"] if r["meets_slo"] and r["design"] == name]
        assert all(_key(b) <= _key(r) for r in mine)
    from rich.console import Console

    from diptych.tools.serve_plan_cmd import design_table
    con = Console(width=300, record=True)
    con.print(design_table(d))              # what the command prints without --json
    text = con.export_text()
    assert "each design at its best" in text
    assert all(v["binding"][:20] in text for v in d["per_design"].values())


def _nap(i: int) -> int:
    import time
    if i:
        time.sleep(120)             # a plan still running when Ctrl-C comes
    return i


def test_ctrl_c_ends_the_local_workers_without_waiting_for_them():
    import multiprocessing as mp
    with pytest.raises(KeyboardInterrupt):
        with pool_mapper(2, None, 3) as mapper:
            for got in mapper(_nap, [0, 1, 2]):
                assert got == 0
                workers = mp.active_children()
                raise KeyboardInterrupt
    assert workers
    for proc in workers:            # terminated, not left to finish their two minutes
        proc.join(timeout=30)
        assert proc.exitcode is not None and proc.exitcode != 0

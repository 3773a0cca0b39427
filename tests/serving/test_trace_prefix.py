"""A trace's ``prefix_id`` column (``serve --trace``; docs/serving.md, "Requests"): requests
that name the same prefix share its cache entry. Parsing against the rows written, the hits
and misses of a spaced-out trace against a plain count of ids seen before (nothing is ever
evicted), and bad ids exit 2 naming the file, line or flag."""

from __future__ import annotations

import numpy as np
import pytest

from diptych.sim.serving.requests import load_trace

HEAD = "arrival_s,prompt_tokens,output_tokens,prefix_id\n"


def _write(tmp_path, rows, head=HEAD):
    p = tmp_path / "t.csv"
    p.write_text(head + "".join(",".join(str(c) for c in r) + "\n" for r in rows))
    return p


def test_the_column_is_read_per_row_and_sorted_with_its_arrival(tmp_path):
    p = _write(tmp_path, [(2.0, 100, 5, 3), (0.5, 200, 6, ""), (1.0, 300, 7, -1),
                          (0.0, 400, 8, 0)])
    tr = load_trace(p)
    assert tr.arrival_s.tolist() == [0.0, 0.5, 1.0, 2.0]
    assert tr.prefix_id.tolist() == [0, -1, -1, 3]
    assert tr.prompt_tokens.tolist() == [400, 200, 300, 100]
    plain = _write(tmp_path, [(0.0, 10, 1)], head="arrival_s,prompt_tokens,output_tokens\n")
    assert load_trace(plain).prefix_id is None


@pytest.mark.parametrize("bad", ["x", "-2", "1.5", "1000001"])
def test_a_bad_id_is_refused_naming_the_file_and_line(tmp_path, bad):
    p = _write(tmp_path, [(0.0, 100, 5, 0), (1.0, 100, 5, bad)])
    with pytest.raises(ValueError, match=r"t\.csv:3: prefix_id"):
        load_trace(p)


def test_requests_sharing_a_prefix_id_hit_the_cache(tmp_path):
    """Requests far apart (each done before the next arrives) with ids 0, 0, 1, 0, 1, none,
    2: a request hits when its id was seen before (3 hits), misses otherwise (3); the cache
    holds the trace's ids."""
    from roofline_double import roofline
    from diptych.arch import load_chip
    from diptych.sim.serving.config import ServeConfig
    from diptych.sim.serving.grid_timer import GridSpec
    from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
    ids = [0, 0, 1, 0, 1, -1, 2]
    p = _write(tmp_path, [(10.0 * i, 1024, 8, k) for i, k in enumerate(ids)])
    oc = StepTimerCache("grid", roofline, GridSpec(token_ratio=1.5, batch_ratio=1.5,
                                                   keys_ratio=1.5, chunk_ratio=1.5,
                                                   past_ratio=1.5, refine_tol=None))
    res = serve(colocated(load_chip("infer-2026"), "llama-3-8b"), Load(trace=str(p)),
                ServeConfig(prefixes=3, prefix_share=0.5, kv_offload="none"), oracles=oc)
    seen, hits, misses = set(), 0, 0
    for k in ids:                   # the reference: an id seen before is cached
        if k >= 0:
            hits, misses = hits + (k in seen), misses + (k not in seen)
            seen.add(k)
    pcd = res.info["prefix_cache"]
    assert (pcd["hits_tier1"], pcd["hits_tier2"], pcd["misses"]) == (hits, 0, misses) == (3, 0, 3)
    assert [r.pid for r in sorted(res.reqs, key=lambda r: r.rid)] == ids
    assert np.isfinite([r.finish_t for r in res.reqs]).all()


@pytest.mark.parametrize("ids, args, word", [
    ([0, 1], [], "--prefixes N"),
    ([0, 5], ["--prefixes", "4", "--prefix-share", "0.5"], "prefix_id 5 is not below"),
])
def test_trace_ids_without_a_cache_for_them_exit_2(cli, tmp_path, ids, args, word):
    p = _write(tmp_path, [(float(i), 1024, 4, k) for i, k in enumerate(ids)])
    r = cli("serve", "--chip", "infer-2026", "--model", "llama-3-8b", "--trace", p, *args)
    assert r.exit_code == 2 and word in r.output, r.output

"""Chrome/Perfetto trace (``chrome://tracing`` JSON) of a run's op timeline on one chip.

:func:`chrome_trace` (a summed run, ``execution="sum"``): repeated blocks are expanded (layer
by layer), compute ops on one track and collectives on a second; with overlap a block's
collectives start with its compute, as the timing model assumes.
:func:`schedule_trace` (``execution="schedule"``): the scheduled phases themselves, one track
per unit.
Each span's ``args`` carry the op's block, shape, bound and, where the record has them, its
kind, dtype, FLOPs, DRAM bytes, link bytes, array utilisation and energy (per repeat).
"""

from __future__ import annotations

#: Per-op quantities copied into each span's ``args`` when the record has them.
_ARGS = ("kind", "dtype", "flops", "dram_bytes", "link_bytes", "utilization", "energy_j")


def chrome_trace(layers: list[dict], *, overlap: bool = True, name: str = "diptych") -> dict:
    """Trace events from the per-op records of a :class:`RunResult` (``layers``)."""
    events: list[dict] = []
    blocks: list[tuple[str, int, list[dict]]] = []
    for rec in layers:
        if not blocks or blocks[-1][0] != rec["block"]:
            blocks.append((rec["block"], rec["repeat"], []))
        blocks[-1][2].append(rec)
    t = 0.0  # microseconds
    for bname, repeat, recs in blocks:
        for i in range(repeat):
            start = t
            tc = tn = start
            for r in recs:
                dur = r["seconds"] * 1e6
                comm = r["bound"] == "communication"
                ts = tn if comm and overlap else max(tc, tn)
                label = f"{bname}[{i}]" if repeat > 1 else bname
                events.append({"name": r["op"], "cat": r.get("stage", "forward"), "ph": "X",
                               "ts": ts, "dur": dur, "pid": 1, "tid": 2 if comm else 1,
                               "args": {"block": label, "shape": r["shape"],
                                        "bound": r["bound"],
                                        **{k: r[k] for k in _ARGS if r.get(k) is not None}}})
                if comm:
                    tn = ts + dur
                    if not overlap:
                        tc = tn
                else:
                    tc = ts + dur
                    if not overlap:
                        tn = tc
            t = max(tc, tn)
    meta = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "compute"}},
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2,
             "args": {"name": "interconnect"}},
            {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": name}}]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms"}


#: Trace tracks of a scheduled run: a node's reserved phases on its unit's track, weight
#: prefetches on the DRAM track, block and repetition markers on their own.
_TRACKS = {"array": (1, "arrays"), "vector": (2, "vector unit"), "link": (3, "interconnect"),
           "dma": (4, "DRAM (prefetch)"), "prefetch": (4, "DRAM (prefetch)"),
           "blocks": (5, "blocks and repeats")}


def schedule_trace(timeline: list[dict], schedule: dict, *, name: str = "diptych") -> dict:
    """Trace events of a scheduled run (``RunResult.timeline`` and ``.schedule``): every
    simulated node phase at its scheduled time — the first repeats of each block up to the
    steady state and its last repeats (the periodic middle is jumped over, not drawn) — and,
    on the "blocks" track, one span per block saying how many repeats it stands for and its
    period, and one per program run more than once (micro-batches, decode steps) for the
    runs not drawn."""
    events: list[dict] = []
    us = 1e6
    for ent in timeline:
        for s, e, label, early in ent["phases"]:
            tid = _TRACKS["prefetch" if early else ent["unit"]][0]
            op = ent["op"] if label in ("main", "") else f"{ent['op']} ({label})"
            events.append({"name": op, "cat": ent.get("stage", "forward"), "ph": "X",
                           "ts": s * us, "dur": (e - s) * us, "pid": 1, "tid": tid,
                           "args": {"block": ent["block"], "repeat": ent["repeat"],
                                    "phase": label, "program": ent.get("piece", "")}})
    for piece in schedule.get("pieces", []):
        for b in piece["blocks"]:
            if b["repeat"] < 2:
                continue
            per = b["period_s"]
            label = (f"{b['block']} × {b['repeat']}" + (f", period {per * us:.4g} µs, "
                     f"{b['simulated_repeats']} repeats drawn" if per else ""))
            events.append({"name": label, "cat": "block", "ph": "X", "ts": b["start_s"] * us,
                           "dur": (b["end_s"] - b["start_s"]) * us, "pid": 1,
                           "tid": _TRACKS["blocks"][0],
                           "args": {"repeat": b["repeat"], "period_s": per,
                                    "representative_repeat": b["representative"]}})
        if piece["times"] > 1:
            length = piece["makespan_s"] + piece["step_sync_s"]
            events.append({"name": f"{piece['label']} × {piece['times'] - 1} more (not drawn)",
                           "cat": "repeat", "ph": "X", "ts": (piece["start_s"] + length) * us,
                           "dur": (piece["times"] - 1) * length * us, "pid": 1,
                           "tid": _TRACKS["blocks"][0], "args": {"times": piece["times"]}})
    meta = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": n}}
            for tid, n in sorted(set(_TRACKS.values()))]
    meta.append({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": name}})
    return {"traceEvents": meta + events, "displayTimeUnit": "ms"}

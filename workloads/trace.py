"""Chrome/Perfetto trace (``chrome://tracing`` JSON) of a run's op timeline on one chip.

Repeated blocks are expanded (layer by layer), compute ops on one track and collectives on a
second; with overlap a block's collectives start with its compute, as the timing model assumes.
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

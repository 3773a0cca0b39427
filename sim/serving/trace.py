"""Chrome/Perfetto trace (``chrome://tracing`` JSON) of a serving run.

One process per instance with a ``steps`` track (one slice per step: decode sequences,
prefill tokens and chunks, queue and KV use in its arguments) and counters for the queue and
the KV blocks in use; one ``requests`` process where each request is an async slice from
arrival to completion with nested ``queued``, ``prefill`` and ``decode`` phases. Times in µs.
"""

from __future__ import annotations


def serving_trace(result, name: str = "diptych serve") -> dict:
    """Trace events of a :class:`~diptych.sim.serving.serve.ServeResult`."""
    ev: list[dict] = [{"name": "process_name", "ph": "M", "pid": 0,
                       "args": {"name": f"{name}: requests"}}]
    for inst in result.instances:
        pid = inst.idx + 1
        ev.append({"name": "process_name", "ph": "M", "pid": pid,
                   "args": {"name": f"instance {inst.idx} ({inst.role}, {inst.chips} chips)"}})
        ev.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 1,
                   "args": {"name": "steps"}})
        for k in range(len(inst.rec_t)):
            ts = inst.rec_t[k] * 1e6
            ev.append({"name": "step", "ph": "X", "pid": pid, "tid": 1, "ts": ts,
                       "dur": inst.rec_dt[k] * 1e6, "cat": "step",
                       "args": {"decode": inst.rec_dec[k], "prefill_tokens": inst.rec_pf[k],
                                "chunks": inst.rec_chunks[k], "waiting": inst.rec_wait[k],
                                "running": inst.rec_run[k], "kv_blocks": inst.rec_used[k]}})
            ev.append({"name": "queue", "ph": "C", "pid": pid, "ts": ts,
                       "args": {"waiting": inst.rec_wait[k], "running": inst.rec_run[k]}})
            ev.append({"name": "kv blocks", "ph": "C", "pid": pid, "ts": ts,
                       "args": {"used": inst.rec_used[k]}})
    for r in result.reqs:
        rid = str(r.rid)
        us = 1e6
        a, f = r.arrival * us, r.finish_t * us
        start = (r.pf_start if r.pf_start >= 0 else r.first_t) * us
        first = r.first_t * us
        common = {"cat": "request", "pid": 0, "id": rid}
        ev.append({**common, "name": f"request {rid}", "ph": "b", "ts": a,
                   "args": {"prompt": r.prompt, "output": r.output,
                            "preemptions": r.preemptions, "instance": r.inst}})
        for nm, t0, t1 in (("queued", a, start), ("prefill", start, first),
                           ("decode", first, f)):
            if t1 > t0:
                ev.append({**common, "name": nm, "ph": "b", "ts": t0})
                ev.append({**common, "name": nm, "ph": "e", "ts": t1})
        ev.append({**common, "name": f"request {rid}", "ph": "e", "ts": f})
    return {"traceEvents": ev, "displayTimeUnit": "ms"}

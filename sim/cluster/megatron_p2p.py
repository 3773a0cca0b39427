"""The interleaved and the non-interleaved 1F1B pipeline as Megatron-Core issues them: each
rank's compute, p2p sends and receives and stream waits in host order, the sends' rendezvous
with their peers' receives, and (optionally) one hardware queue that dispatches them all in
that order.

:func:`~.schedule.simulate_pipeline` lets a unit start once its device is free and its input
has arrived ``send_s`` after its producer ended: a send costs its sender nothing. Megatron-Core's
interleaved schedule with ``overlap_p2p_comm=True``, ``batch_p2p_comm=False`` (what every
H100 system check's configuration sets: NVIDIA/dgxc-benchmarking 35a9aec
``llama3.1/llama3.1_70b.yaml`` L131-132, ``nemo_megatron/gpt3_175b_hydra.yaml`` L91-92;
143b90d ``grok1/grok1_314b.yaml`` L97-98) instead, on every rank [S: Megatron-LM
core_r0.9.0 (1afee592) ``megatron/core/pipeline_parallel/schedules.py``
``forward_backward_pipelining_with_interleaving`` L826-1130; the same loop in core_v0.7.0
(a645f896), GPT-3's NeMo 24.05]:

* warm-up unit ``k``: wait on the previous forward's handles, forward ``k``, then
  ``isend`` its output to the next rank and ``irecv`` the next input from the previous one
  (the forward handles; odd ranks issue the receive first, ``_p2p_ops``); after the last
  warm-up forward also ``irecv`` the first output gradient (the backward handles). Before
  the loop a blocking ``recv_forward`` (not on rank 0);
* steady-state ``k``: wait on the forward handles, forward, ``isend``/``irecv`` forward
  (new forward handles), wait on the backward handles, backward, ``isend`` its input gradient
  to the previous rank and ``irecv`` the next output gradient (new backward handles);
* cool-down: wait on the backward handles, then per backward a blocking
  ``send_backward_recv_backward`` (its requests waited on at once, ``wait_on_reqs=True``).

The semantics each op gets, from its source:

* ``req.wait()`` of an NCCL request makes the current (compute) stream wait for the op's
  end; it does not block the host;
* every ``isend``/``irecv`` runs on the stream of its own two-rank communicator, one per peer
  pair (PyTorch ``ProcessGroupNCCL::pointToPoint``: "For single P2P, preserve the old
  two-rank behavior", ``key = getKeySendRecv(rank_, peer)``, its stream
  ``ncclStreams_[key]``), which first waits for the compute stream as it stands at the call
  (``syncStreams``); so the send of an output and the receive of the next output gradient,
  both with the next rank, share one stream and run in issue order; with two stages Megatron
  puts one direction on the world group (``_p2p_ops``: ``even_recv_odd_send_group``);
* an NCCL send or receive "is blocking for the GPU" until its peer's matching call runs
  [S: NCCL user guide, "Point To Point Communication Functions", ``ncclSend``/``ncclRecv``]:
  the pair's transfer starts when both kernels have started and both end ``send_s`` later
  (the sends of the rows, 12-16 MiB, are larger than NCCL's buffer, 4 MiB by default [S:
  NCCL user guide, "Environment Variables", ``NCCL_BUFFSIZE``], so a sender cannot finish
  into it alone); the ``i``-th send on a communicator meets
  the ``i``-th receive of its peer on it;
* ``one_queue`` (``CUDA_DEVICE_MAX_CONNECTIONS=1``: one hardware work queue for every
  stream [S: CUDA C++ Programming Guide, "CUDA Environment Variables"]): an op is dispatched
  only after every op issued before it on the rank was, so a send waiting for its stream's
  previous receive (which waits for the peer) holds back the backward queued after it.
  Without it (``issue``) each stream proceeds on its own;
* a p2p kernel is resident from its dispatch: while it waits for its peer it holds its
  channels' SMs (NCCL's CTAs never share an SM with a compute kernel, NVIDIA/nccl#689) and
  moves nothing, so the compute beside it runs on the SMs left (``hold_f``, the cluster
  step's ``interference.group_slowdown`` without a DRAM share); the transfer itself is
  already charged in the chunk's time (docs/cluster.md, "Communication beside compute").

The non-interleaved 1F1B (:func:`issue_order_1f1b`,
``forward_backward_pipelining_without_interleaving`` L1274-1545) calls blocking
``recv_forward`` / ``send_forward`` (warm-up), ``send_forward_recv_backward`` /
``send_backward_recv_forward`` (steady state), ``recv_backward`` / ``send_backward``
(cool-down): ``_communicate`` with ``wait_on_reqs=True`` (p2p_communication.py L381-384), the
compute stream waiting on the call's requests at once. Megatron-LM sets ``batch_p2p_comm``
for it (``batch_p2p_comm = not overlap_p2p_comm``, and ``overlap_p2p_comm`` False without
interleaving: megatron/training/arguments.py L286-289, L671): each call one
``batch_isend_irecv`` launch (``_batched_p2p_ops`` L121-156) on the pipeline group's own
communicator and stream (``ProcessGroupNCCL::pointToPoint``: "For batch P2P, we need to
treat it like a collective when selecting communicator"), its ops dispatched together, the
launch over when all its transfers are; ``batch_p2p_sync``'s ``torch.cuda.synchronize()``
after it (L386-389) adds nothing here (no launch gaps; the pipeline's simulation has no
other stream to wait for). Unbatched (``_p2p_ops``), a call's send and receive with the
same peer share the pair's communicator and run in turn. As every call is waited on at
once, a rank's compute never runs beside its own waiting p2p kernel: ``hold_f`` never
applies to 1F1B; the wait itself is its cost.

Assumed [assumption]: the host issues far ahead of the GPU (no launch gaps), and a wait or a
dispatch costs nothing itself.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from .schedule import PipelineRun, _check, _unit, warmup

#: an op of a rank's host order: ("C", kind, micro-batch, chunk) computes;
#: ("S" | "R", direction, handle, launch) sends or receives towards "next" or "prev"
#: (``launch``: the number of the ``batch_isend_irecv`` launch it is part of, else None);
#: ("W", handles) makes the compute stream wait for those ops.
Op = tuple


def issue_order(p: int, m: int, v: int, s: int) -> list[Op]:
    """Rank ``s``'s ops in Megatron-Core's host order (module docstring), with handles
    numbered per rank. The loop of ``forward_backward_pipelining_with_interleaving`` with
    ``overlap_p2p_comm=True``, transcribed."""
    _check("interleaved", p, m, v)
    V, n = p * v, m * v
    every = m == p                                   # all_warmup_microbatches
    w = n if every else warmup("interleaved", p, m, v, s)
    ops: list[Op] = []
    h = itertools.count()

    def chunk_of(k: int, forward: bool) -> int:      # get_model_chunk_id
        return _unit(k, p, v, not forward)[1]

    def vstage(kind: str, k: int) -> int:
        return _unit(k, p, v, kind == "B")[1] * p + s

    def p2p(send_dir: str | None, recv_dir: str | None) -> list[int]:
        return _call(ops, h, s, send_dir, recv_dir)

    def compute(kind: str, k: int) -> None:
        mb, c = _unit(k, p, v, kind == "B")
        ops.append(("C", kind, mb, c))

    if s != 0:                                       # recv_forward before the loop: blocking
        ops.append(("W", p2p(None, "prev")))
    fwd_h: list[int] = []
    bwd_h: list[int] = []
    for k in range(w):
        if fwd_h:
            ops.append(("W", fwd_h))
        compute("F", k)
        recv_prev = not (s == 0 and chunk_of(k + 1, True) == 0) and k != n - 1
        send = vstage("F", k) != V - 1
        fwd_h = p2p("next" if send else None, "prev" if recv_prev else None)
        if k == w - 1 and not every:
            bwd_h = p2p(None, "next" if s != p - 1 else None)
    for k in range(n - w):
        fk = k + w
        if fwd_h:
            ops.append(("W", fwd_h))
        compute("F", fk)
        send = vstage("F", fk) != V - 1
        recv_prev = not (s == 0 and chunk_of(fk - (p - 1), True) == v - 1) \
            and k != n - w - 1
        fwd_h = p2p("next" if send else None, "prev" if recv_prev else None)
        if bwd_h:
            ops.append(("W", bwd_h))
        compute("B", k)
        send = vstage("B", k) != 0
        recv_next = not (s == p - 1 and chunk_of(k - (p - 1), False) == 0)
        bwd_h = p2p("prev" if send else None, "next" if recv_next else None)
    if bwd_h:
        ops.append(("W", bwd_h))
    if every:                                        # recv_backward: blocking
        ops.append(("W", p2p(None, "next" if s != p - 1 else None)))
    for k in range(n - w, n):
        compute("B", k)
        recv_next = not (s == p - 1 and chunk_of(k + 1, False) == v - 1) and k != n - 1
        send = vstage("B", k) != 0
        got = p2p("prev" if send else None, "next" if recv_next else None)
        if got:
            ops.append(("W", got))
    return [o for o in ops if o[0] != "W" or o[1]]


#: [S: Megatron-LM core_r0.9.0 (1afee592) p2p_communication.py ``_p2p_ops`` L181-229] the
#: order one ``_communicate`` call issues its ops in: even ranks send_next, recv_prev,
#: send_prev, recv_next; odd ranks recv_prev, send_next, recv_next, send_prev
_P2P_ORDER = ((("S", "next"), ("R", "prev"), ("S", "prev"), ("R", "next")),
              (("R", "prev"), ("S", "next"), ("R", "next"), ("S", "prev")))

#: [S: Megatron-LM core_r0.9.0 (1afee592) p2p_communication.py ``_batched_p2p_ops``
#: L121-156] the order one ``batch_isend_irecv`` launch lists its ops in, either parity:
#: send_prev, recv_prev, send_next, recv_next
_BATCHED_ORDER = (("S", "prev"), ("R", "prev"), ("S", "next"), ("R", "next"))


def _call(ops: list[Op], h, s: int, send_dir: str | None, recv_dir: str | None,
          group: int | None = None) -> list[int]:
    """Append one ``_communicate`` call's send (towards ``send_dir``) and receive (from
    ``recv_dir``) to ``ops`` in ``_p2p_ops``'s order for rank ``s``, each with a new handle
    from ``h``; ``group``: the call's number when its ops are one ``batch_isend_irecv``
    launch, in ``_batched_p2p_ops``'s order, else None. Returns the handles."""
    got = []
    for op, d in _P2P_ORDER[s % 2] if group is None else _BATCHED_ORDER:
        if d == (send_dir if op == "S" else recv_dir):
            got.append(next(h))
            ops.append((op, d, got[-1], group))
    return got


def issue_order_1f1b(p: int, m: int, s: int, batched: bool = True) -> list[Op]:
    """Rank ``s``'s ops in Megatron-Core's host order of the non-interleaved 1F1B
    [S: Megatron-LM core_r0.9.0 (1afee592) ``schedules.py``
    ``forward_backward_pipelining_without_interleaving`` L1274-1545, transcribed]: warm-up
    (L1391-1421) ``recv_forward``, forward, ``send_forward``; before the steady state
    (L1427-1428) ``recv_forward``; steady state (L1431-1497) forward,
    ``send_forward_recv_backward``, backward, ``send_backward_recv_forward`` (the last
    iteration ``send_backward``); cool-down (L1499-1521) ``recv_backward``, backward,
    ``send_backward``. Every call is a blocking ``_communicate`` (``wait_on_reqs`` True,
    p2p_communication.py L381-384): the compute stream waits on all its requests at once.
    The first stage neither receives activations nor sends gradients, the last neither
    sends activations nor receives gradients (``is_pipeline_first_stage`` /
    ``is_pipeline_last_stage``, p2p_communication.py L410-545). ``batched``:
    ``batch_p2p_comm`` (``_batched_p2p_ops``, L121-156: one call's ops one launch on the
    pipeline group's communicator), else ``_p2p_ops``."""
    _check("1f1b", p, m, 1)
    w = warmup("1f1b", p, m, 1, s)
    first, last = s == 0, s == p - 1
    ops: list[Op] = []
    h, calls = itertools.count(), itertools.count()

    def comm(send_dir: str | None, recv_dir: str | None) -> None:
        if first:                                    # no previous stage
            send_dir = None if send_dir == "prev" else send_dir
            recv_dir = None if recv_dir == "prev" else recv_dir
        if last:                                     # no next stage
            send_dir = None if send_dir == "next" else send_dir
            recv_dir = None if recv_dir == "next" else recv_dir
        got = _call(ops, h, s, send_dir, recv_dir, next(calls) if batched else None)
        if got:
            ops.append(("W", got))

    for i in range(w):                               # warm-up
        comm(None, "prev")                           # recv_forward
        ops.append(("C", "F", i, 0))
        comm("next", None)                           # send_forward
    if m - w > 0:
        comm(None, "prev")                           # recv_forward
    for i in range(m - w):                           # steady state
        ops.append(("C", "F", w + i, 0))
        comm("next", "next")                         # send_forward_recv_backward
        ops.append(("C", "B", i, 0))
        comm("prev", None if i == m - w - 1 else "prev")  # send_backward(_recv_forward)
    for i in range(m - w, m):                        # cool-down
        comm(None, "next")                           # recv_backward
        ops.append(("C", "B", i, 0))
        comm("prev", None)                           # send_backward
    return ops


def _stream(p: int, s: int, op: Op) -> tuple:
    """The stream rank ``s``'s send or receive ``op`` runs on: its communicator's
    (:func:`_comm`), or, for an op of a ``batch_isend_irecv`` launch, the pipeline group's
    own communicator (PyTorch ``ProcessGroupNCCL::pointToPoint``: "For batch P2P, we need
    to treat it like a collective when selecting communicator", ``getKeyFromDevice``)."""
    return ("pp-batch",) if op[3] is not None else _comm(p, s, op[0], op[1])


def _peer(p: int, s: int, direction: str) -> int:
    """The rank stage ``s`` of ``p`` sends to or receives from towards ``direction``."""
    return (s + 1) % p if direction == "next" else (s - 1) % p


def _comm(p: int, s: int, op: str, direction: str) -> tuple:
    """The communicator (and so the stream) rank ``s``'s send or receive runs on: the
    two-rank communicator of the peer pair in the pipeline group; with two stages the one
    direction Megatron routes over the world group (``_p2p_ops``)."""
    peer = _peer(p, s, direction)
    group = "pp"
    if p == 2 and (op == "S") != (s % 2 == 0):      # even ranks receive, odd ones send, there
        group = "world"
    return group, min(s, peer), max(s, peer)


@dataclass
class QueuedRun(PipelineRun):
    """:class:`~.schedule.PipelineRun` of :func:`simulate_megatron_pipeline`, with each
    rank's sends and receives, ``("S" | "R", "next" | "prev", dispatched, ended)`` in issue order
    (``p2p``: a kernel holds its SMs from dispatch to end, its peer's wait included)."""

    p2p: list[list[tuple]] | None = None


def simulate_megatron_pipeline(fwd: list[list[float]], bwd: list[list[float]], m: int, *,
                               send_s: float, one_queue: bool = True,
                               hold_f: Callable[[str, int, int, int], float] | None = None,
                               schedule: str = "interleaved", batched: bool = True
                               ) -> QueuedRun:
    """The pipeline played in Megatron-Core's issue order (module docstring), in time order:
    ``schedule`` "interleaved" (:func:`issue_order`) or "1f1b" (:func:`issue_order_1f1b`,
    its calls one ``batch_isend_irecv`` launch each when ``batched``; a launch ends when all
    its transfers have). ``fwd[s][c]``/``bwd[s][c]``: seconds of chunk ``c`` on rank ``s`` per
    micro-batch; ``send_s``: one transfer's time once both its kernels run; ``one_queue``:
    one hardware queue dispatches every rank's ops in issue order, else each stream runs on
    its own (its ops in order, each after what it waits on). ``hold_f(kind, s, c, n)``: how
    many times longer chunk ``c``'s compute (``kind`` "F" or "B") takes on rank ``s`` beside
    ``n`` of its p2p kernels that wait for their peers (None: 1). RuntimeError if the order
    deadlocks."""
    p, v = len(fwd), len(fwd[0])
    if schedule == "1f1b":
        _check(schedule, p, m, v)
        orders = [issue_order_1f1b(p, m, s, batched) for s in range(p)]
    elif schedule == "interleaved":
        orders = [issue_order(p, m, v, s) for s in range(p)]
    else:
        raise ValueError(f"schedule must be 'interleaved' or '1f1b', not {schedule!r}")
    ranks = [_Rank(s, p, o) for s, o in enumerate(orders)]
    end: dict[tuple[int, int], float] = {}       # (rank, handle) -> transfer's end
    posted: dict[tuple, list] = {}               # (comm, src, dst, op) -> [(rank, handle)]
    matched: dict[tuple, int] = {}
    ends: list[float] = []                       # heap of the transfers' ends still ahead
    t = 0.0
    eps = 1e-12

    def post(r: _Rank, op: Op) -> None:
        """Dispatch a send or receive at ``t``; start the transfer if its peer's is there."""
        kind, direction, handle = op[:3]
        peer = _peer(p, r.s, direction)
        comm = _stream(p, r.s, op)
        key = (comm, r.s, peer) if kind == "S" else (comm, peer, r.s)
        r.waiting.add(handle)
        r.p2p.append((kind, direction, handle, t))
        posted.setdefault(key + (kind,), []).append((r.s, handle))
        sends, recvs = posted.get(key + ("S",), []), posted.get(key + ("R",), [])
        i = matched.get(key, 0)
        while i < len(sends) and i < len(recvs):
            for a, h in (sends[i], recvs[i]):
                end[(a, h)] = t + send_s
                ranks[a].waiting.discard(h)
            heapq.heappush(ends, t + send_s)
            i += 1
        matched[key] = i

    def done(r: _Rank, handle: int) -> bool:
        e = end.get((r.s, handle))
        return e is not None and e <= t + eps

    def step(r: _Rank) -> bool:
        """Dispatch what rank ``r`` can at ``t``; whether anything was."""
        moved = False
        while True:
            i = r.next_op(one_queue, lambda j: ready(r, j))
            if i is None:
                return moved
            op = r.ops[i]
            if op[0] == "C":
                _, kind, mb, c = op
                r.run = [kind, mb, c, t, fwd[r.s][c] if kind == "F" else bwd[r.s][c]]
            elif op[0] != "W":
                post(r, op)
            r.dispatch(i)
            moved = True

    def ready(r: _Rank, i: int) -> bool:
        """Whether rank ``r``'s op ``i`` (at its stream's head) can be dispatched at ``t``."""
        op = r.ops[i]
        if op[0] == "C":
            return r.run is None
        if op[0] == "W":
            return r.run is None and all(done(r, h) for h in op[1])
        before = r.stream_prev[i]                # the previous op (launch) on its stream
        return (r.run is None or r.compute_before[i] < r.running_index) and \
            all(done(r, r.ops[j][2]) for j in before) and r.compute_done(i)

    while not all(r.finished() for r in ranks):
        while any([step(r) for r in ranks]):
            pass
        rates = []
        for r in ranks:
            f = 1.0
            if r.run is not None and r.waiting and hold_f is not None:
                kind, _, c = r.run[:3]
                f = hold_f(kind, r.s, c, len(r.waiting))
            rates.append(f)
        while ends and ends[0] <= t + eps:
            heapq.heappop(ends)
        nxt = [r.run_end(t, f) for r, f in zip(ranks, rates) if r.run is not None]
        nxt += ends[:1]
        if not nxt:
            raise RuntimeError("the Megatron issue order deadlocked")
        t_new = min(nxt)
        for r, f in zip(ranks, rates):
            r.advance(t, t_new, f)
        t = t_new
    return QueuedRun(seconds=max(r.free for r in ranks), units=[r.units for r in ranks],
                     busy_s=[r.busy for r in ranks], finish_s=[r.free for r in ranks],
                     peak_units=[r.peak for r in ranks],
                     peak_weight=[float(r.peak) for r in ranks],
                     p2p=[[(k, d, t0, end[(r.s, h)]) for k, d, h, t0 in r.p2p] for r in ranks])


class _Rank:
    """One rank's ops and streams while :func:`simulate_megatron_pipeline` plays them: the
    compute stream (computes and waits) and one stream per communicator, each in issue
    order; ``run``: the compute under way ``[kind, mb, chunk, start, work left (s)]``."""

    def __init__(self, s: int, p: int, ops: list[Op]):
        self.s, self.ops = s, ops
        self.dispatched = [False] * len(ops)
        self.head = 0                            # first op not dispatched (one queue)
        self.streams: dict = {}                  # stream -> its ops' indices, in order
        self.stream_prev: list[tuple] = []       # a send's or receive's previous op
        #                                          (launch) on its stream; () for the rest
        self.stream_of: list = []                # each op's stream
        self.compute_before: list[int] = []      # last compute-stream op issued before
        last_compute = -1
        last_launch: dict = {}                   # stream -> (launch, its ops' indices)
        for i, op in enumerate(ops):
            if op[0] in "CW":
                stream, prev = "compute", ()
            else:
                stream, launch = _stream(p, s, op), op[3]
                last = last_launch.get(stream)
                if last is not None and launch is not None and last[0] == launch:
                    prev = self.stream_prev[last[1][0]]          # one launch: together
                    last[1].append(i)
                else:                            # after the whole previous launch (op)
                    prev = () if last is None else tuple(last[1])
                    last_launch[stream] = (launch, [i])
            self.streams.setdefault(stream, []).append(i)
            self.stream_of.append(stream)
            self.stream_prev.append(prev)
            self.compute_before.append(last_compute)
            if stream == "compute":
                last_compute = i
        self.pos = {k: 0 for k in self.streams}
        self.run: list | None = None
        self.running_index = -1                  # op index of the compute under way
        self.completed = -1                      # last compute-stream op completed
        self.free = 0.0
        self.busy = 0.0
        self.units: list = []
        self.p2p: list = []
        self.waiting: set[int] = set()
        self.live = self.peak = 0

    def finished(self) -> bool:
        return self.head >= len(self.ops) and self.run is None

    def compute_done(self, i: int) -> bool:
        """Whether every compute-stream op issued before op ``i`` has completed (the comm
        stream waits for the compute stream as it stood at the call)."""
        return self.completed >= self.compute_before[i]

    def next_op(self, one_queue: bool, ready) -> int | None:
        """The next op to dispatch: the queue's head under one queue, else any stream's
        head that is ready."""
        if one_queue:
            i = self.head
            return i if i < len(self.ops) and ready(i) else None
        for stream, idx in self.streams.items():
            k = self.pos[stream]
            if k < len(idx) and ready(idx[k]):
                return idx[k]
        return None

    def dispatch(self, i: int) -> None:
        self.dispatched[i] = True
        op = self.ops[i]
        self.pos[self.stream_of[i]] += 1         # an op is dispatched at its stream's head
        while self.head < len(self.ops) and self.dispatched[self.head]:
            self.head += 1
        if op[0] == "C":
            self.running_index = i
        elif op[0] == "W":
            self.completed = i

    def run_end(self, t: float, f: float) -> float:
        return t + self.run[4] * f

    def advance(self, t: float, t_new: float, f: float) -> None:
        """Move the compute under way from ``t`` to ``t_new`` at ``1/f`` of its rate."""
        if self.run is None:
            return
        self.run[4] -= (t_new - t) / f
        if self.run[4] <= 1e-12 * max(1.0, t_new):
            kind, mb, c, start, _ = self.run
            self.units.append((kind, mb, c, start, t_new))
            self.busy += t_new - start
            self.live += 1 if kind == "F" else -1
            self.peak = max(self.peak, self.live)
            self.completed = self.running_index
            self.run = None
            self.free = t_new

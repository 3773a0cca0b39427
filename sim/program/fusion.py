"""Fusion: elementwise and normalisation ops merge into the GEMM next to them, so that the
tensor between them never leaves the chip (docs/program.md, "Fusion").

A pass over a :class:`~diptych.sim.program.Program` whose node payloads are op records; each
block is fused on its own (one layer fuses like every other). What fuses:

* **Prologue** (norm → next GEMM): a normalisation node (``rmsnorm``, ``layernorm``) whose
  every output is read by exactly one node, a GEMM, and by nothing outside the block (not
  carried, not a program tensor, not imported by a later block, not ``live_out``): the GEMM
  applies the norm while it loads its operand, and reads the norm's inputs instead.
* **Epilogue** (GEMM → elementwise): a vector node of an elementwise, normalisation, RoPE,
  copy or soft-capping kind (:data:`EPILOGUE_KINDS`) that updates nothing, reads nothing
  updated in the block and reads a tensor produced by a GEMM none of its other inputs depends
  on (a residual input, a norm weight, another GEMM's earlier output; of several such GEMMs,
  the last listed): the GEMM's output path applies it. The tensor it read from the GEMM disappears if nobody else reads it (it stays,
  written by the fused node, otherwise), and its outputs become the fused node's.

Prologues are tried first (a norm read by one GEMM fuses there rather than into its producer's
epilogue, which would write both tensors), then epilogues, in program order, and again until
nothing changes; a merge that would order the block's nodes in a cycle (through the listed
order of an updated tensor's accesses) is not made. Both need the chip's vector unit on the arrays' operand path
(``chip.core.vector.on_array_output_path``), and only the kinds the chip's kernels fuse
(``chip.core.vector.gemm_fused_kinds``, passed as ``kinds``); the caller decides. Softmax (attention's is
already inside the fused FlashAttention node), top-k, embedding lookups and the optimizer do
not fuse, nor does anything across a collective.

The fused node's payload is a :class:`FusedOps` record (its GEMM, prologue and epilogue ops in
execution order); its time is charged by the caller (``sim/run/scheduled.py``): the vector
work runs during the GEMM's main phase, ``max(GEMM, vector work)``, and its DRAM traffic is the
GEMM's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...arch.chip import FUSABLE_KINDS
from ...workloads.host_work import host_sync_count, kernel_count
from ...workloads.ops import Gemm, VectorOp
from ...workloads.program import Block, Node, Program, _topo_order

#: Vector-op kinds (``workloads.ops.VECTOR_KINDS``) that fuse into a GEMM's epilogue; a chip
#: names the subset its kernels fuse (``core.vector.gemm_fused_kinds``).
EPILOGUE_KINDS = FUSABLE_KINDS
#: Vector-op kinds that fuse into the prologue of the GEMM that reads their output.
PROLOGUE_KINDS = ("rmsnorm", "layernorm")


@dataclass(frozen=True)
class FusedOps:
    """A GEMM with vector ops applied while it loads its operand (``prologue``) and on its
    output path (``epilogue``), each in execution order."""

    gemm: Gemm
    prologue: tuple[VectorOp, ...] = ()
    epilogue: tuple[VectorOp, ...] = ()
    #: DRAM bytes the fused node moves beyond its GEMM's own (the epilogue's extra inputs in
    #: DRAM, output bytes beyond C): set when the node is timed with its residency
    extra_dram_bytes: float = 0.0

    @property
    def ops(self) -> tuple:
        return self.prologue + (self.gemm,) + self.epilogue

    @property
    def vector_ops(self) -> tuple[VectorOp, ...]:
        return self.prologue + self.epilogue

    @property
    def name(self) -> str:
        return "+".join(o.name for o in self.ops)

    @property
    def flops(self) -> float:
        return self.gemm.flops + sum(v.flops for v in self.vector_ops)


def _gemm(node: Node):
    p = node.payload
    return p if isinstance(p, (Gemm, FusedOps)) else None


def _as_fused(p) -> FusedOps:
    return p if isinstance(p, FusedOps) else FusedOps(p)


def _external(program: Program, bi: int) -> set[str]:
    """Tensors of block ``bi`` read outside the block's nodes: carried outputs (the next
    repeat reads them), program tensors, imports of later blocks, live_out tensors."""
    b = program.blocks[bi]
    out = {c.output for c in b.carry} | {t.name for t in b.tensors if t.live_out}
    local = {t.name for t in b.tensors}
    out |= {t for n in b.nodes for t in n.writes if t not in local}
    for bj in range(bi + 1, len(program.blocks)):
        for imp in program.imported(bj).values():
            if imp.block == b.name:
                out.add(imp.tensor)
    return out


def _descendants(nodes: list[Node], i: int) -> set[int]:
    """Indices of the nodes that depend (through tensors they read) on node ``i``."""
    prod = {t: j for j, n in enumerate(nodes) for t in n.writes}
    seen, stack = set(), [i]
    while stack:
        j = stack.pop()
        for k, n in enumerate(nodes):
            if k not in seen and any(prod.get(t) == j for t in n.reads + n.updates):
                seen.add(k)
                stack.append(k)
    return seen


def _acyclic(nodes: list[Node]) -> bool:
    """Whether the nodes, as listed, still order without a cycle (data dependencies and the
    listed order of accesses to updated tensors)."""
    producer = {t: n.name for n in nodes for t in n.writes}
    try:
        _topo_order(Block("fusion", (), tuple(nodes)), producer)
    except ValueError:
        return False
    return True


def _readers(nodes: list[Node], t: str) -> list[int]:
    return [k for k, n in enumerate(nodes) if t in n.reads or t in n.updates]


def _host_work(op) -> bool:
    """True for an op that stands for several kernels or makes the host wait
    (:mod:`diptych.workloads.host_work`): a framework's run of small kernels, which no GEMM's
    prologue or epilogue absorbs."""
    return kernel_count(op) > 1 or host_sync_count(op) > 0


def _prologue(nodes: list[Node], ext: set[str], updated: set[str], kinds) -> bool:
    for i, n in enumerate(nodes):
        op = n.payload
        if not isinstance(op, VectorOp) or op.kind not in kinds or n.updates \
                or not n.writes or any(t in ext for t in n.writes) or set(n.reads) & updated \
                or _host_work(op):
            continue
        users = {k for t in n.writes for k in _readers(nodes, t)}
        if len(users) != 1:
            continue
        (j,) = users
        g = _gemm(nodes[j])
        if g is None or nodes[j].updates and set(nodes[j].updates) & set(n.reads):
            continue
        f = _as_fused(g)
        c = nodes[j]
        reads = tuple(dict.fromkeys([t for t in c.reads if t not in n.writes] + list(n.reads)))
        reads = tuple(t for t in reads if t not in c.writes and t not in c.updates)
        trial = list(nodes)
        trial[j] = replace(c, name=f"{n.name}+{c.name}", reads=reads, access=None,
                           payload=replace(f, prologue=(op,) + f.prologue))
        del trial[i]
        if _acyclic(trial):
            nodes[:] = trial
            return True
    return False


def _epilogue(nodes: list[Node], ext: set[str], updated: set[str], kinds) -> bool:
    prod = {t: j for j, n in enumerate(nodes) for t in n.writes}
    for i, n in enumerate(nodes):
        op = n.payload
        if not isinstance(op, VectorOp) or op.kind not in kinds or n.updates \
                or set(n.reads) & updated or _host_work(op):
            continue
        src = sorted({prod[t] for t in n.reads if t in prod and _gemm(nodes[prod[t]])})
        # the GEMM whose output it waits for last: none of its other inputs depends on it
        # (that would be a cycle); among several, the last listed
        ok = [j for j in src if not {prod.get(t) for t in n.reads if prod.get(t) != j}
              & _descendants(nodes, j)]
        if not ok:
            continue
        j = ok[-1]
        inner = [t for t in n.reads if prod.get(t) == j]
        g = nodes[j]
        keep = [t for t in g.writes
                if t not in inner or t in ext or any(k != i for k in _readers(nodes, t))]
        reads = tuple(dict.fromkeys(list(g.reads) + [t for t in n.reads if t not in inner]))
        f = _as_fused(g.payload)
        trial = list(nodes)
        trial[j] = replace(g, name=f"{g.name}+{n.name}", reads=reads, access=None,
                           writes=tuple(dict.fromkeys(keep + list(n.writes))),
                           payload=replace(f, epilogue=f.epilogue + (op,)))
        del trial[i]
        if _acyclic(trial):                # an update's listed order can forbid the merge
            nodes[:] = trial
            return True
    return False


def fuse_block(program: Program, bi: int, kinds=EPILOGUE_KINDS) -> Block:
    """Block ``bi`` of ``program`` with its fusable vector ops of ``kinds`` merged into
    GEMMs."""
    pro = tuple(k for k in PROLOGUE_KINDS if k in kinds)
    epi = tuple(k for k in EPILOGUE_KINDS if k in kinds)
    b = program.blocks[bi]
    ext = _external(program, bi)
    updated = {t for n in b.nodes for t in n.updates}
    nodes = list(b.nodes)
    changed = True
    while changed:                   # prologues first, then epilogues, until nothing fuses
        changed = False
        while _prologue(nodes, ext, updated, pro):
            changed = True
        while _epilogue(nodes, ext, updated, epi):
            changed = True
    used = ({t for n in nodes for t in n.accesses} | {c.input for c in b.carry} | ext
            | {i.local for i in b.imports})
    return replace(b, nodes=tuple(nodes), tensors=tuple(t for t in b.tensors if t.name in used))


def fuse_program(program: Program, kinds=EPILOGUE_KINDS) -> Program:
    """``program`` with every block fused (module docstring), only vector ops of ``kinds``
    (default every fusable kind; a chip's are ``core.vector.gemm_fused_kinds``); the result is
    validated like any program. Tensors that no node touches any more are dropped."""
    return Program(program.name,
                   [fuse_block(program, bi, kinds) for bi in range(len(program.blocks))],
                   program.tensors)

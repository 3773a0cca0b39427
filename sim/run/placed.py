"""Ops with their operands' locations: what the engine times under a residency plan.

:func:`placed_op` turns a program node's op record into the same op with the locations the
residency planner (:mod:`diptych.sim.program.residency`) gave its operands in one repeat
(docs/program.md, "Phase 2b"); :func:`split_segments` cuts a program's blocks at their
residency segments so that each segment's ops are timed once. With every operand in DRAM the
op comes back equal to the one given (the engine then times it exactly as before).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from ...workloads.ops import Gemm, VectorOp
from ..program import FusedOps
from ...workloads.program import Carry, Program, Tensor
from ...workloads.fused_attention import FusedAttention

__all__ = ["Tiered", "access_index", "placed_op", "split_segments", "tier2_chip",
           "tier3_chip", "tier2_weight_bytes"]

#: Where an operand's bytes cross a DRAM interface (the residency planner's locations).
_OFF_CHIP = ("dram", "dram2", "dram3")


@dataclasses.dataclass(frozen=True)
class Tiered:
    """An op (``inner``, as :func:`placed_op` placed it: the engine sees every off-chip
    operand as ``"dram"``) a share of whose off-chip bytes (``dram2_share``, in [0, 1]) the
    chip's second DRAM tier moves, and a share (``dram3_share``) its third (docs/chips.md,
    "Memory tiers"; the two > 0 together, at most 1). The scheduled run times it on the chip,
    on :func:`tier2_chip` and on :func:`tier3_chip` and takes
    ``(1 − s₂ − s₃)·t₁ + s₂·t₂ + s₃·t₃``: each tier streams its share at its own rate, one
    after the other (direct access, no prefetch into the first tier): a memory-bound op's
    time is ``B₁/bw₁ + B₂/bw₂ + B₃/bw₃``, a compute-bound op's its compute."""

    inner: object
    dram2_share: float
    #: bytes of the op's weights in the second tier that a prefetch may fetch ahead
    #: (:func:`tier2_weight_bytes`; 0: none)
    prefetch_bytes: float = 0.0
    dram3_share: float = 0.0

    def __post_init__(self):
        s2, s3 = self.dram2_share, self.dram3_share
        if not (0 <= s2 <= 1 and 0 <= s3 <= 1 and 0 < s2 + s3 <= 1 + 1e-12):
            raise ValueError(f"dram2_share and dram3_share must be in [0, 1] with a sum in "
                             f"(0, 1], not {s2!r} and {s3!r}")
        if not self.prefetch_bytes >= 0:
            raise ValueError(f"prefetch_bytes must be >= 0, not {self.prefetch_bytes!r}")


def tier2_weight_bytes(op, node, nres, accesses: dict) -> float:
    """Bytes of a weight GEMM's weights (its ``b`` operand) that node ``node``'s residency
    ``nres`` puts in the second DRAM tier: what a prefetch may stream ahead of the op (they
    are read-only in the step, so their fetch depends on nothing the op's predecessors do).
    0 for any other op, or without access records."""
    g = op.gemm if isinstance(op, FusedOps) else op
    acc = accesses.get(id(g))
    if not isinstance(g, Gemm) or "weight" not in g.tags or acc is None:
        return 0.0
    names = node.reads + node.writes + node.updates
    loc = {t: a.location for t, a in zip(names, nres.accesses)}
    size = {t: a.bytes for t, a in zip(names, nres.accesses)}
    return float(sum(sh * size[t] for t, sh in _uses(acc, node, "b")
                     if loc.get(t) == "dram2"))


@lru_cache(maxsize=64)
def tier3_chip(chip):
    """``chip`` with its third tier as its only DRAM (as :func:`tier2_chip` for
    ``[dram3]``). ValueError for a chip without ``[dram3]``."""
    t = getattr(chip, "dram3", None)
    if t is None:
        raise ValueError(f"chip {chip.name!r} has no third memory tier ([dram3])")
    return dataclasses.replace(chip, dram=t, dram2=None, dram3=None,
                               energy=dataclasses.replace(chip.energy,
                                                          pj_per_dram_bit=t.pj_per_bit))


@lru_cache(maxsize=64)
def tier2_chip(chip):
    """``chip`` with its second tier as its only DRAM: ``[dram2]``'s record in place of
    ``[dram]``, its energy per bit in place of the first's (what times an op's tier-2 bytes,
    :class:`Tiered`). ValueError for a chip without ``[dram2]``."""
    t = getattr(chip, "dram2", None)
    if t is None:
        raise ValueError(f"chip {chip.name!r} has no second memory tier ([dram2])")
    return dataclasses.replace(chip, dram=t, dram2=None, dram3=None,
                               energy=dataclasses.replace(chip.energy,
                                                          pj_per_dram_bit=t.pj_per_bit))


def access_index(w) -> dict:
    """``id(op)`` → its :class:`~diptych.workloads.program.Access` (roles and shares of the
    tensors it uses), over every block of workload ``w`` that records names."""
    out = {}
    for b in w.blocks:
        for op, a in zip(b.ops, b.access or ()):
            out.setdefault(id(op), a)
    return out


def _where(locs: set) -> str:
    """One location for an operand made of tensors in ``locs``: DRAM if any part is, else the
    slower on-chip memory."""
    if not locs or any(x in locs for x in _OFF_CHIP):
        return "dram"
    return "shared_buffer" if "shared_buffer" in locs else "scratchpad"


def _uses(access, node, role: str | None = None, modes=("read",)) -> list:
    """(tensor, share) of the access record's uses with ``role`` and a mode in ``modes``
    (share > 0); without a record (a chain block), the node's own reads/writes at share 1."""
    if access is None:
        names = node.reads if "read" in modes else node.writes + node.updates
        return [(t, 1.0) for t in names]
    return [(u.tensor, u.share) for u in access.uses
            if (role is None or u.role == role) and u.mode in modes and u.share > 0]


def _split(op_bytes: float, pieces, loc, size) -> tuple[float, float]:
    """(scratchpad bytes, shared-buffer bytes) of ``op_bytes`` by the share of the pieces'
    bytes each memory holds."""
    tot = sum(s * size[t] for t, s in pieces if t in loc)
    if not tot or not op_bytes:
        return 0.0, 0.0
    sp = sum(s * size[t] for t, s in pieces if loc.get(t) == "scratchpad")
    sb = sum(s * size[t] for t, s in pieces if loc.get(t) == "shared_buffer")
    return op_bytes * sp / tot, op_bytes * sb / tot


def placed_op(op, node, nres, accesses: dict, sp_state_bytes: int, has_dram: bool = True):
    """``op`` (node ``node``'s payload) with the locations of :class:`NodeResidency`
    ``nres``; ``accesses``: :func:`access_index`; ``sp_state_bytes``: scratchpad bytes held
    by pinned state for the whole program (``Residency.on_chip_bytes``); ``has_dram``: False
    on an all-SRAM chip (a chain block's weights, which are no tensor of the program, are
    then in the scratchpad)."""
    names = node.reads + node.writes + node.updates
    loc = {t: a.location for t, a in zip(names, nres.accesses)}
    size = {t: a.bytes for t, a in zip(names, nres.accesses)}
    resident = sp_state_bytes + int(sum(a.bytes for a in nres.accesses
                                        if a.transient and a.location == "scratchpad"))
    if isinstance(op, (Gemm, FusedOps)):
        return _placed_gemm(op, node, loc, size, accesses, resident, has_dram)
    if isinstance(op, VectorOp):
        acc = accesses.get(id(op))
        rd = _uses(acc, node, None, ("read", "update"))
        wr = _uses(acc, node, None, ("write", "update"))
        (spr, sbr), (spw, sbw) = _split(op.read_bytes, rd, loc, size), \
            _split(op.write_bytes, wr, loc, size)
        if spr or sbr or spw or sbw:
            return dataclasses.replace(op, scratchpad_read_bytes=spr,
                                       shared_buffer_read_bytes=sbr,
                                       scratchpad_write_bytes=spw,
                                       shared_buffer_write_bytes=sbw)
        return op
    if isinstance(op, FusedAttention):
        acc = accesses.get(id(op))
        sp_r, sb_r = _split(op.read_bytes, _uses(acc, node, None, ("read", "update")), loc, size)
        sp_w, sb_w = _split(op.write_bytes, _uses(acc, node, None, ("write", "update")), loc,
                            size)
        if sp_r or sb_r or sp_w or sb_w:
            return dataclasses.replace(op, scratchpad_bytes=sp_r + sp_w,
                                       shared_buffer_bytes=sb_r + sb_w)
    return op


def _main(pieces, loc, size):
    """(the largest of ``pieces`` by bytes, DRAM bytes of the others) among those with a
    location."""
    ps = [(s * size[t], t) for t, s in pieces if t in loc]
    if not ps:
        return None, 0.0
    main = max(ps)[1]
    return main, sum(b for b, t in ps if t != main and loc[t] in _OFF_CHIP)


def _placed_gemm(op, node, loc, size, accesses, resident, has_dram):
    fused = op if isinstance(op, FusedOps) else None
    g = fused.gemm if fused else op
    acc = accesses.get(id(g))
    if acc is None:   # a chain block: A is what it reads, C what it writes, B a weight
        a_t, b_t, c_t = list(node.reads), [], list(node.writes)
    else:
        a_t = [t for t, _ in _uses(acc, node, "a")]
        b_t = [t for t, _ in _uses(acc, node, "b")]
        c_t = [t for t, _ in _uses(acc, node, "c", ("write", "update"))]
    extra = 0.0
    own = set(a_t) | set(b_t)
    if fused and fused.prologue:
        # A is made on the fly from the prologue's largest input (the activation); its other
        # inputs (a norm's weight) are read besides
        ins = [p for v in fused.prologue for p in _uses(accesses.get(id(v)), node, None)]
        main, other = _main(ins, loc, size)
        if main is not None:
            a_t, extra = [main], extra + other
            own |= {t for t, _ in ins}
    if fused and fused.epilogue:
        # C leaves as the epilogue's largest output; its other outputs (a KV-cache append)
        # are written besides
        outs = set(node.writes + node.updates)
        wr = [p for v in fused.epilogue
              for p in _uses(accesses.get(id(v)), node, None, ("write", "update"))
              if p[0] in outs]
        main, other = _main(wr, loc, size)
        if main is not None:
            c_t, extra = [main], extra + other
    srcs = dict(a_source=_where({loc[t] for t in a_t if t in loc}),
                b_source=_where({loc[t] for t in b_t if t in loc}) if acc is not None
                or has_dram else "scratchpad",
                c_dest=_where({loc[t] for t in c_t if t in loc}))
    # the scratchpad held during the op: pinned state plus this node's resident transients
    on_chip = any(v != "dram" for v in srcs.values())
    placed = dataclasses.replace(g, **srcs, resident_bytes=resident) if (
        on_chip or resident) else g
    if not fused:
        return placed
    # the epilogue's extra inputs in DRAM (a residual, a bias), each once
    for v in fused.epilogue:
        for t, s in _uses(accesses.get(id(v)), node, None):
            if t in loc and t not in own and loc[t] in _OFF_CHIP:
                extra += s * size[t]
                own.add(t)
    return dataclasses.replace(fused, gemm=placed, extra_dram_bytes=extra)


def split_segments(prog: Program, res) -> tuple[Program, dict]:
    """``prog`` with every block whose repeats differ in residency (``res.segments``) cut into
    one block per segment, chained through its carries (new program tensors between them).
    Blocks that import from or are imported by another block stay whole. Returns the program
    and, per block of it, ``(original block name, first repeat, representative repeat)``: the
    repeat whose residency times its ops (the first of a segment; for a block kept whole
    although its repeats differ, its last repeat, the one with the most in DRAM)."""
    linked = {b.name for b in prog.blocks if b.imports} | {
        i.block for b in prog.blocks for i in b.imports}
    blocks, tensors, origin = [], list(prog.tensors), {}
    for b in prog.blocks:
        segs = res.segments(b.name)
        if len(segs) == 1 or b.name in linked or not b.carry:
            blocks.append(b)
            origin[b.name] = (b.name, 0, 0 if len(segs) == 1 else b.repeat - 1)
            continue
        for i, (s0, s1) in enumerate(segs):
            name = f"{b.name}[{s0}:{s1}]"
            carry = []
            for c in b.carry:
                out_t = next(t for t in b.tensors if t.name == c.output)
                entry = c.entry if i == 0 else f"{b.name}@{s0}.{c.input}"
                exit_ = c.exit if i == len(segs) - 1 else f"{b.name}@{s1}.{c.input}"
                if i < len(segs) - 1:
                    tensors.append(Tensor(exit_, out_t.bytes, out_t.kind))
                carry.append(Carry(c.input, c.output, entry, exit_))
            blocks.append(dataclasses.replace(b, name=name, repeat=s1 - s0, carry=tuple(carry)))
            origin[name] = (b.name, s0, s0)
    if len(blocks) == len(prog.blocks):
        return prog, origin
    return Program(prog.name, blocks, tuple(tensors)), origin

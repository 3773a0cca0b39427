"""The program graph: tensors, ops that read and write them, and blocks repeated L times.

A :class:`Program` is a sequence of :class:`Block` s. A block holds one copy of its ops
(:class:`Node`) and of its own tensors (:class:`Tensor`) and stands for ``repeat`` identical
copies run one after the other (the L layers of a transformer): every repeat has its own
instance of each block tensor (its own weights, KV cache and activations), and a
:class:`Carry` hands one repeat's output to the next repeat's input. Program-level tensors
(``Program.tensors``) connect blocks: a block reads them by name, and a repeated block exports
its last repeat's output to one of them (``Carry.exit``).

Rules (checked eagerly, errors name the block, node and tensor):

* names are unique (program tensors, block names, a block's tensors and nodes), and a block's
  tensor names do not shadow program tensors;
* every tensor has at most one producer (``writes``); a repeated block writes program tensors
  only through ``Carry.exit``;
* a tensor without producer is an input: program tensors of any kind, block tensors of a state
  kind (:data:`STATE_KINDS`: the layer's weights, KV cache, optimizer state, gradients) or a
  carried input; anything else is read before any producer;
* ``updates`` (read-modify-write in place: a KV-cache append, an optimizer step) only touch
  inputs of a state kind; accesses to an updated tensor are ordered as listed in the block;
* blocks are in dependency order (a block reads program tensors produced by earlier blocks or
  by itself), and a block's dependency graph has no cycle (the error names the cycle);
* bytes are finite and >= 0.

A graph that only makes sense on some chip (a tensor larger than every memory) is checked by
:meth:`Program.check_fits`. :meth:`Program.expand` materialises the repeats (all of them, or
the first, one middle and the last) for the golden models and the planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..arch.chip import TENSOR_KINDS
from .fused_attention import FusedAttention
from .ops import Collective, Gemm, Op, VectorOp

#: Tensor kinds that live across program invocations (weights, caches, optimizer state,
#: gradient accumulators): an input of one of these kinds is resident for the whole program.
STATE_KINDS: tuple[str, ...] = ("weight", "kv_cache", "optimizer_state", "gradient")

#: The main unit an op runs on (informative; the scheduler uses the node's ``demand``).
NODE_UNITS: tuple[str, ...] = ("array", "vector", "link", "dma")

STAGES = ("forward", "recompute", "backward", "optimizer")

#: How an op uses a tensor.
MODES = ("read", "write", "update")
#: A use's role: a GEMM's ``a``/``b`` input or ``c`` output; ``dep``: an ordering-only read
#: (share 0: a summed gradient partial, routing indices the op's byte model leaves out).
ROLES = ("", "a", "b", "c", "dep")


@dataclass(frozen=True)
class Use:
    """One op's use of one tensor: ``mode`` (read, write, update), ``share`` (bytes the op
    moves ÷ the tensor's bytes; 0 for an ordering-only read) and ``role``."""

    tensor: str
    mode: str = "read"
    share: float = 1.0
    role: str = ""

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"use of {self.tensor!r}: mode must be one of {', '.join(MODES)}, "
                             f"not {self.mode!r}")
        if self.role not in ROLES:
            raise ValueError(f"use of {self.tensor!r}: role must be one of {ROLES}, not "
                             f"{self.role!r}")
        if not (isinstance(self.share, (int, float)) and math.isfinite(self.share)
                and self.share >= 0):
            raise ValueError(f"use of {self.tensor!r}: share must be a finite number >= 0, "
                             f"not {self.share!r}")


@dataclass(frozen=True)
class Access:
    """The tensors one op uses (:class:`Use` s, in role order). ``rmw``: a vector op's updates
    are read and written (AdamW's master copy and moments); otherwise an update is written
    only (a gradient accumulated by a GEMM's output, whose read the engine does not model)."""

    uses: tuple[Use, ...]
    rmw: bool = False

    def _names(self, mode: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(u.tensor for u in self.uses if u.mode == mode))

    @property
    def reads(self) -> tuple[str, ...]:
        return self._names("read")

    @property
    def writes(self) -> tuple[str, ...]:
        return self._names("write")

    @property
    def updates(self) -> tuple[str, ...]:
        return self._names("update")

    def of(self, *, mode: str | None = None, role: str | None = None) -> tuple[Use, ...]:
        return tuple(u for u in self.uses if (mode is None or u.mode == mode)
                     and (role is None or u.role == role))


def op_unit(op) -> str:
    """The unit an op's main work runs on (``Node.unit``)."""
    if isinstance(op, Collective):
        return "link"
    if isinstance(op, VectorOp):
        return "vector"
    return "array"


def _name(what: str, value) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, not {value!r}")


def _names(what: str, value) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        raise ValueError(f"{what} must be a tuple of tensor names, not {value!r}")
    for v in value:
        _name(what, v)
    if len(set(value)) != len(value):
        raise ValueError(f"{what} lists a tensor twice: {tuple(value)!r}")
    return tuple(value)


@dataclass(frozen=True)
class Tensor:
    """A tensor of ``bytes`` bytes. ``kind`` is one of :data:`~diptych.arch.chip.TENSOR_KINDS`.
    ``live_out``: its value must outlive the program (new KV entries, updated weights, the
    logits): it is live until the end of the program."""

    name: str
    bytes: float
    kind: str = "activation"
    live_out: bool = False

    def __post_init__(self):
        _name("tensor name", self.name)
        b = self.bytes
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) \
                or b < 0:
            raise ValueError(f"tensor {self.name!r}: bytes must be a finite number >= 0, "
                             f"not {b!r}")
        if self.kind not in TENSOR_KINDS:
            raise ValueError(f"tensor {self.name!r}: kind must be one of "
                             f"{', '.join(TENSOR_KINDS)}, not {self.kind!r}")

    @property
    def is_state(self) -> bool:
        return self.kind in STATE_KINDS


@dataclass(frozen=True)
class Node:
    """One op: the tensors it ``reads``, ``writes`` (it is their producer) and ``updates`` in
    place. ``unit`` names the unit its main work runs on; ``demand`` is what the scheduler
    needs, attached once the op is timed (:meth:`Program.with_demands`; the run layer
    attaches a ``Demand`` of :mod:`diptych.sim.program.demand`, which the scheduler
    checks); ``payload`` carries the op record (Gemm, VectorOp, ...); ``access``, when the
    lowering recorded one, the op's :class:`Use` s of its tensors (role, share), from which
    ``reads``, ``writes`` and ``updates`` follow."""

    name: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    updates: tuple[str, ...] = ()
    unit: str = "array"
    demand: Any = None
    payload: Any = field(default=None, compare=False, repr=False)
    access: Access | None = None

    def __post_init__(self):
        _name("node name", self.name)
        if self.access is not None:
            a = self.access
            given = (tuple(self.reads), tuple(self.writes), tuple(self.updates))
            if any(given) and given != (a.reads, a.writes, a.updates):
                raise ValueError(f"node {self.name!r}: give its tensors as an access record "
                                 f"or as reads/writes/updates, not both")
            for what in ("reads", "writes", "updates"):
                object.__setattr__(self, what, getattr(a, what))
        for what in ("reads", "writes", "updates"):
            object.__setattr__(self, what, _names(f"node {self.name!r}: {what}",
                                                  getattr(self, what)))
        both = set(self.reads) & set(self.writes) | set(self.updates) & (
            set(self.reads) | set(self.writes))
        if both:
            raise ValueError(f"node {self.name!r}: {sorted(both)[0]!r} appears in more than "
                             f"one of reads/writes/updates (an in-place op lists it in "
                             f"updates only)")
        if self.unit not in NODE_UNITS:
            raise ValueError(f"node {self.name!r}: unit must be one of "
                             f"{', '.join(NODE_UNITS)}, not {self.unit!r}")

    @property
    def accesses(self) -> tuple[str, ...]:
        return self.reads + self.writes + self.updates


@dataclass(frozen=True)
class Carry:
    """Repeat k's block tensor ``output`` becomes repeat k+1's block tensor ``input``; repeat 0
    reads the program tensor ``entry`` instead, and the last repeat's ``output`` is the program
    tensor ``exit`` (if given)."""

    input: str
    output: str
    entry: str
    exit: str | None = None


@dataclass(frozen=True)
class Import:
    """Block tensor ``local`` is, in repeat k, the instance of the earlier block ``block``'s
    tensor ``tensor`` from repeat ``L−1−k`` (``reverse``: a backward pass reading what the
    forward pass saved, last layer first) or from repeat ``k``. Both blocks have the same
    ``repeat`` L. The source tensor is produced in ``block`` (an activation saved for
    backward), is its carried input (the layer input) or is one of its state inputs (the
    layer's weights, read again by backward)."""

    local: str
    block: str
    tensor: str
    reverse: bool = True


@dataclass(frozen=True)
class Block:
    """``repeat`` identical copies of ``nodes`` over their own instances of ``tensors``;
    ``imports`` name tensors of an earlier block's repeats (see :class:`Import`).

    As the lowering emits it (:meth:`of_ops`), a block also says where in a phase it belongs
    (``stage``), which tensors it shares with other blocks (``program_tensors``: the
    embedding's output, a layer's output, the logits) and, for a backward or recompute block,
    the forward block whose tensors it reads by their names (``source``); the programs a
    step runs are assembled from such blocks (:func:`diptych.workloads.graph.program_pieces`).
    A block whose nodes carry no access record (a topology file, a hand-made list of ops)
    runs as a chain, each op reading its predecessor's output."""

    name: str
    tensors: tuple[Tensor, ...]
    nodes: tuple[Node, ...]
    repeat: int = 1
    carry: tuple[Carry, ...] = ()
    imports: tuple[Import, ...] = ()
    stage: str = "forward"
    program_tensors: tuple[Tensor, ...] = ()
    source: str | None = None

    def __post_init__(self):
        _name("block name", self.name)
        r = self.repeat
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ValueError(f"block {self.name!r}: repeat must be a positive integer, "
                             f"not {r!r}")
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {self.stage!r}")
        for f in ("tensors", "nodes", "carry", "imports", "program_tensors"):
            object.__setattr__(self, f, tuple(getattr(self, f)))
        if not self.nodes:
            raise ValueError(f"block {self.name!r} has no nodes")
        _unique(f"block {self.name!r}: tensor", [t.name for t in self.tensors])
        _unique(f"block {self.name!r}: node", [n.name for n in self.nodes])

    @classmethod
    def of_ops(cls, name: str, repeat: int, ops, stage: str = "forward", *, access=(),
               tensors=(), program_tensors=(), carry=(), source: str | None = None
               ) -> "Block":
        """A block of ``ops`` (one node each, named as its op; ``access``: one
        :class:`Access` per op, or none for a chain block, whose nodes of a repeated name
        are numbered ``name#j``)."""
        ops = tuple(ops)
        if access and len(access) != len(ops):
            raise ValueError(f"block {name!r}: {len(access)} access records for "
                             f"{len(ops)} ops (one per op, or none)")
        nodes, seen = [], set()
        for j, op in enumerate(ops):
            n = op.name if (access or op.name not in seen) else f"{op.name}#{j}"
            seen.add(n)
            nodes.append(Node(n, unit=op_unit(op), payload=op,
                              access=access[j] if access else None))
        return cls(name, tuple(tensors), tuple(nodes), repeat, tuple(carry), (), stage,
                   tuple(program_tensors), source)

    def with_ops(self, ops, access=None, **changes) -> "Block":
        """This block with ``ops`` (and their ``access`` records, or none) instead of its own,
        and any other field of :meth:`of_ops` changed."""
        f = dict(name=self.name, repeat=self.repeat, stage=self.stage, tensors=self.tensors,
                 program_tensors=self.program_tensors, carry=self.carry, source=self.source)
        f.update(changes)
        return Block.of_ops(f.pop("name"), f.pop("repeat"), ops, access=tuple(access or ()),
                            **f)

    @property
    def ops(self) -> tuple[Op, ...]:
        """The op records of the nodes, in order."""
        return tuple(n.payload for n in self.nodes)

    @property
    def access(self) -> tuple[Access, ...]:
        """One access record per node, or none for a chain block."""
        if any(n.access is None for n in self.nodes):
            return ()
        return tuple(n.access for n in self.nodes)

    @property
    def gemm_flops(self) -> float:
        """GEMM FLOPs of ``repeat`` copies, fused attention's included (with its recompute)."""
        return self.repeat * sum(o.flops if isinstance(o, Gemm) else o.gemm_flops
                                 for o in self.ops if isinstance(o, (Gemm, FusedAttention)))

    @property
    def recompute_flops(self) -> float:
        """GEMM FLOPs fused attention backward spends recomputing scores (not model FLOPs)."""
        return self.repeat * sum(o.recompute_flops for o in self.ops
                                 if isinstance(o, FusedAttention))

    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


def _unique(what: str, names) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise ValueError(f"{what} {n!r} is defined twice")
        seen.add(n)


@dataclass(frozen=True)
class NodeInst:
    """One node of one repeat in a materialised program (see :meth:`Program.expand`)."""

    index: int
    block: int
    repeat: int
    node: Node
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    updates: tuple[str, ...]
    preds: tuple[int, ...]


@dataclass(frozen=True)
class TensorInst:
    """One tensor instance of a materialised program. ``cls`` groups the instances that share
    a residency decision: ``"block/tensor"`` for block tensors, the name for program tensors."""

    id: str
    tensor: Tensor
    cls: str
    block: int | None
    repeat: int | None


@dataclass(frozen=True)
class Expanded:
    """A materialised program: nodes in program order (blocks, repeats, each block's
    topological order) with resolved tensor instances and dependencies. ``repeats[b]`` lists
    the repeat indices that were materialised for block ``b`` (all, or first/middle/last)."""

    nodes: tuple[NodeInst, ...]
    tensors: dict
    repeats: tuple[tuple[int, ...], ...]


class Program:
    """A validated program graph (see the module docstring). Immutable; build once."""

    def __init__(self, name: str, blocks, tensors=()):
        _name("program name", name)
        self.name = name
        self.blocks: tuple[Block, ...] = tuple(blocks)
        self.tensors: tuple[Tensor, ...] = tuple(tensors)
        if not self.blocks:
            raise ValueError(f"program {name!r} has no blocks")
        for b in self.blocks:
            if not isinstance(b, Block):
                raise ValueError(f"program {name!r}: blocks must be Block, not "
                                 f"{type(b).__name__}")
        _unique(f"program {name!r}: block", [b.name for b in self.blocks])
        _unique(f"program {name!r}: tensor", [t.name for t in self.tensors])
        self._global = {t.name: t for t in self.tensors}
        self._index = {b.name: i for i, b in enumerate(self.blocks)}
        self._producer: list[dict[str, str]] = []
        self._imports: list[dict[str, Import]] = []
        order = []
        for i in range(len(self.blocks)):
            order.append(self._validate_block(i))
        self._order = tuple(order)
        self._pos = tuple({ni: p for p, ni in enumerate(o)} for o in self._order)
        self._check_block_order()

    # ---- validation ---------------------------------------------------------------------
    def _resolve_kind(self, b: Block, name: str):
        """("local", Tensor) | ("global", Tensor) | None."""
        for t in b.tensors:
            if t.name == name:
                return "local", t
        if name in self._global:
            return "global", self._global[name]
        return None

    def _validate_block(self, bi: int) -> tuple[int, ...]:
        b = self.blocks[bi]
        where = f"block {b.name!r}"
        for t in b.tensors:
            if t.name in self._global:
                raise ValueError(f"{where}: tensor {t.name!r} shadows the program tensor of "
                                 f"the same name")
        producer: dict[str, str] = {}
        for n in b.nodes:
            for t in n.accesses:
                if self._resolve_kind(b, t) is None:
                    raise ValueError(f"{where}: node {n.name!r} accesses unknown tensor {t!r}")
            for t in n.writes:
                if t in producer:
                    raise ValueError(f"{where}: tensor {t!r} has two producers "
                                     f"({producer[t]!r} and {n.name!r})")
                producer[t] = n.name
                if b.repeat > 1 and self._resolve_kind(b, t)[0] == "global":
                    raise ValueError(f"{where}: node {n.name!r} writes program tensor {t!r} "
                                     f"in every one of {b.repeat} repeats; a repeated block "
                                     f"exports its last repeat's output through Carry.exit")
            for t in n.updates:
                scope, ten = self._resolve_kind(b, t)
                if not ten.is_state:
                    raise ValueError(f"{where}: node {n.name!r} updates {t!r} in place, but "
                                     f"only state tensors ({', '.join(STATE_KINDS)}) can be "
                                     f"updated, not a {ten.kind}")
                if scope == "global" and b.repeat > 1:
                    raise ValueError(f"{where}: node {n.name!r} updates program tensor {t!r} "
                                     f"in every repeat; per-repeat state must be a block "
                                     f"tensor (one instance per repeat)")
        for n in b.nodes:
            for t in n.updates:
                if t in producer:
                    raise ValueError(f"{where}: node {n.name!r} updates {t!r} in place, but "
                                     f"{producer[t]!r} produces it: only inputs (state without "
                                     f"a producer) are updated in place")
        carried = {}
        for c in b.carry:
            for nm, what in ((c.input, "input"), (c.output, "output")):
                r = self._resolve_kind(b, nm)
                if r is None or r[0] != "local":
                    raise ValueError(f"{where}: carry {what} {nm!r} must be a tensor of the "
                                     f"block")
            if c.input in producer:
                raise ValueError(f"{where}: carried input {c.input!r} is also written by "
                                 f"node {producer[c.input]!r}")
            if c.output not in producer:
                raise ValueError(f"{where}: carried output {c.output!r} has no producer in "
                                 f"the block")
            if c.input in carried:
                raise ValueError(f"{where}: tensor {c.input!r} is carried twice")
            carried[c.input] = c
            for nm, what in ((c.entry, "entry"), (c.exit, "exit")):
                if nm is None:
                    continue
                if nm not in self._global:
                    raise ValueError(f"{where}: carry {what} {nm!r} must be a program tensor")
                local = c.input if what == "entry" else c.output
                if self._global[nm].bytes != b.tensor(local).bytes:
                    raise ValueError(f"{where}: carry {what} {nm!r} has "
                                     f"{self._global[nm].bytes!r} bytes, the block tensor "
                                     f"{local!r} has {b.tensor(local).bytes!r}")
        imports = self._validate_imports(bi, producer, carried)
        self._producer.append(producer)
        self._imports.append(imports)
        if imports and b.repeat > 1:
            _check_behind_carry(b, producer, carried, imports)
        for n in b.nodes:
            for t in n.reads:
                scope, ten = self._resolve_kind(b, t)
                if scope == "local" and t not in producer and t not in carried \
                        and t not in imports and not ten.is_state:
                    raise ValueError(f"{where}: node {n.name!r} reads {t!r} before any "
                                     f"producer: it is a {ten.kind} that no node writes and "
                                     f"not a carried input or a state tensor")
        return _topo_order(b, producer)

    def _validate_imports(self, bi: int, producer: dict, carried: dict) -> dict:
        b = self.blocks[bi]
        where = f"block {b.name!r}"
        out: dict[str, Import] = {}
        updated = {t for n in b.nodes for t in n.updates}
        for imp in b.imports:
            if not isinstance(imp, Import):
                raise ValueError(f"{where}: imports must be Import, not {type(imp).__name__}")
            r = self._resolve_kind(b, imp.local)
            if r is None or r[0] != "local":
                raise ValueError(f"{where}: imported tensor {imp.local!r} must be a tensor of "
                                 f"the block")
            if imp.local in out:
                raise ValueError(f"{where}: tensor {imp.local!r} is imported twice")
            if imp.local in producer or imp.local in updated or imp.local in carried:
                raise ValueError(f"{where}: imported tensor {imp.local!r} is also written, "
                                 f"updated or carried in the block (an import is read only)")
            si = self._index.get(imp.block)
            if si is None or si >= bi:
                raise ValueError(f"{where}: import {imp.local!r} names block {imp.block!r}, "
                                 f"which must be an earlier block of the program")
            src = self.blocks[si]
            if src.repeat != b.repeat:
                raise ValueError(f"{where}: imports from block {src.name!r}, which has "
                                 f"{src.repeat} repeats, not {b.repeat}: both must have the "
                                 f"same number")
            st = next((t for t in src.tensors if t.name == imp.tensor), None)
            if st is None:
                raise ValueError(f"{where}: import {imp.local!r} names tensor {imp.tensor!r}, "
                                 f"which block {src.name!r} does not have")
            lt = b.tensor(imp.local)
            if (lt.bytes, lt.kind) != (st.bytes, st.kind):
                raise ValueError(f"{where}: imported tensor {imp.local!r} ({lt.bytes!r} bytes, "
                                 f"{lt.kind}) differs from {src.name!r}'s {imp.tensor!r} "
                                 f"({st.bytes!r} bytes, {st.kind})")
            src_carried = {c.input for c in src.carry}
            src_updated = {t for n in src.nodes for t in n.updates}
            if imp.tensor in self._imports[si]:
                raise ValueError(f"{where}: import {imp.local!r} names {src.name!r}'s "
                                 f"{imp.tensor!r}, itself an import: import from its source")
            if imp.tensor in src_updated:
                raise ValueError(f"{where}: import {imp.local!r} names {src.name!r}'s "
                                 f"{imp.tensor!r}, which that block updates in place")
            if imp.tensor not in self._producer[si] and imp.tensor not in src_carried \
                    and not st.is_state:
                raise ValueError(f"{where}: import {imp.local!r} names {src.name!r}'s "
                                 f"{imp.tensor!r}, which that block neither produces nor "
                                 f"carries in and which is not a state tensor")
            out[imp.local] = imp
        return out

    def _check_block_order(self) -> None:
        producer_block: dict[str, int] = {}
        for bi, b in enumerate(self.blocks):
            for n in b.nodes:
                for t in n.writes:
                    if self._resolve_kind(b, t)[0] == "global":
                        if t in producer_block:
                            other = self.blocks[producer_block[t]].name
                            raise ValueError(f"program tensor {t!r} has two producers (blocks "
                                             f"{other!r} and {b.name!r})")
                        producer_block[t] = bi
            for c in b.carry:
                if c.exit is not None:
                    if c.exit in producer_block:
                        other = self.blocks[producer_block[c.exit]].name
                        raise ValueError(f"program tensor {c.exit!r} has two producers "
                                         f"(blocks {other!r} and {b.name!r})")
                    producer_block[c.exit] = bi
        for bi, b in enumerate(self.blocks):
            names = [(n.name, t) for n in b.nodes for t in n.reads + n.updates] + \
                    [(f"carry {c.input!r}", c.entry) for c in b.carry]
            for who, t in names:
                if self._resolve_kind(b, t)[0] != "global":
                    continue
                pb = producer_block.get(t)
                if pb is not None and pb > bi:
                    raise ValueError(f"block {b.name!r}: {who} reads program tensor {t!r}, "
                                     f"produced by the later block {self.blocks[pb].name!r}: "
                                     f"blocks must be listed in dependency order")
                if pb is not None and pb == bi and b.repeat > 1:
                    raise ValueError(f"block {b.name!r}: {who} reads program tensor {t!r} "
                                     f"that the block itself exports")

    # ---- queries ------------------------------------------------------------------------
    def order(self, block: int) -> tuple[int, ...]:
        """Node indices of block ``block`` in the topological order the scheduler uses
        (stable: the listed order where dependencies allow)."""
        return self._order[block]

    @property
    def node_count(self) -> int:
        """Nodes of the materialised program (repeats included)."""
        return sum(b.repeat * len(b.nodes) for b in self.blocks)

    def with_demands(self, demands) -> "Program":
        """A copy whose nodes carry ``demands[(block name, node name)]`` (a
        :class:`~diptych.sim.program.demand.Demand`); nodes not in the mapping keep theirs."""
        import dataclasses
        blocks = []
        for b in self.blocks:
            nodes = tuple(dataclasses.replace(n, demand=demands[(b.name, n.name)])
                          if (b.name, n.name) in demands else n for n in b.nodes)
            blocks.append(dataclasses.replace(b, nodes=nodes))
        return Program(self.name, blocks, self.tensors)

    def all_tensors(self):
        """(block name or None, Tensor) for every program and block tensor."""
        for t in self.tensors:
            yield None, t
        for b in self.blocks:
            for t in b.tensors:
                yield b.name, t

    def check_fits(self, chip) -> None:
        """Raise ValueError for a tensor larger than every memory of ``chip`` (its DRAM, or the
        SRAM of a chip without DRAM)."""
        cap = chip.memory_bytes
        where = (f"DRAM of {chip.dram.capacity_bytes:,} bytes" if chip.has_dram
                 else f"SRAM of {chip.sram_bytes:,} bytes (no DRAM)")
        for bname, t in self.all_tensors():
            if t.bytes > cap:
                owner = f"block {bname!r}" if bname else f"program {self.name!r}"
                raise ValueError(f"{owner}: tensor {t.name!r} ({t.bytes:,.0f} bytes) is larger "
                                 f"than every memory of chip {chip.name!r} (largest: {where})")

    # ---- imports ------------------------------------------------------------------------
    def imported(self, block: int) -> dict:
        """``{local name: Import}`` of block index ``block``."""
        return self._imports[block]

    def saved_classes(self) -> frozenset:
        """Tensor classes (``"block/tensor"``) some later block imports as produced
        activations (saved for backward): their instances are live from their producer to the
        importing read, so the planners treat each instance as its own item (see
        :mod:`~diptych.sim.program.residency`)."""
        out = set()
        for bi in range(len(self.blocks)):
            for imp in self._imports[bi].values():
                si = self._index[imp.block]
                src = self.blocks[si]
                name = imp.tensor
                for c in src.carry:
                    if c.input == name:
                        name = c.output
                if name in self._producer[si]:
                    out.add(f"{src.name}/{name}")
        return frozenset(out)

    def _source(self, bi: int, local: str, k: int) -> tuple[int, str, int]:
        """(source block, tensor, repeat) an import of block ``bi`` reads in repeat ``k``."""
        imp = self._imports[bi][local]
        si = self._index[imp.block]
        L = self.blocks[si].repeat
        return si, imp.tensor, (L - 1 - k if imp.reverse else k)

    def instance(self, block: int, name: str, repeat: int, reps=None) -> str:
        """The instance id block index ``block``'s tensor ``name`` has in ``repeat``: its own
        (``"blk[k].name"``), the previous repeat's carried output, the carry entry, the carry
        exit, or (for an import) the source's. With ``reps`` (the repeats materialised of
        each block, as :meth:`expand` with ``condensed`` keeps them) a repeat that is not
        materialised maps to the middle one."""
        owner, name, k = self.instance_parts(block, name, repeat, reps)
        return name if owner is None else f"{owner}[{k}].{name}"

    def instance_parts(self, block: int, name: str, repeat: int, reps=None
                       ) -> tuple[str | None, str, int]:
        """:meth:`instance` as ``(owner block name, tensor name, repeat)``; the owner is None
        for a program tensor (then the repeat is 0)."""
        if name in self._imports[block]:
            block, name, repeat = self._source(block, name, repeat)
        b = self.blocks[block]
        if not any(t.name == name for t in b.tensors):
            return None, name, 0
        for c in b.carry:
            if c.input == name:
                if repeat == 0:
                    return None, c.entry, 0
                name, repeat = c.output, repeat - 1
                break
        if repeat == b.repeat - 1:
            for c in b.carry:
                if c.output == name and c.exit is not None:
                    return None, c.exit, 0
        if reps is not None and repeat not in reps[block]:
            repeat = reps[block][1]
        return b.name, name, repeat

    def import_writer(self, block: int, local: str, repeat: int):
        """``(block, repeat, position in that block's order)`` of the node whose output block
        index ``block``'s imported tensor ``local`` is in ``repeat``; None when it is a state
        input or a program tensor (the carry's entry or exit, an ordinary dependency)."""
        si, name, j = self._source(block, local, repeat)
        src = self.blocks[si]
        for c in src.carry:
            if c.input == name:
                if j == 0:
                    return None
                name, j = c.output, j - 1
                break
        if j == src.repeat - 1 and any(c.output == name and c.exit is not None
                                       for c in src.carry):
            return None
        w = self._producer[si].get(name)
        if w is None:
            return None
        ni = next(i for i, n in enumerate(src.nodes) if n.name == w)
        return si, j, self._pos[si][ni]

    # ---- materialisation ----------------------------------------------------------------
    def expand(self, *, condensed: bool = False) -> Expanded:
        """Materialise the repeats: all of them, or with ``condensed`` only the first, one
        middle and the last repeat of each block (every middle repeat sees exactly the same
        live tensors and dependency pattern, so this is enough for the planner).

        Dependencies come from one version table over tensor instances, in program order: a
        read depends on the last writer or updater of the instance; an update also on every
        read since (write-after-read); a carried input is the previous repeat's output
        instance, repeat 0's is the program tensor ``entry``, the last repeat's exported
        output is the program tensor ``exit``; an import reads its source's instance (with
        ``condensed``, a representative one, without a dependency on its writer: see
        :meth:`import_writer`)."""
        nodes: list[NodeInst] = []
        tensors: dict[str, TensorInst] = {t.name: TensorInst(t.name, t, t.name, None, None)
                                          for t in self.tensors}
        writer: dict[str, int] = {}
        readers: dict[str, list[int]] = {}
        reps_all = []
        for bi, b in enumerate(self.blocks):
            L = b.repeat
            reps = tuple(range(L)) if not condensed or L <= 3 else (0, 1, L - 1)
            reps_all.append(reps)
            carried = {c.input: c for c in b.carry}
            exits = {c.output: c.exit for c in b.carry if c.exit is not None}
            imports = self._imports[bi]
            prev: dict[str, str] = {}
            for ri, k in enumerate(reps):
                inst_of: dict[str, str] = {}
                for t in b.tensors:
                    if t.name in imports:
                        inst_of[t.name] = self.instance(
                            bi, t.name, k, tuple(reps_all) if condensed else None)
                    elif t.name in carried:
                        c = carried[t.name]
                        inst_of[t.name] = c.entry if ri == 0 else prev[c.output]
                    elif k == L - 1 and t.name in exits:
                        inst_of[t.name] = exits[t.name]
                    else:
                        tid = f"{b.name}[{k}].{t.name}"
                        inst_of[t.name] = tid
                        tensors[tid] = TensorInst(tid, t, f"{b.name}/{t.name}", bi, k)
                for ni in self._order[bi]:
                    n = b.nodes[ni]
                    idx = len(nodes)
                    res = {t: inst_of.get(t, t) for t in n.accesses}
                    preds: set[int] = set()
                    for t in n.reads:
                        tid = res[t]
                        # a condensed expansion reads a representative instance of an
                        # import: its writer is not this repeat's (the scheduler adds the
                        # exact one, Program.import_writer)
                        if tid in writer and not (condensed and t in imports
                                                  and tid not in self._global):
                            preds.add(writer[tid])
                        readers.setdefault(tid, []).append(idx)
                    for t in n.updates:
                        tid = res[t]
                        if tid in writer:
                            preds.add(writer[tid])
                        preds.update(readers.get(tid, ()))
                        writer[tid] = idx
                        readers[tid] = []
                    for t in n.writes:
                        writer[res[t]] = idx
                        readers[res[t]] = []
                    preds.discard(idx)
                    nodes.append(NodeInst(idx, bi, k, n, tuple(res[t] for t in n.reads),
                                          tuple(res[t] for t in n.writes),
                                          tuple(res[t] for t in n.updates),
                                          tuple(sorted(preds))))
                prev = {c.output: inst_of[c.output] for c in b.carry}
        return Expanded(tuple(nodes), tensors, tuple(reps_all))


def _check_behind_carry(b: Block, producer: dict, carried: dict, imports: dict) -> None:
    """In a repeated block, every node that reads an import must depend, within its repeat,
    on a carried input: repeat k+1 runs behind repeat k (a backward layer runs when the
    gradient reaches it). The fast scheduler relies on it: it materialises repeat k+1 when
    repeat k starts."""
    behind: set[str] = set()
    changed = True
    while changed:
        changed = False
        for n in b.nodes:
            if n.name in behind:
                continue
            if any(t in carried or (t in producer and producer[t] in behind)
                   for t in n.reads + n.updates):
                behind.add(n.name)
                changed = True
    for n in b.nodes:
        t = next((t for t in n.reads if t in imports), None)
        if t is not None and n.name not in behind:
            raise ValueError(f"block {b.name!r}: node {n.name!r} reads the imported tensor "
                             f"{t!r} but does not depend on a carried input of the block: in "
                             f"a repeated block, imports are read behind the carried chain "
                             f"(a backward layer runs when the gradient reaches it)")


def _topo_order(b: Block, producer: dict[str, str]) -> tuple[int, ...]:
    """Stable topological order of one repeat of ``b`` (Kahn, smallest listed index first);
    a cycle raises ValueError naming it."""
    import heapq
    idx = {n.name: i for i, n in enumerate(b.nodes)}
    succ: list[set[int]] = [set() for _ in b.nodes]
    why: dict[tuple[int, int], str] = {}
    indeg = [0] * len(b.nodes)
    last_update: dict[str, int] = {}
    since: dict[str, list[int]] = {}
    for i, n in enumerate(b.nodes):
        deps = []
        for t in n.reads + n.updates:
            if t in producer and producer[t] != n.name:
                deps.append((idx[producer[t]], t))
            if t in last_update:
                deps.append((last_update[t], t))
        for t in n.updates:
            deps += [(j, t) for j in since.get(t, ())]
            last_update[t] = i
            since[t] = []
        for t in n.reads:
            since.setdefault(t, []).append(i)
        for j, t in deps:
            if j != i and i not in succ[j]:
                succ[j].add(i)
                why[(j, i)] = t
                indeg[i] += 1
        for t in n.reads:
            if producer.get(t) == n.name:
                raise ValueError(f"block {b.name!r} has a cycle: {n.name} -> {n.name} "
                                 f"(reads its own output {t!r})")
    ready = [i for i in range(len(b.nodes)) if indeg[i] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    if len(out) < len(b.nodes):
        cycle = _find_cycle([i for i in range(len(b.nodes)) if indeg[i] > 0], succ)
        names = " -> ".join(b.nodes[i].name for i in cycle + [cycle[0]])
        via = ", ".join(f"{why[(cycle[k], cycle[(k + 1) % len(cycle)])]!r}"
                        for k in range(len(cycle)))
        raise ValueError(f"block {b.name!r} has a cycle: {names} (through tensors {via})")
    return tuple(out)


def _find_cycle(nodes: list[int], succ: list[set[int]]) -> list[int]:
    """A cycle among ``nodes``, the nodes Kahn's algorithm could not order: each has a
    predecessor among them, so walking predecessors must revisit a node."""
    inside = set(nodes)
    pred = {j: min(i for i in inside if j in succ[i]) for j in inside}
    path: list[int] = []
    seen: dict[int, int] = {}
    cur = min(inside)
    while cur not in seen:
        seen[cur] = len(path)
        path.append(cur)
        cur = pred[cur]
    return path[seen[cur]:][::-1]

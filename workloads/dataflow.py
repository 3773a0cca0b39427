"""Recording the tensors a block's ops use while the lowering emits them.

The lowering functions (``workloads/lower.py``) take an optional ``flow``: a :class:`Flow`
collects the tensor table of the block being lowered and one
:class:`~diptych.workloads.program.Access` per op, in the order the ops are emitted; without
one (:data:`NOFLOW`) the functions return exactly the same ops and record nothing. A value
that lives in part of a tensor (q is a slice of the fused QKV output; after RoPE the rotated
dimensions live in a new tensor) is a list of *pieces* ``[(tensor, share), ...]``.
"""

from __future__ import annotations

from .program import Tensor
from .program import Access, Use

Pieces = list[tuple[str, float]]


def scaled(pieces: Pieces, f: float) -> Pieces:
    """The same pieces, each share times ``f`` (a part of a part)."""
    return [(t, s * f) for t, s in pieces]


def uses(pieces: Pieces, mode: str = "read", role: str = "") -> tuple[Use, ...]:
    """:class:`Use` s of ``pieces``, shares of one tensor summed (one use per tensor)."""
    out: dict[str, float] = {}
    for t, s in pieces:
        out[t] = out.get(t, 0.0) + s
    return tuple(Use(t, mode, s, role) for t, s in out.items())


class Flow:
    """The tensors and accesses of one block, recorded as its ops are lowered."""

    def __init__(self):
        self.tensors: dict[str, Tensor] = {}
        self.program: dict[str, Tensor] = {}
        self.records: list = []

    def t(self, name: str, nbytes: float, kind: str = "activation", *, program: bool = False,
          live_out: bool = False) -> str:
        """Declare tensor ``name`` (a block tensor, or with ``program`` one shared between
        blocks) and return its name; declaring it again must agree."""
        table, other = (self.program, self.tensors) if program else (self.tensors, self.program)
        if name in other:
            raise ValueError(f"lowering bug: tensor {name!r} declared both as a block and as a "
                             f"program tensor")
        t = Tensor(name, float(nbytes), kind, live_out)
        old = table.setdefault(name, t)
        if old != t:
            raise ValueError(f"lowering bug: tensor {name!r} declared twice: {old!r}, {t!r}")
        return name

    def live_out(self, name: str) -> None:
        """Mark a declared tensor as outliving the program (the logits, the loss)."""
        for table in (self.tensors, self.program):
            if name in table:
                t = table[name]
                table[name] = Tensor(t.name, t.bytes, t.kind, True)
                return
        raise KeyError(name)

    def add(self, op, *use: Use, rmw: bool = False):
        """Record ``op`` with its uses and return it."""
        self.records.append((op, Access(tuple(use), rmw)))
        return op

    def gemm(self, op, a: Pieces, b: Pieces, c: Pieces, deps: tuple[str, ...] = ()):
        """Record a GEMM: ``a`` and ``b`` its input operands, ``c`` its output."""
        return self.add(op, *uses(a, "read", "a"), *uses(b, "read", "b"),
                        *(Use(t, "read", 0.0, "dep") for t in deps), *uses(c, "write", "c"))

    def vec(self, op, reads: Pieces, writes: Pieces, deps: tuple[str, ...] = ()):
        """Record a vector op (or a collective, or fused attention)."""
        return self.add(op, *uses(reads, "read"), *(Use(t, "read", 0.0, "dep") for t in deps),
                        *uses(writes, "write"))


class _NoFlow:
    """Records nothing: the lowering functions called without a flow."""

    def t(self, name, *_, **__):
        return name

    def live_out(self, name):
        pass

    def add(self, op, *_, **__):
        return op

    gemm = vec = add


NOFLOW = _NoFlow()

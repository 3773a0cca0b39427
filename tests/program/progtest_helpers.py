"""Random valid programs for the program-layer tests (built from one integer seed, so
hypothesis drives them), and a small decode-like layer used by several tests."""

from __future__ import annotations

import random

from diptych.sim.program import Demand, Phase, op_demand
from diptych.workloads.program import Block, Carry, Import, Node, Program, Tensor

RES = ("array", "vector", "dram", "link")


def random_demand(rng: random.Random, *, space: int, prefetch: bool = True) -> Demand:
    """1-3 reserved phases with random durations and shares, maybe after a prefetch."""
    phases = []
    hold = 0
    if prefetch and space > 0 and rng.random() < 0.4:
        hold = rng.randint(0, space)
        phases.append(Phase(rng.choice([1, 2, 3, 5]) * 1e-6, {"dram": 1.0}, early=True,
                            label="prefetch"))
    for _ in range(rng.randint(1, 3)):
        use = {}
        for r in rng.sample(RES, rng.randint(1, 3)):
            use[r] = rng.choice([1.0, 1.0, 0.5, 0.3, 0.75, 0.05])
        phases.append(Phase(rng.choice([1, 2, 3, 4, 7]) * 1e-6, use))
    return Demand(tuple(phases), hold_bytes=hold)


def random_program(seed: int, *, max_blocks: int = 3, max_nodes: int = 4, max_repeat: int = 4,
                   space: int = 0, demands: bool = True) -> Program:
    """A random valid program: blocks of random nodes over local activations, state tensors
    (some updated in place), carried layer inputs and program tensors between blocks."""
    rng = random.Random(seed)
    gl = [Tensor("in0", rng.randint(1, 50) * 100)]
    avail = ["in0"]                     # program tensors later blocks may read
    blocks = []
    for bi in range(rng.randint(1, max_blocks)):
        L = rng.randint(1, max_repeat)
        tensors = []
        states = []
        for s in range(rng.randint(0, 2)):
            kind = rng.choice(["weight", "kv_cache", "weight"])
            tensors.append(Tensor(f"s{s}", rng.randint(1, 40) * 100, kind))
            states.append(f"s{s}")
        carry = ()
        local = []
        xsize = rng.randint(1, 30) * 100
        if L > 1 or rng.random() < 0.5:
            tensors.append(Tensor("x", xsize))
            local.append("x")
        nodes = []
        for j in range(rng.randint(1, max_nodes)):
            pool = local + states + avail
            reads = tuple(rng.sample(pool, min(len(pool), rng.randint(1, 3))))
            updates = ()
            kv = [s for s in states if s not in reads]
            if kv and rng.random() < 0.25:
                updates = (rng.choice(kv),)
            out = f"t{j}"
            size = xsize if j == 0 else rng.randint(1, 30) * 100
            tensors.append(Tensor(out, size, live_out=(L == 1 and rng.random() < 0.1)))
            unit = rng.choice(["array", "vector", "link"])
            d = random_demand(rng, space=space) if demands else None
            nodes.append(Node(f"n{j}", reads=reads, writes=(out,), updates=updates, unit=unit,
                              demand=d))
            local.append(out)
        if "x" in local:
            # the carried output must have x's size: the first node's output has it
            entry = f"g{bi}_in"
            exit_ = f"g{bi}_out"
            src = avail[-1] if rng.random() < 0.5 else None
            if src is not None and next(t for t in gl if t.name == src).bytes == xsize:
                entry = src
            else:
                gl.append(Tensor(entry, xsize))
            gl.append(Tensor(exit_, xsize))
            carry = (Carry("x", "t0", entry, exit_),)
            avail.append(exit_)
        blocks.append(Block(f"b{bi}", tuple(tensors), tuple(nodes), repeat=L, carry=carry))
    return Program(f"p{seed}", blocks, gl)


def decode_layer_program(layers: int, *, prefetch_bytes: float = 0.0, allreduce_s: float = 0.0,
                         launch_s: float = 0.0) -> Program:
    """A decode step of ``layers`` identical layers: norm (vector) -> qkv (GEMV, weights) ->
    attention over the KV cache -> o_proj -> [all-reduce] -> mlp (two GEMVs), each GEMV
    memory-bound: 1 us of weight streaming, 0.1 us of compute."""
    bw = 1e12
    gemv = dict(seconds=1e-6, unit="array", compute_seconds=0.1e-6, dram_bytes=1e6,
                stream_bytes_per_s=bw,
                launch_seconds=launch_s)
    pre = dict(prefetch_bytes=prefetch_bytes) if prefetch_bytes else {}
    T = [Tensor("x", 16e3), Tensor("h", 16e3), Tensor("q", 16e3), Tensor("a", 16e3),
         Tensor("o", 16e3), Tensor("r", 16e3), Tensor("m", 16e3), Tensor("y", 16e3),
         Tensor("w_qkv", 1e6, "weight"), Tensor("w_o", 1e6, "weight"),
         Tensor("w_up", 1e6, "weight"), Tensor("w_down", 1e6, "weight"),
         Tensor("kv", 0.5e6, "kv_cache")]
    N = [Node("norm", reads=("x",), writes=("h",), unit="vector",
              demand=op_demand(seconds=0.05e-6, unit="vector", launch_seconds=launch_s)),
         Node("qkv", reads=("h", "w_qkv"), writes=("q",), demand=op_demand(**gemv, **pre)),
         Node("attn", reads=("q", "kv"), writes=("a",),
              demand=op_demand(seconds=0.5e-6, unit="array", dram_bytes=0.5e6,
                               stream_bytes_per_s=bw, launch_seconds=launch_s)),
         Node("o_proj", reads=("a", "w_o"), writes=("o",), demand=op_demand(**gemv, **pre))]
    if allreduce_s:
        N.append(Node("all_reduce", reads=("o",), writes=("r",), unit="link",
                      demand=op_demand(seconds=allreduce_s, unit="link",
                                       launch_seconds=launch_s)))
        mlp_in = "r"
    else:
        mlp_in = "o"
    N += [Node("up", reads=(mlp_in, "w_up"), writes=("m",), demand=op_demand(**gemv, **pre)),
          Node("down", reads=("m", "w_down"), writes=("y",), demand=op_demand(**gemv, **pre))]
    layer = Block("layers", tuple(T), tuple(N), repeat=layers,
                  carry=(Carry("x", "y", "emb", "hidden"),))
    embed = Block("embed", (), (Node("embed", reads=("tokens",), writes=("emb",),
                                     unit="vector", demand=op_demand(seconds=0.1e-6,
                                                                     unit="vector")),))
    head = Block("head", (), (Node("lm_head", reads=("hidden",), writes=("logits",),
                                   demand=op_demand(seconds=2e-6, unit="array")),))
    return Program("decode", [embed, layer, head],
                   [Tensor("tokens", 64), Tensor("emb", 16e3), Tensor("hidden", 16e3),
                    Tensor("logits", 256e3, live_out=True)])


def random_program_with_imports(seed: int, *, space: int = 0, demands: bool = True,
                                **kw) -> Program:
    """:func:`random_program` plus a "backward" block that imports tensors of an earlier
    block's repeats (produced ones, its carried input, its state), in reverse or in the same
    order, sometimes behind a carried gradient chain that starts after the source block."""
    rng = random.Random(seed ^ 0x5EED)
    base = random_program(seed, space=space, demands=demands, **kw)
    blocks = list(base.blocks)
    gl = list(base.tensors)
    src = rng.choice(blocks)
    produced = [t for n in src.nodes for t in n.writes
                if not any(t == g.name for g in gl)]
    carried = [c.input for c in src.carry]
    states = [t.name for t in src.tensors if t.is_state
              and not any(t.name in n.updates for n in src.nodes)]
    pool = produced + carried + states
    if not pool:
        return base
    chosen = rng.sample(pool, rng.randint(1, min(3, len(pool))))
    reverse = rng.random() < 0.7
    tensors, imports = [], []
    for i, name in enumerate(chosen):
        t = src.tensor(name)
        tensors.append(Tensor(f"i{i}", t.bytes, t.kind))
        imports.append(Import(f"i{i}", src.name, name, reverse))
    tensors.append(Tensor("g", rng.randint(1, 20) * 100, "gradient"))
    local = [f"i{i}" for i in range(len(chosen))]
    carry = ()
    if src.repeat > 1 or rng.random() < 0.5:     # a repeated block needs its chain
        size = rng.randint(1, 20) * 100
        entry = "d_in"
        gl.append(Tensor(entry, size))
        # the chain starts after the source block: a node of a new block reads the source's
        # exports, or nothing (then the backward block may run alongside its source)
        exports = [c.exit for b in blocks for c in b.carry if c.exit]
        reads = (rng.choice(exports),) if exports and rng.random() < 0.8 else ()
        blocks.append(Block("seed", (), (Node("seed", reads=reads, writes=(entry,),
                                              unit="vector",
                                              demand=random_demand(rng, space=0)
                                              if demands else None),)))
        tensors += [Tensor("dy", size), Tensor("dx", size)]
        carry = (Carry("dy", "dx", entry, "d_out"),)
        gl.append(Tensor("d_out", size))
        local.append("dy")
    nodes = []
    last = None
    chain = ["dy"] if carry else []      # imports are read behind the carried chain
    for j in range(rng.randint(1, 3)):
        reads = tuple(rng.sample(local, rng.randint(1, len(local))))
        if chain and not set(reads) & set(chain):
            reads += (rng.choice(chain),)
        out = f"o{j}"
        chain.append(out)
        tensors.append(Tensor(out, rng.randint(1, 20) * 100))
        upd = ("g",) if j == 0 else ()
        nodes.append(Node(f"b{j}", reads=reads, writes=(out,), updates=upd,
                          unit=rng.choice(["array", "vector", "link"]),
                          demand=random_demand(rng, space=space) if demands else None))
        local.append(out)
        last = out
    if carry:
        nodes.append(Node("dx", reads=(last,), writes=("dx",), unit="vector",
                          demand=random_demand(rng, space=0) if demands else None))
    blocks.append(Block("bwd", tuple(tensors), tuple(nodes), repeat=src.repeat, carry=carry,
                        imports=tuple(imports)))
    return Program(f"{base.name}+bwd", blocks, gl)

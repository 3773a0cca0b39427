"""The program graph: construction, eager validation (messages name block, node, tensor),
materialisation of repeats and its dependencies."""

import pytest

from diptych.arch import load_chip
from diptych.workloads.program import Block, Carry, Node, Program, Tensor


def act(name, n=100, **kw):
    return Tensor(name, n, **kw)


def simple_block(name="b", repeat=1, nodes=None, tensors=None, carry=()):
    tensors = tensors if tensors is not None else (act("x"), act("y"), Tensor("w", 50, "weight"))
    nodes = nodes if nodes is not None else (Node("mm", reads=("x", "w"), writes=("y",)),)
    return Block(name, tensors, nodes, repeat=repeat, carry=carry)


# ---- construction ------------------------------------------------------------------------
def test_init():
    p = Program("p", [simple_block(nodes=(Node("mm", reads=("inp", "w"), writes=("y",)),),
                                   tensors=(act("y"), Tensor("w", 50, "weight")))],
                [act("inp")])
    assert p.node_count == 1 and p.order(0) == (0,)
    assert p.blocks[0].tensor("w").is_state and not p.blocks[0].tensor("y").is_state


@pytest.mark.parametrize("make,message", [
    (lambda: Tensor("t", -1), "tensor 't': bytes must be a finite number >= 0, not -1"),
    (lambda: Tensor("t", float("nan")), "tensor 't': bytes must be a finite number >= 0"),
    (lambda: Tensor("t", 1, "weights"), "tensor 't': kind must be one of weight, activation"),
    (lambda: Tensor("", 1), "tensor name must be a non-empty string"),
    (lambda: Node("n", reads=("a",), writes=("a",)), "node 'n': 'a' appears in more than one"),
    (lambda: Node("n", reads="a"), "node 'n': reads must be a tuple of tensor names"),
    (lambda: Node("n", unit="gpu"), "node 'n': unit must be one of array, vector, link, dma"),
    (lambda: Block("b", (), ()), "block 'b' has no nodes"),
    (lambda: Block("b", (), (Node("n"),), repeat=0),
     "block 'b': repeat must be a positive integer, not 0"),
    (lambda: Block("b", (act("t"), act("t")), (Node("n"),)), "block 'b': tensor 't' is "
     "defined twice"),
])
def test_init_wrong_records(make, message):
    with pytest.raises(ValueError, match=None) as info:
        make()
    assert message in str(info.value)


def test_cycle_is_named():
    nodes = (Node("a", reads=("t2",), writes=("t1",)), Node("b", reads=("t1",), writes=("t2",)),
             Node("c", reads=("t2",), writes=("t3",)))
    with pytest.raises(ValueError) as info:
        Program("p", [simple_block(nodes=nodes, tensors=(act("t1"), act("t2"), act("t3")))])
    msg = str(info.value)
    assert "block 'b' has a cycle" in msg
    assert "a -> b -> a" in msg or "b -> a -> b" in msg
    assert "'t1'" in msg and "'t2'" in msg


def test_self_cycle_is_named():
    nodes = (Node("a", reads=("t1",), writes=("t2",)), Node("b", reads=("t2",), writes=("t1",)))
    with pytest.raises(ValueError, match="cycle: a -> b -> a|cycle: b -> a -> b"):
        Program("p", [simple_block(nodes=nodes, tensors=(act("t1"), act("t2")))])


@pytest.mark.parametrize("nodes,tensors,message", [
    ((Node("mm", reads=("x", "w"), writes=("y",)),), (act("x"), act("y"), Tensor("w", 5, "weight")),
     "block 'b': node 'mm' reads 'x' before any producer: it is a activation that no node "
     "writes and not a carried input or a state tensor"),
    ((Node("a", writes=("y",)), Node("c", writes=("y",))), (act("y"),),
     "block 'b': tensor 'y' has two producers ('a' and 'c')"),
    ((Node("a", reads=("nope",), writes=("y",)),), (act("y"),),
     "block 'b': node 'a' accesses unknown tensor 'nope'"),
    ((Node("a", updates=("y",)), Node("c", writes=("y",))), (act("y"),),
     "block 'b': node 'a' updates 'y' in place, but only state tensors"),
    ((Node("a", updates=("g",)), Node("c", writes=("g",))), (Tensor("g", 4, "gradient"),),
     "block 'b': node 'a' updates 'g' in place, but 'c' produces it"),
])
def test_wrong_graphs(nodes, tensors, message):
    with pytest.raises(ValueError) as info:
        Program("p", [Block("b", tensors, nodes)])
    assert message in str(info.value)


def test_repeated_block_cannot_write_program_tensor():
    blk = Block("layers", (act("x"),), (Node("n", reads=("x",), writes=("g",)),), repeat=2,
                carry=())
    with pytest.raises(ValueError, match="node 'n' writes program tensor 'g' in every one of 2 "
                                         "repeats"):
        Program("p", [blk], [act("g"), act("x0")])


def test_carry_checks():
    T = (act("x"), act("y"))
    n = (Node("n", reads=("x",), writes=("y",)),)
    with pytest.raises(ValueError, match="carry entry 'e' must be a program tensor"):
        Program("p", [Block("b", T, n, 2, (Carry("x", "y", "e"),))])
    with pytest.raises(ValueError, match="carried output 'z' has no producer"):
        Program("p", [Block("b", T + (act("z"),), n, 2, (Carry("x", "z", "e"),))], [act("e")])
    with pytest.raises(ValueError, match="carried input 'y' is also written by node 'n'"):
        Program("p", [Block("b", T, n, 2, (Carry("y", "x", "e"),))], [act("e")])
    with pytest.raises(ValueError, match="carry entry 'e' has 7 bytes, the block tensor 'x' "
                                         "has 100"):
        Program("p", [Block("b", T, n, 2, (Carry("x", "y", "e"),))], [Tensor("e", 7)])


def test_blocks_in_dependency_order():
    first = Block("first", (), (Node("n", reads=("g",), writes=("h",)),))
    second = Block("second", (), (Node("m", reads=("i",), writes=("g",)),))
    with pytest.raises(ValueError, match="block 'first': n reads program tensor 'g', produced "
                                         "by the later block 'second'"):
        Program("p", [first, second], [act("g"), act("h"), act("i")])


def test_shadowing_and_duplicates():
    with pytest.raises(ValueError, match="block 'b': tensor 'x' shadows the program tensor"):
        Program("p", [simple_block()], [act("x")])
    with pytest.raises(ValueError, match="program 'p': block 'b' is defined twice"):
        Program("p", [simple_block(tensors=(act("y"), Tensor("w", 5, "weight")),
                                   nodes=(Node("mm", reads=("w",), writes=("y",)),))] * 2)


def test_tensor_larger_than_every_memory():
    big = Tensor("w", 100 * 2**30, "weight")
    p = Program("p", [Block("b", (big, act("y")), (Node("mm", reads=("w",), writes=("y",)),))])
    with pytest.raises(ValueError) as info:
        p.check_fits(load_chip("h100"))
    msg = str(info.value)
    assert "block 'b': tensor 'w' (107,374,182,400 bytes) is larger than every memory" in msg
    assert "DRAM of 85,899,345,920 bytes" in msg
    sram = Program("p", [Block("b", (Tensor("w", 300 * 2**20, "weight"), act("y")),
                               (Node("mm", reads=("w",), writes=("y",)),))])
    sram.check_fits(load_chip("h100"))           # fits the DRAM
    with pytest.raises(ValueError, match=r"largest: SRAM of 230,686,720 bytes \(no DRAM\)"):
        sram.check_fits(load_chip("groq-lpu"))


# ---- materialisation ---------------------------------------------------------------------
def layer_program(L):
    T = (act("x"), act("h"), act("y"), Tensor("w", 50, "weight"), Tensor("kv", 70, "kv_cache"))
    N = (Node("norm", reads=("x",), writes=("h",), unit="vector"),
         Node("append", reads=("h",), updates=("kv",), unit="vector"),
         Node("attn", reads=("h", "kv", "w"), writes=("y",)))
    layers = Block("layers", T, N, repeat=L, carry=(Carry("x", "y", "emb", "out"),))
    emb = Block("emb", (), (Node("embed", reads=("tok",), writes=("emb",), unit="vector"),))
    head = Block("head", (), (Node("head", reads=("out",), writes=("logits",)),))
    return Program("p", [emb, layers, head],
                   [act("tok"), act("emb"), act("out"), act("logits", live_out=True)])


def test_expand_carry_chain_and_exports():
    ex = layer_program(3).expand()
    names = [(n.block, n.repeat, n.node.name) for n in ex.nodes]
    assert names[0] == (0, 0, "embed") and names[-1] == (2, 0, "head") and len(names) == 11
    by = {(n.repeat, n.node.name): n for n in ex.nodes if n.block == 1}
    assert by[(0, "norm")].reads == ("emb",)                  # repeat 0 reads the entry
    assert by[(1, "norm")].reads == ("layers[0].y",)          # the carried output
    assert by[(2, "attn")].writes == ("out",)                 # the last repeat exports
    assert by[(1, "norm")].preds == (by[(0, "attn")].index,)
    # the KV append is ordered after the norm and before attention (update RAW)
    assert by[(0, "attn")].preds == (by[(0, "norm")].index, by[(0, "append")].index)
    assert ex.nodes[-1].preds == (by[(2, "attn")].index,)
    assert {t.cls for t in ex.tensors.values()} >= {"layers/w", "layers/kv", "layers/y", "out"}


def test_expand_condensed_keeps_three_repeats():
    ex = layer_program(9).expand(condensed=True)
    assert ex.repeats[1] == (0, 1, 8)
    assert [n.repeat for n in ex.nodes if n.block == 1] == [0] * 3 + [1] * 3 + [8] * 3
    assert len([n for n in ex.nodes if n.block == 1 and n.repeat == 8]) == 3


def test_write_after_read_of_updated_state():
    T = (Tensor("w", 10, "weight"), act("y"), act("g"))
    N = (Node("use", reads=("w",), writes=("y",)), Node("grad", reads=("y",), writes=("g",)),
         Node("step", reads=("g",), updates=("w",)))
    ex = Program("p", [Block("b", T, N)]).expand()
    assert set(ex.nodes[2].preds) == {0, 1}        # the update waits for the earlier reader


def test_with_demands_and_listed_order():
    from diptych.sim.program import op_demand
    T = (act("a"), act("b"), act("c"))
    N = (Node("second", reads=("a",), writes=("b",)), Node("first", writes=("a",)),
         Node("third", reads=("b",), writes=("c",)))
    p = Program("p", [Block("blk", T, N)])
    assert p.order(0) == (1, 0, 2)                 # dependencies decide; ties keep the list
    d = op_demand(seconds=1e-6, unit="array")
    q = p.with_demands({("blk", "first"): d})
    assert q.blocks[0].nodes[1].demand == d and q.blocks[0].nodes[0].demand is None


def test_import_checks():
    from diptych.workloads.program import Import
    f = Block("f", (act("x"), act("h"), act("y"), Tensor("w", 5, "weight")),
              (Node("a", reads=("x", "w"), writes=("h",)), Node("b", reads=("h",), writes=("y",))),
              repeat=3, carry=(Carry("x", "y", "in", "out"),))
    glob = [act("in"), act("out"), act("d")]

    def bwd(imports, tensors=(act("hs"),), repeat=3):
        return Block("g", tensors + (act("dy"), act("p")),
                     (Node("n", reads=tuple(dict.fromkeys(i.local for i in imports)) + ("dy",),
                           writes=("p",)),), repeat=repeat,
                     carry=(Carry("dy", "p", "d"),), imports=tuple(imports))

    Program("p", [f, bwd([Import("hs", "f", "h")])], glob)            # valid
    for imports, tensors, repeat, msg in [
        ([Import("hs", "nope", "h")], (act("hs"),), 3, "names block 'nope', which must be an "
                                                        "earlier block"),
        ([Import("hs", "f", "zz")], (act("hs"),), 3, "which block 'f' does not have"),
        ([Import("hs", "f", "h")], (act("hs"),), 2, "which has 3 repeats, not 2"),
        ([Import("hs", "f", "h")], (Tensor("hs", 99),), 3, "differs from 'f''s 'h'"),
        ([Import("hs", "f", "h"), Import("hs", "f", "y")], (act("hs"),), 3, "imported twice"),
    ]:
        with pytest.raises(ValueError, match=msg):
            Program("p", [f, bwd(imports, tensors, repeat)], glob)

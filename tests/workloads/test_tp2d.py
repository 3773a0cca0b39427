"""The 2-D weight-stationary FFN layout (workloads/tp2d.py) against Pope et al.'s closed forms
("Efficiently Scaling Transformer Inference", arXiv 2211.05102, §3.2.2 and Appendix A.2)."""

import json
import math

import pytest

from diptych.arch import load_chip
from diptych.sim.protocols import torus_slice
from diptych.sim.run import Scenario
from diptych.sim.run.links import collective_seconds
from diptych.sim.run.node import tp_grid
from diptych.workloads.lower import decode_mean, prefill
from diptych.workloads.ops import Collective, Gemm
from diptych.workloads.config import model_from_hf
from diptych.workloads.registry import load_model
from diptych.workloads.tp2d import x_axis
from diptych.workloads.graph import program_pieces
from test_tensors import check_bytes

# GPT-3-like FFN (F = 4E, GELU, ungated: the paper's), 256 heads so 1-D TP splits it too
GPT3 = model_from_hf({"architectures": ["GPT2LMHeadModel"], "n_embd": 16384, "n_head": 256,
                      "n_layer": 2, "n_positions": 4096, "vocab_size": 1024},
                     name="gpt-like")
LLAMA = load_model("llama-3-70b")     # gated (SwiGLU), 64 heads
T, A = 64, 2                          # decode at batch 64, bf16 activations


def _layer_ops(w):
    """The ops of the (only) transformer layer block."""
    [block] = [b for b in w.blocks if b.name not in ("embedding", "head")]
    return block.ops


def _ffn_sent(ops) -> float:
    """Bytes each chip sends in the FFN's collectives (ring fraction of each buffer)."""
    frac = {"all_reduce": lambda k: 2 * (k - 1) / k, "all_gather": lambda k: (k - 1) / k,
            "reduce_scatter": lambda k: (k - 1) / k}
    return sum(frac[op.kind](op.group) * op.bytes for op in ops
               if isinstance(op, Collective) and op.name.startswith("mlp"))


def _grid(m, n):
    shape = torus_slice(n, 3)
    return shape, x_axis(m, shape)


def test_paper_grid_is_chosen():
    # the paper's optimum X = sqrt(n E / F) = sqrt(n)/2 for F = 4E: 64 chips 4 x 16,
    # 16 chips 2 x 8 (Appendix A.2.1)
    for n, x in ((64, 4), (16, 2), (256, 8)):
        shape, xi = _grid(GPT3, n)
        assert shape[xi] == x and n // shape[xi] == 2 * math.isqrt(n)


@pytest.mark.parametrize("n", [16, 64])
def test_ffn_bytes_match_the_paper(n):
    shape, xi = _grid(GPT3, n)
    X, YZ, E, F = shape[xi], n // shape[xi], GPT3.hidden_size, GPT3.intermediate_size
    two = _ffn_sent(_layer_ops(decode_mean(GPT3, T, 2048, tp=n, tp_grid=(shape, xi))))
    one = _ffn_sent(_layer_ops(decode_mean(GPT3, T, 2048, tp=n)))
    # 2-D: all-gather BLE over YZ, reduce-scatter BLF over X, all-gather over X,
    # reduce-scatter BLE over YZ, each a ring over its axis
    paper_2d = A * T * (2 * E / X * (YZ - 1) / YZ + 2 * F / YZ * (X - 1) / X)
    assert two == pytest.approx(paper_2d, rel=1e-12)
    # 1-D: one all-reduce of BLE, 2(n-1)/n of it sent
    assert one == pytest.approx(A * T * E * 2 * (n - 1) / n, rel=1e-12)
    # asymptotically 8 BLE / sqrt(n) (the paper's T_comm): within the ring's (k-1)/k
    assert 0.5 < two / (8 * A * T * E / math.sqrt(n)) <= 1.0


def test_2d_volume_falls_as_inverse_sqrt_n_1d_stays():
    sent = {}
    for n in (16, 64, 256):
        grid = _grid(GPT3, n)
        sent[n] = (_ffn_sent(_layer_ops(decode_mean(GPT3, T, 2048, tp=n, tp_grid=grid))),
                   _ffn_sent(_layer_ops(decode_mean(GPT3, T, 2048, tp=n))))
    # x4 the chips: 2-D bytes x ~1/2 (1/sqrt 4, less the ring's (k-1)/k growth), 1-D ~ x1
    assert 0.5 <= sent[64][0] / sent[16][0] < 0.65
    assert 0.5 <= sent[256][0] / sent[64][0] < 0.56
    assert 1.0 < sent[256][1] / sent[16][1] < 1.07
    assert sent[256][0] < sent[256][1] / 4


@pytest.mark.parametrize("m", [GPT3, LLAMA], ids=["gelu", "gated"])
def test_gemm_flops_and_weights_split_n_ways(m):
    n = 64
    grid = _grid(m, n)
    for w2, w1 in ((decode_mean(m, T, 2048, tp=n, tp_grid=grid), decode_mean(m, T, 2048, tp=n)),
                   (prefill(m, 2, 512, tp=n, tp_grid=grid), prefill(m, 2, 512, tp=n))):
        g2 = [op for op in _layer_ops(w2) if isinstance(op, Gemm) and "mlp" in op.tags]
        g1 = [op for op in _layer_ops(w1) if isinstance(op, Gemm) and "mlp" in op.tags]
        t, E, F = w2.tokens, m.hidden_size, m.intermediate_size
        full = 2 * t * E * F * (3 if m.gated_mlp else 2)     # the unsplit FFN's FLOPs
        assert sum(op.flops for op in g2) * n == full == sum(op.flops for op in g1) * n
        # each chip holds an E/X x F/YZ block of every FFN weight: 1/n of it
        wbytes = sum(op.k * op.n for op in g2)
        assert wbytes * n == E * F * (3 if m.gated_mlp else 2)
        X = grid[0][grid[1]]
        assert (g2[0].k, g2[-1].n, g2[-1].k) == (E // X, E // X, F // (n // X))


def test_sub_slice_collective_timing_is_the_per_dimension_rule():
    chip = load_chip("tpu-v4")
    ic = chip.interconnect
    link = ic.gb_per_s_per_link_per_direction * 1e9 * ic.bus_efficiency
    hop = ic.latency_us * 1e-6
    nbytes = 8e6
    # one wrapped side of 4 (a 4x4x4 slice): a bidirectional ring, 3/4 of the buffer over 2
    # lanes, 3 hops
    x = Collective(name="x", kind="all_gather", bytes=nbytes, group=4, torus_shape=(4, 4, 4),
                   torus_axes=(0,))
    assert collective_seconds(x, chip) == pytest.approx(0.75 * nbytes / 2 / link + 3 * hop)
    # the same side of a 3x4x4 slice does not wrap: one lane
    y = Collective(name="y", kind="reduce_scatter", bytes=nbytes, group=4,
                   torus_shape=(3, 4, 4), torus_axes=(1,))
    assert collective_seconds(y, chip) == pytest.approx(0.75 * nbytes / link + 3 * hop)
    with pytest.raises(ValueError, match="must span group"):
        Collective(name="z", kind="all_gather", bytes=1.0, group=8, torus_shape=(4, 4, 4),
                   torus_axes=(0, 1))


def test_layout_validation_names_the_value():
    with pytest.raises(ValueError, match="tp_layout must be one of 1d, 2d, not '3d'"):
        Scenario(phase="decode", prompt=8, tp_layout="3d")
    with pytest.raises(ValueError, match="phase train takes --tp-layout 1d"):
        Scenario(phase="train", seq=8, tp_layout="2d")
    s = Scenario(phase="decode", prompt=8, tp_layout="2d")
    with pytest.raises(ValueError, match=r"'h100' has none \(interconnect.torus_dims = 0\)"):
        tp_grid(load_chip("h100"), GPT3, s, 8)
    with pytest.raises(ValueError, match="--tp is 2"):
        tp_grid(load_chip("tpu-v4"), GPT3, s, 2)
    with pytest.raises(ValueError, match="mixture of experts"):
        tp_grid(load_chip("tpu-v4"), load_model("mixtral-8x7b"), s, 8)
    # 7 chips: a 1x1x7 slice has no X x YZ grid
    with pytest.raises(ValueError, match="no side X"):
        tp_grid(load_chip("tpu-v4"), GPT3, s, 7)
    assert tp_grid(load_chip("tpu-v4"), GPT3, Scenario(phase="decode", prompt=8), 64) is None


@pytest.mark.parametrize("args, msg", [
    (["--chip", "h100", "--tp", "8", "--chips", "8", "--tp-layout", "2d"],
     "chip 'h100' has none (interconnect.torus_dims = 0)"),
    (["--chip", "tpu-v4", "--tp", "8", "--chips", "8", "--tp-layout", "3d"],
     "'3d' is not one of '1d', '2d'"),
    (["--chip", "tpu-v4", "--tp", "8", "--chips", "8", "--tp-layout", "2d", "--pp", "2"],
     "--tp-layout 2d applies to a model on one chip type"),
])
def test_cli_refuses_a_bad_layout_with_exit_2(args, msg):
    from click.testing import CliRunner
    from diptych.tools.cli import main
    r = CliRunner().invoke(main, ["run", "--model", "llama-3-8b", "--phase", "decode",
                                  "--prompt", "16", *args])
    assert r.exit_code == 2 and msg in " ".join(r.output.split()) and "Traceback" not in r.output


PALM = model_from_hf({"architectures": ["LlamaForCausalLM"], "hidden_size": 18432,
                      "intermediate_size": 73728, "num_attention_heads": 48,
                      "num_key_value_heads": 1, "head_dim": 256, "num_hidden_layers": 2,
                      "vocab_size": 256000, "max_position_embeddings": 4096},
                     name="palm-like")    # PaLM-540B's widths (Chowdhery et al. 2022, Table 1)


def test_48_heads_on_64_chips_only_under_2d():
    # the 1-D layout cannot split 48 heads over 64 chips; the 2-D one splits them over YZ
    with pytest.raises(ValueError, match="attention heads"):
        decode_mean(PALM, T, 2048, tp=64)
    shape, xi = _grid(PALM, 64)
    assert (shape[xi], 64 // shape[xi]) == (4, 16)
    w = decode_mean(PALM, T, 2048, tp=64, tp_grid=(shape, xi))
    ops = _layer_ops(w)
    X, YZ, E, dh = 4, 16, PALM.hidden_size, PALM.head_dim
    H = PALM.heads // YZ                                # 3 query heads per chip
    # attention collectives: all-gather E over YZ, reduce-scatter the projections' partial
    # sums over X, all-gather the heads' output over X, reduce-scatter o_proj's over YZ
    frac = {"all_gather": lambda k: (k - 1) / k, "reduce_scatter": lambda k: (k - 1) / k}
    sent = sum(frac[op.kind](op.group) * op.bytes for op in ops
               if isinstance(op, Collective) and op.name.startswith(("attn", "qkv")))
    qkv = (H + 2) * dh                                  # one (replicated) KV head per chip
    assert sent == pytest.approx(A * T * (2 * E / X * (YZ - 1) / YZ
                                          + (qkv + H * dh) * (X - 1) / X), rel=1e-12)
    # per chip x n: o_proj and the attention core are the unsplit model's; qkv_proj's K/V
    # part is replicated over YZ (one KV head: multi-query)
    ref = _layer_ops(decode_mean(PALM, T, 2048, tp=1))

    def flops(ops, name):
        return sum(op.flops for op in ops if getattr(op, "name", "") == name)
    assert flops(ops, "o_proj") * 64 == flops(ref, "o_proj")
    assert flops(ops, "attention (fused)") * 64 == flops(ref, "attention (fused)")
    q_part = flops(ref, "qkv_proj") * PALM.heads / (PALM.heads + 2)
    assert flops(ops, "qkv_proj") * 64 == pytest.approx(q_part + YZ * (flops(ref, "qkv_proj")
                                                                     - q_part))


@pytest.mark.parametrize("n", [48, 64])
def test_every_op_agrees_with_its_tensors(n):
    # the flow's tensors move what each op moves (test_tensors.check_bytes), also where X
    # does not divide the batch (48 chips: X = 3, batch 8); the program validates
    grid = _grid(PALM, n)
    for w in (decode_mean(PALM, 8, 512, tp=n, tp_grid=grid), prefill(PALM, 4, 256, tp=n,
                                                                      tp_grid=grid)):
        assert check_bytes(w) == [], (n, w.phase)
        (piece,) = program_pieces(w)
        assert [nd.payload for b in piece.program.blocks for nd in b.nodes] == \
            [o for b in w.blocks for o in b.ops]


def test_cli_runs_the_2d_layout_and_names_its_grid(monkeypatch):
    # engine replaced by the roofline double (as tests/workloads/test_cli.py): the CLI path
    import diptych.sim.run.node as run_mod
    from click.testing import CliRunner
    from diptych.tools.cli import main
    from roofline_double import roofline
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    base = ["run", "--chip", "tpu-v4", "--model", "llama-3-8b", "--phase", "decode",
            "--prompt", "64", "--batch", "8", "--tp", "8", "--chips", "8"]
    r = CliRunner().invoke(main, [*base, "--tp-layout", "2d"])
    assert r.exit_code == 0, r.output
    assert "2-D layout X 2 × YZ 4 of 2x2x2" in " ".join(r.output.split())
    j = json.loads(CliRunner().invoke(main, [*base, "--tp-layout", "2d", "--json"]).output)
    j = j[0] if isinstance(j, list) else j
    names = {row["op"] for row in j["layers"]}
    assert {"mlp_up_reduce_scatter", "qkv_reduce_scatter"} <= names
    assert "mlp_all_reduce" not in names


def test_kv_cache_per_chip_is_the_grids():
    # 2-D: each chip caches its ceil(B/X) sequences' one KV head (multi-query); 1-D (48
    # chips): the whole batch's, the KV head replicated on every chip
    from diptych.workloads.memory import inference_memory
    from diptych.workloads.precision import Precision
    B, ctx, p = 64, 2048, Precision()
    per_seq = ctx * PALM.layers * 2 * PALM.head_dim * 2          # K and V, bf16
    for n, X in ((64, 4), (48, 3)):
        w = decode_mean(PALM, B, ctx - 1, tp=n, tp_grid=_grid(PALM, n))
        mem = inference_memory(PALM, p, n, B, ctx, w, 1e15)
        assert mem.breakdown["kv_cache"] == -(-B // X) * per_seq
    w1 = decode_mean(PALM, B, ctx - 1, tp=48)
    assert inference_memory(PALM, p, 48, B, ctx, w1, 1e15).breakdown["kv_cache"] == B * per_seq

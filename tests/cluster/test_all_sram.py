"""The cluster step on an all-SRAM chip (groq-lpu, no [dram]): every tensor of a stage in SRAM.

References: the single-node schedule (``execution="schedule"``, whose residency planner places
every tensor on chip when the model fits) times each op of a layer exactly as the cluster
step's resident per-layer ops; a stage that does not fit the SRAM is refused naming its bytes;
compare's one line per chip comes from the published parameter count.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from diptych.arch import load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import Plan, bind
from diptych.sim.cluster.layers import layer_ops
from diptych.sim.cluster.timing import resident
from diptych.sim.cluster.run import run_cluster_step
from diptych.sim.run import Scenario, run_workload
from diptych.workloads import load_model
from diptych.sim.run.node import _default_simulate, default_precision

GROQ = "groq-lpu"


def _small_llama():
    """Llama-3-8B's layer shapes, 2 layers and a 4k vocabulary: fits 8 groq-lpu chips at TP8."""
    return dataclasses.replace(load_model("llama-3-8b"), name="llama-3-8b-2l", layers=2,
                               vocab_size=4096)


def test_stage_layer_time_equals_the_single_node_schedule_with_everything_resident():
    m = _small_llama()
    sched = run_workload(GROQ, m,
                         Scenario.of(phase="decode", batch=1, prompt=256, tp=8,
                                     execution="schedule", fusion=False))
    assert sched.fits
    per_layer = sum(r["seconds"] for r in sched.layers
                    if r["block"] == "layers" and r["kind"] not in
                    ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"))
    assert all(r["dram_bytes"] == 0 for r in sched.layers)
    # the summed composition (execution="sum") times each op alone with its operands
    # resident: the per-op times add up to the schedule's
    res = run_cluster_step(GROQ, m,
                           Scenario.of(phase="decode", batch=1, prompt=256, execution="sum"),
                           plan=Plan(tp=8, pp=1, dp=1, micro_batch=1))
    assert res.layers["layers"].fwd_compute == pytest.approx(per_layer, rel=1e-12)
    assert res.fits and res.seconds > 2 * per_layer       # two layers, head, all-reduces


def test_resident_ops_never_touch_dram():
    chip = load_chip(GROQ)
    m = _small_llama()
    p = default_precision(chip, "prefill", None, None, None)
    sim = _default_simulate()
    ops = layer_ops(m, p, phase="prefill", tp=8, cp=1, ep=1, micro_batch=1, seq=256)
    n = 0
    for kind, lo in ops.items():
        for op in lo.forward:
            r = resident(op)
            if hasattr(r, "parts"):            # fused attention: its traffic on chip
                assert r.dram_bytes == 0
                continue
            st = sim(r, chip)
            assert st.dram_read_bytes + st.dram_write_bytes == 0, (kind, op.name)
            n += 1
    assert n > 5


def test_a_stage_that_does_not_fit_the_sram_is_refused_with_its_bytes():
    # Llama-3-70B at INT8 on 72 x 8 chips: the last stage holds a layer (855.6M params / 8 =
    # 102 MiB) and the 128k-vocabulary head (128,256 x 8,192 / 8 = 125 MiB) > 220 MiB
    with pytest.raises(ValueError) as e:
        run_cluster_step(GROQ, "llama-3-70b", Scenario.of(phase="decode", batch=1, prompt=1024),
                         cluster="groq-dragonfly", plan=Plan(tp=8, pp=72, dp=1, micro_batch=1))
    msg = str(e.value)
    assert "does not fit the SRAM of chip 'groq-lpu'" in msg and "stage 71" in msg
    assert "220.0 MiB" in msg and "--pp" in msg and "narrower precision" in msg


def test_cli_refusal_is_one_line_and_exit_2():
    from click.testing import CliRunner

    from diptych.tools.cli import main
    r = CliRunner().invoke(main, ["run", "--chip", GROQ, "--model", "llama-3-8b", "--phase",
                                  "decode", "--batch", "1", "--prompt", "512", "--tp", "8",
                                  "--pp", "2", "--chips", "16"])
    assert r.exit_code == 2, r.output
    assert "does not fit the SRAM" in r.output and "at least 35 chips" in r.output


def test_groq_dragonfly_preset_binds_the_published_link_figures():
    c = load_cluster("groq-dragonfly")
    # 576 chips (8 racks of 72: ISCA'22's 10,440 chips = 145 x 72)
    assert c.chips == 576 == 8 * 10_440 // 145
    net = bind(c, load_chip(GROQ))
    # cabled C2C: 4 lanes x 28 Gb/s = 14 GB/s per link per direction (Linley 2020)
    assert net.link_bytes_per_s == pytest.approx(4 * 28e9 / 8)


def test_compare_says_how_many_chips_the_weights_need_in_one_line():
    from diptych.tools.dse.compare import compare

    def refuse(chip, model, **kw):
        raise ValueError("tensor 'w_embed' is larger than every memory")

    # no cell can be computed: compare refuses (exit 2 from the CLI) with the one line that
    # says why (issue 22 item 4), instead of a table of errors
    with pytest.raises(ValueError, match="no cell could be computed") as e:
        compare([GROQ], "llama-3-8b", run=refuse,
                search=lambda *a, **k: (_ for _ in ()).throw(ValueError("no plan")))
    msg = str(e.value)
    # 8.03e9 published parameters at INT8 over 220 MiB of SRAM per chip
    need = math.ceil(8.03e9 / (220 * 2**20))
    assert msg.count(f"{GROQ}:") == 1 and f"needs at least {need} chips" in msg
    assert "--cluster" in msg and "larger than every memory" not in msg


def test_chips_with_dram_keep_streaming_weights_from_dram():
    # the all-SRAM path is only taken without DRAM: an h100 decode layer still reads its
    # weights from HBM, so it takes at least their bytes over the HBM peak
    chip = load_chip("h100")
    m = load_model("llama-3-8b")
    res = run_cluster_step(chip, m, Scenario.of(phase="decode", batch=1, prompt=256),
                           plan=Plan(tp=2, pp=1, dp=1, micro_batch=1))
    assert res.memory.capacity_bytes == chip.dram.capacity_bytes
    h, f, kv = m.hidden_size, m.intermediate_size, m.kv_heads * m.head_dim
    weight_bytes = (h * (h + 2 * kv) + h * h + 3 * h * f) * 2 / 2     # bf16, TP2
    assert res.layers["layers"].fwd_compute >= weight_bytes / chip.dram_bytes_per_s


def test_llama2_70b_on_576_chips_fits_and_is_bound_by_weight_tile_installation():
    # the validation layout (docs/validation-published.md, groq): Llama-2-70B (Llama-3-70B's
    # shapes with a 32k vocabulary), INT8, TP8 x PP72 on groq-dragonfly, batch 1
    m = dataclasses.replace(load_model("llama-3-70b"), name="llama-2-70b", vocab_size=32000,
                            max_position_embeddings=4096)
    r = run_cluster_step(GROQ, m, Scenario.of(phase="decode", batch=1, prompt=1024),
                         cluster="groq-dragonfly", plan=Plan(tp=8, pp=72, dp=1, micro_batch=1))
    assert r.fits and r.memory.total_bytes <= 220 * 2**20
    # closed form: a plane installs each 320 x 320 tile before a single token's row streams
    # through it; groq-lpu's install path (8 rows per cycle, a global swap) makes that
    # ceil(320 / 8) = 40 cycles a tile, back to back (the period max(1 row, 40)); the layer's
    # GEMMs at TP8 (K x N per rank): qkv 8192 x 1280, o 1024 x 8192, gate/up 8192 x 7168,
    # down 3584 x 8192, over 4 planes
    arr = load_chip(GROQ).core.array
    assert (arr.weight_load_rows_per_cycle, arr.weight_swap) == (8, "global")
    tiles = [math.ceil(math.ceil(k / 320) * math.ceil(n / 320) / 4)
             for k, n in ((8192, 1280), (1024, 8192), (8192, 7168), (3584, 8192))]
    install_s = sum(tiles) * 40 / 0.9e9
    assert r.layers["layers"].fwd_compute >= install_s
    assert r.seconds >= 80 * install_s
    # ... and not more than each GEMM's fill and drain (R + C + 40 cycles) and the attention
    # (a few microseconds at this context) above it
    assert r.layers["layers"].fwd_compute <= install_s + 4 * 680 / 0.9e9 + 10e-6
    # the same weights at the SRAM's 80 TB/s would take 1.3 us per layer: the install rate
    # (4 planes x 8 rows x 320 B per cycle) bounds the layer, not the SRAM
    layer_bytes = (8192 * (8192 + 2 * 1024) + 8192 * 8192 + 3 * 8192 * 28672) / 8
    assert r.layers["layers"].fwd_compute > 5 * layer_bytes / 80e12

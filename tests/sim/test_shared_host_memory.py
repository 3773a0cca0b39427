"""A memory the chips of a node share (``[dram2] shared_by``; docs/chips.md, "Host memory
shared by a node's chips"): each chip gets an even share of its capacity and of its pins when
all stream at once, behind its own link; its price is the chip's share. The arithmetic against
the DGX H100 figures, a run whose share binds costs at least its bytes at the share's rate and
more sharing never makes it faster, and a package tier cannot be shared (exit 2)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.arch.cost import chip_cost  # noqa: E402
from diptych.sim.run import Scenario, run_workload  # noqa: E402
from diptych.tools.cli import main  # noqa: E402

CHIPS = Path(__file__).resolve().parents[2] / "examples" / "chips"
HOST = CHIPS / "h100-host.toml"
CXL = CHIPS / "infer-2026-cxl.toml"
DECODE = dict(phase="decode", batch=512, prompt=4000, gen=1)


def shared(tier, n: int, **kw):
    return dataclasses.replace(tier, shared_by=n, **kw)


def test_the_sharing_arithmetic_against_the_dgx_h100_figures():
    """DGX H100: 2 TB of DDR5 over two Xeon 8480C sockets of 8 DDR5-4800 channels, four GPUs a
    socket, one PCIe 5.0 x16 port (63 GB/s a direction) a GPU. A socket's memory shared by
    four: 256 GiB and 307.2 / 4 = 76.8 GB/s of pins each, so the port binds (63 GB/s); behind
    a link faster than the share (a C2C port of 450 GB/s), the share binds, and halves when
    twice the chips share it."""
    t = load_chip(str(HOST)).dram2
    socket_pins = 8 * 64 * 4.8e9 / 8            # 8 channels x 64 bits x 4.8 Gb/s
    assert t.peak_bytes_per_s == socket_pins == 307.2e9
    assert t.capacity_gib * 2 == 2048          # the datasheet's "2 TB" read as 2 TiB
    assert t.capacity_bytes == 2048 * 2**30 // 2 // 4 == 256 * 2**30
    assert t.bytes_per_s == min(63e9, socket_pins / 4) == 63e9
    fast = shared(t, 4, attach="c2c", link_gb_per_s=450.0)
    assert fast.bytes_per_s == socket_pins / 4 == 76.8e9
    assert shared(fast, 8).bytes_per_s == socket_pins / 8
    one = shared(fast, 1)
    assert one.bytes_per_s == min(socket_pins, 450e9) and one.capacity_bytes == 1024 * 2**30


def test_a_chip_pays_for_its_share_of_the_memory():
    c = load_chip(str(HOST))
    alone = dataclasses.replace(c, dram2=None)
    assert chip_cost(c).dram_usd - chip_cost(alone).dram_usd == pytest.approx(
        1024 / 4 * c.dram2.usd_per_gb)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


def test_a_shared_memory_costs_its_bytes_at_the_chips_share(tiny):
    """infer-2026-cxl with 0.5 GiB of HBM (a third of the tiny model's state spills) and a
    link that cannot bind: the expanders' pins shared by 16 chips cost the tier's bytes at
    least their time at 1/16 of the pins less their time at all of them (the same
    placement: sharing splits the bandwidth, not this chip's capacity here)."""
    c = load_chip(str(CXL))
    c = dataclasses.replace(c, dram=dataclasses.replace(c.dram, capacity_gib=0.5),
                            dram2=dataclasses.replace(c.dram2, mm2_per_phy=0.0,
                                                      link_gb_per_s=1e4, link_latency_ns=0.0))
    runs = [run_workload(dataclasses.replace(c, dram2=shared(c.dram2, n)), tiny,
                         Scenario.of(**DECODE)) for n in (1, 16)]
    secs = [r.seconds for r in runs]
    moved = runs[1].info["memory_tiers"]["dram2_bytes_moved"]
    assert moved == runs[0].info["memory_tiers"]["dram2_bytes_moved"] > 0   # same placement
    pins = c.dram2.peak_bytes_per_s
    assert runs[1].info["memory_tiers"]["tiers"]["dram2"]["stream_s"] == pytest.approx(
        moved / (pins / 16))
    floor = moved / (pins / 16) - moved / pins
    assert secs[1] - secs[0] >= 0.9 * floor > 0


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace("shared_by = 4 ", "shared_by = 0 "), "dram2.shared_by"),
    (lambda t: t.replace('attach = "pcie"', 'attach = "package"')
     .replace("links = 1 ", "links = 0 ").replace("link_gb_per_s = 63.0", "link_gb_per_s = 0.0")
     .replace("link_latency_ns = 1000.0", "link_latency_ns = 0.0"), "dram2.shared_by"),
])
def test_bad_sharing_exits_2_naming_the_key(tmp_path, edit, key):
    text = HOST.read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(edit(text))
    assert bad.read_text() != text
    r = CliRunner().invoke(main, ["chips", "validate", str(bad)])
    assert r.exit_code == 2 and key in r.output, r.output

"""Node demands from an op's standalone engine time (sim/program/demand.py)."""

import pytest

from diptych.sim.program import Demand, Phase, op_demand


def test_plain_op_keeps_its_standalone_time():
    d = op_demand(seconds=2e-6, unit="array", dram_bytes=1e6, stream_bytes_per_s=1e12)
    (main,) = d.phases
    assert main.seconds == 2e-6 and dict(main.use) == {"array": 1.0, "dram": 0.5}
    assert d.hold_bytes == 0


def test_prefetch_split():
    # 4 us standalone, 1 us of it compute: of the 3 us DRAM stall, the weights (2 MB at
    # 1 TB/s) explain 2 us: that part may run early; the rest streams 1 MB in the 2 us left
    d = op_demand(seconds=4e-6, unit="array", dram_bytes=3e6, stream_bytes_per_s=1e12,
                  compute_seconds=1e-6, prefetch_bytes=2e6, launch_seconds=0.5e-6)
    pre, launch, main = d.phases
    assert pre.early and pre.seconds == pytest.approx(2e-6) and dict(pre.use) == {"dram": 1.0}
    assert launch.label == "launch" and launch.seconds == 0.5e-6
    assert main.seconds == pytest.approx(2e-6)
    assert dict(main.use)["dram"] == pytest.approx(1e6 / 1e12 / 2e-6)
    assert d.hold_bytes == 2e6
    assert d.seconds == pytest.approx(4e-6 + 0.5e-6)          # standalone + launch


def test_prefetch_of_a_compute_bound_op_is_only_its_stall():
    d = op_demand(seconds=10e-6, unit="array", dram_bytes=5e6, stream_bytes_per_s=1e12,
                  compute_seconds=9.5e-6, prefetch_bytes=5e6)
    assert d.phases[0].seconds == pytest.approx(0.5e-6)
    assert d.phases[1].seconds == pytest.approx(9.5e-6)


def test_vector_collective_and_transfer_units():
    assert dict(op_demand(seconds=1e-6, unit="vector").phases[0].use) == {"vector": 1.0}
    c = op_demand(seconds=3e-6, unit="link", launch_seconds=1e-6)
    assert [dict(p.use) for p in c.phases] == [{"link": 1.0}, {"link": 1.0}]
    t = op_demand(seconds=1e-6, unit="dma", dram_bytes=1e6, stream_bytes_per_s=1e12)
    assert dict(t.phases[0].use) == {"dram": 1.0}


@pytest.mark.parametrize("kw,message", [
    (dict(seconds=-1.0, unit="array"), "seconds must be a finite number of seconds >= 0"),
    (dict(seconds=1.0, unit="tpu"), "unit must be one of array, vector, link, dma"),
    (dict(seconds=1.0, unit="array", dram_bytes=5.0), "stream_bytes_per_s must be > 0"),
    (dict(seconds=1.0, unit="array", dram_bytes=5.0, stream_bytes_per_s=1.0,
          prefetch_bytes=6.0), "prefetch_bytes (6.0) cannot exceed dram_bytes (5.0)"),
    (dict(seconds=1.0, unit="array", dram_bytes=5.0, stream_bytes_per_s=1.0,
          prefetch_bytes=1.0), "compute_seconds is needed"),
    (dict(seconds=1.0, unit="array", launch_seconds=float("inf")), "launch_seconds must be"),
])
def test_op_demand_wrong(kw, message):
    with pytest.raises(ValueError) as info:
        op_demand(**kw)
    assert message in str(info.value)


@pytest.mark.parametrize("make,message", [
    (lambda: Phase(-1e-6, {"array": 1.0}), "seconds must be a finite number"),
    (lambda: Phase(1e-6, {"sram": 1.0}), "unknown resource 'sram'"),
    (lambda: Phase(1e-6, {"dram": 1.5}), "share of 'dram' must be in (0, 1]"),
    (lambda: Demand(()), "a demand needs at least one phase"),
    (lambda: Demand((Phase(1e-6, {"array": 1.0}), Phase(1e-6, {"dram": 1.0}, early=True))),
     "only the first phase may be early"),
    (lambda: Demand((Phase(1e-6, {"array": 1.0}, early=True),)),
     "an early phase is a prefetch on DRAM"),
    (lambda: Demand((Phase(1e-6, {"array": 1.0}),), hold_bytes=5),
     "hold_bytes > 0 needs an early first phase"),
    (lambda: Demand((Phase(1e-6, {"array": 1.0}),), hold_bytes=-5), "hold_bytes must be"),
])
def test_phase_and_demand_wrong(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert message in str(info.value)

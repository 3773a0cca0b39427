"""``diptych gemm``: time one GEMM on a chip."""

from __future__ import annotations

import click

from ..arch.dtypes import DTYPES
from . import fmt
from .errors import friendly
from .jsonout import dumps
from .result_check import check_result


def _dims(d: dict) -> str:
    """``{'m': 128, 'k': 64, 'n': 32}`` as ``m 128 × k 64 × n 32`` (ones left out)."""
    parts = [f"{k} {v:,}" for k, v in d.items() if v != 1]
    return " × ".join(parts) or "1"


def _joules(j: float) -> str:
    """Energy in the unit that keeps 1–999 before the point: ``2.314 J``, ``718.7 mJ``."""
    for scale, unit in ((1.0, "J"), (1e-3, "mJ"), (1e-6, "µJ")):
        if j >= scale:
            return f"{j / scale:.4g} {unit}"
    return f"{j / 1e-9:.4g} nJ"


@click.command("gemm")
@click.argument("m", type=str)
@click.argument("k", type=str)
@click.argument("n", type=str)
@click.option("--chip", "chip_name", required=True, help="Preset name or TOML path.")
@click.option("--dtype", type=str, default=None,
              help=f"{'|'.join(DTYPES)} (default: the chip's).")
@click.option("--dataflow", type=str, default=None, help="os|ws|is (default: the best supported).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="Write a Chrome/Perfetto trace-event JSON file: every active array's "
                   "DMA, compute and write-back blocks and the DRAM pseudo-channels.")
@friendly
def gemm(m, k, n, chip_name, dtype, dataflow, as_json, trace_path):
    """Simulate C[M×N] = A[M×K]·B[K×N] on CHIP and report cycles, stalls, bytes and energy."""
    from ..arch import load_chip
    from ..sim import simulate_gemm

    dims = []
    for name, v in (("m", m), ("k", k), ("n", n)):
        try:
            iv = int(v, 10)
        except ValueError:
            raise ValueError(f"{name} must be a positive integer, not {v!r}") from None
        dims.append(iv)
    chip = load_chip(chip_name)
    if trace_path:
        chip.require_dram("the DRAM trace of `diptych gemm --trace`")
    from .progress import progress_display

    steps = 2 if trace_path else 1
    with progress_display("gemm", enabled=not as_json) as progress:
        progress(0, steps, f"mapping and simulating {dims[0]}×{dims[1]}×{dims[2]} on "
                           f"{chip.name}")
        st = simulate_gemm(*dims, chip, dtype=dtype, dataflow=dataflow)
        if trace_path:
            from ..sim.trace import write_gemm_trace

            progress(1, steps, f"writing the trace to {trace_path}")
            write_gemm_trace(trace_path, dims[0], dims[1], dims[2], chip, dtype=dtype,
                             dataflow=dataflow)
        progress(steps, steps, "done")
    check_result(st.to_dict(), "gemm")
    if as_json:
        click.echo(dumps(st.to_dict()))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"GEMM {dims[0]}×{dims[1]}×{dims[2]} on {chip.name} "
                    f"({st.mapping['dtype']}, {st.mapping['dataflow']})", show_header=False)
    rows = [
        ("cycles", f"{st.cycles:,}"), ("time", fmt.seconds(st.seconds)),
        ("compute cycles (no memory limit)", f"{st.compute_cycles:,}"),
        ("stalls", ", ".join(f"{k_} {v:,}" for k_, v in st.stall_breakdown.items())),
        ("MAC utilization", fmt.pct(st.utilization)),
        ("bound (roofline regime)", st.bound),
        *([("busiest unit", f"{st.mapping['busiest']['unit']} "
                            f"{fmt.pct(st.mapping['busiest']['occupancy'])} of the cycles")]
          if st.mapping.get("busiest") else []),
        ("DRAM read / write", f"{fmt.si(st.dram_read_bytes, 'B')} / "
                              f"{fmt.si(st.dram_write_bytes, 'B')}"),
        ("DRAM bandwidth achieved", f"{st.dram_bytes_per_s / 1e9:,.1f} GB/s "
                                    f"({fmt.pct(st.dram_bytes_per_s / chip.dram_bytes_per_s)} "
                                    f"of peak)"
         if chip.has_dram else "no DRAM (operands resident in the scratchpads)"),
        ("energy", _joules(st.energy_j)),
        ("mapping", f"output split {_dims(st.mapping['split'])} over "
                    f"{st.mapping['active_arrays']} arrays, tile {_dims(st.mapping['block'])}, "
                    f"loop order {st.mapping['loop_order']}"),
    ]
    for a, b in rows:
        t.add_row(a, b)
    Console().print(t)

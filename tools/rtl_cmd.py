"""``diptych rtl``: generate Verilog for the MAC array, test it on Verilator, count its gates,
and check the block-scaled number formats of the golden numerics."""

from __future__ import annotations

from pathlib import Path

import click

from .errors import UsageError, friendly
from .jsonout import dumps

_DTYPES = ("int8", "bf16", "fp8", "multi", "fused", "dot4", "mx", "mxdot4",
           "mxint8", "fp4dot8")  # DATAPATHS
_DATAFLOWS = ("os", "ws")

#: How ``diptych rtl area`` counts (printed under its tables; docs/rtl.md "Area").
AREA_METHOD = (
    "Method: each block is flattened and synthesised by Yosys (pyosys) with `synth -flatten` to "
    "Yosys' generic gate library ($_AND_, $_NAND_, $_XOR_, $_MUX_, $_SDFF_ ...); the unit is one "
    "cell (a 2-3 input gate, a 2:1 mux or a flip-flop each count 1; no wires, no placement); "
    "'transistors' is `stat -tech cmos` (+: some flip-flop types have no estimate). A PE is the "
    "MAC plus its registers; per MAC = PE cells / the mode's MACs per cycle. In the chips' area "
    "model a PE is max_d(rate_d x mm2_per_mac_d), so a shared PE's 8-bit coefficient is its "
    "per-MAC ratio above (docs/dse.md 1.1).")

#: What ``diptych rtl test`` runs without a configuration, and the slow test tier's set:
#: (rows, cols, dtype, dataflow, directed plans). Every mode of the int8, bf16, fused and dot4
#: datapaths (the fused PE does INT8, every FP8 mode and BF16; the fp8 and multi datapaths'
#: FP8 multiplier and FP32 adder are checked on Verilator by the FP deep check, their arrays
#: in amaranth.sim; the dot4 FP8 dot-product PE, which sets the presets' FP8 area coefficient,
#: in one small WS array: its OS array runs in amaranth.sim; the block-scaled MXFP8 mxdot4 PE,
#: which sets the presets' MXFP8 area coefficient, in one small OS array, and the FP4 fp4dot8
#: PE, which sets their MXFP4/NVFP4 coefficient, in another (mxdot4's WS arrays and the mxint8
#: PE run in amaranth.sim and by hand; the exact mx PE runs in amaranth.sim and by hand,
#: docs/rtl.md), both dataflows, non-square and odd sizes, BF16 beyond
#: 4×4, the directed special-value plan on every configuration and the INT8 OS tile whose sums
#: wrap.
STANDARD_CONFIGS = ((8, 8, "int8", "os", ("special", "os_wrap")),
                    (8, 8, "int8", "ws", ("special",)),
                    (4, 8, "bf16", "os", ("special",)), (4, 4, "bf16", "ws", ("special",)),
                    (2, 3, "fused", "os", ("special",)), (3, 2, "fused", "ws", ("special",)),
                    (2, 3, "dot4", "ws", ("special",)),
                    (2, 2, "mxdot4", "os", ("special",)),
                    (2, 2, "fp4dot8", "os", ("special",)))

_DTYPE_HELP = ("PE datapath: int8, bf16, fp8 (E4M3/E5M2), multi (INT8/FP8 at 2 MACs per "
               "cycle, BF16 at 1; FP8 products rounded one at a time), fused (the same, the "
               "two FP8 products of a cycle and the accumulator rounded once) or dot4 (the FP8 "
               "dot-product PE: 4 FP8 MACs per cycle, truncated alignment, one rounding toward "
               "zero), mx (the block-scaled MXFP8 PE: 4 MACs per cycle, E8M0 scales per "
               "K-block, exact block sums rounded once) or mxdot4 (the dot4 PE with the "
               "block scales added to the product exponents; OS and WS), mxint8 (MXINT8: "
               "four INT8 products summed exactly, scaled, then as mxdot4; OS and WS) or "
               "fp4dot8 (MXFP4/NVFP4 at 8 MACs per cycle: E8M0 or E4M3 block scales; OS "
               "only); mx: OS only.")


@click.group("rtl")
def rtl():
    """The Amaranth INT8/FP8/BF16/multi-precision (sequential and fused)/FP8 dot4/MXFP8
    block-scaled (mx, mxdot4) systolic array: Verilog, cocotb-on-Verilator bench, area; the
    block-scaled formats (MX, NVFP4) of the golden numerics."""


@rtl.command("verilog")
@click.option("--rows", type=int, default=8, show_default=True, help="Array rows R.")
@click.option("--cols", type=int, default=8, show_default=True, help="Array columns C.")
@click.option("--dtype", type=click.Choice(_DTYPES), default="int8", show_default=True,
              help=_DTYPE_HELP)
@click.option("--dataflow", type=click.Choice(_DATAFLOWS), default="os", show_default=True,
              help="Output stationary or weight stationary.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), required=True,
              help="Verilog file to write ('-' for standard output).")
@friendly
def rtl_verilog(rows, cols, dtype, dataflow, output):
    """Write the array's Verilog (ports documented in docs/rtl.md)."""
    from ..rtl.array import check_config
    from ..rtl.verilog import array_verilog, toplevel_name

    check_config(rows, cols, dtype, dataflow)
    text = array_verilog(rows, cols, dtype, dataflow)
    if output == "-":
        click.echo(text, nl=False)
        return
    Path(output).write_text(text)
    click.echo(f"wrote {output}: module {toplevel_name(rows, cols, dtype, dataflow)} "
               f"({rows}x{cols} {dtype} {dataflow.upper()})", err=True)


@rtl.command("test")
@click.option("--rows", type=int, help="Array rows (default: 8 for int8, 4 otherwise).")
@click.option("--cols", type=int, help="Array columns (default: as rows).")
@click.option("--dtype", type=click.Choice(_DTYPES), help=_DTYPE_HELP)
@click.option("--dataflow", type=click.Choice(_DATAFLOWS), help="os or ws.")
@click.option("--mode", "modes", multiple=True,
              help="Only tiles of this mode (repeatable): int8, bf16, e4m3, e5m2, e4m3xe5m2, "
                   "e5m2xe4m3 (mx: mxfp8_e4m3, mxfp8_e5m2, mxfp8_e4m3xe5m2, "
                   "mxfp8_e5m2xe4m3; mxdot4 also mxfp6_e3m2, mxfp6_e2m3, mxfp4; mxint8: "
                   "mxint8; fp4dot8: mxfp4, nvfp4); default every mode of the datapath.")
@click.option("--block", type=int, default=None,
              help="K-block of the mx/mxdot4 datapaths' scales (default 32, OCP MX; a multiple "
                   "of 4 up to 32); fp4dot8: a multiple of 8 up to 32 (default: MXFP4 32, "
                   "NVFP4 16).")
@click.option("--seed", type=int, default=1, show_default=True, help="First stimulus seed.")
@click.option("--seeds", "n_seeds", type=int, default=1, show_default=True,
              help="Number of seeds (random plans) run on each build.")
@click.option("--tiles", type=int, default=10, show_default=True, help="Tiles per plan.")
@click.option("--wrap", is_flag=True,
              help="Also run the INT8 OS tile of 2^17 + 1024 steps whose int32 sums wrap.")
@click.option("--waves", is_flag=True, help="Record FST waveforms (kept in --work-dir).")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None,
              help="Keep Verilog, build and waves here (default: a temporary directory).")
@click.option("--verbose", is_flag=True, help="Show Verilator's and cocotb's output.")
@friendly
def rtl_test(rows, cols, dtype, dataflow, modes, block, seed, n_seeds, tiles, wrap, waves,
             work_dir, verbose):
    """Build with Verilator once per configuration and run the cocotb bench on it; every
    output is checked bit-exactly against the golden model and at the cycle
    diptych.sim.timing predicts.

    Every configuration also runs the directed special-value plan (signed zeros, subnormals,
    Inf, NaN, overflow in every mode and operand position). Without
    --rows/--cols/--dtype/--dataflow it runs the CI set (INT8 OS/WS 8x8 with the wrapping OS
    tile, BF16 OS 4x8 and WS 4x4, fused multi-precision OS 2x3 and WS 3x2, the dot4 FP8
    dot-product PE in WS 2x3, the block-scaled MXFP8 mxdot4 PE in OS 2x2). Each
    configuration's line is followed by how many of each corner class its plans exercised
    (bubbles, back-to-back tiles, int32 wraps, FP32 zero/-0/Inf/NaN outputs) and the classes it
    claims; a claimed class with no hit fails it (docs/rtl.md "Coverage you can read"). Exits
    non-zero if any check fails.
    """
    from ..rtl.array import check_config
    from ..rtl.datapath import get_datapath
    from ..rtl.fp4_bench import check_fp4_block
    from ..rtl.mx_bench import check_block
    from ..rtl.verilator import VerilatorMissing, run_bench

    if waves and work_dir is None:
        work_dir = "rtl-waves"
    if rows is cols is dtype is dataflow is None:
        configs = STANDARD_CONFIGS
    else:
        dtype = dtype or "int8"
        dataflow = dataflow or "os"
        rows = rows if rows is not None else (8 if dtype == "int8" else 4)
        cols = cols if cols is not None else rows
        configs = ((rows, cols, dtype, dataflow, ("special",) + (("os_wrap",) if wrap else ())),)
    for r, c, dt, df, directed in configs:
        check_config(r, c, dt, df)
        for m in modes:
            get_datapath(dt).macs_per_cycle(m)
        if "os_wrap" in directed and (df != "os" or "int8" not in get_datapath(dt).modes):
            raise ValueError(f"--wrap needs an OS array with an int8 mode, not {dt} {df}")
        if block is not None:
            if not get_datapath(dt).block_scaled:
                raise ValueError(f"--block applies to the block-scaled mx, mxdot4 and mxint8 "
                                 f"datapaths "
                                 f"only, not {dt} (block {block})")
            (check_fp4_block if dt == "fp4dot8" else check_block)(block)
    for name, v in (("tiles", tiles), ("seeds", n_seeds)):
        if isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, not {v!r}")
    results = []
    for r, c, dt, df, directed in configs:
        click.echo(f"building and testing {dt} {df} {r}x{c} ...", err=True)
        try:
            res = run_bench(r, c, dt, df, seeds=range(seed, seed + n_seeds), tiles=tiles,
                            modes=modes or None, directed=directed, waves=waves,
                            work_dir=None if work_dir is None else Path(work_dir),
                            quiet=not verbose,
                            block=block if get_datapath(dt).block_scaled else None)
        except VerilatorMissing as exc:
            raise UsageError(str(exc)) from None
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from None
        results.append(res)
        click.echo(res.summary())
        if res.waves:
            click.echo(f"  waves: {res.waves}")
    failed = [r for r in results if not r.passed]
    click.echo(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    if failed:
        raise SystemExit(1)


@rtl.command("area")
@click.option("--dtype", "dtypes", type=click.Choice(_DTYPES), multiple=True,
              help="PE datapath to synthesise (repeatable; default: every one); dot4 is the "
                   "FP8 dot-product PE (4 FP8 MACs per cycle, truncated alignment).")
@click.option("--rows", type=int, help="Also synthesise an array of this many rows.")
@click.option("--cols", type=int, help="... and this many columns.")
@click.option("--dataflow", type=click.Choice(_DATAFLOWS), default="os", show_default=True,
              help="Dataflow of the array (with --rows/--cols).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@friendly
def rtl_area(dtypes, rows, cols, dataflow, as_json):
    """Synthesise each PE (and optionally an array) with Yosys synth + stat; report cell
    counts, cells per MAC against BF16 (the multi-precision PEs at their INT8/FP8 rate of 2
    MACs per cycle and their BF16 rate of 1), and the per-MAC ratios of the chips' area model
    (dedicated PEs, and shared PEs against a dedicated BF16 PE's MAC)."""
    from ..rtl.area import PyosysMissing, area_model_ratios, area_report, per_mac_ratios

    dtypes = tuple(dict.fromkeys(dtypes)) or _DTYPES
    try:
        reports = {dt: area_report(dt, rows, cols, dataflow) for dt in dtypes}
    except PyosysMissing as exc:        # a missing extra: exit 2, as `rtl test` does
        raise UsageError(str(exc)) from None
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    per_mac = per_mac_ratios(reports)
    out = {"reports": reports, "per_mac": per_mac, "method": AREA_METHOD}
    if "bf16" in reports:
        out["area_model"] = area_model_ratios(reports)
    if "int8" in reports and "bf16" in reports:
        a, b = reports["int8"]["blocks"], reports["bf16"]["blocks"]
        out["bf16_to_int8_cell_ratio"] = {k: round(b[k]["cells"] / a[k]["cells"], 2)
                                          for k in a if k in b}
    if as_json:
        click.echo(dumps(out))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("dtype", "block", "cells", "flip-flops", "logic cells", "transistors (est.)",
                  title="Yosys synth -flatten; stat (generic gate library)")
    for dt, rep in reports.items():
        for name, s in rep["blocks"].items():
            tr = f"{s['transistors_est']}{'+' if s['transistors_partial'] else ''}"
            table.add_row(dt, name, str(s["cells"]), str(s["flip_flops"]),
                          str(s["logic_cells"]), tr)
    console = Console()
    console.print(table)
    base = "to_bf16" if "bf16" in reports else None
    ptable = Table("datapath", "modes", "MACs/cycle", "MAC cells/MAC", "OS PE cells/MAC",
                   "WS PE cells/MAC", *(("MAC : BF16", "OS PE : BF16") if base else ()),
                   title="Cells per MAC")
    for key, r in per_mac.items():
        c = r["cells_per_mac"]
        ratio = ((f"{r[base]['mac']:.2f}", f"{r[base]['pe_os']:.2f}") if base else ())
        ptable.add_row(key, ", ".join(r["modes"]), str(r["macs_per_cycle"]),
                       f"{c['mac']:.0f}", f"{c['pe_os']:.0f}",
                       f"{c['pe_ws']:.0f}" if "pe_ws" in c else "-", *ratio)
    console.print(ptable)
    if "area_model" in out:
        am = out["area_model"]
        mtable = Table("PE", "MACs per cycle", "PE : BF16 PE", "8-bit MAC : BF16 MAC",
                       "its BF16 MAC : BF16 MAC", "8-bit : BF16 inside the PE",
                       title="For area.mm2_per_mac: per MAC against a dedicated BF16 PE's MAC "
                             "(OS PE cells)")
        for dt, r in am["dedicated"].items():
            n = max(reports[dt]["macs_per_cycle"].values())
            mtable.add_row(f"{dt} (dedicated)", str(n), f"{r * n:.2f}", f"{r:.2f}", "", "")
        for dt, r in am["shared"].items():
            pm = r["per_mac"]
            mtable.add_row(f"{dt} (shared)", "int8/fp8 2, bf16 1", f"{r['pe']:.2f}",
                           f"{pm['e4m3']:.2f}", f"{pm['bf16']:.2f}", f"{r['in_pe']['e4m3']:.2f}")
        console.print(mtable)
    console.print(AREA_METHOD)


@rtl.command("formats")
@click.option("--format", "names", multiple=True,
              help="Block format to evaluate (repeatable; default: all): mxfp8_e4m3, "
                   "mxfp8_e5m2, mxfp6_e3m2, mxfp6_e2m3, mxfp4, mxint8, nvfp4.")
@click.option("--block", type=int, help="Non-standard block size (the specs fix 32 for MX, "
                                        "16 for NVFP4).")
@click.option("--k", "k", type=int, default=4096, show_default=True,
              help="Length of the vectors quantised and dotted.")
@click.option("--rows", type=int, default=16, show_default=True,
              help="Random vector pairs evaluated.")
@click.option("--outliers", type=float, default=0.001, show_default=True,
              help="Fraction of elements scaled up 100x (activation outliers).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@friendly
def rtl_formats(names, block, k, rows, outliers, seed, as_json):
    """Block-scaled formats of the golden numerics (OCP MX v1.0, NVIDIA NVFP4): bits per
    element with the scales, and the error of quantising Gaussian data with outliers and of
    the dot products computed by the reference rules (docs/rtl.md), against float64."""
    import numpy as np

    from ..rtl import formats as F

    for name in names:
        F.get_block_format(name)
    for what, v in (("k", k), ("rows", rows)):
        if isinstance(v, bool) or v < 1:
            raise ValueError(f"{what} must be a positive integer, not {v!r}")
    if not 0 <= outliers < 1:
        raise ValueError(f"outliers must be a fraction in [0, 1), not {outliers!r}")
    fmts = [F.get_block_format(n, block) for n in (names or F.BLOCK_FORMATS)]
    for f in fmts:
        if k % f.block:
            raise ValueError(f"block size {f.block} of {f.name} does not divide k={k}")
    rng = np.random.default_rng(seed)

    def data():
        x = rng.standard_normal((rows, k))
        return np.where(rng.random((rows, k)) < outliers, x * 100, x).astype(np.float32)
    a, b = data(), data()
    exact = np.einsum("ik,ik->i", a.astype(np.float64), b.astype(np.float64))
    out = []
    for f in fmts:
        qa, qb = F.quantize(a, f), F.quantize(b, f)
        err = F.dequantize(qa) - a
        dots = np.array([F.block_dot_bits(F.BlockTensor(f, qa.elements[i], qa.scales[i],
                                                        qa.tensor_scale),
                                          F.BlockTensor(f, qb.elements[i], qb.scales[i],
                                                        qb.tensor_scale))
                         for i in range(rows)], np.uint32).view(np.float32)
        out.append({"format": f.name, "element": f.element, "block": f.block,
                    "scale": f.scale, "bits_per_element": f.bits_per_element,
                    "quant_rel_rms_error": float(np.sqrt(np.mean(err**2) / np.mean(a**2))),
                    "dot_rel_rms_error": float(np.sqrt(np.mean((dots - exact) ** 2)
                                                       / np.mean(exact ** 2))),
                    "spec": f.spec})
    if as_json:
        click.echo(dumps({"k": k, "rows": rows, "outliers": outliers, "seed": seed,
                          "formats": out}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("format", "element", "block", "scale", "bits/element",
                  "quantisation rel. RMS error", "dot rel. RMS error",
                  title=f"{rows} Gaussian vectors of {k}, {outliers:.2%} outliers ×100 "
                        f"(seed {seed})")
    for r in out:
        table.add_row(r["format"], r["element"], str(r["block"]), r["scale"],
                      f"{r['bits_per_element']:g}", f"{r['quant_rel_rms_error']:.2e}",
                      f"{r['dot_rel_rms_error']:.2e}")
    Console().print(table)

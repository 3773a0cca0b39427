"""The chip description: frozen dataclasses with units in field names.

A :class:`Chip` is ``tensor_cores`` identical :class:`TensorCore` s (each with ``arrays``
systolic arrays, a vector unit and a scratchpad), a DMA engine, DRAM, a chip-to-chip
interconnect and technology tables for energy and area. Load one with
:func:`diptych.arch.load_chip`; every field is validated when the chip is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from .dtypes import BLOCK_DTYPES, DTYPE_BYTES, DTYPES
from .runtime import runtime_names
from .bounds import (AREA_MM2, BUS_EFFICIENCY, CLOCK_GHZ, DRAM_T_MIN_NS, DRAM_T_WHY, FIXED_US,
                     LINK_GB_PER_S, LINK_NS, LINK_LATENCY_US, PJ_PER_IO_BIT, PJ_PER_OP,
                     REFRESH_MAX_FRACTION, SRAM_MIB)
from .schema import bound, f, fail
from .tables import CostTable, DieSpec, Noc, Package, PowerTable

DATAFLOWS: tuple[str, ...] = ("os", "ws", "is")
#: Where a chip applies block scales (``core.array.block_scale``, docs/precision.md).
BLOCK_SCALE_PLACES: tuple[str, ...] = ("none", "pe", "vector")
#: Where a chip expands narrow weights for a wider product (``core.array.dequant``).
DEQUANT_PLACES: tuple[str, ...] = ("none", "vector")
#: Where a chip computes the block scales of a block-scaled product output
#: (``core.array.output_quant``, docs/precision.md).
OUTPUT_QUANT_PLACES: tuple[str, ...] = ("vector", "array")
#: How installed WS weights become active (SystolicArray.weight_swap; sim/timing.py).
WEIGHT_SWAPS: tuple[str, ...] = ("wave", "global")
#: Vector-op kinds a GEMM kernel can apply on its output path (epilogue) or, for the norms,
#: while it loads its operand (prologue): the fusion pass's kinds (docs/program.md, "Fusion").
FUSABLE_KINDS: tuple[str, ...] = ("elementwise", "add", "mul", "silu", "gelu", "geglu", "swiglu",
                                  "rope", "rmsnorm", "layernorm", "copy")
DRAM_KINDS: tuple[str, ...] = ("hbm2", "hbm2e", "hbm3", "hbm3e", "hbm4", "ddr3", "ddr4",
                               "ddr5", "lpddr5", "lpddr5x", "gddr6", "gddr7")
#: DRAM kinds a second memory tier (``[dram2]``) may be: package-attached memories with a
#: PHY of their own on the die edge. HBM belongs in ``[dram]`` (more stacks).
TIER_KINDS: tuple[str, ...] = tuple(k for k in DRAM_KINDS if not k.startswith("hbm"))
#: How a second memory tier reaches the chip (``[dram2] attach``): ``package``, DRAM packages
#: with PHYs of their own on the die edge; or behind a link, whose rate caps the tier's and
#: whose latency adds to every access: ``cxl`` (a CXL type-3 memory expander), ``pcie`` (host
#: DRAM read over the chip's PCIe host interface), ``c2c`` (host DRAM over a coherent
#: chip-to-chip link such as NVLink-C2C). docs/chips.md, "A tier behind a link".
TIER_ATTACH: tuple[str, ...] = ("package", "cxl", "pcie", "c2c")
#: The order a chip's compute kernels run in (``[overheads] kernel_order``): ``dataflow``
#: (any kernels whose data is ready run side by side where the resources allow), ``issue``
#: (one in-order stream, a GPU stack's CUDA stream: one kernel at a time) or ``one_queue``
#: (``issue``, and every node, collectives and transfers included, dispatched in issue order
#: from one hardware queue: ``CUDA_DEVICE_MAX_CONNECTIONS=1``).
KERNEL_ORDERS: tuple[str, ...] = ("dataflow", "issue", "one_queue")
#: How a fused attention kernel's tiles reach the cores (``[attention] dispatch``):
#: ``balanced`` (spread evenly, the rule's bounds: mean load, longest tile, waves) or ``grid``
#: (a GPU's hardware block scheduler: one tile per core at a time, handed out in the launch
#: grid's order to whichever core frees first; sim/run/attention_tiles.py).
TILE_DISPATCH: tuple[str, ...] = ("balanced", "grid")
#: The fastest data rate per pin (Gb/s) a part of each DRAM kind is specified or shipped at:
#: a faster one is a typo or another kind (issue 23 item 6). [S] HBM2 2.4 (Samsung Aquabolt;
#: JESD235A says 2.0), HBM2E 3.6 (SK hynix), HBM3 6.4 (JESD238), HBM3E 9.8 (Samsung, SK hynix
#: and Micron parts 9.2-9.8), DDR3-2133 (JESD79-3), DDR4-3200 (JESD79-4), DDR5-8800
#: (JESD79-5), LPDDR5X-10700 (Samsung 2024; LPDDR5 is 6.4), GDDR6 24 (Samsung), GDDR7 48
#: (JEDEC JESD239 announcement, March 2024: up to 192 GB/s per 32-bit device). HBM4 12
#: [assumption]: JESD270-4 specifies up to 8 Gb/s and vendors have announced 10-11 Gb/s parts.
PIN_RATE_MAX_GBPS: dict[str, float] = {
    "hbm2": 2.4, "hbm2e": 3.6, "hbm3": 6.4, "hbm3e": 9.8, "hbm4": 12.0, "ddr3": 2.133,
    "ddr4": 3.2, "ddr5": 8.8, "lpddr5": 10.7, "lpddr5x": 10.7, "gddr6": 24.0, "gddr7": 48.0}
#: Kinds of program tensors (:mod:`diptych.sim.program`); a chip's ``[residency]`` table says
#: which of them may stay in each on-chip memory between ops.
TENSOR_KINDS: tuple[str, ...] = ("weight", "activation", "kv_cache", "gradient",
                                 "optimizer_state")

# Physical ranges (docs/chips.md, "Valid ranges"). Every numeric field has an upper bound:
# generous (a wafer-scale engine, a 2030s HBM stack fit inside) but finite, so that nonsense
# (a typo of 10**20, NaN, inf) is refused when the chip is loaded, not met inside the engine.
MAX_ARRAY_DIM = 4096
#: Largest value in any dtype table; the per-table limits below are tighter.
DTYPE_TABLE_MAX = 1e4
#: MACs per PE per cycle: a rate is n/d with d <= MAX_RATE_DENOMINATOR (exactly representable,
#: so the array timeline never rounds a rate up) and MIN_RATE <= rate <= MAX_RATE.
MAX_RATE_DENOMINATOR = 1024
MIN_RATE = 1 / MAX_RATE_DENOMINATOR
MAX_RATE = 64.0
# Lower bounds and their reasons: arch/bounds.py (issue 22 item 2).
MM2_PER_MAC_MAX = 1.0       # mm² per MAC unit; a 45 nm fp32 MAC is ~0.01 mm²
POWER_W_MAX = 1e5           # W; a wafer-scale system draws ~25 kW


def check_rate(rate: float, source, path) -> None:
    """``rate`` MACs per PE per cycle must be a ratio n/d with d <= MAX_RATE_DENOMINATOR that
    equals the float exactly (to 1e-12), within [MIN_RATE, MAX_RATE]."""
    from fractions import Fraction

    if not MIN_RATE <= rate <= MAX_RATE:
        fail(source, path, rate, f"a rate >= 1/{MAX_RATE_DENOMINATOR} and <= {MAX_RATE:g} "
                                 "(or 0 for unsupported)")
    fr = Fraction(rate).limit_denominator(MAX_RATE_DENOMINATOR)
    if abs(float(fr) - rate) > 1e-12 * rate:
        fail(source, path, rate, f"a rate n/d with d <= {MAX_RATE_DENOMINATOR} (the array "
                                 "timeline plays whole steps; e.g. 0.25, 0.75 or 1/3 = "
                                 f"0.333...), nearest is {fr} = {float(fr):.6g}")


@dataclass(frozen=True, kw_only=True)
class DtypeTable:
    """One non-negative number per precision (0 = unsupported / not applicable)."""

    int4: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for int4")
    int8: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for int8")
    fp8: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for fp8")
    bf16: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for bf16")
    fp16: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for fp16")
    fp32: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for fp32")
    # block-scaled formats (arch/dtypes.py; docs/precision.md)
    mxfp4: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for mxfp4")
    nvfp4: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for nvfp4")
    mxfp6: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for mxfp6")
    mxfp8: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for mxfp8")
    mxint8: float = f(default=0.0, min=0.0, max=DTYPE_TABLE_MAX, doc="value for mxint8")

    def __getitem__(self, dtype: str) -> float:
        if dtype not in DTYPES:
            raise KeyError(dtype)
        return getattr(self, dtype)

    def items(self):
        return [(d, getattr(self, d)) for d in DTYPES]


#: Mixed-input pairs ``WEIGHTxACT`` (weights narrower than the activations) a PE may multiply
#: directly (``core.array.mixed_input``).
#: Each pair's (weights, activations) dtypes.
MIXED_PAIR_DTYPES: dict[str, tuple[str, str]] = {
    f"{w}x{a}": (w, a) for w in DTYPES for a in DTYPES if DTYPE_BYTES[w] < DTYPE_BYTES[a]}
MIXED_PAIRS: tuple[str, ...] = tuple(MIXED_PAIR_DTYPES)


@dataclass(frozen=True, kw_only=True)
class SystolicArray:
    """An R×C systolic MAC array.

    ``macs_per_pe_per_cycle[dtype]`` is the number of MACs one PE completes per cycle in that
    precision (0 = unsupported; fractions model multi-pass modes such as TPU v1's 16-bit
    quarter rate). All precisions share the array-timing contract (design.md §4): a dtype with
    n MACs per PE per cycle processes n K-steps per PE per cycle, so its compute time is the
    single-rate timeline with K divided by n.
    """

    rows: int = f(min=1, max=MAX_ARRAY_DIM, doc="PE rows (integer 1..4096)")
    cols: int = f(min=1, max=MAX_ARRAY_DIM, doc="PE columns (integer 1..4096)")
    dataflows: tuple[str, ...] = f(choices=DATAFLOWS, nonempty=True,
                                   doc="list of supported dataflows: os, ws, is")
    macs_per_pe_per_cycle: DtypeTable = f(
        doc="table of MACs per PE per cycle by dtype",
        each=bound(MIN_RATE, MAX_RATE, "MACs per PE per cycle: 0 = unsupported; 1/1024 is a slow "
                   "multi-pass mode, 64 a PE of 64 parallel MACs", zero=True))
    # ---- precision support beyond the rates (docs/precision.md) ---------------------------
    block_scale: str = f(default="none", choices=BLOCK_SCALE_PLACES,
                         doc="where block scales of MX/NVFP4 operands are applied: none (no "
                             "block-scaled dtype), pe (in the MAC datapath: no extra time) or "
                             "vector (each K-block's partial sums rescaled on the vector "
                             "unit)")
    mixed_input: tuple[str, ...] = f(default=(), choices=MIXED_PAIRS,
                                     doc="list of WEIGHTxACT pairs the PE multiplies directly "
                                         "at the activation dtype's rate (e.g. int4xbf16)")
    dequant: str = f(default="vector", choices=DEQUANT_PLACES,
                     doc="how weights narrower than the activations are expanded when their "
                         "pair is not in mixed_input: vector (on the vector unit) or none "
                         "(the chip cannot run such a product)")
    # ---- the weight-install path of WS/IS (sim/timing.py, docs/engine.md) -----------------
    weight_load_rows_per_cycle: int = f(
        default=1, min=1, max=MAX_ARRAY_DIM,
        doc="rows of a stationary weight tile written per cycle when it is installed (1: the "
            "systolic shift-in, R cycles per tile; p: ceil(R / p) cycles; at most rows)")
    weight_swap: str = f(
        default="wave", choices=WEIGHT_SWAPS,
        doc="how the installed weights become active: wave (a swap wave travels with the "
            "tile's first row; the next install waits until it has left the array, R + C - 2 "
            "cycles) or global (every PE switches at once in the first-row cycle, which frees "
            "the install buffer)")
    output_quant: str = f(default="vector", choices=OUTPUT_QUANT_PLACES,
                          doc="where a product's block-scaled output (MX, NVFP4) is quantised: "
                              "vector (the vector unit finds each block's max, its scale, and "
                              "scales and rounds every element) or array (a quantiser on the "
                              "array's output path: no extra time)")

    def _validate(self, source, path):
        if all(v == 0 for _, v in self.macs_per_pe_per_cycle.items()):
            fail(source, f"{path}.macs_per_pe_per_cycle", {},
                 "at least one dtype with MACs per PE per cycle > 0")
        for dtype, v in self.macs_per_pe_per_cycle.items():
            if v:
                check_rate(v, source, f"{path}.macs_per_pe_per_cycle.{dtype}")
        scaled = [d for d in BLOCK_DTYPES if self.macs_per_pe_per_cycle[d] > 0]
        if scaled and self.block_scale == "none":
            fail(source, f"{path}.block_scale", self.block_scale,
                 f"pe or vector: the array runs the block-scaled {', '.join(scaled)} "
                 f"(macs_per_pe_per_cycle), so it must say where their scales are applied")
        if self.weight_load_rows_per_cycle > self.rows:
            fail(source, f"{path}.weight_load_rows_per_cycle", self.weight_load_rows_per_cycle,
                 f"at most rows ({self.rows}): a tile has no more rows to write in one cycle")
        for pair in self.mixed_input:
            _, act = MIXED_PAIR_DTYPES[pair]
            if self.macs_per_pe_per_cycle[act] <= 0:
                fail(source, f"{path}.mixed_input", pair,
                     f"pairs whose activation dtype the array supports; {act} has no "
                     f"macs_per_pe_per_cycle")

    @property
    def pes(self) -> int:
        return self.rows * self.cols

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Supported precisions, narrowest first."""
        return tuple(d for d, v in self.macs_per_pe_per_cycle.items() if v > 0)


@dataclass(frozen=True, kw_only=True)
class VectorUnit:
    """SIMD unit beside the arrays for elementwise ops and reductions."""

    lanes: int = f(min=1, max=2**20, doc="vector lanes (integer 1..1048576)")
    ops_per_lane_per_cycle: float = f(
        doc="ops per lane per cycle",
        **bound(0.001, 1024.0, "one op per 1,000 cycles is slower than any iterative divider; "
                "1024 is above the widest SIMD lane"))
    on_array_output_path: bool = f(default=False,
                                   doc="true when the vector unit sits on the arrays' output "
                                       "path, so elementwise work can fuse into a GEMM's "
                                       "epilogue (default false: unknown)")
    gemm_fused_kinds: tuple[str, ...] = f(
        default=FUSABLE_KINDS, choices=FUSABLE_KINDS,
        doc="list of vector-op kinds the chip's GEMM kernels apply on their output path (or, "
            "for rmsnorm/layernorm, while loading an operand), as its software stack runs "
            "them; only with on_array_output_path; [] when the stack runs every elementwise "
            "op and norm as a kernel of its own (default: every kind: "
            + ", ".join(FUSABLE_KINDS) + ")")
    on_array_input_path: bool = f(default=False,
                                  doc="true when the vector unit hands operands to the arrays "
                                      "directly (registers into the MMA), so a tile it expands "
                                      "(dequantised weights or KV cache) does not go back "
                                      "through the scratchpad (default false: it does)")
    in_kernel_expand_stream: float = f(
        default=1.0,
        doc="with on_array_input_path: the fraction of its streaming rate a fused attention "
            "keeps while it expands a cache narrower than its queries in registers on the way "
            "into the arrays (1, the default: the conversion hides entirely under the loads)",
        **bound(0.01, 1.0, "1 = the conversion is free; a kernel at under 1 % of its stream "
                "is a bug, not a rate"))


@dataclass(frozen=True, kw_only=True)
class Scratchpad:
    """Software-managed on-chip SRAM of one tensor core."""

    capacity_mib: float = f(doc="capacity in MiB", **SRAM_MIB)
    banks: int = f(min=1, max=65536, doc="number of banks (integer 1..65536)")
    bank_width_bytes: int = f(min=1, max=2**20,
                              doc="bytes per bank access (integer 1..1048576)")
    ports: int = f(min=1, max=64, doc="ports per bank (integer 1..64)")
    accumulator_mib: float = f(default=0.0, doc="separate accumulator SRAM in MiB (0 = none)",
                               **SRAM_MIB, zero_ok=True)

    @property
    def capacity_bytes(self) -> int:
        return int(self.capacity_mib * 2**20)

    @property
    def bytes_per_cycle(self) -> int:
        """Peak SRAM bandwidth: banks × width × ports."""
        return self.banks * self.bank_width_bytes * self.ports


@dataclass(frozen=True, kw_only=True)
class TensorCore:
    """One tensor core: ``arrays`` identical systolic arrays sharing a scratchpad."""

    arrays: int = f(min=1, max=4096, doc="systolic arrays per core (integer 1..4096)")
    array: SystolicArray = f(doc="the systolic array table")
    vector: VectorUnit = f(doc="the vector unit table")
    scratchpad: Scratchpad = f(doc="the scratchpad table")


@dataclass(frozen=True, kw_only=True)
class Dma:
    """The DMA engines moving tiles between DRAM and scratchpad."""

    engines: int = f(min=1, max=1024, doc="DMA engines (integer 1..1024)")
    max_outstanding: int = f(min=1, max=65536,
                             doc="outstanding transfers per engine (integer 1..65536)")
    bytes_per_cycle: float = f(
        doc="bytes per core cycle per engine",
        **bound(0.01, 1e6, "a byte per 100 cycles is below any DMA engine, 1 MB per cycle above "
                "any on-chip bus"))
    setup_cycles: int = f(default=0, min=0, max=1_000_000,
                          doc="fixed per-descriptor latency in cycles (integer 0..1000000)")


@dataclass(frozen=True, kw_only=True)
class Dram:
    """Off-chip DRAM (HBM stacks or DDR channels) with JEDEC-style timing."""

    kind: str = f(choices=DRAM_KINDS, doc="DRAM kind")
    stacks: int = f(min=1, max=64, doc="stacks (HBM) or DIMM groups (DDR), integer 1..64")
    channels_per_stack: int = f(min=1, max=128, doc="channels per stack (integer 1..128)")
    pseudo_channels_per_channel: int = f(min=1, max=16,
                                         doc="pseudo-channels per channel (integer 1..16)")
    bits_per_pseudo_channel: int = f(min=1, max=1024,
                                     doc="data bits per pseudo-channel (integer 1..1024)")
    gbps_per_pin: float = f(
        doc="data rate per pin in Gb/s",
        **bound(0.1, 64.0, "Gb/s: 0.1 is PC100 SDRAM, 64 is above GDDR7 at 32-48; per kind at "
                "most PIN_RATE_MAX_GBPS"))
    banks_per_pseudo_channel: int = f(min=1, max=1024,
                                      doc="banks per pseudo-channel (integer 1..1024)")
    page_bytes: int = f(min=32, max=65536, doc="row-buffer (page) size in bytes (integer "
                                               "32..65536)")
    burst_bytes: int = f(min=8, max=4096, doc="bytes per burst (integer 8..4096)")
    interleave_bytes: int = f(min=32, max=2**30,
                              doc="address-interleave granularity across pseudo-channels "
                                  "in bytes (integer 32..1073741824)")
    t_rcd_ns: float = f(doc="tRCD in ns", **bound(DRAM_T_MIN_NS, 1000.0, DRAM_T_WHY))
    t_cl_ns: float = f(doc="tCL in ns", **bound(DRAM_T_MIN_NS, 1000.0, DRAM_T_WHY))
    t_rp_ns: float = f(doc="tRP in ns", **bound(DRAM_T_MIN_NS, 1000.0, DRAM_T_WHY))
    t_ras_ns: float = f(doc="tRAS in ns", **bound(DRAM_T_MIN_NS, 10_000.0, DRAM_T_WHY))
    t_rfc_ns: float = f(doc="tRFC in ns",
                        **bound(DRAM_T_MIN_NS, 100_000.0, "ns: real all-bank refreshes take "
                                "90-550 ns; 0.1 ns is below any DRAM array operation"))
    t_refi_ns: float = f(doc="tREFI in ns",
                         **bound(100.0, 1e6, "ns: no part refreshes all banks more often "
                                 "than every ~2 us; the engine walks refresh windows one by "
                                 "one"))
    t_wtr_ns: float = f(doc="write-to-read turnaround tWTR in ns",
                        **bound(0.01, 1000.0, "ns: 0 = none; 10 ps is below one clock of any "
                                "DRAM", zero=True))
    t_rtw_ns: float = f(doc="read-to-write turnaround in ns",
                        **bound(0.01, 1000.0, "ns: 0 = none; 10 ps is below one clock of any "
                                "DRAM", zero=True))
    capacity_gib: float = f(doc="capacity in GiB",
                            **bound(0.001, 65536.0, "GiB: 1 MiB is below any DRAM device sold "
                                    "this century, 64 TiB is 300x the largest HBM system"))

    @classmethod
    def json_schema_rules(cls) -> list[dict]:
        """The per-kind pin-rate ceilings (:data:`PIN_RATE_MAX_GBPS`) as JSON Schema rules."""
        return [{"if": {"properties": {"kind": {"const": k}}, "required": ["kind"]},
                 "then": {"properties": {"gbps_per_pin": {"maximum": v}}}}
                for k, v in PIN_RATE_MAX_GBPS.items()]

    def _validate(self, source, path):
        top = PIN_RATE_MAX_GBPS[self.kind]
        if self.gbps_per_pin > top:
            fail(source, f"{path}.gbps_per_pin", self.gbps_per_pin,
                 f"at most {top:g} Gb/s for {self.kind} (the fastest {self.kind} part "
                 f"specified or shipped; another kind?)")
        if self.burst_bytes > self.page_bytes:
            fail(source, f"{path}.burst_bytes", self.burst_bytes,
                 f"at most page_bytes ({self.page_bytes})")
        if self.t_refi_ns <= self.t_rfc_ns:
            fail(source, f"{path}.t_refi_ns", self.t_refi_ns,
                 f"more than t_rfc_ns ({self.t_rfc_ns})")
        blackout = self.t_rfc_ns + self.t_rcd_ns + self.t_cl_ns
        if blackout > REFRESH_MAX_FRACTION * self.t_refi_ns:
            fail(source, f"{path}.t_refi_ns", self.t_refi_ns,
                 f"at least {1 / REFRESH_MAX_FRACTION:g}x the refresh blackout t_rfc_ns + "
                 f"t_rcd_ns + t_cl_ns ({blackout:g} ns): real parts lose 2-15 % of the time "
                 f"to refresh, and a blackout as long as tREFI leaves no time to transfer")
        if self.t_ras_ns < self.t_rcd_ns:
            fail(source, f"{path}.t_ras_ns", self.t_ras_ns, f"at least t_rcd_ns ({self.t_rcd_ns})")

    @property
    def pseudo_channels(self) -> int:
        return self.stacks * self.channels_per_stack * self.pseudo_channels_per_channel

    @property
    def bus_bits(self) -> int:
        return self.pseudo_channels * self.bits_per_pseudo_channel

    @property
    def peak_bytes_per_s(self) -> float:
        """Pin bandwidth: all pseudo-channels × bits × Gb/s per pin ÷ 8."""
        return self.bus_bits * self.gbps_per_pin * 1e9 / 8

    @property
    def capacity_bytes(self) -> int:
        return int(self.capacity_gib * 2**30)


@dataclass(frozen=True, kw_only=True)
class MemoryTier(Dram):
    """A second memory tier (optional ``[dram2]`` table): package-attached DRAM beside the
    ``[dram]`` HBM (LPDDR5X or GDDR7 on the die edge), with the JEDEC-style timing of
    :class:`Dram` (``stacks``: its packages) and what the chip's tables give HBM elsewhere:
    its energy per bit, price, and the PHY's area and die edge per package. The residency
    planner places what the first tier cannot hold here (docs/chips.md, "Memory tiers").

    A tier behind a link (``attach`` ``cxl``, ``pcie`` or ``c2c``; docs/chips.md, "A tier
    behind a link") is DRAM of the same description on the far side of ``links`` link ports of
    ``link_gb_per_s`` each per direction: it streams at the lower of its pins and the links
    (:attr:`bytes_per_s`), every access pays ``link_latency_ns`` more, ``pj_per_bit`` counts
    the link with the device, and ``mm2_per_phy``/``mm_edge_per_phy`` are per link port (0:
    an interface the chip has anyway, a PCIe host port)."""

    # > 0 always: a tier is never free to read (issue 25, bad input: zero energy exits 2)
    pj_per_bit: float = f(doc="pJ per bit transferred (device + PHY + controller)",
                          **bound(0.01, 1000.0, "pJ: never 0, a tier is not free to read; "
                                  "0.01 pJ/bit is 25x below the best die-to-die link"))
    usd_per_gb: float = f(default=0.0, doc="price in USD per GB (0 = not priced)",
                          **bound(0.01, 1000.0, "USD: commodity DRAM is ~1-10 $/GB, HBM "
                                  "~10-30", zero=True))
    mm2_per_phy: float = f(default=0.0, doc="mm² of PHY + controller per package",
                           **bound(0.01, 1000.0, "mm²: 0 = not modelled; a x64 LPDDR or "
                                   "x32 GDDR PHY is a few mm²", zero=True))
    mm_edge_per_phy: float = f(default=0.0, doc="mm of die edge per package PHY",
                               **bound(0.01, 100.0, "mm: 0 = not modelled; an HBM PHY takes "
                                       "~10 mm of edge", zero=True))

    attach: str = f(default="package", choices=TIER_ATTACH,
                    doc="how the tier reaches the chip: package (PHYs on the die edge) or "
                        "behind a link (cxl, pcie, c2c)")
    links: int = f(default=0, min=0, max=64,
                   doc="link ports to a linked tier (0 for attach = package; integer 0..64)")
    link_gb_per_s: float = f(default=0.0, doc="GB/s per link port per direction (0 for "
                             "attach = package)", **LINK_GB_PER_S, zero_ok=True)
    link_latency_ns: float = f(default=0.0, doc="ns the link adds to every access (round "
                               "trip beyond the DRAM's own; 0 = ideal)", **LINK_NS)
    shared_by: int = f(default=1, min=1, max=1024,
                       doc="chips sharing this memory (a node's host DRAM behind a socket: the "
                           "table then describes the whole shared memory, and each chip gets "
                           "1/shared_by of its capacity and pins; integer 1..1024)")

    @property
    def linked(self) -> bool:
        """Whether the tier sits behind a link (``attach`` other than ``package``)."""
        return self.attach != "package"

    @property
    def capacity_bytes(self) -> int:
        """One chip's bytes: the whole capacity, or of a memory ``shared_by`` chips, an even
        share (every chip of a node runs the same step and holds the same state)."""
        if self.shared_by == 1:
            return int(self.capacity_gib * 2**30)
        return int(self.capacity_gib * 2**30 / self.shared_by)

    @property
    def pin_share_bytes_per_s(self) -> float:
        """One chip's share of the memory's pins when every sharing chip streams at once
        (:attr:`Dram.peak_bytes_per_s` ÷ ``shared_by``): what a node's chips running the same
        step each get of a socket's DRAM channels."""
        return self.peak_bytes_per_s / self.shared_by

    @property
    def capacity_gib_per_chip(self) -> float:
        """``capacity_gib`` ÷ ``shared_by`` (what one chip's price counts)."""
        return self.capacity_gib / self.shared_by

    @property
    def link_bytes_per_s(self) -> float:
        """The links' bandwidth per direction, all ports (inf for a package-attached tier)."""
        return self.links * self.link_gb_per_s * 1e9 if self.linked else float("inf")

    @property
    def bytes_per_s(self) -> float:
        """What the tier can deliver to one chip: the lower of its pins (their share, for a
        memory ``shared_by`` several chips) and its links."""
        if self.shared_by == 1:
            return min(self.peak_bytes_per_s, self.link_bytes_per_s)
        return min(self.pin_share_bytes_per_s, self.link_bytes_per_s)

    @property
    def phys(self) -> int:
        """PHYs the tier puts on the die edge: one per package, or one per link port."""
        return self.links if self.linked else self.stacks

    def _validate(self, source, path):
        if not self.linked:
            if self.shared_by != 1:
                fail(source, f"{path}.shared_by", self.shared_by,
                     "1 for a package-attached tier (its packages are one chip's); a memory "
                     "several chips share sits behind their links: attach = one of "
                     f"{', '.join(TIER_ATTACH[1:])}")
            for name in ("links", "link_gb_per_s", "link_latency_ns"):
                if getattr(self, name):
                    fail(source, f"{path}.{name}", getattr(self, name),
                         "0 for a package-attached tier (attach = \"package\"); a tier "
                         f"behind a link names it: attach = one of {', '.join(TIER_ATTACH[1:])}")
        else:
            if self.links < 1:
                fail(source, f"{path}.links", self.links,
                     f"at least 1 link port for attach = {self.attach!r}")
            if self.link_gb_per_s <= 0:
                fail(source, f"{path}.link_gb_per_s", self.link_gb_per_s,
                     f"a link bandwidth > 0 GB/s for attach = {self.attach!r}")
        if self.kind not in TIER_KINDS:
            fail(source, f"{path}.kind", self.kind,
                 f"a package-attached DRAM kind ({', '.join(TIER_KINDS)}): HBM stacks belong "
                 f"in [dram] (more stacks)")
        super()._validate(source, path)


@dataclass(frozen=True, kw_only=True)
class SharedBuffer:
    """Optional chip-level on-chip buffer shared by every tensor core (GPU L2, TPU v4 CMEM).

    The engine serves an operand's re-reads from it when their reuse set fits (docs/engine.md,
    "Shared buffer"); its bytes cost ``energy.pj_per_sram_byte``.
    """

    capacity_mib: float = f(doc="capacity in MiB", **SRAM_MIB)
    bytes_per_cycle: float = f(
        doc="read bandwidth of the whole buffer in bytes per core cycle, all arrays together",
        **bound(0.01, 1e7, "a byte per 100 cycles is below any on-chip buffer, 10 MB per "
                "cycle above any"))

    @property
    def capacity_bytes(self) -> int:
        return int(self.capacity_mib * 2**20)


@dataclass(frozen=True, kw_only=True)
class Interconnect:
    """Chip-to-chip links (ICI, NVLink, NeuronLink ...).

    ``bus_efficiency``: the fraction of the links' bandwidth a collective library sustains on
    them (nccl-tests' bus bandwidth ÷ the link bandwidth; protocol, chunking and
    synchronisation), applied to every transfer over the links (1: ideal, the default).
    ``in_network_reduction``: the links' bandwidth fraction an all-reduce through the
    switch's in-network reduction sustains (NVLink SHARP, NCCL's NVLS: each rank's buffer
    goes up once, the sum comes down once), 0 for none, with its own fixed latency
    (``in_network_reduction_latency_us``: its protocol's, in place of the per-hop steps); a
    switch-domain all-reduce takes it when it is faster than the ring (docs/cluster.md,
    "Collectives"). ``in_network_reduction_ramp``: measured segments ``(from MiB, to MiB,
    fraction)`` of a message whose bytes move at ``fraction`` of the links' bandwidth instead
    (an in-switch all-reduce reaches its full rate only on large messages); bytes outside
    every segment at ``in_network_reduction``."""

    links: int = f(min=0, max=1024, doc="links (integer 0..1024)")
    gb_per_s_per_link_per_direction: float = f(doc="GB/s per link per direction",
                                               **LINK_GB_PER_S, zero_ok=True)
    latency_us: float = f(doc="per-hop latency in microseconds", **LINK_LATENCY_US,
                          zero_ok=True)
    bus_efficiency: float = f(default=1.0,
                              doc="fraction of the link bandwidth collectives sustain",
                              **BUS_EFFICIENCY)
    in_network_reduction: float = f(default=0.0,
                                    doc="link-bandwidth fraction of an in-switch-reduced "
                                        "all-reduce (0: no in-network reduction)",
                                    **BUS_EFFICIENCY, zero_ok=True)
    in_network_reduction_latency_us: float = f(default=0.0,
                                               doc="fixed latency of an in-switch-reduced "
                                                   "all-reduce in microseconds",
                                               **LINK_LATENCY_US, zero_ok=True)
    in_network_reduction_ramp: tuple[tuple[float, ...], ...] = f(
        default=(), doc="segments [from MiB, to MiB, fraction] of an in-switch-reduced "
                        "all-reduce's bytes that move at that fraction of the link bandwidth "
                        "(the rest at in_network_reduction)")
    torus_dims: int = f(default=0, min=0, max=8,
                        doc="dimensions of the torus the links form, two links per "
                            "dimension (integer 0..8; 0: the links end in a switch or a full "
                            "mesh, a collective is striped over all of them)")

    def _validate(self, source, path):
        if 2 * self.torus_dims > self.links:
            fail(source, f"{path}.torus_dims" if path else "torus_dims", self.torus_dims,
                 f"at most links / 2 = {self.links // 2} (two links per dimension)")
        where = f"{path}.in_network_reduction_ramp" if path else "in_network_reduction_ramp"
        if self.in_network_reduction_ramp and not self.in_network_reduction:
            fail(source, where, list(map(list, self.in_network_reduction_ramp)),
                 "no segments without in_network_reduction > 0")
        end = 0.0
        for i, seg in enumerate(self.in_network_reduction_ramp):
            if (len(seg) != 3 or not end <= seg[0] < seg[1] or not 0.0 < seg[2] <= 1.0
                    or not math.isfinite(seg[1])):
                fail(source, f"{where}[{i}]", list(seg),
                     f"[from MiB, to MiB, fraction] with {end:g} <= from < to and 0 < "
                     f"fraction <= 1 (segments in order, not overlapping)")
            end = seg[1]

    @property
    def bytes_per_s_per_direction(self) -> float:
        """The links' raw bandwidth, one direction."""
        return self.links * self.gb_per_s_per_link_per_direction * 1e9

    @property
    def sustained_bytes_per_s_per_direction(self) -> float:
        """What a transfer over all the links sustains: raw × ``bus_efficiency``."""
        return self.bytes_per_s_per_direction * self.bus_efficiency


#: Algorithms a collective library may offer inside one scale-up domain and across domains
#: (docs/cluster.md, "Collectives"): NCCL's ring, tree and NVLS, and diptych's hierarchical.
LIBRARY_ALGORITHMS = ("ring", "tree", "nvls", "hierarchical")

#: Protocols of a collective library, NCCL's names (src/device/prims_*.h): LL (8-byte
#: flag+data stores), LL128 (120 of every 128 bytes data) and Simple (chunks behind fences).
PROTOCOLS = ("ll", "ll128", "simple")


@dataclass(frozen=True, kw_only=True)
class CollectiveProtocol:
    """One protocol of the chip's collective library: a ring or tree collective of ``steps``
    sequential steps, ``h`` of them inside a scale-up domain and ``s`` across the network,
    takes ``base_latency_us + h·hop_latency_us + s·net_hop_latency_us`` plus its busiest
    link's bytes at ``bus_fraction`` of the bandwidth the Simple protocol sustains (the
    links' ``bus_efficiency``; a tree all-reduce at ``tree_bus_fraction``), the bus bandwidth
    capped at ``max_bus_gb_per_s`` per rank (0: no cap). NCCL's own cost model has these
    terms (src/graph/tuning.cc: baseLat, hwLat[NVLINK | NET], the ring and tree LL/LL128
    bandwidth factors and llMaxBw)."""

    base_latency_us: float = f(doc="fixed latency of one collective in microseconds",
                               **LINK_LATENCY_US, zero_ok=True)
    hop_latency_us: float = f(doc="latency per step over the scale-up links in microseconds",
                              **LINK_LATENCY_US, zero_ok=True)
    net_hop_latency_us: float = f(default=0.0,
                                  doc="latency per step over the scale-out network in "
                                      "microseconds (0: the cluster's own latency)",
                                  **LINK_LATENCY_US, zero_ok=True)
    tree_net_hop_latency_us: float = f(default=0.0,
                                       doc="latency per network step of a tree all-reduce in "
                                           "microseconds (0: net_hop_latency_us)",
                                       **LINK_LATENCY_US, zero_ok=True)
    bus_fraction: float = f(doc="fraction of the Simple protocol's bus bandwidth this "
                                "protocol sustains, in (0, 1]", **BUS_EFFICIENCY)
    tree_bus_fraction: float = f(default=0.0,
                                 doc="the same fraction for a tree all-reduce, in (0, 1] (0: "
                                     "bus_fraction)", **BUS_EFFICIENCY, zero_ok=True)
    max_bus_gb_per_s: float = f(default=0.0,
                                doc="cap on the bus bandwidth per rank in GB/s (0: none)",
                                **LINK_GB_PER_S, zero_ok=True)


@dataclass(frozen=True, kw_only=True)
class PointToPoint:
    """The library's point-to-point path (``[collectives.p2p]``): an all-to-all is ``n−1``
    grouped sends that progress at once (NCCL's ``ncclGroupStart``/``ncclSend``/``ncclRecv``;
    NCCL's tuner has no cost model for them, src/graph/tuning.cc times collectives only), so
    it is timed by what nccl-tests' ``alltoall_perf`` measures: one call costs
    ``base_latency_us`` (the whole fixed cost of a call, its launch included; a call that
    crosses the network adds one network step) plus its busiest port's bytes at
    ``scale_up_bus_fraction`` of the links' sustained bandwidth (``bus_efficiency``) and its
    busiest NIC's at ``scale_out_bus_fraction`` of the cluster's (docs/cluster.md,
    "Collectives")."""

    base_latency_us: float = f(doc="fixed latency of one all-to-all call in microseconds",
                               **LINK_LATENCY_US, zero_ok=True)
    scale_up_bus_fraction: float = f(default=1.0,
                                     doc="fraction of the scale-up links' sustained bandwidth "
                                         "an all-to-all reaches, in (0, 1]", **BUS_EFFICIENCY)
    scale_out_bus_fraction: float = f(default=1.0,
                                      doc="fraction of the NICs' sustained bandwidth an "
                                          "all-to-all reaches, in (0, 1]", **BUS_EFFICIENCY)


@dataclass(frozen=True, kw_only=True)
class CollectiveLibrary:
    """The collective library the chip's software runs on its links (optional
    ``[collectives]`` table; docs/cluster.md, "Collectives"): the algorithms its tuner
    considers and, per protocol, a latency and a bus-bandwidth efficiency; every collective
    of a switch domain (and across domains) takes the fastest (algorithm, protocol) pair, as
    NCCL's tuner does from the same terms. Absent: one protocol at the links' sustained
    bandwidth and ``latency_us`` per step (the model of chips without a library table,
    e.g. TPU ICI, whose collectives are XLA's, not NCCL's). Not applied to torus links."""

    name: str = f(doc="library name (1..64 printable characters)", nonempty=True, max_len=64,
                  printable=True)
    algorithms: tuple[str, ...] = f(choices=LIBRARY_ALGORITHMS,
                                    doc="list of the algorithms the library's tuner considers")
    protocols: tuple[str, ...] = f(choices=PROTOCOLS,
                                   doc="list of the protocols the library's tuner considers")
    ll: CollectiveProtocol | None = f(default=None, doc="the LL protocol table")
    ll128: CollectiveProtocol | None = f(default=None, doc="the LL128 protocol table")
    simple: CollectiveProtocol | None = f(default=None, doc="the Simple protocol table")
    p2p: PointToPoint | None = f(default=None,
                                 doc="the point-to-point table (all-to-all); absent: the "
                                     "links' plain rule")

    def _validate(self, source, path):
        where = f"{path}." if path else ""
        if "ring" not in self.algorithms:
            fail(source, f"{where}algorithms", list(self.algorithms),
                 "a list that includes 'ring' (every library runs a ring)")
        if not self.protocols:
            fail(source, f"{where}protocols", [], "at least one of " + ", ".join(PROTOCOLS))
        for name in self.protocols:
            if getattr(self, name) is None:
                fail(source, f"{where}protocols", list(self.protocols),
                     f"protocols that have a table: [{where}{name}] is missing")
        if len(set(self.algorithms)) != len(self.algorithms):
            fail(source, f"{where}algorithms", list(self.algorithms), "no name twice")

    def table(self) -> tuple[tuple[str, CollectiveProtocol], ...]:
        """The enabled protocols, (name, table), in :data:`PROTOCOLS` order."""
        return tuple((p, getattr(self, p)) for p in PROTOCOLS if p in self.protocols)


@dataclass(frozen=True, kw_only=True)
class EnergyTable:
    """Dynamic energy per event, plus static power."""

    pj_per_mac: DtypeTable = f(doc="table of pJ per MAC by dtype", each=PJ_PER_OP)
    pj_per_sram_byte: float = f(
        doc="pJ per scratchpad byte read or written",
        **bound(0.001, 1000.0, "pJ: 0 = not modelled; 1 fJ per byte is below any SRAM "
                "access, ~0.1-1 pJ per byte at 3-7 nm", zero=True))
    pj_per_dram_bit: float = f(doc="pJ per DRAM bit transferred", **PJ_PER_IO_BIT, zero_ok=True)
    pj_per_link_bit: float = f(doc="pJ per interconnect bit", **PJ_PER_IO_BIT, zero_ok=True)
    pj_per_vector_op: float = f(doc="pJ per vector-unit op", **PJ_PER_OP)
    static_w: float = f(default=0.0, doc="static (leakage + idle) power in W",
                        **bound(0.001, POWER_W_MAX, "W: 0 = ideal; 1 mW is a microcontroller's "
                                "leakage, 100 kW 4x a wafer-scale system's power", zero=True))


@dataclass(frozen=True, kw_only=True)
class AreaTable:
    """Area coefficients of the die-area model (see :mod:`diptych.arch.area`)."""

    mm2_per_mac: DtypeTable = f(
        doc="table of mm² per MAC unit by dtype",
        each=bound(1e-6, MM2_PER_MAC_MAX, "mm²: 0 = not modelled; 1 µm² is below any MAC, an "
                   "int4 MAC at 3 nm is ~100 µm²; 1 mm² is 100x a 45 nm fp32 MAC", zero=True))
    mm2_per_mib_sram: float = f(
        doc="mm² per MiB of SRAM",
        **bound(0.01, 1000.0, "mm²: 0 = not modelled; 0.01 mm² per MiB is 20x denser than 3 nm "
                "SRAM", zero=True))
    mm2_per_vector_lane: float = f(
        doc="mm² per vector lane",
        **bound(1e-5, 100.0, "mm²: 0 = not modelled; 10 µm² is below any lane with an ALU",
                zero=True))
    mm2_per_hbm_phy: float = f(
        doc="mm² per DRAM stack PHY + controller",
        **bound(0.01, 1000.0, "mm²: 0 = not modelled; an HBM PHY is ~10-30 mm²", zero=True))
    mm2_per_link: float = f(
        doc="mm² per interconnect link SerDes",
        **bound(0.001, 1000.0, "mm²: 0 = not modelled; one SerDes lane is ~0.1-0.5 mm²",
                zero=True))
    fixed_overhead_mm2: float = f(doc="fixed overhead in mm²", **AREA_MM2, zero_ok=True)


@dataclass(frozen=True, kw_only=True)
class Overheads:
    """Fixed costs that no bandwidth or FLOP count explains (optional ``[overheads]`` table).

    ``op_launch_us``: issue cost of every op (a GPU kernel launch: the gap between dependent
    kernels; an op that stands for several kernels pays it once per kernel,
    workloads/host_work.py); ``step_sync_us``: once per program step (graph launch, host
    synchronisation, hand-over of the sampled tokens); ``collective_launch_us``: per
    collective, on top of the interconnect's per-hop latency; ``host_sync_us``: per host
    synchronisation an op makes inside a step (a ``masked_select`` reading its size back:
    workloads/host_work.py), the device idling until the host has launched the next
    kernels. Absent, all are zero, so results without the table do not move. The program
    scheduler (:mod:`diptych.sim.program`) charges them as their own intervals; they are
    never folded into a bandwidth. ``serving_runtime``: the serving
    stack (:mod:`diptych.arch.runtime`, ``arch/runtimes/*.toml``) whose host costs ``diptych
    serve`` charges a deployment of this chip unless another is named; ``ideal`` (the
    default) charges none. ``kernel_order``: the order the program scheduler runs the chip's
    compute nodes (GEMMs, attention, vector ops) in: ``dataflow`` (the default; independent
    ones overlap where the resources allow), ``issue`` (one at a time in program order, as
    kernels issued on one CUDA stream run; collectives and DMA transfers still overlap them:
    docs/program.md, "Kernel order") or ``one_queue`` (``issue``, and every node started in
    program order, as one hardware queue dispatches the work of every stream:
    ``CUDA_DEVICE_MAX_CONNECTIONS=1``); a run's stack setting ``kernel_order`` may override
    it.
    """

    op_launch_us: float = f(default=0.0, doc="fixed issue cost per op in microseconds",
                            **bound(1e-4, 1000.0, FIXED_US, zero=True))
    step_sync_us: float = f(default=0.0, doc="fixed cost per program step in microseconds",
                            **bound(1e-4, 1e6, FIXED_US, zero=True))
    collective_launch_us: float = f(default=0.0,
                                    doc="fixed cost per collective in microseconds",
                                    **bound(1e-4, 1000.0, FIXED_US, zero=True))
    host_sync_us: float = f(default=0.0,
                            doc="cost of one host synchronisation inside a step in "
                                "microseconds (the device idles while the host, having "
                                "waited for it, launches the next kernels)",
                            **bound(1e-4, 1e5, FIXED_US, zero=True))
    serving_runtime: str = f(default="ideal",
                             doc="serving runtime profile a deployment runs by default (a "
                                 "name of arch/runtimes/*.toml)")
    kernel_order: str = f(default="dataflow", choices=KERNEL_ORDERS,
                          doc="order of the compute kernels: dataflow (independent ones "
                              "overlap), issue (one in-order stream) or one_queue (issue, "
                              "and every node dispatched in order)")

    def _validate(self, source, path):
        names = runtime_names()
        if self.serving_runtime not in names:
            fail(source, f"{path}.serving_runtime" if path else "serving_runtime",
                 self.serving_runtime, "one of " + ", ".join(names))


@dataclass(frozen=True, kw_only=True)
class ResidencyPolicy:
    """Which tensors may stay on chip between ops (optional ``[residency]`` table).

    ``scratchpad_kinds`` / ``shared_buffer_kinds``: the tensor kinds (:data:`TENSOR_KINDS`)
    the residency planner may keep in the cores' scratchpads / the shared buffer from one op
    to the next; a chip whose arrays take weights only from DRAM (TPU v1's weight FIFO) or
    whose scratchpad does not outlive an op (a GPU's shared memory) lists fewer.
    ``reserve_fraction``: the share of each on-chip memory kept free for the engine's
    double-buffered tiles and operand reuse; the planner never fills it.
    """

    scratchpad_kinds: tuple[str, ...] = f(default=TENSOR_KINDS, choices=TENSOR_KINDS,
                                          doc="list of tensor kinds that may stay in the "
                                              "scratchpads between ops")
    shared_buffer_kinds: tuple[str, ...] = f(default=TENSOR_KINDS, choices=TENSOR_KINDS,
                                             doc="list of tensor kinds that may stay in the "
                                                 "shared buffer between ops")
    reserve_fraction: float = f(default=0.25,
                                doc="fraction of each on-chip memory kept for the engine's "
                                    "tiles",
                                **bound(0.001, 0.95, "0 = none; under 0.1 % holds no tile, "
                                        "over 95 % leaves nothing to keep", zero=True))


def _copy_fraction(what: str):
    """A field of :class:`ElementwiseKernels`: the fraction of the copy rate ``what``
    reaches, 1 by default."""
    return f(default=1.0, doc=f"fraction of the copy rate reached by {what}",
             **bound(0.01, 1.0, "1 = the copy rate; a kernel at under 1 % of its memory's "
                     "rate is a bug, not a rate"))


#: :class:`ElementwiseKernels`' fields by what they rate: a vector-op kind's forward is the
#: field of its name, its backward ``<name>_bwd``; a loss pass by implementation likewise.
_RATED_KINDS = frozenset({"swiglu", "geglu", "gelu"})
#: The stem of the fields that rate a residual add that drops (Megatron's bias-dropout-add,
#: tagged ``dropout``: workloads/dropout.py) and the dropout's own backward kernel.
_DROPOUT_ADD = "dropout_add"
_LOSS_FIELDS = {"fused": "cross_entropy", "unfused": "cross_entropy_unfused"}


@dataclass(frozen=True, kw_only=True)
class ElementwiseKernels:
    """The DRAM rate a software stack's own elementwise kernels reach, as a fraction of the
    vector unit's streaming rate (the engine's copy rate, :mod:`diptych.sim.vector`), per
    kernel kind and direction (``[elementwise_kernels]`` when the chip's stack runs them so,
    or an offered ``[elementwise_kernels_megatron]`` that a run selects with the stack
    setting ``elementwise_kernels``, :mod:`diptych.sim.run.stack`). The op's DRAM stream
    takes ``1 / fraction`` times as long; its ALU work, on-chip bytes and launch are
    unchanged. 1 (the default): at the copy rate. Each fraction comes from kernel-level
    measurements of the stack's own kernel, or of its closest measured twin where the preset
    says so (cited where the preset sets it). Kinds: ``swiglu`` and ``geglu`` (the gated
    activations, workloads/lower.py), ``gelu``, a residual add that drops and the dropout's
    backward kernel (``dropout_add``, workloads/dropout.py), the LM loss's passes by
    implementation."""

    swiglu: float = f(default=1.0, doc="fraction of the copy rate a SwiGLU forward reaches",
                      **bound(0.01, 1.0, "1 = the copy rate; a kernel at under 1 % of its "
                              "memory's rate is a bug, not a rate"))
    swiglu_bwd: float = f(default=1.0,
                          doc="fraction of the copy rate a SwiGLU backward reaches",
                          **bound(0.01, 1.0, "as swiglu"))
    geglu: float = _copy_fraction("a (tanh-)GeGLU forward")
    geglu_bwd: float = _copy_fraction("a GeGLU backward")
    gelu: float = _copy_fraction("a (tanh-)GeLU forward (with its bias)")
    gelu_bwd: float = _copy_fraction("a GeLU backward")
    dropout_add: float = _copy_fraction("a residual add that drops (bias-dropout-add)")
    dropout_add_bwd: float = _copy_fraction("the dropout's backward kernel")
    # the LM loss's passes (workloads/loss.py's bytes), by implementation and direction
    cross_entropy: float = _copy_fraction("the fused cross-entropy's forward passes")
    cross_entropy_bwd: float = _copy_fraction("the fused cross-entropy's backward")
    cross_entropy_unfused: float = _copy_fraction("the eager cross-entropy's forward kernels")
    cross_entropy_unfused_bwd: float = _copy_fraction("the eager cross-entropy's backward "
                                                      "kernels")

    def fraction(self, kind: str, backward: bool, loss: str | None = None,
                 dropout: bool = False) -> float:
        """The fraction for a vector op of ``kind`` (its forward, or its ``backward``
        pass), or for a pass of the LM loss of implementation ``loss`` (``"fused"`` or
        ``"unfused"``, workloads/loss.py: whatever its kind), or for an op that drops
        (``dropout``: a bias-dropout-add forward, or the dropout's backward kernel); 1 for
        a kind the table does not list."""
        stem = (_LOSS_FIELDS.get(loss) or (_DROPOUT_ADD if dropout else None)
                or (kind if kind in _RATED_KINDS else None))
        if stem is None:
            return 1.0
        return getattr(self, stem + "_bwd" if backward else stem)


@dataclass(frozen=True, kw_only=True)
class AttentionKernel:
    """How the chip's software stack runs fused (FlashAttention-style) attention in training
    and prefill (docs/workloads.md, "Fused attention"): each core takes a tile of
    ``block_q`` query rows of one head and walks the keys ``block_k`` at a time, whole blocks
    only (a causal mask's diagonal blocks are computed in full), paying a fixed
    ``tile_overhead_cycles`` per tile (loading its queries and filling the pipeline, the
    final rescale and the output store); the exponentials run on special-function units at
    ``exp_per_cycle`` per core (0: on the vector lanes with the rest of the softmax), and
    ``softmax_overlap`` is the share of the softmax's time hidden under the matrix products
    (warp-specialised ping-pong; 0: after them). Absent: the kernel is timed as the sum of its parts
    at their exact causal span (the rule of the TPU-style presets). Decode is not tiled this
    way (its kernels split the keys over the cores)."""

    block_q: int = f(min=1, max=65536, doc="query rows per tile (integer 1..65536)")
    block_k: int = f(min=1, max=65536, doc="keys per inner step (integer 1..65536)")
    tile_overhead_cycles: float = f(
        doc="fixed cycles per tile (prologue and epilogue) on its core",
        **bound(0.01, 1e9, "cycles: a hundredth of a cycle is below any fixed cost, a billion "
                "per tile far above any kernel's", zero=True))
    bwd_tile_overhead_cycles: float = f(
        default=0.0, doc="fixed cycles per tile of the backward kernel",
        **bound(0.01, 1e9, "cycles: as tile_overhead_cycles", zero=True))
    bwd_block_overhead_cycles: float = f(
        default=0.0, doc="fixed cycles per key block of a backward tile beyond its products "
                         "and softmax (the query-side gradient accumulated across key tiles)",
        **bound(0.01, 1e9, "cycles: a hundredth of a cycle is below any fixed cost, a billion "
                "far above any", zero=True))
    exp_per_cycle: float = f(
        default=0.0, doc="exponentials per core per cycle on special-function units (0: on "
                         "the vector lanes)",
        **bound(0.001, 1e6, "one per 1,000 cycles is below any unit, a million per cycle "
                "above any core", zero=True))
    softmax_overlap: float = f(
        default=0.0, doc="share of the softmax's time hidden under the matrix products (0: "
                         "after them; 1: wholly under them)",
        **bound(0.001, 1.0, "a fraction: 1 hides all of it", zero=True))
    mma_fraction: float = f(
        default=1.0, doc="fraction of the cores' matrix rate the kernel's MMA instructions "
                         "reach (1: the full rate; Hopper's mma.sync, which FlashAttention-2 "
                         "uses, about 2/3 of wgmma's)",
        **bound(0.01, 1.0, "a fraction of the full rate"))
    bwd_causal_fraction: float = f(
        default=1.0, doc="fraction of its unmasked rate a masked (causal, windowed, chunked) "
                         "backward call's tile work reaches, beyond the whole diagonal blocks "
                         "and the per-tile costs the rule charges (1: the same rate)",
        **bound(0.01, 1.0, "a fraction of the unmasked rate"))
    dropout_cost: float = f(
        default=0.0, doc="extra share of a call's compute time when it drops attention "
                         "probabilities (its mask drawn inside the kernel, forward and "
                         "backward; workloads/dropout.py); 0: free or unmeasured",
        **bound(0.001, 10.0, "a share of the kernel's time: a thousandth is below any "
                "measured cost, ten times the kernel far above", zero=True))
    dispatch: str = f(
        default="balanced", choices=TILE_DISPATCH,
        doc="how the tiles reach the cores: balanced (spread evenly: the time is the mean "
            "load, the longest tile or the waves of the shortest) or grid (the hardware "
            "block scheduler hands them out in launch-grid order, query tile fastest, then "
            "sequence, then head, to whichever core frees first; the backward's key blocks "
            "longest first)")
    pj_per_mac: float = f(
        default=0.0, doc="energy per MAC of the kernel's matrix products beyond the chip's "
                         "[energy] pj_per_mac, in pJ at the nominal clock (what a block's "
                         "products cost beyond a long-K GEMM's: its score tile turned over "
                         "every block, P converted and re-laid out in registers); 0: none",
        **bound(0.001, 100.0, "pJ: a thousandth is below any measurable share, 100 above "
                "any MAC's energy", zero=True))


@dataclass(frozen=True, kw_only=True)
class TpOverlap:
    """How the chip's training stack overlaps tensor-parallel communication with the layer's
    GEMMs: Transformer Engine's comm-GEMM overlap (userbuffers), as Megatron-Core and NeMo run
    it with sequence parallelism (sim/run/tp_overlap.py; docs/cluster.md, "Tensor-parallel
    overlap"). Per attention (``qkv``, ``proj``) and MLP (``fc1``, ``fc2``) sub-block, with
    TE's names for its GEMMs:

    * forward: the all-gather of the input is a ring exchange on the copy engines, the
      column-parallel GEMM (``qkv``/``fc1``) split into one chunk per rank, each computed as
      its piece arrives (no cores taken); the reduce-scatter of the row-parallel GEMM's
      (``proj``/``fc2``) output is pipelined with it in ``splits`` chunks, the GEMM running
      on the cores the reduce-scatter leaves it (``proj_fprop_cores``/``fc2_fprop_cores``
      taken, TE's ``set_sm_margin``);
    * backward: the all-gather of the output gradient is a ring exchange with the
      row-parallel GEMM's data gradient; the all-gather of the saved input (for the weight
      gradient) runs in bulk beside the column-parallel data-gradient GEMM, the
      reduce-scatter of the input gradient beside its weight-gradient GEMM, each taking
      ``*_dgrad_cores``/``*_wgrad_cores`` cores from a GEMM launched on all of them.

    Absent: tensor-parallel collectives are timed where the program puts them (after the
    row-parallel GEMM, on the dependency chain; behind the layer under ``execution="sum"``)."""

    splits: int = f(min=1, max=1024, doc="chunks a pipelined reduce-scatter splits its "
                                          "row-parallel GEMM into (integer 1..1024)")
    proj_fprop_cores: int = f(default=0, min=0, max=1_000_000,
                              doc="cores the attention output projection's pipelined "
                                  "reduce-scatter takes from its forward GEMM")
    fc2_fprop_cores: int = f(default=0, min=0, max=1_000_000,
                             doc="cores the MLP down projection's pipelined reduce-scatter "
                                 "takes from its forward GEMM")
    qkv_dgrad_cores: int = f(default=0, min=0, max=1_000_000,
                             doc="cores the bulk all-gather of the attention input takes "
                                 "beside the QKV data-gradient GEMM")
    qkv_wgrad_cores: int = f(default=0, min=0, max=1_000_000,
                             doc="cores the bulk reduce-scatter of the attention input "
                                 "gradient takes beside the QKV weight-gradient GEMM")
    fc1_dgrad_cores: int = f(default=0, min=0, max=1_000_000,
                             doc="cores the bulk all-gather of the MLP input takes beside "
                                 "the up projection's data-gradient GEMM")
    fc1_wgrad_cores: int = f(default=0, min=0, max=1_000_000,
                             doc="cores the bulk reduce-scatter of the MLP input gradient "
                                 "takes beside the up projection's weight-gradient GEMM")
    nccl_cores: int = f(default=0, min=0, max=1_000_000,
                        doc="cores an NCCL tensor-parallel all-gather or reduce-scatter takes "
                            "beside a gradient GEMM when userbuffers is off (Megatron's own "
                            "sequence-parallel path)")
    qkv_fprop_aggregate: bool = f(default=False,
                                  doc="the QKV forward's ring exchange runs TE's aggregate "
                                      "variant (tp/2 chunks of 2x rows; sim/run/tp_overlap.py)")
    proj_dgrad_aggregate: bool = f(default=False,
                                   doc="the output projection's data-gradient ring exchange "
                                       "runs TE's aggregate variant")
    fc1_fprop_aggregate: bool = f(default=False,
                                  doc="the up projection's forward ring exchange runs TE's "
                                      "aggregate variant")
    fc2_dgrad_aggregate: bool = f(default=False,
                                  doc="the down projection's data-gradient ring exchange runs "
                                      "TE's aggregate variant")
    userbuffers: bool = f(default=True,
                          doc="the stack runs Transformer Engine's userbuffers overlap (false: "
                              "Megatron's NCCL sequence-parallel path; a run setting, "
                              "sim/run/stack.py)")

    def cores(self) -> dict[str, int]:
        """The cores each overlapped collective takes, by TE GEMM name."""
        return {"proj_fprop": self.proj_fprop_cores, "fc2_fprop": self.fc2_fprop_cores,
                "qkv_dgrad": self.qkv_dgrad_cores, "qkv_wgrad": self.qkv_wgrad_cores,
                "fc1_dgrad": self.fc1_dgrad_cores, "fc1_wgrad": self.fc1_wgrad_cores}

    def aggregate(self) -> dict[str, bool]:
        """Whether each ring-exchange GEMM runs TE's ``aggregate`` variant, by TE GEMM name."""
        return {"qkv_fprop": self.qkv_fprop_aggregate, "proj_dgrad": self.proj_dgrad_aggregate,
                "fc1_fprop": self.fc1_fprop_aggregate, "fc2_dgrad": self.fc2_dgrad_aggregate}


@dataclass(frozen=True, kw_only=True)
class CommKernels:
    """What a collective library's kernels (NCCL's, on a GPU) take from the compute beside
    them while they run (sim/run/interference.py; docs/cluster.md, "Communication beside
    compute"): each kernel holds one core per channel for its whole duration (a
    communication CTA does not share an SM with a compute kernel), so the compute beside it
    runs on the cores left; and it streams ``hbm_bytes_per_link_byte`` bytes of the chip's
    DRAM per byte it puts on a link, which the memory-bound kernels beside it lose. Absent:
    collectives that overlap compute cost it nothing (a chip whose collectives run on DMA
    engines, as TPU ICI's do)."""

    ring_nvlink_cores: int = f(min=0, max=1_000_000,
                               doc="cores (channels) a ring collective holds inside one "
                                   "scale-up domain")
    ring_network_cores: int = f(min=0, max=1_000_000,
                                doc="cores (channels) a collective holds when its group "
                                    "crosses the network")
    p2p_cores_per_peer: int = f(min=0, max=1_000_000,
                                doc="cores (channels) a point-to-point send or receive "
                                    "holds per peer")
    hbm_bytes_per_link_byte: float = f(default=0.0,
                                       doc="DRAM bytes the kernel moves per byte it sends "
                                           "on a link (reads, writes and staging; 0: none)",
                                       **bound(0.1, 16.0, "DRAM bytes per link byte: a "
                                               "ring step reads and writes each byte a few "
                                               "times, not 16", zero=True))


@dataclass(frozen=True, kw_only=True)
class SplitAccumulator:
    """How the chip runs a GEMM whose training recipe asks for a split accumulator
    (optional ``[split_accumulator]`` table; docs/precision.md, "The split accumulator").

    Hopper's tensor cores accumulate FP8 products in a limited-precision accumulator; with
    cuBLAS's fast accumulation off (Transformer Engine's ``use_split_accumulator=True``, its
    default for the dgrad and wgrad GEMMs) the kernel adds the tensor cores' partial sum into
    an FP32 accumulator on the CUDA cores every ``promotion_interval_k`` elements of K and
    starts the next partial sum from zero. Each promotion is one FP32 add per output element
    on the vector unit (:data:`~diptych.workloads.quant.PROMOTE_OPS_PER_ELEMENT`), of
    which the share ``overlap`` hides under the matrix products (another warpgroup's MMAs
    running meanwhile) and the rest adds to the GEMM's time. Absent: a split-accumulator GEMM
    costs its MACs alone (the chip accumulates in full precision, or nothing asks)."""

    promotion_interval_k: int = f(min=1, max=65536,
                                  doc="elements of K between promotions of the partial sum "
                                      "(integer 1..65536)")
    overlap: float = f(default=0.0,
                       doc="share of the promotions' time hidden under the matrix products "
                           "(0: none; 1: all of it)",
                       **bound(0.001, 1.0, "a fraction: 1 hides all of it", zero=True))


@dataclass(frozen=True, kw_only=True)
class Chip:
    """A whole accelerator chip. Derived peaks are properties; physical views (area, die
    geometry, package, NoC, cost, power) are functions of a loaded chip in the modules above
    this record (:mod:`diptych.arch.area` and its neighbours)."""

    name: str = f(doc="chip name (1..128 printable characters)", nonempty=True, max_len=128,
                  printable=True)
    description: str = f(default="", doc="one-line description (at most 4096 characters)",
                         max_len=4096)
    clock_ghz: float = f(doc="core clock in GHz", **CLOCK_GHZ)
    tensor_cores: int = f(min=1, max=1_000_000, doc="tensor cores (integer 1..1000000)")
    default_dtype: str = f(choices=DTYPES, doc="default datapath dtype")
    core: TensorCore = f(doc="the tensor core table")
    dma: Dma = f(doc="the dma table")
    dram: Dram | None = f(default=None,
                          doc="the dram table (absent: an all-SRAM chip without off-chip "
                              "memory; see docs/chips.md)")
    dram2: MemoryTier | None = f(default=None,
                                 doc="optional second memory tier (LPDDR5X/GDDR7 beside the "
                                     "HBM: docs/chips.md, 'Memory tiers'); absent = one DRAM")
    dram3: MemoryTier | None = f(default=None,
                                 doc="optional third memory tier behind the second (CXL or "
                                     "host DRAM, no faster than [dram2]: docs/chips.md, "
                                     "'A third tier'); absent = at most two")
    interconnect: Interconnect = f(doc="the interconnect table")
    energy: EnergyTable = f(doc="the energy table")
    area: AreaTable = f(doc="the area table")
    tdp_w: float = f(doc="thermal design power in W",
                     **bound(0.01, POWER_W_MAX, "W: 10 mW is a microcontroller NPU, 100 kW 4x a "
                             "wafer-scale system"))
    area_budget_mm2: float = f(default=0.0, doc="die-area budget in mm² (0 = none stated)",
                               **AREA_MM2, zero_ok=True)
    shared_buffer: SharedBuffer | None = f(default=None,
                                           doc="optional shared on-chip buffer table "
                                               "(L2 / CMEM); absent = none")
    overheads: Overheads | None = f(default=None,
                                    doc="optional fixed costs table (per op, per step, per "
                                        "collective); absent = all zero")
    residency: ResidencyPolicy | None = f(default=None,
                                          doc="optional residency table: which tensor kinds "
                                              "may stay on chip between ops; absent = "
                                              "defaults of ResidencyPolicy")
    # optional physical-design tables (docs/floorplan.md); absent = nothing changes
    die: DieSpec | None = f(default=None, doc="optional die outline and edge table")
    package: Package | None = f(default=None, doc="optional chiplet package table")
    noc: Noc | None = f(default=None, doc="optional on-chip network table")
    cost: CostTable | None = f(default=None, doc="optional cost table")
    power: PowerTable | None = f(default=None, doc="optional V/f curve and power-gating table")
    attention: AttentionKernel | None = f(default=None,
                                          doc="optional fused-attention kernel table (tiles, "
                                              "their fixed cost, exponentials); absent = the "
                                              "kernel timed as its parts")
    attention_fa2: AttentionKernel | None = f(
        default=None, doc="optional FlashAttention-2 kernel table, run in place of "
                          "[attention] when a run asks for attention_kernel 'fa2' "
                          "(sim/run/stack.py); absent = not offered")
    elementwise_kernels: ElementwiseKernels | None = f(
        default=None, doc="optional table of the rates the stack's elementwise kernels reach "
                          "(a fraction of the vector unit's copy rate per kind); absent = "
                          "all at the copy rate")
    elementwise_kernels_megatron: ElementwiseKernels | None = f(
        default=None, doc="optional table of the rates Megatron-Core's own elementwise "
                          "kernels reach, run in place of [elementwise_kernels] when a run "
                          "asks for elementwise_kernels 'megatron' (sim/run/stack.py); "
                          "absent = not offered")
    collectives: CollectiveLibrary | None = f(
        default=None, doc="optional collective library table (algorithms, protocols: "
                          "latency and bus-bandwidth efficiency); absent = one protocol at "
                          "the links' sustained bandwidth")
    tp_overlap: TpOverlap | None = f(default=None,
                                     doc="optional tensor-parallel comm-GEMM overlap table "
                                         "(training); absent = collectives timed where the "
                                         "program puts them")
    comm_kernels: CommKernels | None = f(default=None,
                                         doc="optional table of what the collective "
                                             "library's kernels take from the compute "
                                             "beside them (cores held, DRAM bandwidth); "
                                             "absent = nothing")
    split_accumulator: SplitAccumulator | None = f(
        default=None, doc="optional table of how a split-accumulator GEMM (FP8 training's "
                          "dgrad and wgrad) promotes its partial sums: interval and overlap; "
                          "absent = no cost")

    def _validate(self, source, path):
        supported = self.core.array.dtypes
        if self.default_dtype not in supported:
            fail(source, "default_dtype", self.default_dtype,
                 f"a dtype the array supports ({', '.join(supported)})")
        if self.dram2 is not None and self.dram is None:
            fail(source, "dram2", "[dram2]", "a chip with a [dram] table: the second tier "
                 "holds what the first cannot")
        if self.dram3 is not None:
            if self.dram2 is None:
                fail(source, "dram3", "[dram3]", "a chip with a [dram2] table: the third tier "
                     "holds what the first two cannot")
            elif self.dram3.bytes_per_s > self.dram2.bytes_per_s:
                fail(source, "dram3", f"{self.dram3.bytes_per_s / 1e9:g} GB/s",
                     f"a third tier no faster than the second ({self.dram2.bytes_per_s / 1e9:g} "
                     f"GB/s): the tiers are listed fastest first and filled in that order "
                     f"(swap the [dram2] and [dram3] tables)")
        if self.tp_overlap is not None:
            for name, n in {**self.tp_overlap.cores(),
                            "nccl": self.tp_overlap.nccl_cores}.items():
                if n >= self.tensor_cores:
                    fail(source, f"tp_overlap.{name}_cores", n,
                         f"fewer than the chip's {self.tensor_cores} tensor cores")
        if self.comm_kernels is not None:
            for name in ("ring_nvlink_cores", "ring_network_cores", "p2p_cores_per_peer"):
                n = getattr(self.comm_kernels, name)
                if 2 * n >= self.tensor_cores:
                    fail(source, f"comm_kernels.{name}", n,
                         f"fewer than half the chip's {self.tensor_cores} tensor cores")

    # ---- hashing: once per chip object (chips key the memoised derivations of the engine and
    # mapper, e.g. sim/fabric.py, asked thousands of times per GEMM search); the same fields
    # as __eq__ compares. The cached value stays in this process: string hashes are salted
    # per process, so pickling (sweep workers) drops it.
    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, x.name) for x in fields(self) if x.compare))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    # ---- derived quantities -------------------------------------------------------------
    @property
    def clock_hz(self) -> float:
        return self.clock_ghz * 1e9

    @property
    def arrays(self) -> int:
        """Systolic arrays on the chip."""
        return self.tensor_cores * self.core.arrays

    @property
    def dtypes(self) -> tuple[str, ...]:
        return self.core.array.dtypes

    def supports(self, dtype: str) -> bool:
        return dtype in self.dtypes

    def peak_macs_per_cycle(self, dtype: str) -> float:
        """MACs per cycle of the whole chip in ``dtype`` (0 when unsupported)."""
        return self.arrays * self.core.array.pes * self.core.array.macs_per_pe_per_cycle[dtype]

    @property
    def peak_ops_per_s(self) -> dict[str, float]:
        """Peak ops/s by supported dtype (ops = 2 × MACs)."""
        return {d: 2.0 * self.peak_macs_per_cycle(d) * self.clock_hz for d in self.dtypes}

    @property
    def has_dram(self) -> bool:
        """False for an all-SRAM chip (no ``[dram]`` table)."""
        return self.dram is not None

    def require_dram(self, what: str) -> "Dram":
        """The chip's DRAM, or a ValueError saying that ``what`` needs one."""
        if self.dram is None:
            raise ValueError(f"chip {self.name!r} has no DRAM (an all-SRAM chip: no [dram] "
                             f"table); {what} needs one: the engine cannot time a chip "
                             f"without DRAM yet (docs/program.md, 'All-SRAM chips')")
        return self.dram

    @property
    def dram_bytes_per_s(self) -> float:
        """Peak DRAM bandwidth (0 for a chip without DRAM): the pins, or for a memory tier
        behind a link as the chip's DRAM (``tier2_chip`` of :mod:`diptych.sim.run.placed`)
        the lower of its pins and its links (:attr:`MemoryTier.bytes_per_s`)."""
        if self.dram is None:
            return 0.0
        return getattr(self.dram, "bytes_per_s", self.dram.peak_bytes_per_s)

    @property
    def memory_tiers(self) -> tuple[tuple[str, "MemoryTier"], ...]:
        """The chip's memory tiers beyond the first, fastest first: ``(("dram2", t2),
        ("dram3", t3))`` as far as it has them (empty without ``[dram2]``)."""
        return tuple((n, t) for n, t in (("dram2", self.dram2), ("dram3", self.dram3))
                     if t is not None)

    @property
    def memory_bytes(self) -> int:
        """The largest memory a tensor can live in: DRAM capacity, or for an all-SRAM chip
        its SRAM."""
        return self.dram.capacity_bytes if self.dram is not None else self.sram_bytes

    @property
    def fixed_costs(self) -> Overheads:
        """The ``[overheads]`` table, or all zeros when absent."""
        return self.overheads if self.overheads is not None else Overheads()

    @property
    def residency_policy(self) -> ResidencyPolicy:
        """The ``[residency]`` table, or its defaults when absent."""
        return self.residency if self.residency is not None else ResidencyPolicy()

    @property
    def sram_bytes(self) -> int:
        """All on-chip SRAM: scratchpads plus accumulators of every core, plus the shared buffer."""
        sp = self.core.scratchpad
        shared = self.shared_buffer.capacity_mib if self.shared_buffer else 0.0
        return int((self.tensor_cores * (sp.capacity_mib + sp.accumulator_mib) + shared) * 2**20)

    @property
    def vector_ops_per_s(self) -> float:
        v = self.core.vector
        return self.tensor_cores * v.lanes * v.ops_per_lane_per_cycle * self.clock_hz

    def ridge_ops_per_byte(self, dtype: str) -> float:
        """Roofline ridge point: peak ops/s ÷ peak DRAM bytes/s (inf without DRAM)."""
        bw = self.dram_bytes_per_s
        return self.peak_ops_per_s[dtype] / bw if bw > 0 else float("inf")


def field_names(cls) -> list[str]:
    return [x.name for x in fields(cls)]

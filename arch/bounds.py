"""Physical bounds shared by the chip, cluster and runtime-profile records (issue 22 item 2).

Every rate, bandwidth, latency, energy, area, power and cost field has a lower and an upper
bound derived from what a part of its kind can physically be, each with a one-line reason
(``why``) that messages and the JSON Schema show with the bounds (:func:`~.schema.bound`).
A value below the floor (a link of 1e-300 GB/s) is a typo; inside the engine it became a time
that overflowed int64 (a slower part came out faster), a loop that never ended, or a
negative energy. Where 0 means "none" or "ideal" (no links, no static power, no launch cost)
an explicit 0 stays valid (``zero_ok``); a denormal-scale positive value does not. The floors
are generous (10-1000x below the most extreme real part) so that no real or idealised design
is refused. docs/limits.md, "Physical bounds", lists them; docs/chips.md, "Valid ranges",
gives every field's.

Bounds used by one field only sit with that field (:mod:`.chip`, :mod:`.tables`,
:mod:`.cluster`, :mod:`.runtime`); the classes shared by several are here.
"""

from __future__ import annotations

from .schema import bound

#: Core clock, GHz: 1 MHz (a slow microcontroller) to 10 GHz (above any shipped logic clock).
CLOCK_GHZ = bound(0.001, 10.0, "GHz: 1 MHz is a slow microcontroller, 10 GHz is above any "
                  "shipped logic clock")

#: SRAM capacity, MiB: 1 KiB holds hardly one tile; 1 TiB is 25x a wafer-scale engine's SRAM
#: (~42,000 MiB).
SRAM_MIB_MAX = 2.0**20
SRAM_MIB = bound(0.001, SRAM_MIB_MAX, "MiB: 1 KiB holds hardly one tile, 1 TiB is 25x a "
                 "wafer-scale engine's SRAM")

#: Chip-to-chip (and NIC) bandwidth per link per direction, GB/s: 10 MB/s is below the
#: slowest SerDes lane (~1 Gb/s); 100 TB/s is 100x today's fastest link.
LINK_GB_PER_S = bound(0.01, 1e5, "GB/s: 10 MB/s is below the slowest SerDes lane, ~1 Gb/s; "
                      "100 TB/s is 100x the fastest link")

#: Network latencies, µs: 0.1 ns is less than one cycle of any link (light crosses 3 cm);
#: 10 ms is above any hop or message in a data centre.
LINK_LATENCY_US = bound(1e-4, 1e4, "µs: 0 = ideal; 0.1 ns is under one cycle of any link, "
                        "10 ms above any hop in a data centre")

#: Latency a link adds to a memory access, ns: 1 ns is under a SerDes lane's own pipeline;
#: 100 us is beyond any load/store path (CXL and PCIe add ~0.1-1 us).
LINK_NS = bound(1.0, 1e5, "ns: 0 = ideal; 1 ns is under any SerDes pipeline, 100 us beyond "
                "any load/store path (CXL and PCIe add ~0.1-1 us)", zero=True)

#: Fractions of a bandwidth a protocol sustains: under 1 % is a broken setup, not a part.
BUS_EFFICIENCY = bound(0.01, 1.0, "fraction: under 1 % is a broken setup, not a part; at "
                       "most the raw bandwidth")

#: Energy per op (a MAC, a vector op), pJ: 0.1 fJ is below the switching energy of any real
#: op (an int4 MAC at 3 nm is ~10 fJ); 1 nJ is 250x a 45 nm fp32 MAC (~4 pJ).
PJ_PER_MAC_MAX = 1000.0
PJ_PER_OP = bound(1e-4, PJ_PER_MAC_MAX, "pJ: 0 = not modelled; 0.1 fJ is below any CMOS op, "
                  "an int4 MAC at 3 nm takes ~10 fJ; 1 nJ is 250x a 45 nm fp32 MAC", zero=True)

#: Energy per bit moved off chip (DRAM, SerDes, D2D), pJ: 0.01 pJ/bit is 25x below the most
#: efficient die-to-die links (UCIe-A ~0.25) and 300x below HBM (~3-4 pJ/bit).
PJ_PER_IO_BIT = bound(0.01, 1000.0, "pJ: 0 = not modelled; 0.01 pJ/bit is 25x below the "
                      "best die-to-die link, 300x below HBM")

#: Areas of fixed blocks, mm²: 0.001 mm² (1,000 µm²) is below any functional block;
#: 100,000 mm² is above a 300 mm wafer (~70,000 mm²).
AREA_MM2_MAX = 1e5
AREA_MM2 = bound(0.001, AREA_MM2_MAX, "mm²: 0 = none; 1,000 µm² is below any block, 1e5 mm² "
                 "above a 300 mm wafer")

#: Fixed costs of the software stack (per op, step, collective), µs: 0.1 ns is one cycle at
#: 10 GHz, the fastest clock; 0 = none.
FIXED_US = "µs: 0 = none; 0.1 ns is one cycle at 10 GHz, the fastest clock"

#: Host costs of a serving runtime, µs: 1 ns is a few host instructions; 0 = none.
HOST_US = "µs: 0 = none; 1 ns is a few host instructions"

#: DRAM core timings (tRCD, tCL, tRP, tRAS, tRFC), ns: no DRAM array senses, restores or
#: precharges a row in under 100 ps (every generation since SDR takes ~10-20 ns).
DRAM_T_MIN_NS = 0.1
DRAM_T_WHY = ("ns: no DRAM array senses or precharges a row in under 0.1 ns; every part "
              "since SDR takes ~10-20 ns")

#: Largest share of tREFI the refresh blackout (tRFC + tRCD + tCL) may take: real parts lose
#: 2-15 %; at 100 % no data moves at all and the DRAM model's refresh walk never ends.
REFRESH_MAX_FRACTION = 0.5

"""The slow burst-level DRAM reference: bank state machines, one request at a time.

Every transfer is cut into bursts in address order (same address mapping as
:mod:`diptych.sim.dram`). Each pseudo-channel serves its bursts first-come first-served with an
open-page policy:

* a burst to a bank whose open row differs needs PRECHARGE (no earlier than ``tRAS`` after that
  bank's activation and after its last data) and ``tRP`` later an ACTIVATE; a closed bank needs
  only the ACTIVATE;
* ACTIVATEs respect the four-activate window (``tFAW``) and may be issued at most
  :data:`~diptych.sim.dram.LOOKAHEAD_BURSTS` bursts ahead of the data bus;
* data starts ``tRCD`` after the ACTIVATE plus ``tCL``, after the previous burst's data, and
  after a read/write turnaround (``tWTR`` after a write, ``tRTW`` after a read);
* all-bank refresh at every ``k·tREFI`` (k ≥ 1): no data may overlap ``[k·tREFI, k·tREFI +
  tRFC)``, every row closes, and the next burst must re-activate.

It is deliberately simple and slow (pure Python); the fast analytic model is tested against it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .dram import LOOKAHEAD_BURSTS, DramTiming


@dataclass(frozen=True)
class Transfer:
    """A 2-D DMA transfer: ``rows`` rows of ``row_bytes`` bytes, ``stride`` bytes apart."""

    start_ns: float
    addr: int
    rows: int
    row_bytes: int
    stride: int
    write: bool = False


def bursts_of(t: DramTiming, tr: Transfer):
    """Yield ``(pseudo_channel, bank, row)`` for every burst of a transfer, in address order."""
    il, p_n, page, burst = t.interleave_bytes, t.pseudo_channels, t.page_bytes, t.burst_bytes
    for r in range(tr.rows):
        a = tr.addr + r * tr.stride
        end = a + tr.row_bytes
        while a < end:
            c, off = divmod(a, il)
            pc = c % p_n
            local = (c // p_n) * il + off
            b0 = local - local % burst
            g = b0 // page
            yield pc, g % t.banks, g // t.banks
            step = min(burst - local % burst, end - a, il - off)
            a += step


class _Bank:
    def __init__(self):
        self.open_row = -1
        self.act_ns = -1e18
        self.last_data_ns = -1e18


class _Channel:
    def __init__(self, t: DramTiming):
        self.t = t
        self.banks = [_Bank() for _ in range(t.banks)]
        self.bus_free = 0.0
        self.last_write = None
        self.acts = deque(maxlen=4)
        self.data_starts = deque(maxlen=LOOKAHEAD_BURSTS)
        self.next_refresh = t.t_refi_ns

    def _activate(self, bank: _Bank, row: int, earliest: float) -> float:
        t = self.t
        act = earliest
        if len(self.data_starts) == LOOKAHEAD_BURSTS:
            act = max(act, self.data_starts[0])
        if bank.open_row != -1:
            pre = max(act, bank.act_ns + t.t_ras_ns, bank.last_data_ns)
            act = pre + t.t_rp_ns
        if len(self.acts) == 4:
            act = max(act, self.acts[0] + t.t_faw_ns)
        bank.open_row, bank.act_ns = row, act
        self.acts.append(act)
        return act

    def serve(self, bank_id: int, row: int, write: bool, arrival: float) -> float:
        """Serve one burst; returns the end of its data transfer (ns)."""
        t = self.t
        bank = self.banks[bank_id]
        while True:
            if bank.open_row != row:
                act = self._activate(bank, row, arrival)
                ready = act + t.t_rcd_ns + t.t_cl_ns
            else:
                ready = max(arrival + t.t_cl_ns, bank.act_ns + t.t_rcd_ns + t.t_cl_ns)
            turn = 0.0
            if self.last_write is not None and self.last_write != write:
                turn = t.t_wtr_ns if self.last_write else t.t_rtw_ns
            start = max(ready, self.bus_free + turn)
            if start + t.t_burst_ns > self.next_refresh:
                # refresh first: every row closes; the burst re-activates after tRFC
                ref_end = self.next_refresh + t.t_rfc_ns
                for b in self.banks:
                    b.open_row = -1
                self.acts.clear()
                self.bus_free = max(self.bus_free, ref_end)
                arrival = max(arrival, ref_end)
                self.next_refresh += t.t_refi_ns
                continue
            end = start + t.t_burst_ns
            self.bus_free = end
            self.last_write = write
            bank.last_data_ns = end
            self.data_starts.append(start)
            return end


class ReferenceDram:
    """Burst-level reference; ``run`` returns each transfer's finish time (ns)."""

    def __init__(self, dram):
        self.timing = DramTiming.from_dram(dram)
        self.channels = [_Channel(self.timing) for _ in range(self.timing.pseudo_channels)]

    def run(self, transfers: list[Transfer]) -> list[float]:
        finish = []
        for tr in transfers:
            done = tr.start_ns
            for pc, bank, row in bursts_of(self.timing, tr):
                done = max(done, self.channels[pc].serve(bank, row, tr.write, tr.start_ns))
            finish.append(done)
        return finish

"""The request stream: arrival processes, length distributions and CSV traces.

* **Lengths** (:func:`parse_length`): ``N`` or ``fixed:N``; ``uniform:lo=A,hi=B`` (integers,
  both inclusive); ``normal:mean=M,std=S``; ``lognormal:mean=M,sigma=S`` (``mean`` is the mean
  of the lengths, ``sigma`` the standard deviation of their logarithm, so
  ``mu = ln(mean) − sigma²/2``). Draws are rounded to integers and clipped below at 1.
* **Open-loop arrivals** (:func:`open_loop_arrivals`): Poisson at ``rate`` requests/s, or
  gamma-distributed gaps with shape ``burstiness`` and the same mean (vLLM's
  ``benchmark_serving.py --burstiness``: 1 is Poisson, below 1 burstier, above 1 more regular).
* **Closed loop**: ``concurrency`` clients, each sending its next request the moment its
  previous one completes (the event loop creates those arrivals).
* **Traces** (:func:`load_trace`): a CSV with the header ``arrival_s,prompt_tokens,
  output_tokens`` and optionally ``prefix_id`` (the shared prefix a request carries: an
  integer >= 0, or empty or -1 for none; ``serve --prefixes`` caches them); rows are sorted
  by arrival; errors name ``file:line``.
* :class:`Load` says which of these arrive and how many; :func:`draw_requests` draws them.

Everything random draws from one ``numpy.random.Generator`` seeded by the user's seed, in a
fixed order (gaps, then prompts, then outputs), so a seed gives one stream.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...arch.schema import check_columns, echo, read_text_file
from ..limits import BURSTINESS_RANGE, MAX_ARRIVAL_S, MAX_REQUESTS, MAX_TOKENS, QPS_RANGE

LENGTH_KINDS = ("fixed", "uniform", "normal", "lognormal")
_PARAMS = {"fixed": ("value",), "uniform": ("lo", "hi"), "normal": ("mean", "std"),
           "lognormal": ("mean", "sigma")}


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts (see the module docstring)."""

    kind: str
    a: float
    b: float = 0.0

    def __post_init__(self):
        if self.kind not in LENGTH_KINDS:
            raise ValueError(f"length distribution must be one of {', '.join(LENGTH_KINDS)}, "
                             f"not {self.kind!r}")

    @property
    def mean(self) -> float:
        if self.kind == "uniform":
            return (self.a + self.b) / 2.0
        return self.a

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` integer lengths >= 1."""
        if self.kind == "fixed":
            x = np.full(n, self.a)
        elif self.kind == "uniform":
            x = rng.integers(int(self.a), int(self.b) + 1, size=n)
        elif self.kind == "normal":
            x = rng.normal(self.a, self.b, size=n)
        else:
            mu = math.log(self.a) - self.b ** 2 / 2.0
            x = rng.lognormal(mu, self.b, size=n)
        return np.maximum(1, np.rint(x)).astype(np.int64)

    def describe(self) -> str:
        names = _PARAMS[self.kind]
        vals = (self.a, self.b)[:len(names)]
        if self.kind == "fixed":
            return f"{int(self.a)}"
        return f"{self.kind}:" + ",".join(f"{k}={v:g}" for k, v in zip(names, vals))


def parse_length(text: str, what: str = "length") -> LengthDist:
    """Parse ``1000``, ``fixed:1000``, ``uniform:lo=100,hi=2000``, ``normal:mean=..,std=..``
    or ``lognormal:mean=..,sigma=..``; ``what`` names the option in messages."""
    s = str(text).strip()
    head, colon, rest = s.partition(":")
    kind = head.strip().lower()
    forms = "N, " + ", ".join(k + ":..." for k in LENGTH_KINDS)
    if not colon:
        try:
            float(head)
        except ValueError:
            raise ValueError(f"{what} must be one of {forms}, not {text!r}") from None
        return LengthDist("fixed", _positive(what, "value", head, integer=True))
    if kind not in LENGTH_KINDS:
        raise ValueError(f"{what} must be one of {forms}, not {text!r}")
    if kind == "fixed":
        val = rest.split("=", 1)[-1]
        return LengthDist("fixed", _positive(what, "value", val, integer=True))
    params: dict[str, str] = {}
    for part in rest.split(","):
        k, eq, v = part.partition("=")
        if not eq:
            raise ValueError(f"{what}: expected key=value in {text!r}, not {part!r}")
        params[k.strip().lower()] = v.strip()
    want = _PARAMS[kind]
    if set(params) != set(want):
        raise ValueError(f"{what}: {kind} takes exactly {', '.join(want)}, not "
                         f"{', '.join(sorted(params)) or 'nothing'} (in {text!r})")
    if kind == "uniform":
        lo = _positive(what, "lo", params["lo"], integer=True)
        hi = _positive(what, "hi", params["hi"], integer=True)
        if hi < lo:
            raise ValueError(f"{what}: uniform hi ({hi:g}) must be >= lo ({lo:g})")
        return LengthDist("uniform", lo, hi)
    if kind == "normal":
        return LengthDist("normal", _positive(what, "mean", params["mean"]),
                          _nonneg(what, "std", params["std"]))
    return LengthDist("lognormal", _positive(what, "mean", params["mean"]),
                      _nonneg(what, "sigma", params["sigma"]))


def _number(what: str, key: str, v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise ValueError(f"{what}: {key} must be a number, not {v!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{what}: {key} must be finite, not {v!r}")
    return x


def _positive(what: str, key: str, v: str, integer: bool = False) -> float:
    x = _number(what, key, v)
    if x <= 0 or (integer and x != int(x)):
        raise ValueError(f"{what}: {key} must be a positive {'integer' if integer else 'number'}"
                         f", not {v!r}")
    return x


def _nonneg(what: str, key: str, v: str) -> float:
    x = _number(what, key, v)
    if x < 0:
        raise ValueError(f"{what}: {key} must be >= 0, not {v!r}")
    return x


def check_rate(name: str, v) -> float:
    """A rate (requests/s) within :data:`~diptych.sim.limits.QPS_RANGE`, or ValueError naming
    ``name`` and the value."""
    lo, hi = QPS_RANGE
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive number of requests per second, not {v!r}")
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be between {lo:g} and {hi:g} requests per second "
                         f"(sim/limits.py), not {v:g}")
    return float(v)


def check_burstiness(v) -> float:
    """A burstiness (the gaps' gamma shape) within
    :data:`~diptych.sim.limits.BURSTINESS_RANGE`, or ValueError naming the value."""
    lo, hi = BURSTINESS_RANGE
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
            or not lo <= v <= hi):
        raise ValueError(f"burstiness must be a number from {lo:g} to {hi:g} (the gaps' gamma "
                         f"shape; 1 = Poisson; sim/limits.py), not {v!r}")
    return float(v)


def check_request_count(n: int | float, what: str) -> None:
    """ValueError stating :data:`~diptych.sim.limits.MAX_REQUESTS` if ``n`` requests (``what``
    says where the number comes from) are more than a run simulates."""
    if n > MAX_REQUESTS:
        raise ValueError(f"{what}: {n:,.0f} requests, more than the {MAX_REQUESTS:,} a serving "
                         f"run simulates (sim/limits.py; ~75 requests per second of wall "
                         f"time): lower --requests, --duration or the rate")


def check_arrivals(arrival_s: np.ndarray, what: str) -> None:
    """ValueError if an arrival is later than :data:`~diptych.sim.limits.MAX_ARRIVAL_S`."""
    if len(arrival_s) and np.nanmax(arrival_s) > MAX_ARRIVAL_S:
        raise ValueError(f"{what}: an arrival at {float(np.nanmax(arrival_s)):.3g} s, later "
                         f"than the {MAX_ARRIVAL_S:g} s a serving run's clock resolves "
                         f"(sim/limits.py): raise the rate or lower --requests")


def open_loop_arrivals(rng: np.random.Generator, rate: float, *, count: int | None = None,
                       duration_s: float | None = None, burstiness: float = 1.0) -> np.ndarray:
    """Arrival times (s, from 0) of a Poisson (``burstiness`` 1) or gamma process of mean
    ``rate`` per second: ``count`` arrivals, or all before ``duration_s`` (the fewer of the
    two when both are given). The first request arrives after one gap."""
    check_rate("qps", rate)
    check_burstiness(burstiness)
    if count is None and duration_s is None:
        raise ValueError("give a request count or a duration")
    if count is None:
        check_request_count(rate * duration_s, f"--qps {rate:g} over --duration "
                                               f"{duration_s:g} s")
    n = count if count is not None else max(16, int(rate * duration_s * 1.2) + 16)
    out = []
    t0 = 0.0
    while True:
        if burstiness == 1.0:
            gaps = rng.exponential(1.0 / rate, size=n)
        else:
            gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
        t = t0 + np.cumsum(gaps)
        out.append(t)
        if count is not None or t[-1] >= duration_s:
            break
        t0 = float(t[-1])
    times = np.concatenate(out)
    if count is not None:
        times = times[:count]
    if duration_s is not None:
        times = times[times < duration_s]
    check_arrivals(times, f"--qps {rate:g}")
    return times


@dataclass(frozen=True)
class Trace:
    """Requests from a CSV file: arrival times (s) and token counts, sorted by arrival."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str
    #: each request's prefix id (−1: none), or None for a trace without the column
    prefix_id: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)


TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
#: An optional column: the shared prefix a request carries (module docstring).
PREFIX_COLUMN = "prefix_id"
#: The largest prefix id a trace may name (ids key the prefix cache; ``--prefixes`` above).
MAX_PREFIX_ID = 1_000_000


def _prefix_id(path, line: int, v: str) -> int:
    """One row's ``prefix_id``: −1 for empty or −1, else an integer 0..MAX_PREFIX_ID."""
    if v in ("", "-1"):
        return -1
    try:
        k = int(v)
    except ValueError:
        k = None
    if k is None or not 0 <= k <= MAX_PREFIX_ID:
        raise ValueError(f"{path}:{line}: {PREFIX_COLUMN} must be an integer from 0 to "
                         f"{MAX_PREFIX_ID:,}, or empty or -1 for none, not {echo(v)}")
    return k


def load_trace(path: str | Path) -> Trace:
    """Read a request trace (module docstring); ValueError with ``file:line`` on bad rows.

    Read through the checked reader (:func:`~diptych.arch.schema.read_text_file`: a regular
    file of at most 64 MiB, UTF-8); a field over csv's 128 KiB, a duplicate column, an
    arrival past :data:`~diptych.sim.limits.MAX_ARRIVAL_S` or a token count past
    :data:`~diptych.sim.limits.MAX_TOKENS` is refused naming the file and line."""
    path = Path(path)
    text = read_text_file(path, "the trace", error=ValueError)
    arr, pr, out, pid = [], [], [], []
    pcol = None
    rd = csv.reader(text.splitlines())
    header = None
    while True:
        try:
            row = next(rd)
        except StopIteration:
            break
        except csv.Error as exc:   # a field over csv.field_size_limit(), a NUL byte ...
            raise ValueError(f"{path}:{rd.line_num}: invalid CSV ({exc})") from None
        line = rd.line_num
        if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [c.strip().lower() for c in row]
            check_columns(path, line, header, error=ValueError)
            missing = [c for c in TRACE_COLUMNS if c not in header]
            if missing:
                raise ValueError(f"{path}:{line}: the header must name the columns "
                                 f"{','.join(TRACE_COLUMNS)}; missing {', '.join(missing)}"
                                 f" (got {echo(','.join(header))})")
            idx = [header.index(c) for c in TRACE_COLUMNS]
            pcol = header.index(PREFIX_COLUMN) if PREFIX_COLUMN in header else None
            continue
        if len(row) != len(header):
            raise ValueError(f"{path}:{line}: expected {len(header)} fields, got {len(row)}")
        vals = [row[i].strip() for i in idx]
        try:
            t = float(vals[0])
        except ValueError:
            raise ValueError(f"{path}:{line}: arrival_s must be a number, not "
                             f"{echo(vals[0])}") from None
        if not math.isfinite(t) or t < 0 or t > MAX_ARRIVAL_S:
            raise ValueError(f"{path}:{line}: arrival_s must be a number from 0 to "
                             f"{MAX_ARRIVAL_S:g} s (sim/limits.py), not {echo(vals[0])}")
        ints = []
        for name, v in zip(TRACE_COLUMNS[1:], vals[1:]):
            try:
                k = int(v)
            except ValueError:
                raise ValueError(f"{path}:{line}: {name} must be a positive integer, not "
                                 f"{echo(v)}") from None
            if not 1 <= k <= MAX_TOKENS:
                raise ValueError(f"{path}:{line}: {name} must be an integer from 1 to "
                                 f"{MAX_TOKENS:,} (sim/limits.py), not {echo(v)}")
            ints.append(k)
        arr.append(t)
        pr.append(ints[0])
        out.append(ints[1])
        if pcol is not None:
            pid.append(_prefix_id(path, line, row[pcol].strip()))
    if header is None or not arr:
        raise ValueError(f"{path}: the trace holds no requests (expected a header "
                         f"{','.join(TRACE_COLUMNS)} and at least one row)")
    order = np.argsort(np.asarray(arr), kind="stable")
    return Trace(np.asarray(arr)[order], np.asarray(pr, dtype=np.int64)[order],
                 np.asarray(out, dtype=np.int64)[order], str(path),
                 np.asarray(pid, dtype=np.int64)[order] if pcol is not None else None)


#: Requests when neither a count nor a duration is given.
DEFAULT_REQUESTS = 1000


@dataclass(frozen=True)
class Load:
    """The request stream: exactly one of ``qps`` (open loop; ``burstiness`` 1 = Poisson),
    ``concurrency`` (closed loop) or ``trace`` (a CSV path); lengths from ``prompt`` and
    ``gen`` (ignored with a trace); ``requests`` and/or ``duration_s`` bound it (default
    1000 requests, or the whole trace)."""

    qps: float | None = None
    concurrency: int | None = None
    trace: str | None = None
    prompt: LengthDist = LengthDist("fixed", 1000)
    gen: LengthDist = LengthDist("fixed", 200)
    requests: int | None = None
    duration_s: float | None = None
    burstiness: float = 1.0

    def __post_init__(self):
        given = [n for n in ("qps", "concurrency", "trace") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of --qps, --concurrency or --trace"
                             + (f" (got {', '.join('--' + g for g in given)})" if given else ""))
        if self.qps is not None:
            check_rate("qps", self.qps)
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or not
                                             isinstance(self.concurrency, int)
                                             or self.concurrency < 1):
            raise ValueError(f"concurrency must be a positive integer, not "
                             f"{self.concurrency!r}")
        if self.concurrency is not None and self.concurrency > MAX_REQUESTS:
            raise ValueError(f"concurrency must be at most {MAX_REQUESTS:,} clients "
                             f"(sim/limits.py), not {self.concurrency:,}")
        if self.requests is not None and (isinstance(self.requests, bool) or not
                                          isinstance(self.requests, int) or self.requests < 1):
            raise ValueError(f"requests must be a positive integer, not {self.requests!r}")
        if self.requests is not None and self.requests > MAX_REQUESTS:
            raise ValueError(f"requests must be at most {MAX_REQUESTS:,} (sim/limits.py), "
                             f"not {self.requests:,}")
        if self.duration_s is not None and (isinstance(self.duration_s, bool)
                                            or not isinstance(self.duration_s, (int, float))
                                            or not math.isfinite(self.duration_s)
                                            or self.duration_s <= 0):
            raise ValueError(f"duration must be a positive number of seconds, not "
                             f"{self.duration_s!r}")
        if self.duration_s is not None and self.duration_s > MAX_ARRIVAL_S:
            raise ValueError(f"duration must be at most {MAX_ARRIVAL_S:g} s (sim/limits.py), "
                             f"not {self.duration_s:g}")
        check_burstiness(self.burstiness)
        if self.requests is None and self.concurrency is not None:
            check_request_count(max(16, 64 * self.concurrency),
                                f"--concurrency {self.concurrency} (64 requests per client "
                                f"unless --requests says otherwise)")
        if self.requests is None and self.qps is not None and self.duration_s is not None:
            check_request_count(self.qps * self.duration_s,
                                f"--qps {self.qps:g} over --duration {self.duration_s:g} s")

    def describe(self) -> str:
        if self.qps is not None:
            kind = "Poisson" if self.burstiness == 1 else f"gamma (burstiness {self.burstiness:g})"
            src = f"{self.qps:g} req/s {kind}"
        elif self.concurrency is not None:
            src = f"{self.concurrency} concurrent clients"
        else:
            return f"trace {self.trace}"
        return f"{src}, prompt {self.prompt.describe()}, output {self.gen.describe()}"


def draw_requests(load: Load, ctx_limit: int, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Arrival times (NaN for closed-loop requests), prompt and output lengths; ``info``
    carries a trace's prefix ids under ``"prefix_id"`` (an array: the caller takes it out)."""
    info: dict = {}
    if load.trace is not None:
        tr = load_trace(load.trace)
        arr, pr, out = tr.arrival_s, tr.prompt_tokens, tr.output_tokens
        keep = np.ones(len(arr), dtype=bool)
        if load.duration_s is not None:
            keep &= arr < load.duration_s
        arr, pr, out = arr[keep], pr[keep], out[keep]
        pid = tr.prefix_id[keep] if tr.prefix_id is not None else None
        if load.requests is not None:
            arr, pr, out = arr[:load.requests], pr[:load.requests], out[:load.requests]
            pid = pid[:load.requests] if pid is not None else None
        if pid is not None:
            info["prefix_id"] = pid
        check_request_count(len(arr), f"{load.trace}")   # (load_trace bounds each arrival)
        if len(arr) == 0:
            raise ValueError(f"{load.trace}: no request arrives within --duration "
                             f"{load.duration_s:g} s")
        bad = np.nonzero(pr + out > ctx_limit)[0]
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{load.trace}: request {i + 1} has {int(pr[i])} prompt + "
                             f"{int(out[i])} output tokens, more than the model's context of "
                             f"{ctx_limit} tokens")
        return arr.astype(float), pr.astype(np.int64), out.astype(np.int64), info
    count = load.requests
    if count is None and load.duration_s is None:
        count = DEFAULT_REQUESTS
    if load.qps is not None:
        arr = open_loop_arrivals(rng, load.qps, count=count, duration_s=load.duration_s,
                                 burstiness=load.burstiness)
        n = len(arr)
        if n == 0:
            raise ValueError(f"no request arrives within --duration {load.duration_s:g} s at "
                             f"--qps {load.qps:g}")
    else:
        n = count if count is not None else max(16, 64 * load.concurrency)
        arr = np.full(n, np.nan)
    for d, what in ((load.prompt, "prompt"), (load.gen, "output")):
        if d.kind in ("fixed", "uniform") and (d.b if d.kind == "uniform" else d.a) >= ctx_limit:
            raise ValueError(f"--{'prompt' if what == 'prompt' else 'gen'} of "
                             f"{int(d.b if d.kind == 'uniform' else d.a)} {what} tokens does "
                             f"not fit the model's context of {ctx_limit} tokens")
    pr = load.prompt.sample(rng, n)
    out = load.gen.sample(rng, n)
    if load.prompt.kind == "fixed" and load.gen.kind == "fixed" and pr[0] + out[0] > ctx_limit:
        raise ValueError(f"a prompt of {int(pr[0])} tokens plus {int(out[0])} output tokens "
                         f"exceeds the model's context of {ctx_limit} tokens")
    pr_c = np.minimum(pr, ctx_limit - 1)
    out_c = np.minimum(out, ctx_limit - pr_c)
    clipped = int(np.count_nonzero((pr_c != pr) | (out_c != out)))
    if clipped:
        info["clipped_to_context"] = clipped
    return arr, pr_c, out_c, info

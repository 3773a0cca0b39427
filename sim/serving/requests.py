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
  output_tokens``; rows are sorted by arrival; errors name ``file:line``.

Everything random draws from one ``numpy.random.Generator`` seeded by the user's seed, in a
fixed order (gaps, then prompts, then outputs), so a seed gives one stream.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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
    """A positive finite rate (requests/s), or ValueError naming ``name`` and the value."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive number of requests per second, not {v!r}")
    return float(v)


def open_loop_arrivals(rng: np.random.Generator, rate: float, *, count: int | None = None,
                       duration_s: float | None = None, burstiness: float = 1.0) -> np.ndarray:
    """Arrival times (s, from 0) of a Poisson (``burstiness`` 1) or gamma process of mean
    ``rate`` per second: ``count`` arrivals, or all before ``duration_s`` (the fewer of the
    two when both are given). The first request arrives after one gap."""
    check_rate("qps", rate)
    if not burstiness > 0 or not math.isfinite(burstiness):
        raise ValueError(f"burstiness must be a positive number, not {burstiness!r}")
    if count is None and duration_s is None:
        raise ValueError("give a request count or a duration")
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
    return times


@dataclass(frozen=True)
class Trace:
    """Requests from a CSV file: arrival times (s) and token counts, sorted by arrival."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str

    def __len__(self) -> int:
        return len(self.arrival_s)


TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


def load_trace(path: str | Path) -> Trace:
    """Read a request trace (module docstring); ValueError with ``file:line`` on bad rows."""
    path = Path(path)
    try:
        fh = open(path, newline="")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
    arr, pr, out = [], [], []
    with fh:
        rd = csv.reader(fh)
        header = None
        for row in rd:
            line = rd.line_num
            if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [c.strip().lower() for c in row]
                missing = [c for c in TRACE_COLUMNS if c not in header]
                if missing:
                    raise ValueError(f"{path}:{line}: the header must name the columns "
                                     f"{','.join(TRACE_COLUMNS)}; missing {', '.join(missing)}"
                                     f" (got {','.join(header)})")
                idx = [header.index(c) for c in TRACE_COLUMNS]
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}:{line}: expected {len(header)} fields, got {len(row)}")
            vals = [row[i].strip() for i in idx]
            try:
                t = float(vals[0])
            except ValueError:
                raise ValueError(f"{path}:{line}: arrival_s must be a number, not "
                                 f"{vals[0]!r}") from None
            if not math.isfinite(t) or t < 0:
                raise ValueError(f"{path}:{line}: arrival_s must be a finite number >= 0, not "
                                 f"{vals[0]!r}")
            ints = []
            for name, v in zip(TRACE_COLUMNS[1:], vals[1:]):
                try:
                    k = int(v)
                except ValueError:
                    raise ValueError(f"{path}:{line}: {name} must be a positive integer, not "
                                     f"{v!r}") from None
                if k < 1:
                    raise ValueError(f"{path}:{line}: {name} must be a positive integer, not "
                                     f"{v!r}")
                ints.append(k)
            arr.append(t)
            pr.append(ints[0])
            out.append(ints[1])
    if header is None or not arr:
        raise ValueError(f"{path}: the trace holds no requests (expected a header "
                         f"{','.join(TRACE_COLUMNS)} and at least one row)")
    order = np.argsort(np.asarray(arr), kind="stable")
    return Trace(np.asarray(arr)[order], np.asarray(pr, dtype=np.int64)[order],
                 np.asarray(out, dtype=np.int64)[order], str(path))

"""The serving runtime's host costs: what the CPU side of a serving stack adds to the chip's
step times and to every request's latency. docs/serving.md, "Runtime host costs".

A :class:`RuntimeProfile` holds, with units in the field names:

* per step: host work of ``step_host_fixed_us`` + ``step_host_per_seq_us`` per sequence in
  the step (sampling bookkeeping, stop checks, detokenisation, building the responses) +
  ``step_host_device_fraction`` × the step's device time (how some sources state it: host
  time as a share of the iteration). With ``overlap`` false (a synchronous loop: the host
  processes step n's outputs and schedules step n+1 while the device idles) a step takes
  device + host; with ``overlap`` true (an overlap / async scheduler: the host work of step
  n runs while the device runs step n+1) it takes max(device, host); either way
  ``step_exposed_us`` more (what an overlapped loop still leaves the device waiting for:
  input preparation, graph-replay set-up).
* per request: ``request_in_us`` + ``tokenize_us_per_token`` per prompt token from the
  request's arrival at the server to its being schedulable (HTTP/gRPC, validation, chat
  template, tokenisation) and ``token_out_us`` from a token's sampling to the client's
  receiving it (detokenisation, the response path). They delay the request, not the engine;
  the client-visible TTFT and end-to-end latency include both, the gaps between tokens (ITL,
  TPOT) neither.
* the tensor-parallel all-reduce: ``all_reduce`` "nccl" (NCCL's kernels, the chip's
  ``[collectives]``), or the engine's own custom kernels where its source takes them ("vllm",
  "trtllm": :mod:`diptych.arch.engine_allreduce`), on the device, not the host.
* scheduling: ``chunked_prefill`` as the named engine schedules prompts (true: mixed into
  decode steps, vLLM V1; false: whole prompts in steps of their own while the decodes wait,
  vLLM V0's default); unset, the run's own setting. ``split_prompts`` (with
  ``chunked_prefill``): true, a prompt may be split across steps to fill the token budget
  (vLLM V1, TensorRT-LLM with ``enable_chunked_context``); false, a prompt joins a decode
  step only whole, and waits when it does not fit (TensorRT-LLM's in-flight batching without
  context chunking); unset, split.
* KV admission: ``kv_admission`` "on-demand" (a request's KV blocks are allocated as its
  tokens are written; when a running sequence needs a block and none is free, one is
  preempted: vLLM) or "reserve" (a request is admitted only when the blocks of its whole
  prompt + output fit beside what every running request may still claim, and nothing is ever
  preempted: TensorRT-LLM's ``GUARANTEED_NO_EVICT`` capacity scheduler); unset, on demand.
* the engine's sampler: ``sampler`` "none", or the kernels the named engine runs over each
  step's logits after its LM head ("trtllm": an FP32 cast, a penalty pass, a softmax and a
  top-k stage over the whole vocabulary; :mod:`diptych.arch.sampler`), on the device like
  ``all_reduce``.
* KV memory: ``kv_sizing`` "capacity" (the cache is the chip's capacity less weights,
  activations, the engine's buffers and ``kv_reserve_fraction`` of the capacity: vLLM's
  ``gpu_memory_utilization``) or "free" (``1 − kv_reserve_fraction`` of what is free once the
  engine has loaded: TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction``); either way
  ``process_gib`` per chip first, the memory the engine's process holds beyond what diptych
  lists (CUDA's context and libraries, what the driver never reports).
* batch size: ``batch_size_tuning`` true caps the batch at what TensorRT-LLM's dynamic
  batch-size tuner picks for the KV capacity at the requests' mean lengths (a table of sizes;
  ``trtllm-bench`` turns it on: :mod:`diptych.sim.serving.batch_tuning`); false, the run's
  ``max_batch``.

Profiles ship as TOML files in ``arch/runtimes/`` (each number with its source);
``ideal`` is all zeros: the chip alone, every number as without a runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from importlib import resources
from pathlib import Path

from .bounds import HOST_US
from .engine_allreduce import ENGINE_ALL_REDUCES
from .sampler import DEFAULT_SAMPLER, SAMPLERS
from .schema import ConfigError, bound, build, f, read_config_file

DEFAULT_RUNTIME = "ideal"
#: How a serving engine admits requests into its KV cache (module docstring).
KV_ADMISSIONS = ("on-demand", "reserve")
#: How a serving engine sizes its KV cache from the chip's memory (module docstring).
KV_SIZINGS = ("capacity", "free")
#: The fields that charge host time (per step or per request); every other field is the
#: engine's device work, memory or scheduling.
HOST_FIELDS = ("step_host_fixed_us", "step_host_per_seq_us", "step_host_device_fraction",
               "step_exposed_us", "request_in_us", "tokenize_us_per_token", "token_out_us")


@dataclass(frozen=True)
class RuntimeProfile:
    """A serving runtime's host costs (module docstring for the model)."""

    name: str = f(doc="profile name")
    description: str = f(default="", doc="one-line description")
    step_host_fixed_us: float = f(default=0.0, doc="host time per step, in microseconds",
                                  **bound(0.001, 1e6, HOST_US, zero=True))
    step_host_per_seq_us: float = f(default=0.0,
                                    doc="host time per sequence in a step, in microseconds",
                                    **bound(0.001, 1e4, HOST_US, zero=True))
    step_host_device_fraction: float = f(default=0.0,
                                         doc="host time per step as a fraction of the step's "
                                             "device time",
                                         **bound(1e-4, 10.0, "fraction: 0 = none; 0.01 % is "
                                                 "below any measured host share, 10x the "
                                                 "device time above any", zero=True))
    overlap: bool = f(default=False,
                      doc="true: host work overlaps the next device step (a step takes "
                          "max(device, host)); false: it does not (device + host)")
    step_exposed_us: float = f(default=0.0,
                               doc="host time per step the device waits for even when host "
                                   "work overlaps it, in microseconds",
                               **bound(0.001, 1e6, HOST_US, zero=True))
    request_in_us: float = f(default=0.0,
                             doc="arrival at the server -> schedulable, in microseconds",
                             **bound(0.001, 1e7, HOST_US, zero=True))
    tokenize_us_per_token: float = f(default=0.0,
                                     doc="prompt tokenisation on the request path, "
                                         "microseconds per prompt token",
                                     **bound(0.001, 1e4, HOST_US, zero=True))
    token_out_us: float = f(default=0.0,
                            doc="token sampled -> received by the client, in microseconds",
                            **bound(0.001, 1e6, HOST_US, zero=True))
    all_reduce: str = f(default="nccl", choices=ENGINE_ALL_REDUCES,
                        doc="the engine's tensor-parallel all-reduce: nccl, or its own "
                            "custom kernels below their size limits (vllm, trtllm)")
    chunked_prefill: bool | None = f(default=None,
                                     doc="true: prompts mixed into decode steps (split to "
                                         "fill the budget unless split_prompts is false); "
                                         "false: whole prompts in steps of their own (prefill "
                                         "first); unset: the run's setting")
    split_prompts: bool | None = f(default=None,
                                   doc="with chunked_prefill: true, a prompt may be split "
                                       "across steps; false, it joins a decode step only "
                                       "whole; unset: split")
    kv_admission: str | None = f(default=None, choices=KV_ADMISSIONS,
                                 doc="on-demand: KV blocks allocated as tokens are written, a "
                                     "shortage preempts; reserve: a request admitted only "
                                     "when its whole prompt + output fits, never preempted; "
                                     "unset: on demand")
    sampler: str = f(default=DEFAULT_SAMPLER, choices=tuple(SAMPLERS),
                     doc="the engine's sampling kernels over each step's logits, on the "
                         "device: none, or the named engine's (trtllm)")
    kv_sizing: str = f(default="capacity", choices=KV_SIZINGS,
                       doc="capacity: the cache is what weights, activations and buffers "
                           "leave less kv_reserve_fraction of the capacity; free: "
                           "1 - kv_reserve_fraction of what is free after the engine loads")
    process_gib: float = f(default=0.0,
                           doc="memory per chip the engine's process holds besides weights, "
                               "activations and its buffers (CUDA context, libraries, what "
                               "the driver does not report), in GiB",
                           **bound(0.001, 64.0, "GiB: 0 = none; 1 MiB is below any CUDA "
                                   "context, 64 GiB above any chip's runtime", zero=True))
    batch_size_tuning: bool = f(default=False,
                                doc="true: the batch capped at TensorRT-LLM's dynamic "
                                    "batch-size tuner's size for the KV capacity at the "
                                    "requests' mean lengths; false: the run's max_batch")

    @cached_property
    def is_ideal(self) -> bool:
        """No host cost at all (:data:`HOST_FIELDS`): every time is the chip's alone."""
        return not any(getattr(self, name) for name in HOST_FIELDS)

    def without_host(self) -> "RuntimeProfile":
        """This profile with every host cost (:data:`HOST_FIELDS`) zero: the engine's device
        work, memory sizing and scheduling kept."""
        return replace(self, **{name: 0.0 for name in HOST_FIELDS})

    def request_in_s(self, prompt_tokens: int) -> float:
        """Seconds from a request's arrival to its being schedulable, for a prompt of
        ``prompt_tokens`` tokens."""
        return (self.request_in_us + self.tokenize_us_per_token * prompt_tokens) * 1e-6

    @property
    def token_out_s(self) -> float:
        return self.token_out_us * 1e-6

    def host_s(self, device_s: float, seqs: int) -> float:
        """The host work of a step of ``seqs`` sequences whose device time is ``device_s``."""
        return (self.step_host_fixed_us * 1e-6 + self.step_host_per_seq_us * 1e-6 * seqs
                + self.step_host_device_fraction * device_s)

    def step_s(self, device_s: float, seqs: int) -> float:
        """A step's duration on the engine's clock: device + host, or max(device, host) when
        the host work overlaps the device's, plus the exposed host time."""
        host = self.host_s(device_s, seqs)
        return ((max(device_s, host) if self.overlap else device_s + host)
                + self.step_exposed_us * 1e-6)


IDEAL = RuntimeProfile(name=DEFAULT_RUNTIME, description="no host costs: the chip alone")


def runtime_names() -> list[str]:
    """Names of the shipped profiles (``arch/runtimes/*.toml``), sorted."""
    root = resources.files("diptych.arch.runtimes")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def load_runtime(name_or_path: "str | Path | RuntimeProfile") -> RuntimeProfile:
    """A shipped profile's name (``trtllm-triton``), a path to a TOML file, or a profile
    (returned as is). Unknown names raise :class:`ConfigError` naming the known ones."""
    if isinstance(name_or_path, RuntimeProfile):
        return name_or_path
    text = str(name_or_path)
    names = runtime_names()
    if text in names:
        res = resources.files("diptych.arch.runtimes").joinpath(f"{text}.toml")
        return _from_dict(_parse(res.read_text(), f"{text}.toml"), f"{text}.toml")
    if text.endswith(".toml") or "/" in text or Path(text).exists():
        return _from_dict(read_config_file(text, "runtime profile"), text)
    raise ConfigError(f"unknown runtime {text!r}: expected one of {', '.join(names)} or a "
                      f"path to a .toml file")


def _parse(text: str, source: str) -> dict:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML ({exc})") from None


def _from_dict(data, source: str) -> RuntimeProfile:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a table of runtime fields, got {data!r}")
    return build(RuntimeProfile, data, source=source)

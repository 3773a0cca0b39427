"""Settings of the software stack a run reproduces (issue 21): what a training or serving
stack was configured to run, as environment variables and framework options fix it, applied
to the chip's tables before anything is timed (:func:`stack_chip`).

Each setting selects among mechanisms the chip's preset already carries, each with its own
source there; none is a constant of its own:

* ``nvls``: NCCL's NVLink SHARP all-reduce (the switch reduces in the network:
  ``[interconnect] in_network_reduction``). ``False`` is ``NCCL_NVLS_ENABLE=0``: every
  all-reduce runs as the ring (or tree) at the links' measured bus bandwidth.
* ``attention_kernel``: ``"default"`` runs fused attention by the chip's ``[attention]``
  table (on h100: cuDNN, Transformer Engine's fused attention); ``"fa2"`` by its
  ``[attention_fa2]`` table (FlashAttention-2, what TE runs with ``NVTE_FUSED_ATTN=0``).
* ``collective_algorithms``: ``NCCL_ALGO``, a comma list of the algorithms the chip's
  collective library may use (``[collectives] algorithms``; e.g. ``"ring"``); None: all it
  lists. All-gathers and reduce-scatters keep the ring, as NCCL runs them.
* ``tp_comm_overlap``: Transformer Engine's comm-GEMM overlap (userbuffers, the chip's
  ``[tp_overlap]`` table; NeMo's ``ub_tp_comm_overlap``). ``False``: Megatron's own
  sequence-parallel path, NCCL collectives (sim/run/tp_overlap.py, ``nccl_sub_block``).
* ``tp_overlap_config``: the run's own userbuffers settings, a comma list of
  ``key=value`` overriding the chip's ``[tp_overlap]`` table, which stays the default (None:
  the table as it is): ``splits``, the ``*_cores`` (``proj_fprop_cores`` ... ``fc1_wgrad_cores``,
  NeMo's ``num_sm`` of a pipelined or bulk GEMM) and the ``*_aggregate`` flags of the
  ring-exchange GEMMs (``qkv_fprop``, ``proj_dgrad``, ``fc1_fprop``, ``fc2_dgrad``: NeMo's
  ``aggregate``, 0 or 1). A training run's ``ub_tp_comm_overlap_cfg`` is its software's
  setting, not the chip's (e.g. GPT-3 175B's, benchmarks/validate_system.py).
* ``elementwise_kernels``: ``"default"`` runs the elementwise kernels by the chip's
  ``[elementwise_kernels]`` table (absent: at the vector unit's copy rate); ``"megatron"``
  by its ``[elementwise_kernels_megatron]`` table (Megatron-Core's own kernels: on h100 the
  ``torch.compile``'d SwiGLU and GeGLU of ``bias_activation_fusion``, forward and backward,
  and the LM loss's fused and eager cross-entropy passes, workloads/loss.py).
* ``kernel_order``: ``"default"`` runs the compute kernels in the order the chip's
  ``[overheads] kernel_order`` names (absent: ``dataflow``); ``"issue"`` on one in-order
  stream (a PyTorch eager step, Megatron-Core and Transformer Engine included, issues every
  compute kernel of a rank on the current CUDA stream, and a stream "is a sequence of
  commands ... that execute in order" [S: CUDA C++ Programming Guide, "Streams"]): the list
  schedule runs GEMMs, attention and vector ops one at a time in program order, collectives
  and DMA transfers beside them as before (docs/program.md, "Kernel order");
  ``"one_queue"``: ``"issue"``,
  and every node (collectives and transfers too) starts in program order, as one hardware
  work queue dispatches the kernels of every stream under ``CUDA_DEVICE_MAX_CONNECTIONS=1``
  ("forces the kernels to be scheduled in the order they are called" [S: Megatron-LM
  core_r0.9.0 (1afee592) ``tensor_parallel/layers.py`` L559-566], which Megatron-Core
  recommends under sequence parallelism and async gradient all-reduce, L626-640);
  ``"dataflow"``: independent kernels overlap where the resources allow.

:func:`check_stack` validates the values (ValueError naming the field, the value and what
was expected); :func:`stack_chip` refuses a kernel the chip has no table for.
"""

from __future__ import annotations

import dataclasses

from ...arch.chip import KERNEL_ORDERS, LIBRARY_ALGORITHMS, Overheads, TpOverlap

#: Fused-attention kernels a run may choose (``Scenario.attention_kernel``).
ATTENTION_KERNELS = ("default", "fa2")
#: Elementwise-kernel sets a run may choose (``Scenario.elementwise_kernels``).
ELEMENTWISE_KERNELS = ("default", "megatron")
#: Kernel orders a run may choose (``Scenario.kernel_order``): the chip's own, or one of
#: :data:`~diptych.arch.chip.KERNEL_ORDERS`.
KERNEL_ORDER_CHOICES = ("default",) + KERNEL_ORDERS


def algorithm_names(collective_algorithms: str | None) -> tuple[str, ...] | None:
    """``"ring,tree"`` as ``("ring", "tree")`` (None stays None); ValueError naming
    ``collective_algorithms`` and the first name that is not one of
    :data:`~diptych.arch.chip.LIBRARY_ALGORITHMS`."""
    if collective_algorithms is None:
        return None
    if not isinstance(collective_algorithms, str):
        raise ValueError(f"collective_algorithms must be a comma list of "
                         f"{', '.join(LIBRARY_ALGORITHMS)}, not {collective_algorithms!r}")
    names = tuple(n.strip().lower() for n in collective_algorithms.split(","))
    for n in names:
        if n not in LIBRARY_ALGORITHMS:
            raise ValueError(f"collective_algorithms: {n!r} is not an algorithm; expected a "
                             f"comma list of {', '.join(LIBRARY_ALGORITHMS)}")
    return names


#: The ``[tp_overlap]`` keys a run's ``tp_overlap_config`` may set, each with its integer
#: range (:class:`~diptych.arch.chip.TpOverlap`'s fields and their bounds; the aggregate
#: flags 0 or 1): all but ``nccl_cores`` (Megatron's NCCL path, not TE's settings) and
#: ``userbuffers`` (the run's ``tp_comm_overlap``).
TP_OVERLAP_RANGES = {fl.name: (0, 1) if fl.type == "bool" else
                     (fl.metadata["min"], fl.metadata["max"])
                     for fl in dataclasses.fields(TpOverlap)
                     if fl.name not in ("nccl_cores", "userbuffers")}
TP_OVERLAP_KEYS = tuple(TP_OVERLAP_RANGES)


def tp_overlap_settings(tp_overlap_config: str | None) -> dict:
    """``"fc2_fprop_cores=20,fc2_dgrad_aggregate=1"`` as ``{"fc2_fprop_cores": 20,
    "fc2_dgrad_aggregate": True}`` (None: ``{}``); ValueError naming ``tp_overlap_config``,
    the entry and what was expected."""
    if tp_overlap_config is None:
        return {}
    if not isinstance(tp_overlap_config, str):
        raise ValueError(f"tp_overlap_config must be a comma list of key=value, not "
                         f"{tp_overlap_config!r}")
    out = {}
    for entry in tp_overlap_config.split(","):
        key, eq, value = (x.strip() for x in entry.partition("="))
        if not eq or key not in TP_OVERLAP_KEYS:
            raise ValueError(f"tp_overlap_config: {entry.strip()!r} is not key=value with a key "
                             f"of {', '.join(TP_OVERLAP_KEYS)}")
        if key in out:
            raise ValueError(f"tp_overlap_config: {key} is given twice")
        lo, hi = TP_OVERLAP_RANGES[key]
        n = int(value) if value.isascii() and value.isdigit() else None
        if n is None or not lo <= n <= hi:
            raise ValueError(f"tp_overlap_config: {key}={value!r}; expected an integer in "
                             f"{lo}..{hi}")
        out[key] = bool(n) if key.endswith("_aggregate") else n
    return out


def check_stack(*, nvls, attention_kernel, tp_comm_overlap, collective_algorithms=None,
                elementwise_kernels="default", kernel_order="default",
                tp_overlap_config=None) -> None:
    """ValueError naming the field unless ``nvls``/``tp_comm_overlap`` are bools,
    ``attention_kernel`` one of :data:`ATTENTION_KERNELS`, ``collective_algorithms`` None
    or a comma list of known algorithms, ``elementwise_kernels`` one of
    :data:`ELEMENTWISE_KERNELS` and ``kernel_order`` one of :data:`KERNEL_ORDER_CHOICES`."""
    for name, v in (("nvls", nvls), ("tp_comm_overlap", tp_comm_overlap)):
        if not isinstance(v, bool):
            raise ValueError(f"{name} must be true or false, not {v!r}")
    if attention_kernel not in ATTENTION_KERNELS:
        raise ValueError(f"attention_kernel must be one of {', '.join(ATTENTION_KERNELS)}, "
                         f"not {attention_kernel!r}")
    if elementwise_kernels not in ELEMENTWISE_KERNELS:
        raise ValueError(f"elementwise_kernels must be one of "
                         f"{', '.join(ELEMENTWISE_KERNELS)}, not {elementwise_kernels!r}")
    if kernel_order not in KERNEL_ORDER_CHOICES:
        raise ValueError(f"kernel_order must be one of {', '.join(KERNEL_ORDER_CHOICES)}, "
                         f"not {kernel_order!r}")
    algorithm_names(collective_algorithms)
    tp_overlap_settings(tp_overlap_config)


def stack_chip(chip, *, nvls: bool = True, attention_kernel: str = "default",
               tp_comm_overlap: bool = True, collective_algorithms: str | None = None,
               elementwise_kernels: str = "default", kernel_order: str = "default",
               tp_overlap_config: str | None = None):
    """``chip`` as the stack settings (module docstring) run it: without its in-network
    all-reduce (``nvls`` False), with its ``[attention_fa2]`` kernel in place of
    ``[attention]`` (``attention_kernel="fa2"``; ValueError on a chip without that table),
    with its ``[tp_overlap]`` table marked for Megatron's NCCL path (``tp_comm_overlap``
    False; a chip without the table is unchanged: its collectives are timed where the
    program puts them), with its collective library limited to ``collective_algorithms``
    (ValueError on a chip without a ``[collectives]`` table or a name it does not list),
    with its ``[elementwise_kernels_megatron]`` rates in place of ``[elementwise_kernels]``
    (``elementwise_kernels="megatron"``; ValueError on a chip without that table), with its
    ``[overheads] kernel_order`` set to ``kernel_order`` unless that is ``"default"`` (a chip
    without the table gets one of zero fixed costs), with its ``[tp_overlap]`` keys set as
    ``tp_overlap_config`` says (ValueError on a chip without that table). The defaults
    return ``chip`` itself."""
    check_stack(nvls=nvls, attention_kernel=attention_kernel, tp_comm_overlap=tp_comm_overlap,
                collective_algorithms=collective_algorithms,
                elementwise_kernels=elementwise_kernels, kernel_order=kernel_order,
                tp_overlap_config=tp_overlap_config)
    ub = tp_overlap_settings(tp_overlap_config)
    if ub:
        if chip.tp_overlap is None:
            raise ValueError(f"tp_overlap_config {tp_overlap_config!r} needs a [tp_overlap] "
                             f"table in chip {chip.name!r}, which has none")
        for key, n in ub.items():
            if key.endswith("_cores") and n >= chip.tensor_cores:
                raise ValueError(f"tp_overlap_config: {key}={n}; expected fewer than chip "
                                 f"{chip.name!r}'s {chip.tensor_cores} tensor cores (the GEMM "
                                 f"beside the collective runs on the cores it leaves)")
        chip = dataclasses.replace(chip, tp_overlap=dataclasses.replace(chip.tp_overlap, **ub))
    names = algorithm_names(collective_algorithms)
    if names is not None:
        lib = chip.collectives
        if lib is None:
            raise ValueError(f"collective_algorithms {collective_algorithms!r} needs a "
                             f"[collectives] table in chip {chip.name!r}, which has none")
        for n in names:
            if n not in lib.algorithms:
                raise ValueError(f"collective_algorithms: {n!r} is not one of the algorithms "
                                 f"chip {chip.name!r}'s {lib.name} considers "
                                 f"({', '.join(lib.algorithms)})")
        chip = dataclasses.replace(chip, collectives=dataclasses.replace(
            lib, algorithms=tuple(dict.fromkeys(names))))
    if not nvls and chip.interconnect is not None and chip.interconnect.in_network_reduction:
        chip = dataclasses.replace(chip, interconnect=dataclasses.replace(
            chip.interconnect, in_network_reduction=0.0, in_network_reduction_latency_us=0.0,
            in_network_reduction_ramp=()))
    if attention_kernel == "fa2":
        if chip.attention_fa2 is None:
            raise ValueError(f"attention_kernel 'fa2' needs an [attention_fa2] table in chip "
                             f"{chip.name!r}, which has none")
        chip = dataclasses.replace(chip, attention=chip.attention_fa2)
    if elementwise_kernels == "megatron":
        if chip.elementwise_kernels_megatron is None:
            raise ValueError(f"elementwise_kernels 'megatron' needs an "
                             f"[elementwise_kernels_megatron] table in chip {chip.name!r}, "
                             f"which has none")
        chip = dataclasses.replace(chip, elementwise_kernels=chip.elementwise_kernels_megatron)
    if not tp_comm_overlap and chip.tp_overlap is not None:
        chip = dataclasses.replace(chip, tp_overlap=dataclasses.replace(
            chip.tp_overlap, userbuffers=False))
    if kernel_order != "default" and kernel_order != chip_kernel_order(chip):
        chip = dataclasses.replace(chip, overheads=dataclasses.replace(
            chip.overheads or Overheads(), kernel_order=kernel_order))
    return chip


def chip_kernel_order(chip) -> str:
    """The order ``chip`` runs its compute kernels in (``[overheads] kernel_order``;
    ``dataflow`` without the table)."""
    return chip.overheads.kernel_order if chip.overheads is not None else "dataflow"


def stack_info(s, sequence_parallel: bool | None = None, chip=None) -> dict:
    """Scenario ``s``'s stack settings as a result's ``info["stack"]`` (every run states
    them, defaults included; a training run also its loss implementation,
    ``cross_entropy``, its dropout probabilities (``hidden_dropout``, ``attention_dropout``;
    workloads/dropout.py), and, when the run resolved it, whether it runs Megatron-Core's
    ``sequence_parallel``). With attention dropout and ``chip`` (the stacked chip the run
    timed) also ``attention_dropout_cost``: its attention table's ``dropout_cost``, the share
    a dropping call runs longer (0: not charged; a chip without ``[attention]`` 0 too)."""
    out = {"nvls": s.nvls, "attention_kernel": s.attention_kernel,
           "tp_comm_overlap": s.tp_comm_overlap,
           "collective_algorithms": s.collective_algorithms,
           "elementwise_kernels": s.elementwise_kernels,
           "kernel_order": s.kernel_order}
    if s.tp_overlap_config is not None:
        out["tp_overlap_config"] = s.tp_overlap_config
    if s.phase == "train":
        out["cross_entropy"] = s.cross_entropy
        out["hidden_dropout"] = s.hidden_dropout
        out["attention_dropout"] = s.attention_dropout
        if s.attention_dropout and chip is not None:
            at = chip.attention
            out["attention_dropout_cost"] = at.dropout_cost if at is not None else 0.0
        if sequence_parallel is not None:
            out["sequence_parallel"] = sequence_parallel
    return out


def scenario_chip(chip, s):
    """:func:`stack_chip` with scenario ``s``'s settings."""
    return stack_chip(chip, nvls=s.nvls, attention_kernel=s.attention_kernel,
                      tp_comm_overlap=s.tp_comm_overlap,
                      collective_algorithms=s.collective_algorithms,
                      elementwise_kernels=s.elementwise_kernels, kernel_order=s.kernel_order,
                      tp_overlap_config=s.tp_overlap_config)

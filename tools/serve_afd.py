"""``diptych serve``'s attention–FFN disaggregation flags (docs/serving.md, "Attention–FFN
disaggregation"): the options, their checks against the rest of the command line, and the
deployment they build (:func:`~diptych.sim.serving.deployment.afd_deployment`)."""

from __future__ import annotations

import click

AFD_FLAGS = ("attention_chip", "attention_chips", "ffn_chip", "ffn_chips", "afd_microbatches",
             "afd_attention")


def afd_options(f):
    """The AFD options of ``serve`` (applied under its other options)."""
    from ..sim.serving.afd_defaults import DEFAULT_MICROBATCHES

    opts = [
        click.option("--attention-chip", help="Attention-FFN disaggregation: the chip of the "
                     "attention pool (attention, KV cache, norms, embeddings, LM head)."),
        click.option("--attention-chips", type=int, help="AFD: chips of the attention pool, "
                     "one tensor-parallel group (default 1)."),
        click.option("--ffn-chip", help="AFD: the chip of the FFN pool (the experts of a MoE "
                     "model, or the dense MLPs)."),
        click.option("--ffn-chips", type=int, help="AFD: chips of the FFN pool, the experts "
                     "expert-parallel over them (default 1)."),
        click.option("--afd-attention", type=click.Choice(["tp", "dp"]), help="AFD: the "
                     "attention pool as one tensor-parallel group (tp, default) or one-chip "
                     "data-parallel ranks, each its own sequences and KV cache (dp)."),
        click.option("--afd-microbatches", type=int, help=f"AFD: micro-batches a step is split "
                     f"into, ping-ponging between the pools (default {DEFAULT_MICROBATCHES})."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def afd_requested(kw: dict) -> bool:
    return any(kw.get(k) is not None for k in AFD_FLAGS)


def afd_from_flags(kw: dict, *, chip, model, tp, replicas, ep, redundant_experts, moe_skew,
                   attention, execution, precision, speculative, export_profile, waterfall,
                   pd_flags: dict):
    """The AFD deployment the flags ask for; ValueError naming the flag that cannot go
    with it (exit 2)."""
    from ..sim.serving.afd import DEFAULT_MICROBATCHES, AfdSpec
    from ..sim.serving.deployment import afd_deployment

    given = [f"--{n.replace('_', '-')}" for n, v in pd_flags.items() if v is not None]
    if given:
        raise ValueError(f"{', '.join(given)} with attention-FFN disaggregation: combining "
                         f"it with prefill/decode disaggregation is not supported; drop one")
    if replicas != 1:
        raise ValueError(f"--replicas {replicas} with attention-FFN disaggregation: one "
                         f"attention pool and one FFN pool are served; size them with "
                         f"--attention-chips and --ffn-chips")
    if tp is not None:
        raise ValueError(f"--tp {tp} with attention-FFN disaggregation: the attention pool's "
                         f"tensor-parallel degree is --attention-chips; drop --tp")
    n = 1 if kw.get("attention_chips") is None else kw["attention_chips"]
    m = 1 if kw.get("ffn_chips") is None else kw["ffn_chips"]
    k = DEFAULT_MICROBATCHES if kw.get("afd_microbatches") is None else kw["afd_microbatches"]
    spec = AfdSpec(attention_chips=n, ffn_chips=m, microbatches=k,
                   attention_layout=kw.get("afd_attention") or "tp")
    if ep is not None and ep != m:
        raise ValueError(f"--ep {ep} with attention-FFN disaggregation: the experts are "
                         f"expert-parallel over the FFN pool (--ffn-chips {m}); the attention "
                         f"pool holds no experts. Drop --ep or give --ffn-chips {ep}")
    if execution.get("execution") == "schedule":
        raise ValueError("--execution schedule with attention-FFN disaggregation: the "
                         "pipeline times each pool's layers with the summed execution; drop it")
    for flag, v in (("--export-profile", export_profile),
                    ("--waterfall", waterfall or None)):
        if v:
            raise ValueError(f"{flag} with attention-FFN disaggregation is not modelled yet; "
                             f"drop one")
    a_chip = kw.get("attention_chip") or chip
    f_chip = kw.get("ffn_chip") or chip
    if a_chip is None or f_chip is None:
        missing = "--attention-chip" if a_chip is None else "--ffn-chip"
        raise ValueError(f"attention-FFN disaggregation needs a chip for each pool: give "
                         f"{missing} (or --chip, the chip of a pool not named)")
    return afd_deployment(a_chip, f_chip, model, spec, attention=attention,
                          redundant_experts=redundant_experts, moe_skew=moe_skew, **precision)


def afd_rows(info: dict) -> list[tuple[str, str]]:
    """The report's AFD lines (``info.afd``, :func:`~diptych.sim.serving.afd.afd_info`)."""
    a = info.get("afd")
    if not a:
        return []
    at, ff = a["attention"], a["ffn"]
    ffn_par = f"EP {ff['ep']}" if ff["ep"] > 1 else f"TP {ff['tp']}"
    att_par = f"DP {at['dp']}" if at.get("dp", 1) > 1 else f"TP {at['tp']}"
    return [("AFD layout", f"attention {at['chips']} x {at['chip']} ({att_par}) | FFN "
                           f"{ff['chips']} x {ff['chip']} ({ffn_par}) | {a['microbatches']} "
                           f"micro-batches"),
            ("AFD utilisation", f"attention pool {100 * at['utilisation']:.1f} %, FFN pool "
                                f"{100 * ff['utilisation']:.1f} % of the step time"),
            ("AFD link", f"{a['link_s_per_step'] * 1e3:.3f} ms per step (both directions, "
                         f"{a['link_bytes_per_s'] / 1e9:.0f} GB/s), "
                         f"{100 * a['link_hidden_fraction']:.1f} % hidden; mean step "
                         f"{a['mean_step_s'] * 1e3:.2f} ms")]


def afd_roles_table(roles: dict):
    """``compare --serving-afd``'s two assignments, each at its searched best plan
    (:func:`~diptych.sim.serving.afd_roles.afd_roles`), as a table."""
    from rich.markup import escape
    from rich.table import Table

    st = roles["settings"]
    t = Table("attention", "FFN", "n:m", "micro-batches", "mean step",
              "goodput/chip (req/s)", "tokens/s per chip", "tokens/J", "attention busy",
              "FFN busy", "link hidden",
              title=f"attention-FFN roles, {roles['model']} ({roles['runtime']} runtime; each "
                    f"at its best of up to {st['chips']} chips)")
    for i, a in enumerate(roles["assignments"]):
        mark = " (best)" if i == roles["best"] else ""
        if "ratio" not in a:
            t.add_row(f"{a['attention_chip']}{mark}", a["ffn_chip"],
                      "[red]none meets the SLOs[/red]", "", "", "", "", "", "", "",
                      escape(a["binding"]))
            continue
        t.add_row(f"{a['attention_chip']} ({a['attention_weights']}){mark}",
                  f"{a['ffn_chip']} ({a['ffn_weights']})", a["ratio"], str(a["microbatches"]),
                  f"{a['mean_step_s'] * 1e3:.2f} ms", f"{a['goodput_rps_per_chip']:.3g}",
                  f"{a['tokens_per_s_per_chip']:.0f}", f"{a['tokens_per_j']:.2f}",
                  f"{100 * a['attention_utilisation']:.0f} %",
                  f"{100 * a['ffn_utilisation']:.0f} %",
                  f"{100 * a['link_hidden_fraction']:.0f} %")
    return t

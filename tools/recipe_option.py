"""``--recipe`` for the inference commands (``serve``, ``serve-plan``, ``serve-plan-afd``): a
named inference precision recipe (:data:`~diptych.workloads.precision.INFERENCE_RECIPES`,
docs/precision.md "Inference recipes")."""

from __future__ import annotations

import click

from ..workloads.precision import INFERENCE_RECIPES

HELP = ("Inference precision recipe (docs/precision.md): fp8-static (FP8 linear layers with "
        "calibrated per-tensor scales, as TensorRT-LLM runs a ModelOpt FP8 checkpoint) or "
        "fp8-dynamic (scales from each input's own max, vLLM's online FP8); activations, "
        "collectives, embedding and LM head stay 16-bit. Give --kv-dtype fp8 for an FP8 KV "
        "cache. Default: none (the dtypes alone).")


def inference_recipe_option(f):
    """The ``--recipe`` option (a keyword ``recipe``, None when not given)."""
    return click.option("--recipe", type=click.Choice(INFERENCE_RECIPES), help=HELP)(f)

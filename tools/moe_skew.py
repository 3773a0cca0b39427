"""``--moe-skew``'s values: a number (the experts' popularity coefficient of variation,
:class:`~diptych.workloads.moe.Routing`) or the name of a measured one, ``aux-loss``: an
auxiliary-loss-balanced router as Wang et al. measured it
(:data:`~diptych.workloads.moe.AUX_LOSS_SKEW`, docs/workloads.md "Mixture of experts").
The range is checked where the skew is used (exit 2 naming ``--moe-skew``)."""

from __future__ import annotations

import click

from ..workloads.moe import AUX_LOSS_SKEW

#: The named skews ``--moe-skew`` takes besides a number.
NAMED_SKEWS = {"aux-loss": AUX_LOSS_SKEW}


class MoeSkew(click.ParamType):
    """A float, or a key of :data:`NAMED_SKEWS` (case-insensitive) as its value."""

    name = "skew"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        text = str(value).strip().lower()
        if text in NAMED_SKEWS:
            return NAMED_SKEWS[text]
        try:
            return float(text)
        except ValueError:
            self.fail(f"{value!r} is not a number or one of: {', '.join(NAMED_SKEWS)}",
                      param, ctx)


#: The parameter type of every command's ``--moe-skew``.
MOE_SKEW = MoeSkew()

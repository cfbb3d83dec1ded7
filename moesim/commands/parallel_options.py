"""The multi-GPU flags that `simulate` and `sweep` share: --gpus, --tp, --ep, --placement, --shared-expert-mode, --draft-on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from moesim.commands.common import apply_options
from moesim.simulator.plan.layout import DRAFT_ON, SHARED_EXPERT_MODES, LayoutRequest
from moesim.simulator.routing.placement import PLACEMENT_SPELLINGS

F = TypeVar("F", bound=Callable[..., Any])

PARALLEL_OPTION_NAMES = ("gpus", "tp", "ep", "placement", "shared_experts", "draft_on")


def parallel_options(func: F) -> F:
    """Add the parallel-layout flags; read them back with `layout_from_kwargs(kwargs)`."""
    options = [
        click.option(
            "--gpus",
            type=int,
            default=None,
            help="GPUs to spread the model over (default: the smallest layout whose memory fits, stated in the output).",
        ),
        click.option(
            "--tp",
            type=int,
            default=None,
            help="Tensor-parallel ranks for attention and dense layers (default: --gpus).",
        ),
        click.option(
            "--ep", type=int, default=None, help="Expert-parallel ranks for routed experts (default: --gpus)."
        ),
        click.option(
            "--placement",
            type=click.Choice(PLACEMENT_SPELLINGS),
            default="contiguous",
            show_default=True,
            help="How expert ids map to expert-parallel ranks.",
        ),
        click.option(
            "--shared-expert-mode",
            "shared_experts",
            type=click.Choice(SHARED_EXPERT_MODES),
            default=None,
            help="Shared experts split by tensor parallelism (default) or replicated on every GPU.",
        ),
        click.option(
            "--draft-on",
            type=click.Choice(DRAFT_ON),
            default="shared",
            show_default=True,
            help="Run the drafter on the target's GPUs (shared) or on a GPU of its own (separate).",
        ),
    ]
    return apply_options(func, options)


def layout_from_kwargs(kwargs: dict[str, Any]) -> LayoutRequest:
    """The layout request the flags make (a fixed layout, or the smallest that fits); pops the flags from
    `kwargs` so the rest can be passed on."""
    values = {name: kwargs.pop(name, None) for name in PARALLEL_OPTION_NAMES}
    return LayoutRequest(
        gpus=values["gpus"],
        tp=values["tp"],
        ep=values["ep"],
        placement=values["placement"] or "contiguous",
        shared_experts=values["shared_experts"],
        draft_on=values["draft_on"] or "shared",
    )


__all__ = ["PARALLEL_OPTION_NAMES", "layout_from_kwargs", "parallel_options"]

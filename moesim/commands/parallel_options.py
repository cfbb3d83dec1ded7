"""The multi-GPU flags that `simulate` and `sweep` share (the fields of `LayoutRequest`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from moesim.commands.fields import field_options, fields_of
from moesim.options import option_fields
from moesim.simulator.plan.layout import LayoutRequest

F = TypeVar("F", bound=Callable[..., Any])

PARALLEL_OPTION_NAMES = tuple(option_fields(LayoutRequest))


def parallel_options(func: F) -> F:
    """Add the parallel-layout flags; read them back with `layout_from_kwargs(kwargs)`."""
    return field_options(LayoutRequest, *PARALLEL_OPTION_NAMES)(func)


def layout_from_kwargs(kwargs: dict[str, Any]) -> LayoutRequest:
    """The layout request the flags make (a fixed layout, or the smallest that fits); pops the flags from
    `kwargs` so the rest can be passed on."""
    return LayoutRequest(**fields_of(LayoutRequest, kwargs))


__all__ = ["PARALLEL_OPTION_NAMES", "layout_from_kwargs", "parallel_options"]

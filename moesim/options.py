"""Options declared once: a library dataclass field carries its command-line face beside its type and default.

    @dataclass(frozen=True)
    class Scenario:
        batch: int = option(DEFAULT_BATCH, "Sequences in the batch B.")

`moesim.commands.fields` turns such fields into click options (flag, type, default, choices, help), so a
default lives in the library alone and the CLI shows the library's. The idea is vLLM's `EngineArgs`
(vllm 0.33.0, `vllm/engine/arg_utils.py`), whose dataclass fields generate its argparse flags; this module is
its dataclass-metadata half, kept free of click so that the simulator may use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

OPTION_KEY = "moesim.option"


@dataclass(frozen=True)
class OptionInfo:
    """The command-line face of one field.

    `flag`: the flag's spelling (default `--field-name`); `kind`: int, float, str or bool (default: the
    default's type, str when the default is None); `choices`: the allowed values (or a function giving
    them, so that a light module need not import the one that defines them); `default_text`: what the
    help says the default is when the field's default is None (filled in later, e.g. per device);
    `list_of`: int, float or str when the flag takes a comma list (the field holds a tuple;
    `minimum` is the least integer it may hold, default 1); `path`: the value
    is a file path; `flag_value`: the value of the flag given without one (`--from-csv` alone), the
    field's default when the flag is absent."""

    help: str
    flag: str | None = None
    kind: type | None = None
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    default_text: str | None = None
    list_of: type | None = None
    minimum: int | None = None
    metavar: str | None = None
    path: bool = False
    flag_value: str | None = None


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | None = None,
    **info: Any,
) -> Any:
    """A dataclass field with its command-line face (see `OptionInfo` for `info`)."""
    metadata = {OPTION_KEY: OptionInfo(help, **info)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def option_fields(cls: type) -> dict[str, tuple[dataclasses.Field[Any], OptionInfo]]:
    """Every field of dataclass `cls` that has a command-line face, by name, in declaration order."""
    return {f.name: (f, f.metadata[OPTION_KEY]) for f in dataclasses.fields(cls) if OPTION_KEY in f.metadata}


def default_of(field: dataclasses.Field[Any]) -> Any:
    """The field's default value (its factory called), or None when it has none."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


__all__ = ["OPTION_KEY", "OptionInfo", "default_of", "option", "option_fields"]

"""Click options generated from the library's dataclass fields (`moesim.options.option`), and read back.

    @field_options(Scenario, "batch", "draft_len")       # --batch, --draft-len with the Scenario's defaults
    def command(**flags): Scenario(model, **fields_of(Scenario, flags))

A command declares which fields it offers; their flag, type, default, choices and help come from the field.
`replace` gives a command its own spelling or help for a field it offers differently (e.g. `--draft` for
`drafter`), never its own default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import click

from moesim.options import OptionInfo, default_of, option_fields
from moesim.simulator.bounds import MAX_COUNT


class _WholeNumber(click.types.IntParamType):
    """click's integer, refused past ±(2³¹ − 1) with the flag named, before any field check or arithmetic
    sees it (2⁶³ would otherwise overflow numpy's and torch's integers)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if abs(number) > MAX_COUNT:
            self.fail(f"{value} is beyond ±{MAX_COUNT:,}, the largest count moesim takes", param, ctx)
        return number


WHOLE_NUMBER = _WholeNumber()
"""Every integer flag's click type (see `_WholeNumber`)."""

F = TypeVar("F", bound=Callable[..., Any])


def _flag(name: str, info: OptionInfo) -> str:
    return info.flag or "--" + name.replace("_", "-")


SIMPLE_KINDS = {"int": int, "float": float, "str": str, "bool": bool}


def _annotated_kind(field: dataclasses.Field[Any]) -> type | None:
    """int, float, str or bool when the field is annotated as one of them (or as one `| None`)."""
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    return SIMPLE_KINDS.get(text.removesuffix(" | None"))


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def click_option(cls: type, name: str, **replace: Any) -> Callable[[F], F]:
    """The click option of field `name` of `cls`; `replace` overrides OptionInfo entries (help, flag)."""
    field, info = option_fields(cls)[name]
    if replace:
        info = OptionInfo(**{**info.__dict__, **replace})
    default = default_of(field)
    required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    kind: Any = info.kind or _annotated_kind(field) or (type(default) if default is not None else str)
    if info.choices is not None:
        kind = click.Choice(info.choices() if callable(info.choices) else info.choices)
    elif info.list_of is not None:
        kind = str  # parsed by `fields_of`, so that a bad list ends in the command's one-line error
    elif info.path:
        kind = click.Path(dir_okay=False)
    elif kind is int:
        kind = WHOLE_NUMBER
    help_text = info.help
    if default is None and info.default_text:
        help_text += f" [default: {info.default_text}]"
    if kind is bool:
        return click.option(_flag(name, info), name, is_flag=True, default=bool(default), help=help_text)
    if info.flag_value is not None:  # a flag whose value may be left out
        return click.option(
            _flag(name, info), name, is_flag=False, flag_value=info.flag_value, default=default,
            metavar=info.metavar, help=help_text,
        )  # fmt: skip
    if required:  # click takes an explicit default=None as a value given
        return click.option(_flag(name, info), name, type=kind, required=True, help=help_text)
    return click.option(
        _flag(name, info),
        name,
        type=kind,
        default=_shown(default) if isinstance(default, tuple) else default,
        show_default=default is not None,
        metavar=info.metavar or (f"{info.list_of.__name__.upper()},..." if info.list_of else None),
        help=help_text,
    )


def field_options(cls: type, *names: str, **replace: dict[str, Any]) -> Callable[[F], F]:
    """Decorate a command with the options of `names` (fields of `cls`, listed in that order in --help);
    `replace[name]` overrides OptionInfo entries of one field for this command."""

    def decorate(func: F) -> F:
        for name in reversed(names):
            func = click_option(cls, name, **replace.get(name, {}))(func)
        return func

    return decorate


def _parse_list(flag: str, text: str, info: OptionInfo) -> tuple[Any, ...]:
    from moesim.commands.common import parse_float_list, parse_int_list

    if info.list_of is int:
        return tuple(parse_int_list(flag, text, 1 if info.minimum is None else info.minimum))
    if info.list_of is float:
        return tuple(parse_float_list(flag, text))
    return tuple(part.strip() for part in text.split(",") if part.strip())


def fields_of(cls: type, flags: dict[str, Any]) -> dict[str, Any]:
    """The values in `flags` of the option fields of `cls` that a command offers, comma lists parsed."""
    values = {}
    for name, (_, info) in option_fields(cls).items():
        if name not in flags:
            continue
        value = flags[name]
        if info.list_of is not None and isinstance(value, str):
            value = _parse_list(_flag(name, info), value, info)
        values[name] = value
    return values


def hardware_option(func: F) -> F:
    """--hardware NAME|PATH (the Scenario's field)."""
    from moesim.simulator.scenario import Scenario

    return click_option(Scenario, "hardware")(func)


__all__ = ["WHOLE_NUMBER", "click_option", "field_options", "fields_of", "hardware_option"]

"""One reader for the profile files: hardware profiles (`simulator/hardware/`) and serving-engine profiles
(`simulator/engines/`).

Both are TOML files of named sections. A loader finds the file (a bundled name, or a path read through
`moesim.reading`, whose size and nesting bounds hold), then reads each section through a `ProfileTable`,
which refuses unknown fields and checks every value's type and range. Every error has one form:

    <file>: <section>.<field>: is <value>, <what is wrong> (<how to fix it>)

so a user always sees which file, which field, and what to write instead.
"""

from __future__ import annotations

import difflib
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moesim.errors import MoesimError
from moesim.reading import parse_toml, read_toml
from moesim.simulator.bounds import MAX_COUNT

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

PROFILE_SUFFIX = ".toml"

REQUIRED: Any = object()
"""The default of a field the file must give (`ProfileTable.value(key, REQUIRED)`)."""


def field_error(source: str, dotted: str, problem: str, fix: str) -> MoesimError:
    """The error of field `dotted` (`section.key`, or a section alone) of profile file `source`."""
    return MoesimError(f"{source}: {dotted}" if dotted else source, problem, fix)


def _range(minimum: float, strict: bool, maximum: float) -> str:
    """The allowed range as a user reads it: `> 0`, `>= 1`, `in (0, 1]`, `in [0, 100]` ('' if any)."""
    low = math.isfinite(minimum)
    if low and math.isfinite(maximum):
        return f"in {'(' if strict else '['}{minimum:g}, {maximum:g}]"
    if low:
        return f"{'>' if strict else '>='} {minimum:g}"
    return f"<= {maximum:g}" if math.isfinite(maximum) else ""


class ProfileTable:
    """One table (section) of a profile file: unknown fields are refused, and every value read is checked,
    each error naming the file, the dotted field and the fix."""

    def __init__(self, source: str, section: str, data: Any, known: tuple[str, ...]) -> None:
        self.source, self.section = source, section
        if not isinstance(data, dict):
            raise self.error("", f"is {data!r}, not a table", f"write it as a [{section}] table")
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise self.error(unknown[0], "is not a known field", f"known fields: {', '.join(known)}")
        self.data: dict[str, Any] = data

    def error(self, key: str, problem: str, fix: str) -> MoesimError:
        """The error of field `key` of this table ('' for the table itself)."""
        return field_error(self.source, f"{self.section}.{key}" if key else self.section, problem, fix)

    def has(self, key: str) -> bool:
        return key in self.data

    def value(self, key: str, default: Any = REQUIRED) -> Any:
        """The raw value of `key`; `default` when absent, an error when absent and REQUIRED."""
        if key in self.data:
            return self.data[key]
        if default is REQUIRED:
            raise self.error(key, "is missing", f"add {key} to [{self.section}]")
        return default

    def table(self, key: str, known: tuple[str, ...] | None = None, default: Any = REQUIRED) -> ProfileTable:
        """The sub-table `key` (`[section.key]`); `known=None` accepts any field name."""
        data = self.value(key, default)
        names = tuple(data) if known is None and isinstance(data, dict) else known or ()
        return ProfileTable(self.source, f"{self.section}.{key}", data, names)

    def number(
        self,
        key: str,
        default: Any = REQUIRED,
        *,
        minimum: float = 0.0,
        strict: bool = True,
        maximum: float = math.inf,
    ) -> float:
        """A finite number above `minimum` (at or above it when not `strict`) and at most `maximum`."""
        return self.check_number(key, self.value(key, default), minimum, strict, maximum)

    def check_number(
        self, key: str, value: Any, minimum: float = 0.0, strict: bool = True, maximum: float = math.inf
    ) -> float:
        """`value` (of field `key`, which may be `name[i]` or `name.sub`) as a number in range."""
        allowed = _range(minimum, strict, maximum)
        fix = f"give a number {allowed}" if allowed else "give a finite number"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"is {value!r}, not a number", fix)
        number = float(value)
        if not math.isfinite(number):
            raise self.error(key, f"is {value!r}, not a finite number", fix)
        below = number <= minimum if strict else number < minimum
        if below or number > maximum:
            raise self.error(key, f"is {value!r}, out of range", fix)
        return number

    def integer(self, key: str, default: Any = REQUIRED, *, minimum: int = 0) -> int:
        """A whole number at or above `minimum` (a whole float such as 2.0 is read as 2)."""
        value = self.value(key, default)
        fix = f"give a whole number >= {minimum}"
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not whole:
            raise self.error(key, f"is {value!r}, not a whole number", fix)
        if value < minimum:
            raise self.error(key, f"is {value!r}, out of range", fix)
        if value > MAX_COUNT:
            raise self.error(key, f"is {value!r}, out of range", f"give a whole number ≤ {MAX_COUNT:,}")
        return int(value)

    def choice(self, key: str, choices: tuple[str, ...], default: Any = REQUIRED) -> Any:
        """One of `choices` (typed Any: the caller's field is the Literal of those choices)."""
        value = self.value(key, default)
        if value not in choices:
            raise self.error(key, f"is {value!r}, not a known value", f"use one of {', '.join(choices)}")
        return value

    def string(self, key: str, default: Any = REQUIRED, *, nonempty: bool = False) -> str:
        """A string, not blank when `nonempty`."""
        value = self.value(key, default)
        if not isinstance(value, str):
            raise self.error(key, f"is {value!r}, not a string", f'write it in quotes: {key} = "..."')
        if nonempty and not value.strip():
            raise self.error(key, "is empty", f"give the {key.replace('_', ' ')}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.value(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"is {value!r}, not true or false", f"write {key} = true or false")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        """An array of strings (empty when absent)."""
        value = self.value(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"is {value!r}, not an array of strings", f'write {key} = ["...", "..."]')
        return tuple(value)

    def versions(self, key: str) -> dict[str, str]:
        """A table of name = "version" strings (empty when absent)."""
        value = self.value(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self.error(
                key,
                f"is {value!r}, not a table of version strings",
                f'write [{self.section}.{key}] torch = "2.5"',
            )
        return dict(value)


def read_fit_quality(source: str, data: Any) -> dict[str, dict[str, float]]:
    """The [fit_quality.<parameter>] tables of a profile file: each a table of finite metrics, the counts,
    error sizes and physical quantities among them ≥ 0 (`NON_NEGATIVE_FIT_METRICS`)."""
    quality = ProfileTable(source, "fit_quality", data, tuple(data) if isinstance(data, dict) else ())
    out: dict[str, dict[str, float]] = {}
    for param in quality.data:
        metrics = quality.table(param)
        out[param] = {
            m: metrics.number(m, minimum=_fit_metric_minimum(m), strict=False) for m in metrics.data
        }
    return out


NON_NEGATIVE_FIT_METRICS = frozenset(
    {"n_points", "rows_fit", "rows_held_out", "rmse", "log_rmse", "max_abs_residual", "mape_fit_percent",
     "mape_held_out_percent", "memory_plateau_rel_iqr"}
)  # fmt: skip
"""Fit-quality entries that are counts or error sizes, never below 0; so is every fitted bandwidth, size or
throughput (`_gbps`, `_bytes`, `_tflops`). The rest may be signed (r², intercepts, slopes, a fit's change)."""


def _fit_metric_minimum(metric: str) -> float:
    physical = metric.endswith(("_gbps", "_bytes", "_tflops"))
    return 0.0 if metric in NON_NEGATIVE_FIT_METRICS or physical else -math.inf


def profile_sections(
    source: str, data: Any, known: tuple[str, ...], required: tuple[str, ...], suffix: str = PROFILE_SUFFIX
) -> tuple[dict[str, Any], str]:
    """The sections of a profile file and its name (`name`, else the file name): a section that is not
    known, or a required one missing, is refused."""
    if not isinstance(data, dict):
        raise field_error(source, "", "is not a table of profile sections", "give a profile .toml file")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise field_error(source, unknown[0], "is not a known section", f"known sections: {', '.join(known)}")
    for section in required:
        if section not in data:
            raise field_error(source, section, "is missing", f"add a [{section}] table")
    name = data.get("name", Path(source).name.removesuffix(suffix))
    if not isinstance(name, str) or not name.strip():
        raise field_error(source, "name", f"is {name!r}, not a name", 'write name = "..."')
    return data, name


def read_profile_file(
    field: str,
    name_or_path: str,
    kind: str,
    known: list[str],
    bundled: Traversable,
    listing: str,
    bundled_dir: str = "",
) -> tuple[dict[str, Any], str]:
    """The parsed TOML of a profile given by bundled name (looked up case-blind in `known`: the file
    `<bundled>/<name>.toml`, its errors naming `<bundled_dir><name>.toml`) or by path, and the source its
    errors name; an unknown name suggests close ones. `field` is the option that named it, `kind` what it is
    ('hardware profile'), `listing` the bundled names to show and where to see them all."""
    name = name_or_path.strip().lower()
    if name in known:
        source = bundled_dir + name + PROFILE_SUFFIX
        *subdirs, stem = name.split("/")
        text = bundled.joinpath(*subdirs, stem + PROFILE_SUFFIX).read_text(encoding="utf-8")
        return parse_toml(field, text, source, kind), source
    if (
        name_or_path.endswith(PROFILE_SUFFIX)
        or "/" in name_or_path
        or os.sep in name_or_path
        or Path(name_or_path).expanduser().exists()
    ):
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise MoesimError(
                field,
                f"{kind} file {name_or_path} does not exist",
                f"give a .toml path or a bundled name: {listing}",
            )
        return read_toml(field, path, kind), name_or_path
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise MoesimError(
        field, f"unknown {kind} {name_or_path!r}", f"{hint}known: {listing}; or give a path to a .toml file"
    )


__all__ = [
    "PROFILE_SUFFIX",
    "REQUIRED",
    "ProfileTable",
    "field_error",
    "profile_sections",
    "read_fit_quality",
    "read_profile_file",
]

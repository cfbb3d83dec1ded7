"""Design spaces around a base model: value lists and ranges of override fields, CSV files, seeded samples.

A design is the base model with some override fields (those of `models.overrides.OVERRIDE_OPTIONS`) set. Values
of one field are written as a list (`64,128,256`), a doubling range (`256..2048` = 256, 512, 1024, 2048:
widths and counts of MoE designs are conventionally powers of two) or a stepped range (`256..2048:256`).
A grid is every combination; a sample draws `n` combinations (without repeats) with a seeded generator; a
CSV has one design per row, one override field per column (an empty cell keeps the base value).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError
from moesim.reading import csv_rows, read_text
from moesim.simulator.bounds import SCREEN_SECONDS_PER_POINT, check_count, check_finite, check_seed
from moesim.simulator.models.overrides import OVERRIDE_OPTIONS

# A grid is enumerated (and each design evaluated) before anything is printed: refuse spaces larger than
# this up front rather than run for days; sample them (`--sample N`) instead.
MAX_DESIGNS = 1_000_000
# One field's range expands to at most this many values.
MAX_VALUES_PER_FIELD = 10_000

_FIELD_TYPES: dict[str, type] = {field: kind for _, field, kind, _ in OVERRIDE_OPTIONS}
_FLAG_TO_FIELD: dict[str, str] = {flag.lstrip("-"): field for flag, field, _, _ in OVERRIDE_OPTIONS}
_FIELD_TO_FLAG: dict[str, str] = {field: flag for flag, field in _FLAG_TO_FIELD.items()}


def field_name(name: str) -> str:
    """The override field for a flag spelling (`expert-width`, `--expert-width`) or a field name."""
    text = name.strip()
    if text in _FIELD_TYPES:
        return text
    field = _FLAG_TO_FIELD.get(text.lstrip("-"))
    if field is None:
        raise MoesimError(
            "design field",
            f"unknown field {name!r}",
            f"choose from {', '.join(sorted(_FLAG_TO_FIELD))}",
        )
    return field


Value = int | float | str | bool


@dataclass(frozen=True)
class Design:
    """One design: `index` in its space and the override fields it sets (field → value, sorted)."""

    index: int
    overrides: tuple[tuple[str, Value], ...]

    @classmethod
    def of(cls, index: int, overrides: Mapping[str, Value]) -> Design:
        return cls(index, tuple(sorted(overrides.items())))

    def as_dict(self) -> dict[str, Value]:
        return dict(self.overrides)

    def label(self) -> str:
        """Its overrides in the CLI's spelling (`experts=128 top-k=8`), or `base`."""
        return " ".join(f"{_FIELD_TO_FLAG[field]}={value}" for field, value in self.overrides) or "base"


def _coerce(field: str, text: str) -> Value:
    kind = _FIELD_TYPES[field]
    try:
        if kind is int:
            as_float = float(text)
            if not as_float.is_integer():
                raise ValueError
            return check_count(int(as_float), field, low=0, fix=f"give {field} as a whole number")
        if kind is float:
            return check_finite(float(text), field, fix=f"give {field} as a number")
    except (ValueError, OverflowError):
        raise MoesimError(
            field, f"expects {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None
    if kind is bool:
        lowered = text.strip().lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise MoesimError(field, f"expects true or false, got {text!r}")
        return lowered in ("true", "1", "yes")
    return text.strip()


def _expand_range(field: str, text: str) -> list[Value]:
    low_text, high_text = text.split("..", 1)
    step_text = None
    if ":" in high_text:
        high_text, step_text = high_text.split(":", 1)
    if _FIELD_TYPES[field] is not int:
        raise MoesimError(field, f"ranges are for whole-number fields, got {text!r}", "list the values")
    low, high = _coerce(field, low_text), _coerce(field, high_text)
    assert isinstance(low, int) and isinstance(high, int)
    if low < 1 or high < low:
        raise MoesimError(field, f"range {text!r} needs 1 ≤ low ≤ high")
    if step_text is None:
        count = int(math.log2(high / low)) + 1
        values: list[Value] = [low * 2**i for i in range(count)]
    else:
        step = _coerce(field, step_text)
        assert isinstance(step, int)
        if step < 1:
            raise MoesimError(field, f"range step must be ≥ 1, got {step_text!r}")
        count = (high - low) // step + 1
        if count > MAX_VALUES_PER_FIELD:
            raise MoesimError(field, f"range {text!r} has {count} values", f"at most {MAX_VALUES_PER_FIELD}")
        values = list(range(low, high + 1, step))
    return values


def parse_values(field: str, text: str) -> list[Value]:
    """The values of one field from `64,128`, `256..2048` (doubling) or `256..2048:256` (stepped)."""
    field = field_name(field)
    values: list[Value] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        values.extend(_expand_range(field, part) if ".." in part else [_coerce(field, part)])
    if not values:
        raise MoesimError(field, "needs at least one value")
    return list(dict.fromkeys(values))


def space_size(axes: Mapping[str, Sequence[Value]]) -> int:
    return math.prod(len(values) for values in axes.values()) if axes else 1


def grid(axes: Mapping[str, Sequence[Value]]) -> list[Design]:
    """Every combination of the axes' values (one design, the base, when there are no axes)."""
    size = space_size(axes)
    if size > MAX_DESIGNS:
        raise MoesimError(
            "design space",
            f"{size:,} designs (about {size * 16 * SCREEN_SECONDS_PER_POINT / 3600:,.0f} hours at 16 points each "
            f"on two cores) is more than the {MAX_DESIGNS:,} a screen enumerates",
            "sample it with --sample N",
        )
    fields = list(axes)
    return [
        Design.of(i, dict(zip(fields, combo, strict=True)))
        for i, combo in enumerate(itertools.product(*(axes[f] for f in fields)))
    ]


def sample(axes: Mapping[str, Sequence[Value]], n: int, seed: int) -> list[Design]:
    """`n` distinct combinations drawn uniformly from the grid with a seeded generator (all when n ≥ size)."""
    if n < 1:
        raise MoesimError("--sample", f"must be ≥ 1, got {n}")
    if n > MAX_DESIGNS:
        raise MoesimError("--sample", f"{n} designs is more than {MAX_DESIGNS}")
    size = space_size(axes)
    fields = list(axes)
    rng = np.random.default_rng(check_seed(seed))
    if n >= size:
        return grid(axes)
    chosen: list[int] = []
    seen: set[int] = set()
    while len(chosen) < n:  # rejection of repeats: cheap, since n < size
        for flat in rng.integers(0, size, size=n - len(chosen)).tolist():
            if flat not in seen:
                seen.add(flat)
                chosen.append(flat)
    sizes = [len(axes[f]) for f in fields]
    designs = []
    for i, flat in enumerate(chosen):
        position = np.unravel_index(flat, sizes)
        designs.append(Design.of(i, {f: axes[f][int(p)] for f, p in zip(fields, position, strict=True)}))
    return designs


def read_designs(path: str | Path, check_count: Callable[[int], None] | None = None) -> list[Design]:
    """Designs from a CSV file: a header of field names (or flag spellings), one design per line.

    The designs are counted from the file's non-blank lines before any row is parsed, so a file of too many
    designs — more than `MAX_DESIGNS`, or more than `check_count` (the screen's time bound) accepts — is refused
    before the work of reading it."""
    text = read_text("--designs", path, "CSV of designs")  # binary, non-UTF-8 and empty files refused
    count = max(sum(1 for line in text.splitlines() if line.strip()) - 1, 0)  # the header is the first
    if count > MAX_DESIGNS:
        raise MoesimError(str(path), f"holds {count:,} designs, more than {MAX_DESIGNS:,}")
    if check_count is not None:
        check_count(count)
    header, rows = csv_rows("--designs", text, str(path), "CSV of designs")  # duplicate and ragged refused
    if not header:
        raise MoesimError(str(path), "has no header row", "write field names such as experts,top-k")
    fields = {column: field_name(column) for column in header}
    designs: list[Design] = []
    for number, row in enumerate(rows, start=1):
        try:
            values = {
                fields[column]: _coerce(fields[column], cell) for column, cell in row.items() if cell.strip()
            }
        except MoesimError as error:
            raise MoesimError(f"{path} row {number}: {error.field}", error.problem, error.fix) from None
        designs.append(Design.of(len(designs), values))
    if not designs:
        raise MoesimError(str(path), "holds no designs", "add one row per design below the header")
    return designs


__all__ = [
    "MAX_DESIGNS",
    "Design",
    "field_name",
    "grid",
    "parse_values",
    "read_designs",
    "sample",
    "space_size",
]

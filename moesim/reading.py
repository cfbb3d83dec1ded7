"""One reading layer for every file the tool takes: profiles, model files, traces, statistics, CSVs, results.

Each reader looks at what the file holds before parsing it, so a wrong input is reported for what it is — a
directory, a binary file (a PNG, a zip, an .npz), text that is not UTF-8, an empty file, JSON where TOML is
expected, an array where a table is expected — with the flag that named it and how to fix it. Nothing here
knows the schema of any file; the loaders that call it do.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_INPUT_BYTES = 1 << 30
"""Largest input file read (1 GiB): a trace of 10⁷ tokens; the bound of traces, CSVs and other bulk inputs."""

MAX_TABLE_BYTES = 64 << 20
"""Largest JSON or TOML table read (64 MiB): a statistics file of 48 layers × 65,536 experts is 60 MiB, a model
config or a profile a few kB. Parsed, a table takes several times its size in memory, so the bound is lower
than that of bulk inputs."""

MAX_NESTING = 64
"""Deepest nesting of arrays and tables in a JSON or TOML file: real configs nest 4 levels (a layer list of
tables of lists); a file nested deeper is refused before any reader walks it."""

_MAGIC = (
    (b"\x89PNG", "a PNG image"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a zip archive (an .npz trace is one)"),
    (b"PK\x05\x06", "an empty zip archive"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x7fELF", "an executable"),
    (b"GIF8", "a GIF image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"SQLite format 3", "an SQLite database"),
)


def _describe_binary(data: bytes) -> str | None:
    """What a binary file is, when its first bytes say so; None for text."""
    for magic, what in _MAGIC:
        if data.startswith(magic):
            return what
    if b"\x00" in data[:8192]:
        return "a binary file"
    return None


def _refuse(field: str, path: str | os.PathLike[str], problem: str, fix: str) -> MoesimError:
    """The error for `path`; the path leads the problem unless it already is the field."""
    where = os.fspath(path)
    return MoesimError(field, problem if field == where else f"{where} {problem}", fix)


def read_bytes(
    field: str, path: str | os.PathLike[str], kind: str = "file", max_bytes: int = MAX_INPUT_BYTES
) -> bytes:
    """The bytes of `path`, refusing missing paths, directories, unreadable and oversized files by name."""
    file = Path(path).expanduser()
    if not file.exists():
        raise _refuse(field, path, "does not exist", f"check the path of the {kind}")
    if file.is_dir():
        raise _refuse(field, path, f"is a directory, not a {kind}", "give the path of a file inside it")
    try:
        size = file.stat().st_size
        if size > max_bytes:
            raise _refuse(
                field,
                path,
                f"is {size / 2**20:,.1f} MiB, above the {max_bytes / 2**20:,.0f} MiB limit of a {kind}",
                f"is this really a {kind}?",
            )
        return file.read_bytes()
    except PermissionError:
        raise _refuse(field, path, "cannot be read (permission denied)", "make the file readable") from None
    except OSError as error:
        raise _refuse(field, path, f"cannot be read ({error.strerror})", "check the path") from None


def read_text(
    field: str, path: str | os.PathLike[str], kind: str = "text file", max_bytes: int = MAX_INPUT_BYTES
) -> str:
    """The UTF-8 text of `path` (a byte-order mark is dropped); binary, non-UTF-8 and empty files refused."""
    data = read_bytes(field, path, kind, max_bytes)
    binary = _describe_binary(data)
    if binary:
        raise _refuse(field, path, f"is {binary}, not a {kind}", f"give the path of a {kind}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise _refuse(
            field,
            path,
            f"is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})",
            f"save the {kind} as UTF-8",
        ) from None
    if not text.strip():
        raise _refuse(field, path, "is empty", f"give a {kind} with content")
    return text


def _too_deep(field: str, where: str, kind: str) -> MoesimError:
    return _refuse(
        field,
        where,
        f"nests arrays or tables more than {MAX_NESTING} levels deep",
        f"a {kind} nests a few levels; is this really one?",
    )


def check_nesting(field: str, value: Any, where: str, kind: str) -> Any:
    """`value` if its arrays and tables nest at most MAX_NESTING levels (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > MAX_NESTING:
                    raise _too_deep(field, where, kind)
                stack.append((child, depth + 1))
    return value


def check_finite_numbers(where: str, value: Any) -> Any:
    """`value` if no number in it (at any depth, walked without recursion) is NaN or infinite — JSON has
    neither (RFC 8259), though Python's parser takes them; the first one found is refused by its key path."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise MoesimError(
                f"{where}:{path}" if path else where,
                f"must be a finite number, got {item!r}",
                "JSON has no NaN or Infinity: write the number (or drop the key)",
            )
        if isinstance(item, dict):
            stack.extend((f"{path}.{key}" if path else str(key), child) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((f"{path}[{index}]", child) for index, child in enumerate(item))
    return value


def parse_json(field: str, text: str, where: str, kind: str) -> Any:
    """JSON text parsed; a syntax error names its line and column, a nesting deeper than MAX_NESTING is refused."""
    try:
        return check_nesting(field, json.loads(text), where, kind)
    except json.JSONDecodeError as error:
        raise _refuse(
            field,
            where,
            f"is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})",
            f"fix the syntax of the {kind}",
        ) from None
    except RecursionError:
        raise _too_deep(field, where, kind) from None


def parse_toml(field: str, text: str, where: str, kind: str) -> dict[str, Any]:
    """TOML text parsed; a syntax error names its place, a nesting deeper than MAX_NESTING is refused."""
    try:
        return check_nesting(field, tomllib.loads(text), where, kind)
    except tomllib.TOMLDecodeError as error:
        raise _refuse(field, where, f"is not valid TOML ({error})", f"fix the syntax of the {kind}") from None
    except RecursionError:
        raise _too_deep(field, where, kind) from None


def expect_table(field: str, value: Any, where: str, kind: str) -> dict[str, Any]:
    """`value` if it is a table (a JSON object); a clear error for an array, a number or a string."""
    if isinstance(value, dict):
        return value
    if isinstance(value, bool):
        what = "a JSON boolean"
    elif isinstance(value, int | float):
        what = "a JSON number"
    elif isinstance(value, list):
        what = "a JSON array"
    elif isinstance(value, str):
        what = "a JSON string"
    else:
        what = "JSON null"
    raise _refuse(
        field, where, f"holds {what}, but a {kind} is a table of fields", "give a JSON object {...}"
    )


def _is_json(text: str) -> bool:
    """Whether `text` is JSON: an object (TOML cannot start with `{`) or an array that parses as JSON."""
    head = text.lstrip()
    if head.startswith("{"):
        return True
    if not head.startswith("["):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    except RecursionError:
        return True  # only JSON nests that deep in brackets alone; parse_json names it
    return True


def _is_toml(text: str) -> bool:
    try:
        tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return False
    return True


def read_json(field: str, path: str | os.PathLike[str], kind: str) -> Any:
    """Parsed JSON of `path` (any JSON value; see `read_json_table` for objects)."""
    text = read_text(field, path, kind, MAX_TABLE_BYTES)
    if not _is_json(text) and _is_toml(text):
        raise _refuse(field, path, "holds TOML, not JSON", f"give a JSON {kind}")
    return parse_json(field, text, os.fspath(path), kind)


def read_json_table(field: str, path: str | os.PathLike[str], kind: str) -> dict[str, Any]:
    """A JSON object from `path`."""
    return expect_table(field, read_json(field, path, kind), os.fspath(path), kind)


def read_toml(field: str, path: str | os.PathLike[str], kind: str) -> dict[str, Any]:
    """A TOML document from `path`; JSON content is named as JSON, not reported as a TOML syntax error."""
    text = read_text(field, path, kind, MAX_TABLE_BYTES)
    if _is_json(text):
        raise _refuse(field, path, f"holds JSON, but a {kind} is TOML", f"give a .toml {kind}")
    return parse_toml(field, text, os.fspath(path), kind)


def read_table(field: str, path: str | os.PathLike[str], kind: str) -> tuple[dict[str, Any], str]:
    """A table from a TOML or a JSON file, told apart by content; returns (table, 'toml' | 'json')."""
    text = read_text(field, path, kind, MAX_TABLE_BYTES)
    where = os.fspath(path)
    if _is_json(text):
        return expect_table(field, parse_json(field, text, where, kind), where, kind), "json"
    return parse_toml(field, text, where, kind), "toml"


def csv_rows(
    field: str, lines: list[str] | str, where: str, kind: str
) -> tuple[list[str], list[dict[str, str]]]:
    """The header and the rows of CSV text (a string, or its lines with comments already dropped), each row a
    dict of its cells: a duplicate column name, or a row with more or fewer cells than the header, is refused
    with its line (blank lines are skipped)."""
    reader = csv.reader(io.StringIO(lines, newline="") if isinstance(lines, str) else lines)
    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    for record in reader:
        if not any(cell.strip() for cell in record):
            continue
        if header is None:
            header = [cell.strip() for cell in record]
            repeated = sorted({name for name in header if header.count(name) > 1})
            if repeated:
                raise _refuse(
                    field,
                    where,
                    f"names column {repeated[0]!r} twice in its header",
                    f"give each column of the {kind} once",
                )
            continue
        if len(record) != len(header):
            raise _refuse(
                field,
                where,
                f"row {len(rows) + 1} (line {reader.line_num}) has {len(record)} cells for {len(header)} columns",
                f"give every row of the {kind} one cell per column (empty cells are allowed)",
            )
        rows.append(dict(zip(header, record, strict=True)))
    return header or [], rows


def read_npz(field: str, path: str | os.PathLike[str], kind: str = ".npz file") -> dict[str, Any]:
    """Every array of an .npz archive, loaded without pickle; a corrupt archive or object arrays are named so."""
    import numpy as np

    data = read_bytes(field, path, kind)
    if not data.startswith(b"PK"):
        what = _describe_binary(data) or ("empty" if not data else "text")
        raise _refuse(field, path, f"is {what}, not an .npz archive", f"give a {kind} written by numpy")
    corrupt = _refuse(field, path, "is a corrupt .npz archive", f"regenerate the {kind}")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except ValueError as error:
        if "pickle" in str(error).lower():
            raise _refuse(
                field,
                path,
                "holds Python objects, which are never unpickled (a trace holds integer arrays)",
                f"rewrite the {kind} with numeric arrays only",
            ) from None
        raise corrupt from None
    except (zipfile.BadZipFile, OSError, EOFError, KeyError):
        raise corrupt from None


__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_NESTING",
    "MAX_TABLE_BYTES",
    "check_finite_numbers",
    "check_nesting",
    "csv_rows",
    "expect_table",
    "parse_json",
    "parse_toml",
    "read_bytes",
    "read_json",
    "read_json_table",
    "read_npz",
    "read_table",
    "read_text",
    "read_toml",
]

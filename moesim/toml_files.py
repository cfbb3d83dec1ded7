"""TOML files the way every profile writer and reader in moesim wants them: errors naming the file, and
text with a commented header above the data."""

from __future__ import annotations

import sys
from typing import Any

import tomli_w

from moesim.errors import MoesimError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """Parse TOML text, turning syntax errors into a MoesimError naming the file."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MoesimError(
            source, f"is not valid TOML: {exc}", "fix the syntax or regenerate the file"
        ) from exc


def dump_toml(data: dict[str, Any], header: str = "") -> str:
    """`data` as TOML text, below `header` written as comment lines."""
    text = tomli_w.dumps(data)
    if header:
        text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + "\n" + text
    return text

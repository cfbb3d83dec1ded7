"""TOML text the way every profile writer in moesim writes it: a commented header above the data (reading
goes through `moesim.reading`)."""

from __future__ import annotations

from typing import Any

import tomli_w


def dump_toml(data: dict[str, Any], header: str = "") -> str:
    """`data` as TOML text, below `header` written as comment lines."""
    text = tomli_w.dumps(data)
    if header:
        text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + "\n" + text
    return text

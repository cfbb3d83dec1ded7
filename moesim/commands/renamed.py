"""Old spellings the command line still accepts for one release, each with one deprecation line on stderr.

A renamed flag is rewritten to its new spelling before click parses the arguments, so every command sees
only the new name and its help lists only the new name.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

RENAMED_FLAGS = {"--engine": "--kernel-style"}
"""Old flag spelling → new (renamed in 0.x: "engine" now names only the serving engine)."""


def deprecation(old: str, new: str) -> None:
    """The one line that says an old spelling was used and what to write instead."""
    click.echo(f"warning: {old} is deprecated and goes in the next release; write {new}", err=True)


def rewrite_renamed_flags(args: Sequence[str]) -> list[str]:
    """`args` with every renamed flag (`--old` or `--old=value`) in its new spelling; stops at `--`."""
    out: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            return out + list(args[index:])
        name, equals, value = arg.partition("=")
        if name in RENAMED_FLAGS:
            deprecation(name, RENAMED_FLAGS[name])
            arg = RENAMED_FLAGS[name] + equals + value
        out.append(arg)
    return out


class MoesimGroup(click.Group):
    """The top-level group: old flag spellings are rewritten before any command parses its arguments."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rewrite_renamed_flags(args))


__all__ = ["RENAMED_FLAGS", "MoesimGroup", "deprecation", "rewrite_renamed_flags"]

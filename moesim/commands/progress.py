"""The progress display every command that can run for more than a second or two shows on standard error."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

PROGRESS_MIN_ITEMS = 2
"""Fewer items than this show no bar (the work is one short step)."""


@contextlib.contextmanager
def progress(label: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`; a bar with a count and elapsed time (a spinner when `total` is unknown) on stderr,
    cleared when done, drawn only on a terminal so pipes and JSON output stay clean."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = [SpinnerColumn(), TextColumn(label)]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    console = Console(stderr=True)
    disabled = not console.is_terminal or (total is not None and total < PROGRESS_MIN_ITEMS)
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True, disable=disabled) as bar:
        task = bar.add_task(label, total=total)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        yield advance

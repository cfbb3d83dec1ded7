"""Saving matplotlib figures: the file types every plot command accepts, checked before work, written safely."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from moesim.atomic import check_output_path, is_special_target, open_output

PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def check_plot_path(field: str, path: str | os.PathLike[str]) -> None:
    """Refuse, before any work, a plot path that cannot be written or has a type matplotlib will not draw here."""
    check_output_path(field, path, suffixes=PLOT_SUFFIXES)  # special targets pass regardless of suffix


def plot_format(path: str | os.PathLike[str]) -> str:
    """The format to draw: from the suffix, PNG for standard output and other special targets."""
    suffix = Path(os.path.realpath(path)).suffix.lower() if not is_special_target(path) else ""
    return suffix[1:] if suffix in PLOT_SUFFIXES else "png"


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (files only, no display), imported only when a plot is asked for."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | os.PathLike[str], dpi: int = 150, field: str = "--plot") -> None:
    """Write `fig` to `path` (atomically for files, directly for streams and FIFOs) and close it."""
    try:
        check_plot_path(field, path)
        with open_output(path, binary=True) as handle:
            fig.savefig(handle, format=plot_format(path), dpi=dpi)
    finally:
        pyplot().close(fig)

"""The `moesim` console script and `python -m moesim`: Ctrl-C handling first (`moesim.interrupt`), then the
command group. Ctrl-C while the CLI loads or a command runs ends with status 130, one line and no traceback."""

from __future__ import annotations

from moesim import interrupt


def main() -> None:
    """Console-script entry point."""
    interrupt.install()
    try:
        from moesim.cli import main as run
    except KeyboardInterrupt:  # while numpy, click and the command group load
        interrupt.exit_now()
    run()


__all__ = ["main"]

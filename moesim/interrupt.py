"""Ctrl-C in the `moesim` console script: stop within about a second, whatever the process is doing.

The first SIGINT raises KeyboardInterrupt as Python's own handler does, so that `finally` blocks and the atomic
writers clean up (`moesim.atomic`), and the command ends with one line and status 130. It also starts a
watchdog: a KeyboardInterrupt swallowed on the way (Python drops one raised inside an import lock's callback,
"Exception ignored in ... _get_module_lock") or a slow teardown of a large simulation's objects cannot keep
the process alive past `GRACE_S` (a swallowed one ends it at once, without Python's "Exception ignored"
traceback). A second Ctrl-C exits at once. Standard library only: it is installed before
the CLI loads.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

INTERRUPTED_EXIT_CODE = 130
"""The exit status after Ctrl-C: 128 + SIGINT, as shells report a process the signal ended."""

GRACE_S = 1.0
"""Seconds the process may take to unwind after Ctrl-C before the watchdog ends it."""

MESSAGE = "interrupted; nothing half-written was left behind"

_installed = False


def exit_now() -> None:
    """End the process with status 130 at once (no interpreter teardown), the message on stderr."""
    try:
        sys.stdout.flush()
        sys.stderr.write(f"\n{MESSAGE}\n")
        sys.stderr.flush()
    finally:
        os._exit(INTERRUPTED_EXIT_CODE)


def _second(signum: int, frame: FrameType | None) -> None:
    exit_now()


def _first(signum: int, frame: FrameType | None) -> None:
    watchdog = threading.Timer(GRACE_S, exit_now)
    watchdog.daemon = True
    watchdog.start()
    signal.signal(signal.SIGINT, _second)
    raise KeyboardInterrupt


def _unraisable(unraisable: Any) -> None:
    """A KeyboardInterrupt Python could not raise (it came inside a callback): stop now, without the
    "Exception ignored" traceback; anything else as Python reports it."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        exit_now()
    sys.__unraisablehook__(unraisable)


def install() -> None:
    """Take over SIGINT for this process (the console script calls this first)."""
    global _installed
    signal.signal(signal.SIGINT, _first)
    sys.unraisablehook = _unraisable
    _installed = True


def installed() -> bool:
    """Whether this process is the console script (not, e.g., a test invoking the CLI in-process)."""
    return _installed


__all__ = ["GRACE_S", "INTERRUPTED_EXIT_CODE", "exit_now", "install", "installed"]

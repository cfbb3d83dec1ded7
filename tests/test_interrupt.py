"""Ctrl-C: `moesim` stops promptly with the shell's status for SIGINT (130), one line and no traceback, both
while the CLI loads and in the middle of a long `serve` run. Each case runs the real CLI in a subprocess and
sends it SIGINT, as a terminal does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STOP_LIMIT_S = 2.0
"""Wall time from SIGINT to exit allowed (measured 0.01–0.12 s on two cores at load 12): the watchdog of
`moesim.interrupt` ends the process `GRACE_S` = 1 s after the signal whatever it is doing, so this is a
liveness bound with a second to spare, not a speed figure."""

LONG_SERVE = [
    *("serve", "--model", "olmoe-1b-7b", "--num-prompts", "20000", "--max-concurrency", "64"),
    *("--random-output-len", "1024"),
]
"""About a minute of serving simulation on two cores (8 s with the default 128 output tokens, since the
serving loop works over arrays): still running whenever the signal comes."""

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _interrupt_after(delay_s: float, *args: str) -> tuple[int, str, float]:
    """(exit status, stderr, seconds from SIGINT to exit) of `python -m moesim ARGS` interrupted after
    `delay_s`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "moesim", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay_s)
    assert process.poll() is None, "the command ended before it could be interrupted"
    sent = time.perf_counter()
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    return process.returncode, err, time.perf_counter() - sent


def test_ctrl_c_while_the_cli_loads_exits_130_without_a_traceback() -> None:
    code, err, _ = _interrupt_after(0.3, *LONG_SERVE)  # numpy, simpy and the step model still importing
    assert code == 130, err
    assert "Traceback" not in err


def test_ctrl_c_stops_a_long_serve_run_promptly() -> None:
    code, err, stop_s = _interrupt_after(6.0, *LONG_SERVE)
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert stop_s < STOP_LIMIT_S, stop_s

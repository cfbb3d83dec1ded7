"""Start-up: heavy modules load only when their feature runs (no scipy on the default `simulate` path).

Each command runs in a fresh interpreter, as a user starts it; the test reads `sys.modules` at exit.
(That `--help` imports no numpy is checked in the CLI's contract tests.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Loaded only by the features that need them: optimisers and statistics (fits), trace fitting, plots,
# Parquet, the calibration and validation measurements, Hugging Face configs, clusters.
HEAVY = ("scipy", "sklearn", "matplotlib", "pyarrow", "torch", "triton", "transformers", "ray", "pandas")

_RUN = """
import atexit, json, sys
atexit.register(lambda: sys.__stderr__.write("MODULES " + json.dumps(sorted(sys.modules)) + "\\n"))
sys.argv = ["moesim", *json.loads(sys.argv[1])]
from moesim.cli import main
main()
"""


def modules_loaded(*args: str, top_level: bool = True) -> set[str]:
    """Top-level packages (or every module) `moesim ARGS` has imported when it exits."""
    result = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(list(args))], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stderr.splitlines() if x.startswith("MODULES "))
    names = json.loads(line.removeprefix("MODULES "))
    return {name.split(".")[0] for name in names} if top_level else set(names)


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("simulate", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--batch", "1", "--draft-len", "3"),
        # expert parallelism: the busiest rank's work integrates normal cdfs (routing/normal_cdf.py)
        ("simulate", "--model", "deepseek-v3", "--hardware", "h200", "--gpus", "8"),
    ],
    ids=["help", "simulate", "simulate-ep"],
)
def test_default_paths_import_no_heavy_module(args: tuple[str, ...]) -> None:
    loaded = modules_loaded(*args)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert "moesim" in loaded


def test_a_one_stream_simulation_runs_without_the_event_loop() -> None:
    """A plan on one stream is scheduled without simpy (bit for bit the same, tests/test_events.py); the
    command-line face and the tables load only for a command, not for --help."""
    help_loaded = modules_loaded("--help")
    assert not help_loaded & {"numpy", "rich", "simpy"}, sorted(help_loaded & {"numpy", "rich", "simpy"})
    loaded = modules_loaded("simulate", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--batch", "1")
    assert "simpy" not in loaded and "numpy" in loaded


def test_simulate_loads_neither_the_fast_path_nor_sweeps() -> None:
    """`simulate` times its steps on the event timer: the fast path and the sweep load with their first use."""
    loaded = modules_loaded("simulate", "--model", "olmoe-1b-7b", "--hardware", "h200", top_level=False)
    unused = {"moesim.simulator.execution.fastpath", "moesim.simulator.speculative.sweep"}
    assert "moesim.simulator.execution.events" in loaded and not loaded & unused, sorted(loaded & unused)

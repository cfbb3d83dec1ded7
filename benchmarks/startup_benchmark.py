"""How fast `moesim simulate` (typical routing) starts and answers, as a ratio to `moesim --help` in the same run.

    python benchmarks/startup_benchmark.py                      # this checkout
    python benchmarks/startup_benchmark.py --compare /path/old  # and another checkout, interleaved

Each round runs `python -m moesim --help` and the README's `simulate` example once per checkout, in turn,
so both see the same machine load; the figures are medians over the rounds. The ratio simulate ÷ help
says how much work a simulation adds to starting the tool at all, whatever the machine's speed.
Bytecode caching is on (PYTHONDONTWRITEBYTECODE is dropped) and each command runs once untimed first, as
an installed package starts from its compiled modules: recompiling every module on each start would add
the same fixed cost to both commands and hide the difference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
SIMULATE = ["simulate", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--batch", "1", "--draft-len", "3"]


def wall_s(checkout: Path, args: list[str]) -> float:
    """Seconds one `python -m moesim ARGS` takes with `checkout` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "moesim", *args], env=env, cwd=checkout, check=True, capture_output=True
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--compare", type=Path, default=None, help="another checkout to time beside this one")
    args = parser.parse_args()
    checkouts = {"this checkout": HERE}
    if args.compare is not None:
        checkouts["compared"] = args.compare.resolve()
    times: dict[str, dict[str, list[float]]] = {name: {"help": [], "simulate": []} for name in checkouts}
    for path in checkouts.values():  # untimed: writes the compiled modules
        wall_s(path, ["--help"])
        wall_s(path, SIMULATE)
    for _ in range(args.rounds):
        for name, path in checkouts.items():
            times[name]["help"].append(wall_s(path, ["--help"]))
            times[name]["simulate"].append(wall_s(path, SIMULATE))
    print(f"median of {args.rounds} rounds; command: moesim {' '.join(SIMULATE)}")
    medians = {}
    for name, t in times.items():
        help_s, sim_s = statistics.median(t["help"]), statistics.median(t["simulate"])
        medians[name] = (help_s, sim_s)
        print(
            f"{name:>14}: --help {help_s:.3f} s, simulate {sim_s:.3f} s, simulate / help = {sim_s / help_s:.2f}"
        )
    if "compared" in medians:
        (h_new, s_new), (h_old, s_old) = medians["this checkout"], medians["compared"]
        print(f"simulate: this checkout takes {s_new / s_old:.2f} of the compared one's time "
              f"(ratio to --help {s_new / h_new:.2f} vs {s_old / h_old:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()

"""Peak memory of sampling routed steps against the estimate `routing predict` bounds its work with.

    python benchmarks/routing_sampling_memory.py

For a few (experts, batch, tokens, samples) it samples expert loads with independent and typical routing under
tracemalloc and prints the measured peak next to `sampling_bytes(...)`; the ratio should stay at or below 1 so
the --max-memory-gb limit is conservative. A report, not a test.
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np

from moesim.simulator.routing.base import sampling_bytes
from moesim.simulator.routing.presets import routing_from_cli

CASES = ((128, 8, 1, 4, 200), (128, 8, 16, 4, 200), (256, 8, 8, 8, 100), (64, 6, 32, 2, 400))


def main() -> None:
    print(
        f"{'routing':12} {'N':>5} {'k':>3} {'B':>4} {'T':>3} {'S':>4} {'peak MB':>9} {'estimate MB':>12} ratio"
    )
    for name in ("independent", "typical"):
        for n, k, batch, tokens, samples in CASES:
            model = routing_from_cli(name, n, k, None, None, 1, 1)
            tracemalloc.start()
            model.sample_expert_loads(n, k, batch, tokens, samples, np.random.default_rng(0))
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            estimate = sampling_bytes(n, batch, tokens, samples)
            print(
                f"{name:12} {n:5d} {k:3d} {batch:4d} {tokens:3d} {samples:4d} {peak / 1e6:9.1f} "
                f"{estimate / 1e6:12.1f} {peak / estimate:5.2f}"
            )


if __name__ == "__main__":
    main()

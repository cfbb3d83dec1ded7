"""Peak memory of sampling routing against the estimates the --max-memory-gb limits check.

    python benchmarks/routing_sampling_memory.py

Two estimates: `routing predict`'s sampled steps (`routing.base.sampling_bytes`, independent and typical
routing) and the correlated-routing bank every simulate and sweep samples once per draft length
(`routing.correlated.bank_bytes`). Each case runs under tracemalloc; peak ÷ estimate should stay at or below 1
so the limits are conservative. A report, not a test.
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np

from moesim.simulator.routing.base import sampling_bytes
from moesim.simulator.routing.correlated import BANK_SEQUENCES, bank_bytes, bank_parents, sample_sequences
from moesim.simulator.routing.presets import routing_from_cli

BANK_CASES = ((128, 4), (128, 32), (128, 256), (128, 1024), (1024, 32), (8192, 4))
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


def banks() -> None:
    print(f"\n{'bank: N':>12} {'tokens':>6} {'peak MB':>9} {'estimate MB':>12} ratio")
    for n, tokens in BANK_CASES:
        layer = routing_from_cli("typical", n, 8, None, None, 1, 1).default  # type: ignore[attr-defined]
        tracemalloc.start()
        sample_sequences(layer, bank_parents(tokens), BANK_SEQUENCES, np.random.default_rng(0))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        estimate = bank_bytes(n, tokens, 8)
        print(f"{n:12d} {tokens:6d} {peak / 1e6:9.1f} {estimate / 1e6:12.1f} {peak / estimate:5.2f}")


if __name__ == "__main__":
    main()
    banks()

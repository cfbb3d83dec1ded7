"""Routing model accuracy: round trip on its own traces, robustness on other generating processes, and
prediction from the overlap curve + baseline alone.

For each trace: fit on half the sequences, then compare predicted mean distinct experts with the empirical
counts on the other half for T = 2..16 tokens and B = 1..64 sequences. Prints the worst relative errors.

    python benchmarks/routing_robustness.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from moesim.simulator.routing.correlated import CorrelatedRouting, LayerRouting
from moesim.simulator.routing.estimator import RoutingEstimator
from moesim.simulator.routing.presets import summary_routing
from moesim.simulator.routing.stats import sample_distinct, window_distinct
from moesim.simulator.routing.synthetic import gating_trace, generate_trace, topic_trace
from moesim.simulator.routing.trace import RoutingTrace

TOKENS = (2, 4, 8, 12, 16)
BATCHES = (1, 4, 16, 64)


def split(trace: RoutingTrace, seed: int = 0) -> tuple[RoutingTrace, RoutingTrace]:
    n = trace.sequence_bounds().shape[0]
    order = np.random.default_rng(seed).permutation(n)
    return trace.select_sequences(np.sort(order[: n // 2])), trace.select_sequences(np.sort(order[n // 2 :]))


def errors(
    model, held_out: RoutingTrace, batches: tuple[int, ...], samples: int, layer_of=lambda i: i
) -> dict[tuple[int, int], float]:
    """Relative error of the predicted mean distinct experts (averaged over layers) per (B, T)."""
    rng = np.random.default_rng(1)
    out = {}
    for b in batches:
        for t in TOKENS:
            empirical = np.mean(
                [
                    window_distinct(held_out, i, t)[t - 1]
                    if b == 1
                    else sample_distinct(held_out, i, b, t, samples, rng).mean()
                    for i in range(held_out.n_layers)
                ]
            )
            predicted = np.mean(
                [
                    model.expected_distinct(held_out.n_experts, held_out.top_k, b, t, layer_of(i))
                    for i in range(held_out.n_layers)
                ]
            )
            out[(b, t)] = predicted / empirical - 1
    return out


def report(name: str, errs: dict[tuple[int, int], float]) -> float:
    worst = max(errs.items(), key=lambda item: abs(item[1]))
    rows = sorted({b for b, _ in errs})
    click = "  ".join(
        f"B={b}: " + " ".join(f"{100 * errs[(b, t)]:+.1f}" for t in TOKENS if (b, t) in errs) for b in rows
    )
    print(f"{name:44s} worst {100 * worst[1]:+.2f}% at B={worst[0][0]},T={worst[0][1]}   [{click}]")
    return abs(worst[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer sequences and samples")
    args = parser.parse_args()
    sequences, samples = (400, 150) if args.quick else (1200, 400)
    start = time.perf_counter()
    print(f"relative error of predicted mean distinct experts, % at T = {TOKENS} per batch B")

    # 1. round trip on the model's own traces
    n, k = 128, 8
    popularity = np.arange(1, n + 1, dtype=float) ** -0.5
    truth = LayerRouting(
        tuple(popularity / popularity.sum()), k, sigma=2.0, sequence_share=0.4, token_corr=0.6
    )
    own = generate_trace(CorrelatedRouting(truth, ((0, truth),)), sequences, 32, seed=1)
    fit_half, held = split(own)
    fitted = RoutingEstimator().fit(fit_half)
    got = fitted.model_.layer_params(0)
    print(
        f"round trip: sigma {truth.sigma:.2f} → {got.sigma:.3f}, sequence share {truth.sequence_share:.2f} → "
        f"{got.sequence_share:.3f}, token corr {truth.token_corr:.2f} → {got.token_corr:.3f}"
    )
    worst = {
        "round trip (own process), fitted": report(
            "round trip, fitted from trace", errors(fitted.model_, held, BATCHES, samples)
        )
    }

    # 2. different generating processes: fitted from trace, and from overlap curve + baseline only
    processes = {
        "gating layer, N=128 k=8": gating_trace(n, k, sequences, 32, seed=3),
        "gating layer, N=64 k=6, fast drift": gating_trace(
            64, 6, sequences, 32, drift=0.5, sequence_weight=0.6, seed=4
        ),
        "gating layer, N=256 k=8, slow drift": gating_trace(256, 8, sequences, 32, drift=0.95, seed=5),
        "HMM topic router, N=128 k=8": topic_trace(n, k, sequences, 32, seed=6),
        "HMM topic router, N=64 k=4, sticky": topic_trace(
            64, 4, sequences, 32, stay=0.95, n_topics=16, seed=7
        ),
    }
    for name, trace in processes.items():
        fit_half, held = split(trace)
        estimator = RoutingEstimator().fit(fit_half)
        worst[f"{name}, fitted"] = report(f"{name}, fitted", errors(estimator.model_, held, BATCHES, samples))
        stats = estimator.statistics_[0]
        summary = summary_routing(
            trace.n_experts,
            trace.top_k,
            [float(o) for o in stats["overlap"]],
            float(stats["baseline_overlap"]),
        )
        worst[f"{name}, summary"] = report(
            f"{name}, overlap+baseline only", errors(summary, held, BATCHES, samples, layer_of=lambda i: None)
        )
    print(f"worst overall: {100 * max(worst.values()):.2f}%  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

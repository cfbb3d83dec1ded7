"""Fitting correlated routing layers: from a trace's statistics (see `estimator.RoutingEstimator`) and from
summary statistics (an overlap curve and a baseline overlap).

Fitting a layer is indirect inference: simulate the model with common random numbers and adjust
- sigma, sequence_share and token_corr by least squares until the simulated overlap curve o_1..o_D matches
  the target (the trace's, or the one given on the command line), and
- popularity until each expert's simulated use frequency matches the trace's (from summary statistics: a
  Zipf skew whose use frequencies give the baseline overlap o0 = Σ_e π_e² / k),
alternating the two a few times. Both routes use the same code, so a trace and its summary statistics give
the same model up to the popularity shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.bounds import check_seed
from moesim.simulator.routing.correlated import (
    LayerRouting,
    _expert_masks,
    chain_parents,
    sample_sequences,
)
from moesim.simulator.routing.root import brent_root
from moesim.simulator.routing.stats import (
    baseline_overlap,
    inclusion_frequency,
    overlap_curve,
    popularity_skew,
    window_distinct,
)
from moesim.simulator.routing.trace import RoutingTrace


def successive_inclusion(weights: np.ndarray, top_k: int) -> np.ndarray:
    """Inclusion probabilities of k draws without repeats ∝ weights: π_e = 1 − exp(−λ w_e), Σπ = k."""
    w = np.asarray(weights, dtype=float)
    positive = w > 0
    if positive.sum() <= top_k:
        return positive.astype(float)
    w = w / w[positive].max()

    def excess(log_lam: float) -> float:
        return float(np.sum(-np.expm1(-np.exp(log_lam) * w))) - top_k

    # λ·w_min ≈ e^40 includes even the rarest expert surely: the root lies below (a steep Zipf skew over
    # thousands of experts has w_min far under e^-60)
    high = 60.0 if excess(60.0) >= 0 else 40.0 - float(np.log(w[positive].min()))
    log_lam = brent_root(excess, -30.0, high, xtol=1e-12)
    return -np.expm1(-np.exp(log_lam) * w)


def weights_from_inclusion(frequency: np.ndarray, top_k: int) -> np.ndarray:
    """Popularity weights whose successive-draw inclusion matches `frequency` (inverse of the above)."""
    f = np.clip(np.asarray(frequency, dtype=float), 0.0, None)
    floor = max(1e-4 * top_k / f.size, 1e-12)
    f = np.clip(f, floor, 1.0 - 1e-6)
    w = -np.log1p(-f)
    return w / w.sum()


def _simulate(layer: LayerRouting, tokens: int, n_sequences: int, seed: int) -> np.ndarray:
    return sample_sequences(
        layer, chain_parents(tokens), n_sequences, np.random.default_rng(check_seed(seed))
    )


def _sim_curve(sets: np.ndarray, n_experts: int, max_distance: int) -> np.ndarray:
    """Overlap at distances 1..D of simulated sets [seq, tokens, k]."""
    masks = _expert_masks(sets[:, :, None, :], n_experts)  # [seq, tokens, n]
    k = sets.shape[-1]
    return np.array(
        [(masks[:, d:] & masks[:, :-d]).sum(axis=-1).mean() / k for d in range(1, max_distance + 1)]
    )


SIGMA_MAX = 50.0
DETERMINISTIC_SIGMA = 1e4  # overlap 1: the Gumbel noise no longer matters, every token uses the same experts


def fit_layer(
    frequency: np.ndarray,
    curve: np.ndarray,
    top_k: int,
    n_groups: int = 1,
    topk_groups: int = 1,
    n_sequences: int = 256,
    seed: int = 0,
    rounds: int = 3,
) -> LayerRouting:
    """Fit one layer to its use frequencies [N] (summing to k) and overlap curve o_1..o_D (NaN: unknown)."""
    n = frequency.size
    groups = {"n_groups": n_groups, "topk_groups": topk_groups}
    finite = np.isfinite(curve)
    if not finite.any():
        raise MoesimError("overlap", "no overlap values to fit (sequences of one token only?)")
    p = weights_from_inclusion(frequency, top_k)
    if np.all(curve[finite] >= 1 - 1e-6):
        return LayerRouting(tuple(p), top_k, DETERMINISTIC_SIGMA, 1.0, 1.0, **groups)
    goal = np.clip(frequency, 1e-4 * top_k / n, None)
    max_distance = int(np.flatnonzero(finite).max()) + 1
    tokens = max_distance + 4
    x = np.array([1.0, 0.5, 0.5])

    def make(params: np.ndarray) -> LayerRouting:
        sigma, share, rho = (float(v) for v in params)
        return LayerRouting(tuple(float(v) for v in p), top_k, sigma, share, rho, **groups)

    def residual(params: np.ndarray) -> np.ndarray:
        sim = _sim_curve(_simulate(make(params), tokens, n_sequences, seed), n, max_distance)
        weight = np.ones(max_distance)
        weight[0] = 3.0  # o_1 alone fixes distinct experts of two tokens: match it closely
        return (weight * (sim - curve[:max_distance]))[finite[:max_distance]]

    from scipy.optimize import least_squares  # lazily: scipy.optimize slows every start

    for _ in range(rounds):
        x = least_squares(
            residual, x, bounds=([0.0, 0.0, 0.0], [SIGMA_MAX, 1.0, 0.999]), diff_step=0.03, max_nfev=60
        ).x
        sets = _simulate(make(x), 16, 4 * n_sequences, seed + 1)
        model_freq = np.bincount(sets.ravel(), minlength=n) / (sets.shape[0] * sets.shape[1])
        p = p * goal / np.clip(model_freq, 0.5 / (sets.shape[0] * sets.shape[1]), None)
        p = p / p.sum()
    return make(x)


def trace_layer_statistics(trace: RoutingTrace, layer: int, max_distance: int) -> dict[str, Any]:
    """The empirical statistics of one trace layer that fitting uses and the stats file records."""
    frequency = inclusion_frequency(trace, layer)
    return {
        "layer": trace.layer_indices[layer],
        "overlap": overlap_curve(trace, layer, max_distance),
        "baseline_overlap": baseline_overlap(trace, layer),
        "inclusion_frequency": frequency,
        "popularity_skew": popularity_skew(frequency, trace.top_k),
        "distinct_vs_tokens": window_distinct(trace, layer, max_distance),
    }


# ---- from summary statistics ----


def zipf_for_baseline(n_experts: int, top_k: int, baseline: float) -> np.ndarray:
    """Zipf popularity p ∝ rank^−α whose successive-draw inclusion gives baseline overlap Σπ²/k = `baseline`."""
    uniform = top_k / n_experts
    if baseline < uniform - 1e-9:
        raise MoesimError(
            "baseline_overlap", f"{baseline:g} is below k/N = {uniform:g}, the least any routing can give"
        )
    ranks = np.arange(1, n_experts + 1, dtype=float)

    def overlap(alpha: float) -> float:
        pi = successive_inclusion(ranks**-alpha, top_k)
        return float(np.sum(pi**2) / top_k)

    if baseline <= uniform + 1e-9:
        return np.full(n_experts, 1.0 / n_experts)
    if baseline >= overlap(8.0):
        raise MoesimError(
            "baseline_overlap", f"{baseline:g} is too close to 1 to reach with a popularity skew"
        )
    alpha = brent_root(lambda a: overlap(a) - baseline, 0.0, 8.0, xtol=1e-6)
    weights = ranks**-alpha
    return weights / weights.sum()


def layer_from_summary(
    n_experts: int,
    top_k: int,
    overlap: Sequence[float] | None,
    baseline: float | None,
    n_groups: int = 1,
    topk_groups: int = 1,
    n_sequences: int = 256,
    seed: int = 0,
) -> LayerRouting:
    """Layer parameters from an overlap curve o1..oD (the last value holds beyond D) and baseline o0.

    Popularity is a Zipf skew whose use frequencies give o0; the rest is fitted as for a trace.
    """
    if not 1 <= top_k <= n_experts:
        raise MoesimError("top_k", f"must be between 1 and the expert count {n_experts}, got {top_k}")
    o0 = top_k / n_experts if baseline is None else float(baseline)
    if not 0 <= o0 <= 1:
        raise MoesimError("baseline_overlap", f"must be between 0 and 1, got {o0}")
    popularity = zipf_for_baseline(n_experts, top_k, o0)
    groups = {"n_groups": n_groups, "topk_groups": topk_groups}
    if not overlap:
        return LayerRouting(tuple(popularity), top_k, **groups)
    curve = np.asarray(overlap, dtype=float)
    if np.any(~np.isfinite(curve)) or np.any(curve < 0) or np.any(curve > 1):
        raise MoesimError("overlap", f"values must be between 0 and 1, got {list(overlap)}")
    if np.any(curve < o0 - 1e-9):
        raise MoesimError(
            "overlap",
            f"overlap {curve.min():g} is below the baseline overlap {o0:g}",
            "overlaps must be ≥ baseline",
        )
    frequency = successive_inclusion(popularity, top_k)
    extended = np.r_[curve, np.full(max(0, 16 - curve.size), curve[-1])]  # the last value holds beyond D
    return fit_layer(frequency, extended, top_k, n_groups, topk_groups, n_sequences, seed)

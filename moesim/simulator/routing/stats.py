"""Empirical routing statistics of a trace: overlap vs distance, baseline overlap, popularity, distinct counts.

Definitions (used everywhere): a token's expert set S has k experts per layer. The *overlap at distance d*
is the mean of |S_t ∩ S_{t+d}| / k over positions t of the same sequence. The *baseline overlap* is the same
mean over pairs of tokens from different sequences: what popularity alone gives (k/N for uniform routing).
"""

from __future__ import annotations

import numpy as np

from moesim.simulator.routing.trace import RoutingTrace


def _same_sequence(trace: RoutingTrace, distance: int) -> np.ndarray:
    return trace.sequence_ids[distance:] == trace.sequence_ids[:-distance]


def overlap_curve(trace: RoutingTrace, layer: int, max_distance: int) -> np.ndarray:
    """[max_distance] overlap at distances 1..D (NaN where no sequence is long enough)."""
    masks = trace.masks(layer)
    curve = np.full(max_distance, np.nan)
    for d in range(1, min(max_distance, trace.n_tokens - 1) + 1):
        valid = _same_sequence(trace, d)
        if valid.any():
            shared = (masks[d:][valid] & masks[:-d][valid]).sum(axis=1)
            curve[d - 1] = shared.mean() / trace.top_k
    return curve


def baseline_overlap(trace: RoutingTrace, layer: int) -> float:
    """Mean overlap of token pairs from different sequences (exact over all such pairs)."""
    masks = trace.masks(layer).astype(np.int64)
    _, seq_index = np.unique(trace.sequence_ids, return_inverse=True)
    per_seq = np.zeros((seq_index.max() + 1, trace.n_experts), dtype=np.int64)
    np.add.at(per_seq, seq_index, masks)
    totals = per_seq.sum(axis=0)
    lengths = np.bincount(seq_index).astype(np.int64)
    pairs = trace.n_tokens**2 - int(np.sum(lengths**2))
    if pairs == 0:
        return float("nan")
    shared = float(np.sum(totals**2) - np.sum(per_seq**2))
    return shared / pairs / trace.top_k


def inclusion_frequency(trace: RoutingTrace, layer: int) -> np.ndarray:
    """[n_experts] fraction of tokens that use each expert (sums to k)."""
    counts = np.bincount(trace.experts[:, layer].ravel(), minlength=trace.n_experts)
    return counts / trace.n_tokens


def popularity_skew(frequency: np.ndarray, top_k: int) -> dict[str, float]:
    """Summaries of how uneven expert use is: max/mean load, coefficient of variation, effective experts."""
    mean = top_k / frequency.size
    return {
        "max_over_mean": float(frequency.max() / mean),
        "coefficient_of_variation": float(frequency.std() / mean),
        "effective_experts": float(top_k**2 / np.sum(frequency**2)) if np.any(frequency) else 0.0,
        "unused_experts": int(np.sum(frequency == 0)),
    }


def window_distinct(trace: RoutingTrace, layer: int, max_tokens: int) -> np.ndarray:
    """[max_tokens] mean distinct experts in windows of T = 1..max_tokens consecutive tokens of one sequence."""
    masks = trace.masks(layer)
    union = masks.copy()
    means = np.full(max_tokens, np.nan)
    means[0] = trace.top_k
    for t in range(2, max_tokens + 1):
        if trace.n_tokens < t:
            break
        valid = trace.sequence_ids[t - 1 :] == trace.sequence_ids[: trace.n_tokens - t + 1]
        union = union[:-1] | masks[t - 1 :]
        if not valid.any():
            break
        means[t - 1] = union[valid].sum(axis=1).mean()
    return means


def sample_distinct(
    trace: RoutingTrace, layer: int, batch: int, tokens: int, n_samples: int, rng: np.random.Generator
) -> np.ndarray:
    """Distinct experts of `batch` different sequences × `tokens` consecutive tokens, sampled from the trace."""
    bounds = trace.sequence_bounds()
    long_enough = bounds[(bounds[:, 1] - bounds[:, 0]) >= tokens]
    if long_enough.shape[0] < batch:
        return np.full(n_samples, np.nan)
    masks = trace.masks(layer)
    counts = np.empty(n_samples)
    for i in range(n_samples):
        chosen = long_enough[rng.choice(long_enough.shape[0], size=batch, replace=False)]
        starts = chosen[:, 0] + rng.integers(0, chosen[:, 1] - chosen[:, 0] - tokens + 1)
        rows = (starts[:, None] + np.arange(tokens)[None, :]).ravel()
        counts[i] = masks[rows].any(axis=0).sum()
    return counts

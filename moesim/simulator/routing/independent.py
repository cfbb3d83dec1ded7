"""Independent routing: every token picks its top-k experts afresh, uniformly or by a popularity skew."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.errors import MoesimError


def expected_distinct_uniform(n_experts: int, top_k: int, tokens: int | np.ndarray) -> np.ndarray:
    """Closed form N·(1 − (1 − k/N)^T) for T independent tokens under uniform routing."""
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** np.asarray(tokens, dtype=float))


def sample_topk_without_replacement(
    weights: np.ndarray, top_k: int, n_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """[n_draws, top_k] distinct expert ids drawn with probability ∝ weights (Gumbel top-k)."""
    gumbel = rng.gumbel(size=(n_draws, weights.size))
    keys = np.log(weights)[None, :] + gumbel
    return np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]


@dataclass(frozen=True)
class IndependentRouting:
    """Tokens route independently of each other; `popularity_alpha` skews expert popularity (Zipf-like).

    popularity_alpha = 0 is uniform routing, with the exact closed form; otherwise the expectation is
    Σ_e 1 − (1 − p_e)^T with p_e the inclusion probability of expert e, estimated by seeded sampling.
    """

    popularity_alpha: float = 0.0
    seed: int = 0

    @property
    def description(self) -> str:
        if self.popularity_alpha == 0:
            return "independent uniform routing"
        return f"independent routing, Zipf popularity skew alpha={self.popularity_alpha:g}"

    def popularity(self, n_experts: int) -> np.ndarray:
        ranks = np.arange(1, n_experts + 1, dtype=float)
        weights = ranks ** (-self.popularity_alpha)
        return weights / weights.sum()

    def expected_distinct(
        self, n_experts: int, top_k: int, batch: int, tokens_per_seq: int, layer: int | None = None
    ) -> float:
        _check(n_experts, top_k, batch, tokens_per_seq)
        tokens = batch * tokens_per_seq
        if self.popularity_alpha == 0:
            return float(expected_distinct_uniform(n_experts, top_k, tokens))
        rng = np.random.default_rng(self.seed)
        picks = sample_topk_without_replacement(self.popularity(n_experts), top_k, 20000, rng)
        inclusion = np.bincount(picks.ravel(), minlength=n_experts) / picks.shape[0]
        return float(np.sum(1.0 - (1.0 - inclusion) ** tokens))

    def sample_expert_loads(
        self,
        n_experts: int,
        top_k: int,
        batch: int,
        tokens_per_seq: int,
        n_samples: int,
        rng: np.random.Generator,
        layer: int | None = None,
    ) -> np.ndarray:
        _check(n_experts, top_k, batch, tokens_per_seq)
        tokens = batch * tokens_per_seq
        picks = sample_topk_without_replacement(self.popularity(n_experts), top_k, n_samples * tokens, rng)
        sample_index = np.repeat(np.arange(n_samples), tokens * top_k)
        loads = np.zeros((n_samples, n_experts), dtype=np.int64)
        np.add.at(loads, (sample_index, picks.ravel()), 1)
        return loads


def _check(n_experts: int, top_k: int, batch: int, tokens_per_seq: int) -> None:
    if n_experts < 1:
        raise MoesimError("experts", f"must be at least 1, got {n_experts}")
    if not 1 <= top_k <= n_experts:
        raise MoesimError("top_k", f"must be between 1 and the expert count {n_experts}, got {top_k}")
    if batch < 1 or tokens_per_seq < 1:
        raise MoesimError(
            "batch", f"batch and tokens per sequence must be ≥ 1, got {batch} and {tokens_per_seq}"
        )

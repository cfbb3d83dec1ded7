"""The small interface every routing model offers to the rest of the simulator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

QUANTILES = (0.1, 0.5, 0.9)

SAMPLING_BYTES_PER_TOKEN_EXPERT = 32
"""Peak bytes a sampled step holds per (token, expert) pair: Gumbel noise, the keys, their negation and the
argpartition indices, 8 bytes each (see `sample_topk_without_replacement`). benchmarks/routing_sampling_memory.py
measures peak/estimate ≤ 1.0 for independent and typical routing above a few MB (a fixed ~20 MB aside)."""

MIN_QUANTILE_SAMPLES = 20
"""Fewest sampled steps that still give a p10 and a p90 (two samples beyond each)."""


def sampling_bytes(n_experts: int, batch: int, tokens_per_seq: int, n_samples: int) -> int:
    """Estimated peak memory of sampling `n_samples` steps of batch × tokens_per_seq tokens."""
    return SAMPLING_BYTES_PER_TOKEN_EXPERT * n_samples * batch * tokens_per_seq * n_experts


def affordable_samples(
    n_experts: int, batch: int, tokens_per_seq: int, budget_bytes: float, wanted: int
) -> int:
    """The most samples (at most `wanted`) whose sampling stays within `budget_bytes`; 0 when even
    MIN_QUANTILE_SAMPLES would not."""
    per_sample = sampling_bytes(n_experts, batch, tokens_per_seq, 1)
    fits = int(budget_bytes // per_sample)
    return min(wanted, fits) if fits >= MIN_QUANTILE_SAMPLES else 0


@dataclass(frozen=True)
class DistinctExperts:
    """Distribution of the number of distinct experts one MoE layer touches in one step."""

    mean: float
    p10: float
    p50: float
    p90: float

    @classmethod
    def from_samples(cls, counts: np.ndarray) -> DistinctExperts:
        q10, q50, q90 = np.quantile(counts, QUANTILES)
        return cls(float(np.mean(counts)), float(q10), float(q50), float(q90))


@runtime_checkable
class RoutingModel(Protocol):
    """Which experts the tokens of one step hit, per MoE layer.

    `batch` sequences each contribute `tokens_per_seq` consecutive tokens (a verification step has
    tokens_per_seq = K + 1). `layer` is the MoE layer's index among all layers, for per-layer statistics.
    """

    @property
    def description(self) -> str:
        """The routing assumption in words, printed with every result."""
        ...

    def expected_distinct(
        self, n_experts: int, top_k: int, batch: int, tokens_per_seq: int, layer: int | None = None
    ) -> float:
        """Mean distinct experts hit in one layer."""
        ...

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
        """Integer array [n_samples, n_experts]: token assignments each expert receives in one step."""
        ...

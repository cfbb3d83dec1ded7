"""Acceptance: expected tokens per verification step, the best draft length and the peak batch.

    speedup(B, K) = E[tokens per step] × T_decode(B) ÷ (T_draft(B, K) + T_verify(B, K))

E[tokens per step] = (1 − α^(K+1)) ÷ (1 − α) for a per-token acceptance rate α (accepted draft tokens plus
the one the target always adds), or a given mean acceptance length L, capped at K + 1. The acceptance
kernel (comparing draft and target tokens) is part of the verification plan, so T_verify includes it.
The speedup itself is `speculative.point.SpeculativePoint.speedup` (with the serving engine's terms).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.routing.root import brent_root
from moesim.simulator.scenario import DEFAULT_ACCEPTANCE, check_acceptance


def tokens_per_step(acceptance: float | np.ndarray, draft_len: int | np.ndarray) -> np.ndarray:
    """E[tokens per verification step] = (1 − α^(K+1)) / (1 − α); K + 1 when α = 1."""
    alpha = np.asarray(acceptance, dtype=float)
    k = np.asarray(draft_len, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_alpha = np.log(alpha)
        geometric = np.expm1((k + 1.0) * log_alpha) / np.expm1(log_alpha)  # accurate as α → 1
    return np.where(alpha == 1.0, k + 1.0, geometric)


def expected_tokens(
    draft_len: int, acceptance: float | None = DEFAULT_ACCEPTANCE, acceptance_length: float | None = None
) -> float:
    """Tokens one verification step yields, from α (None: DEFAULT_ACCEPTANCE) or from a mean acceptance
    length (capped at K + 1)."""
    if acceptance_length is not None:
        if not (math.isfinite(acceptance_length) and acceptance_length >= 1.0):
            raise MoesimError(
                "acceptance_length", f"must be a finite number ≥ 1 token per step, got {acceptance_length}"
            )
        return float(min(acceptance_length, draft_len + 1))
    alpha = DEFAULT_ACCEPTANCE if acceptance is None else acceptance
    check_acceptance(alpha)
    return float(tokens_per_step(alpha, draft_len))


def capped_draft_lens(acceptance_length: float | None, draft_lens: Sequence[int]) -> list[int]:
    """The draft lengths K at which a mean acceptance length is above the K + 1 tokens a round can yield,
    so that the round is taken to yield K + 1 (`expected_tokens`): a sweep says so beside its figures."""
    if acceptance_length is None:
        return []
    return sorted({k for k in draft_lens if acceptance_length > k + 1})


def all_accepted_share(tokens: float, draft_len: int) -> float:
    """The share of rounds that accept all K drafts, α^K, for the per-token acceptance α that yields
    `tokens` per step under `tokens_per_step` (geometric acceptance): 0 at one token, 1 at K + 1."""
    if draft_len < 1:
        raise MoesimError("draft_len", f"must be ≥ 1, got {draft_len}")
    if not (math.isfinite(tokens) and 1.0 <= tokens <= draft_len + 1):
        raise MoesimError("acceptance_length", f"must be in [1, K + 1 = {draft_len + 1}], got {tokens}")
    if tokens == 1.0 or tokens == draft_len + 1:
        return 0.0 if tokens == 1.0 else 1.0
    alpha = brent_root(lambda a: float(tokens_per_step(a, draft_len)) - tokens, 0.0, 1.0)
    return float(alpha**draft_len)


def _first_best(values: list[int], speedups: list[float]) -> tuple[int, float]:
    """The value with the highest speedup, the first one on ties."""
    index = int(np.argmax(np.asarray(speedups)))
    return values[index], float(speedups[index])


class _Scored(Protocol):
    @property
    def speedup(self) -> float: ...


ScoredT = TypeVar("ScoredT", bound=_Scored)
KeyT = TypeVar("KeyT", bound=Hashable)


def best_draft_len(rows: Iterable[ScoredT], key: Callable[[ScoredT], KeyT]) -> dict[KeyT, ScoredT]:
    """The best-draft-length rule, the one place it is written: for each `key` (e.g. a model and batch), the
    row (one per draft length, in the order swept) with the highest speedup; the first one on ties."""
    best: dict[KeyT, ScoredT] = {}
    for row in rows:
        group = key(row)
        if group not in best or row.speedup > best[group].speedup:
            best[group] = row
    return best


def peak_batch(batches: list[int], speedups: list[float]) -> tuple[int, float]:
    """The batch size at which SD helps most (the smaller one on ties)."""
    return _first_best(batches, speedups)

"""How many tokens each verification round yields: seeded draws that match the acceptance model.

Each of the K draft tokens is accepted with probability α as long as every earlier one was (a chain
drafter), and the target always adds one token: tokens = 1 + (leading accepted drafts), whose mean is
(1 − α^(K+1)) / (1 − α) — `speculative.acceptance.tokens_per_step`. Given a mean acceptance length L instead,
α is the rate whose mean is L (bisection; L = K + 1 means α = 1).
"""

from __future__ import annotations

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.bounds import check_seed
from moesim.simulator.scenario import check_acceptance
from moesim.simulator.speculative.acceptance import expected_tokens, tokens_per_step

BISECTION_STEPS = 60  # halves [0, 1] to below 1e-18: exact in double precision
DRAW_BLOCK = 4096  # rounds drawn at once (one numpy call instead of one per step)


def rate_for_length(acceptance_length: float, draft_len: int) -> float:
    """The per-token rate α whose expected tokens per round is `acceptance_length` (≤ K + 1)."""
    target = expected_tokens(draft_len, acceptance_length=acceptance_length)
    if target >= draft_len + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        if float(tokens_per_step(middle, draft_len)) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def tokens_of_rounds(accepted: np.ndarray) -> np.ndarray:
    """Per round (a row of K accepted-or-not drafts), 1 + its leading accepted drafts: what
    `1 + cumprod(accepted, axis=1).sum(axis=1)` gives, one column at a time (numpy's cumprod along a short
    axis is slow)."""
    leading = accepted[:, 0].copy()
    tokens = 1 + leading.astype(np.int64)
    for column in range(1, accepted.shape[1]):
        leading &= accepted[:, column]
        tokens += leading
    return tokens


class AcceptanceDraws:
    """A seeded stream of tokens-per-round draws for K draft tokens at rate α (or mean length L)."""

    def __init__(
        self,
        draft_len: int,
        acceptance: float,
        acceptance_length: float | None = None,
        seed: int = 0,
    ) -> None:
        if draft_len < 1:
            raise MoesimError("draft_len", f"must be ≥ 1 for speculative decoding, got {draft_len}")
        check_acceptance(acceptance)
        self.draft_len = draft_len
        self.rate = rate_for_length(acceptance_length, draft_len) if acceptance_length else acceptance
        self._rng = np.random.default_rng([check_seed(seed), 2])
        self._rounds = np.zeros(0, dtype=np.int64)  # drawn ahead in blocks; the stream does not depend on it

    def draw(self, n: int) -> np.ndarray:
        """Tokens (1 … K + 1) that each of n sequences gets from one round."""
        if self._rounds.size < n:
            accepted = self._rng.random((max(n, DRAW_BLOCK), self.draft_len)) < self.rate
            self._rounds = np.concatenate([self._rounds, tokens_of_rounds(accepted)])
        out, self._rounds = self._rounds[:n], self._rounds[n:]
        return out

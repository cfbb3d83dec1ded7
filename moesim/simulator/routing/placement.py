"""Expert placement: which expert-parallel rank holds each expert id — the one implementation.

Two placements: `contiguous` blocks of ids (0..N/E−1 on rank 0, ...) and `round-robin` (expert e on rank
e mod E). Both spellings of the second, `round-robin` and `round_robin`, are accepted everywhere; help and
output show `round-robin`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from moesim.errors import MoesimError

Placement = Literal["contiguous", "round-robin"]
PLACEMENTS: tuple[str, ...] = ("contiguous", "round-robin")
PLACEMENT_SPELLINGS: tuple[str, ...] = ("contiguous", "round-robin", "round_robin")


def normalise_placement(placement: str) -> Placement:
    """The canonical name of a placement (`round_robin` → `round-robin`); refuses unknown names."""
    canonical = placement.replace("_", "-") if isinstance(placement, str) else placement
    if canonical not in PLACEMENTS:
        raise MoesimError(
            "placement", f"unknown expert placement {placement!r}", "choose contiguous or round-robin"
        )
    return canonical  # type: ignore[return-value]


def expert_to_rank(n_experts: int, ep: int, placement: Placement = "contiguous") -> np.ndarray:
    """Rank holding each expert id: contiguous blocks (ids 0..N/E−1 on rank 0, ...) or round-robin (e mod E).

    When E does not divide N the first N mod E ranks hold one expert more.
    """
    if ep < 1 or n_experts < 1:
        raise MoesimError("ep", f"need at least one rank and one expert, got {ep} and {n_experts}")
    ids = np.arange(n_experts)
    if normalise_placement(placement) == "round-robin":
        return ids % ep
    sizes = np.full(ep, n_experts // ep)
    sizes[: n_experts % ep] += 1
    return np.repeat(np.arange(ep), sizes)


def experts_per_rank(n_experts: int, ep: int, placement: Placement = "contiguous") -> list[np.ndarray]:
    """The expert ids each rank holds."""
    owner = expert_to_rank(n_experts, ep, placement)
    return [np.flatnonzero(owner == rank) for rank in range(ep)]

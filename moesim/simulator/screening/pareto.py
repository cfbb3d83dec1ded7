"""Which designs win: a ranking for a stated objective, and the Pareto front of two objectives.

Objectives are read from a design's figures: `speedup@B` (SD speedup at batch B, best draft length),
`tokens@B` (tokens/s with SD at batch B) or `peak-speedup` (the highest speedup over the screened batches).
The front is between small-batch SD speedup (the smallest screened batch) and large-batch throughput
(tokens/s at the largest): a design is on it when no other design is at least as good in both and better
in one.
"""

from __future__ import annotations

from collections.abc import Sequence

from moesim.errors import MoesimError
from moesim.simulator.screening.evaluate import DesignResult

OBJECTIVE_FORMS = ("speedup@B", "tokens@B", "peak-speedup")


def check_objective(objective: str, batches: Sequence[int]) -> str:
    """Refuse an objective that is not one of OBJECTIVE_FORMS over the screened batches."""
    if objective == "peak-speedup":
        return objective
    kind, _, batch_text = objective.partition("@")
    if kind not in ("speedup", "tokens") or not batch_text.isdigit():
        raise MoesimError(
            "--objective", f"unknown objective {objective!r}", f"write one of {', '.join(OBJECTIVE_FORMS)}"
        )
    if int(batch_text) not in batches:
        raise MoesimError(
            "--objective",
            f"batch {batch_text} is not screened",
            f"choose one of {', '.join(map(str, batches))} or add it to --batch",
        )
    return objective


def objective_value(result: DesignResult, objective: str) -> float | None:
    """The design's value of `objective` (None when that batch did not fit)."""
    if objective == "peak-speedup":
        peak = result.peak
        return None if peak is None else peak[1]
    kind, _, batch_text = objective.partition("@")
    metrics = result.at(int(batch_text))
    if metrics is None:
        return None
    return metrics.speedup if kind == "speedup" else metrics.tokens_per_s


def ranking(results: Sequence[DesignResult], objective: str) -> list[int]:
    """Design indices, best first (ties: lower index first); designs without a value are left out."""
    valued = [(value, r.index) for r in results if (value := objective_value(r, objective)) is not None]
    return [index for _, index in sorted(valued, key=lambda pair: (-pair[0], pair[1]))]


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Positions of the non-dominated points when both coordinates are maximised (equal points all kept).

    A point is dominated when another is at least as good in both coordinates and better in one: by a point
    of larger x with y' ≥ y, or of equal x with y' > y.
    """
    by_x: dict[float, list[int]] = {}
    for i, (x, _) in enumerate(points):
        by_x.setdefault(x, []).append(i)
    front: list[int] = []
    best_y_right = float("-inf")  # the largest y among points of larger x
    for x in sorted(by_x, reverse=True):
        group = by_x[x]
        top_y = max(points[i][1] for i in group)
        front.extend(i for i in group if points[i][1] == top_y and top_y > best_y_right)
        best_y_right = max(best_y_right, top_y)
    return sorted(front)


def front_axes(batches: Sequence[int]) -> tuple[str, str]:
    """The two objectives of the front: SD speedup at the smallest batch, tokens/s at the largest."""
    return f"speedup@{min(batches)}", f"tokens@{max(batches)}"


def design_front(results: Sequence[DesignResult], batches: Sequence[int]) -> list[int]:
    """Design indices on the front (designs missing either figure are not candidates)."""
    x_name, y_name = front_axes(batches)
    candidates = []
    for r in results:
        x, y = objective_value(r, x_name), objective_value(r, y_name)
        if x is not None and y is not None:
            candidates.append((r.index, (x, y)))
    positions = pareto_front([point for _, point in candidates])
    return [candidates[p][0] for p in positions]


__all__ = [
    "OBJECTIVE_FORMS",
    "check_objective",
    "design_front",
    "front_axes",
    "objective_value",
    "pareto_front",
    "ranking",
]

"""Constraints that keep designs comparable: equal active or total parameters, or fitting the devices.

A designer compares MoE designs at equal cost, not across arbitrary sizes. A parameter constraint is met
either by solving a named free field (e.g. the expert width that brings each design's active parameters
to the base model's) or, without a free field, by dropping designs further than `tolerance` from the
target. `fits` drops designs whose memory does not fit the layout at some screened batch size (decided
during evaluation, by the same check `sweep` applies). Every dropped design keeps its reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from moesim.errors import MoesimError
from moesim.simulator.models.overrides import apply_overrides
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.models.weights import param_counts
from moesim.simulator.screening.space import Design, Value, field_name

CONSTRAINT_KINDS = ("active-params", "total-params", "fits")
# Relative distance from the target parameter count a design may keep (filtering, or what a solved free
# field must reach): 2% is below the spread of published "A3B"-style size labels.
DEFAULT_TOLERANCE = 0.02
# The free field is searched in [1, this × its base value] (or up to this when the base value is 0).
SEARCH_FACTOR = 64


def _counter(kind: str) -> Callable[[ModelSpec], int]:
    if kind == "active-params":
        return lambda spec: param_counts(spec).active
    return lambda spec: param_counts(spec).total


@dataclass(frozen=True)
class Constraint:
    """`kind` (one of CONSTRAINT_KINDS); `free_field`: the field solved to meet a parameter constraint
    (None: filter); `multiple`: the solved value is a multiple of this (e.g. 64 for GEMM-friendly widths);
    `tolerance`: relative distance from the base model's count that is accepted."""

    kind: str
    free_field: str | None = None
    multiple: int = 1
    tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        if self.kind not in CONSTRAINT_KINDS:
            raise MoesimError(
                "--constraint", f"unknown constraint {self.kind!r}", f"choose {', '.join(CONSTRAINT_KINDS)}"
            )
        if self.free_field is not None:
            if self.kind == "fits":
                raise MoesimError("--free", "fits is a filter; it does not solve a field", "drop --free")
            object.__setattr__(self, "free_field", field_name(self.free_field))
        if self.multiple < 1:
            raise MoesimError("--free-multiple", f"must be ≥ 1, got {self.multiple}")
        if not 0 < self.tolerance < 1:
            raise MoesimError("--tolerance", f"must be between 0 and 1, got {self.tolerance}")

    @property
    def is_parameter(self) -> bool:
        return self.kind != "fits"

    def statement(self, base: ModelSpec) -> str:
        """One sentence for the output: what was held fixed and how."""
        if self.kind == "fits":
            return "designs whose memory does not fit the layout at every screened batch are dropped"
        what = "active" if self.kind == "active-params" else "total"
        target = _counter(self.kind)(base)
        if self.free_field:
            step = f" (a multiple of {self.multiple})" if self.multiple > 1 else ""
            return (
                f"{what} parameters fixed at the base model's {target / 1e9:.3f} B by solving "
                f"{self.free_field}{step} per design, within {self.tolerance:.0%}"
            )
        return (
            f"{what} parameters within {self.tolerance:.0%} of the base model's {target / 1e9:.3f} B (filter)"
        )


@dataclass
class ConstrainedDesigns:
    """Designs that meet the parameter constraints (with the fields solved for each) and those dropped."""

    kept: list[tuple[Design, ModelSpec, dict[str, Value]]] = field(default_factory=list)
    dropped: list[dict[str, object]] = field(default_factory=list)


def _solve(
    base: ModelSpec, overrides: dict[str, object], constraint: Constraint, target: int
) -> tuple[int, ModelSpec]:
    """The free field's value (a multiple of `multiple`) whose count is nearest the target, by bisection
    (counts grow with widths, counts and layer numbers); raises MoesimError when none is close enough."""
    free = constraint.free_field
    assert free is not None
    count = _counter(constraint.kind)

    def build(units: int) -> ModelSpec:
        return apply_overrides(base, {**overrides, free: units * constraint.multiple})

    counts: dict[int, int] = {}

    def counted(units: int) -> int:
        if units not in counts:
            counts[units] = count(build(units))
        return counts[units]

    base_value = int(getattr(base, free, 0) or 0)
    high = max(1, (SEARCH_FACTOR * max(base_value, 1)) // constraint.multiple)
    low = 1
    if counted(high) < target:
        raise MoesimError(free, f"no value up to {high * constraint.multiple} reaches the target")
    # Counts are affine in most free fields (widths, counts): try the secant's answer first and keep it
    # if it is the smallest value reaching the target; otherwise bisect for that value.
    if high > 1 and counted(high) > counted(1):
        guess = math.ceil(1 + (target - counted(1)) * (high - 1) / (counted(high) - counted(1)))
        if 1 <= guess <= high and counted(guess) >= target and (guess == 1 or counted(guess - 1) < target):
            low = high = guess
    while low < high:  # smallest units with count ≥ target
        mid = (low + high) // 2
        if counted(mid) >= target:
            high = mid
        else:
            low = mid + 1
    candidates = [low] if low == 1 else [low - 1, low]
    best = min(candidates, key=lambda units: abs(counted(units) - target))
    return best * constraint.multiple, build(best)


def check_constraints(designs: Sequence[Design], constraints: Sequence[Constraint]) -> None:
    """Refuse constraints that cannot go together over these designs (before any design is built)."""
    solved_fields = [c.free_field for c in constraints if c.free_field]
    if len(solved_fields) != len(set(solved_fields)):
        raise MoesimError("--free", "each constraint needs its own free field")
    axes = {name for design in designs for name, _ in design.overrides}
    clash = sorted(axes & set(solved_fields))
    if clash:
        raise MoesimError(
            "--free", f"{', '.join(clash)} is both varied and solved", "drop it from the design axes"
        )


def apply_constraints(
    base: ModelSpec, designs: Sequence[Design], constraints: Sequence[Constraint]
) -> ConstrainedDesigns:
    """Build each design's model, solve free fields and filter by the parameter constraints."""
    check_constraints(designs, constraints)
    out = ConstrainedDesigns()
    targets = {c.kind: _counter(c.kind)(base) for c in constraints if c.is_parameter}
    for design in designs:
        overrides: dict[str, object] = dict(design.as_dict())
        solved: dict[str, Value] = {}
        try:
            spec = apply_overrides(base, dict(overrides))
            for constraint in constraints:
                if not constraint.is_parameter or constraint.free_field is None:
                    continue
                value, spec = _solve(base, {**overrides, **solved}, constraint, targets[constraint.kind])
                solved[constraint.free_field] = value
            for constraint in constraints:
                if not constraint.is_parameter:
                    continue
                target = targets[constraint.kind]
                error = abs(_counter(constraint.kind)(spec) - target) / target
                if error > constraint.tolerance:
                    raise MoesimError(
                        constraint.kind,
                        f"{error:.1%} from the base model's count (tolerance {constraint.tolerance:.0%})",
                    )
        except MoesimError as problem:
            out.dropped.append({"design": design.index, "label": design.label(), "reason": str(problem)})
            continue
        out.kept.append((design, spec, solved))
    return out


__all__ = ["CONSTRAINT_KINDS", "ConstrainedDesigns", "Constraint", "apply_constraints", "check_constraints"]

"""What a screen is asked besides its base scenario: where the designs come from, the constraints that keep
them comparable, the grid each design is swept on, and how the ranking is run and shown. The screen's design
rules (one design source, `--free` only with a parameter constraint) live here, not in the CLI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from moesim.errors import MoesimError
from moesim.options import option
from moesim.simulator.bounds import (
    DEFAULT_MAX_MINUTES,
    check_count,
    check_finite,
    check_screen,
    check_seed,
    check_workers,
)
from moesim.simulator.screening.backends import BACKENDS
from moesim.simulator.screening.constraints import DEFAULT_TOLERANCE, Constraint
from moesim.simulator.screening.evaluate import DEFAULT_BATCHES, DEFAULT_DRAFT_LENS
from moesim.simulator.screening.space import Design, Value

DEFAULT_TOP = 10


@dataclass(frozen=True)
class ScreenRequest:
    """The screen's choices other than the base scenario; `designs` and `constraints` apply its rules."""

    designs_csv: str | None = option(
        None,
        "A CSV of designs: one override field per column, one design per row.",
        flag="--designs",
        path=True,
    )
    sample: int | None = option(None, "Evaluate N designs drawn (seeded) from the grid instead of all.")
    seed: int = option(0, "Seed of --sample.")
    max_minutes: float = option(
        DEFAULT_MAX_MINUTES, "Refuse a screen estimated to take longer (minutes on two cores)."
    )
    constraint_kinds: tuple[str, ...] = ()
    free_field: str | None = option(
        None,
        "The field solved to meet the (first) parameter constraint, e.g. expert-width; without it designs "
        "off the target are dropped.",
        flag="--free",
    )
    free_multiple: int = option(1, "The solved value is a multiple of this (e.g. 64).")
    tolerance: float = option(
        DEFAULT_TOLERANCE, "Relative distance from the target parameter count accepted."
    )
    batches: tuple[int, ...] = option(DEFAULT_BATCHES, "Batch sizes.", flag="--batch", list_of=int)
    draft_lens: tuple[int, ...] = option(
        DEFAULT_DRAFT_LENS,
        "Draft lengths K (the best per batch is reported).",
        flag="--draft-len",
        list_of=int,
    )
    objective: str | None = option(
        None,
        "Ranking objective: speedup@B, tokens@B or peak-speedup.",
        default_text="speedup at the smallest batch",
    )
    top: int = option(DEFAULT_TOP, "Designs shown in the ranking table.")
    backend: str = option(
        "local", "local: a process pool; ray: Ray tasks (pip install 'moesim[ray]').", choices=BACKENDS
    )
    workers: int | None = option(
        None, "Local processes (default: the CPUs available; 1 runs in this process)."
    )
    address: str | None = option(None, "Ray cluster address (with --backend ray; default: a local Ray).")

    def __post_init__(self) -> None:
        if self.top < 1:
            raise MoesimError("--top", f"must be ≥ 1, got {self.top}")
        check_seed(self.seed, "--seed")
        check_count(self.free_multiple, "--free-multiple")
        check_finite(self.tolerance, "--tolerance", low=0.0, low_open=True, high=1.0)
        if self.workers is not None:
            check_workers(self.workers)
        if self.sample is not None:
            check_count(self.sample, "--sample")
        if self.address and self.backend != "ray":
            raise MoesimError("--address", "is for --backend ray")

    @property
    def grid_batches(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.batches)))

    @property
    def grid_draft_lens(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.draft_lens)))

    def designs(self, axes: Mapping[str, Sequence[Value]]) -> list[Design]:
        """The designs to screen: the CSV's, a seeded sample of the grid of `axes`, or the whole grid."""
        from moesim.simulator.screening.space import MAX_DESIGNS, grid, read_designs, sample, space_size

        points = len(self.grid_batches) * len(self.grid_draft_lens)
        if self.designs_csv:
            if axes or self.sample:
                raise MoesimError("--designs", "a CSV of designs replaces the field flags and --sample")
            return read_designs(self.designs_csv, lambda count: check_screen(count, points, self.max_minutes))
        count = space_size(axes) if self.sample is None else min(self.sample, space_size(axes))
        if count <= MAX_DESIGNS:  # the time bound before a design is drawn (larger counts are refused below)
            check_screen(count, points, self.max_minutes)
        if self.sample is not None:
            return sample(axes, self.sample, self.seed)
        return grid(axes)

    def constraints(self) -> list[Constraint]:
        """One constraint per kind asked for; the free field solves the first parameter constraint."""
        kinds = list(dict.fromkeys(self.constraint_kinds))
        parameter_kinds = [kind for kind in kinds if kind != "fits"]
        if self.free_field and not parameter_kinds:
            raise MoesimError(
                "--free", "solves a parameter constraint", "add --constraint active-params or total-params"
            )
        return [
            Constraint(
                kind,
                free_field=self.free_field if parameter_kinds and kind == parameter_kinds[0] else None,
                multiple=self.free_multiple,
                tolerance=self.tolerance,
            )
            for kind in kinds
        ]


__all__ = ["DEFAULT_TOP", "ScreenRequest"]

"""Evaluate designs: each one's SD speedup, best draft length, step times and tokens/s at every batch.

Designs go to the workers in chunks; a worker runs the closed-form fast path of `speculative.sweep` over its
chunk's models (batches × draft lengths) in one process, never a process per design. Every figure is
deterministic (seeded routing banks, no dependence on which worker or in what order), so any backend gives
the same table for the same designs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from moesim.errors import MoesimError
from moesim.simulator.bounds import DEFAULT_MAX_MINUTES
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.models.weights import param_counts, total_weight_bytes
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.scenario import Scenario, check_routing_size, resolve_hardware, resolve_routing
from moesim.simulator.screening.constraints import Constraint, apply_constraints
from moesim.simulator.screening.space import Design, Value
from moesim.simulator.speculative.acceptance import best_draft_len, peak_batch
from moesim.simulator.speculative.sweep import SweepRow, collector_paused, run_sweep

DEFAULT_BATCHES = (1, 4, 16, 64)
DEFAULT_DRAFT_LENS = (1, 2, 3, 4)


@dataclass(frozen=True)
class ScreenSettings:
    """What decides a design's figures besides the design: the scenario (hardware, engine, launch, routing,
    layout, drafter, acceptance, context; its model is the base) and the batch sizes and draft lengths."""

    scenario: Scenario
    batches: tuple[int, ...] = DEFAULT_BATCHES
    draft_lens: tuple[int, ...] = DEFAULT_DRAFT_LENS
    max_minutes: float = DEFAULT_MAX_MINUTES  # refuse a screen estimated to take longer

    def __post_init__(self) -> None:
        # Load the profile once here, not in every worker.
        hardware = resolve_hardware(self.scenario.hardware)
        object.__setattr__(self, "scenario", self.scenario.replace(hardware=hardware))

    @property
    def hardware(self) -> HardwareProfile:
        return resolve_hardware(self.scenario.hardware)

    def routing_for(self, spec: ModelSpec) -> RoutingModel:
        s = self.scenario
        return resolve_routing(spec, s.routing, s.overlap, s.baseline_overlap)


@dataclass(frozen=True)
class BatchMetrics:
    """One design at one batch size, at its best draft length."""

    batch: int
    speedup: float
    best_draft_len: int
    decode_step_s: float
    verify_step_s: float
    draft_s: float
    tokens_per_s: float  # with SD at the best draft length: B × E[tokens per step] ÷ SD round
    decode_tokens_per_s: float  # without SD: B ÷ decode step
    gpus: int


@dataclass(frozen=True)
class DesignResult:
    """A design's figures; `batches` holds the batch sizes whose memory fitted (`skipped` the others)."""

    index: int
    label: str
    overrides: dict[str, Value]
    solved: dict[str, Value]
    total_params: int
    active_params: int
    weights_bytes: int
    batches: tuple[BatchMetrics, ...]
    skipped: tuple[int, ...] = ()
    skip_reason: str = ""

    def at(self, batch: int) -> BatchMetrics | None:
        return next((m for m in self.batches if m.batch == batch), None)

    @property
    def peak(self) -> tuple[int, float] | None:
        """(batch, speedup) where SD helps most, the smaller batch on ties."""
        if not self.batches:
            return None
        return peak_batch([m.batch for m in self.batches], [m.speedup for m in self.batches])


def design_name(base: ModelSpec, index: int) -> str:
    return f"{base.name}~design{index}"


def _batch_metrics(rows: Sequence[SweepRow]) -> tuple[BatchMetrics, ...]:
    by_batch = best_draft_len(rows, key=lambda row: row.batch)
    return tuple(
        BatchMetrics(
            batch=b,
            speedup=r.speedup,
            best_draft_len=r.draft_len,
            decode_step_s=r.decode_step_s,
            verify_step_s=r.verify_step_s,
            draft_s=r.draft_s,
            tokens_per_s=r.tokens_per_s,
            decode_tokens_per_s=b / r.decode_step_s,
            gpus=r.gpus,
        )
        for b, r in sorted(by_batch.items())
    )


@dataclass(frozen=True)
class DesignTask:
    """What a worker needs for one design (picklable): the design, the fields solved for it, its model."""

    design: Design
    solved: dict[str, Value]
    spec: ModelSpec

    @property
    def routing_key(self) -> tuple[int, int]:
        """(N, k): designs sharing it share their routing banks."""
        return self.spec.n_experts, self.spec.top_k


@dataclass(frozen=True)
class DesignItem:
    """A design as a screen hands it to a worker (picklable): its base model and the screen's parameter
    constraints, which the worker applies (solving free fields) before it evaluates the design. One chunk's
    items share their base and constraints (pickled once per chunk)."""

    base: ModelSpec
    design: Design
    constraints: tuple[Constraint, ...] = ()

    @property
    def routing_key(self) -> tuple[int, int]:
        """(N, k) as designed (a free field may still change it): designs sharing it share routing banks."""
        overrides = self.design.as_dict()
        return (
            int(overrides.get("n_experts", self.base.n_experts)),
            int(overrides.get("top_k", self.base.top_k)),
        )


@dataclass(frozen=True)
class DroppedDesign:
    """A design a constraint, or its routing, rules out before evaluation, with the reason."""

    index: int
    label: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"design": self.index, "label": self.label, "reason": self.reason}


@collector_paused  # as a sweep: the designs' routing and plans are ~10^5 short-lived objects per chunk
def constrain_and_evaluate(
    settings: ScreenSettings, items: Sequence[DesignItem]
) -> list[DesignResult | DroppedDesign]:
    """A worker's chunk of a screen: each design's constraints solved, its routing checked (its memory from
    the design's counts, before its routing model is built), then the designs kept evaluated
    (`evaluate_chunk`); every design comes back, evaluated or dropped."""
    if not items:
        return []
    base, constraints = items[0].base, items[0].constraints
    constrained = apply_constraints(base, [item.design for item in items], constraints)
    dropped = [
        DroppedDesign(cast(int, d["design"]), str(d["label"]), str(d["reason"])) for d in constrained.dropped
    ]
    s = settings.scenario
    tokens = max(settings.draft_lens) + 1
    kept = []
    for design, spec, solved in constrained.kept:
        try:
            check_routing_size(
                spec, s.routing, s.overlap, s.baseline_overlap, tokens, s.max_memory_gb, spec.name
            )
            settings.routing_for(spec)  # e.g. a statistics file fitted for another expert count
        except MoesimError as problem:
            dropped.append(DroppedDesign(design.index, design.label(), str(problem)))
            continue
        kept.append((design, spec, solved))
    return [*evaluate_chunk(settings, make_tasks(base, kept)), *dropped]


def evaluate_chunk(settings: ScreenSettings, tasks: Sequence[DesignTask]) -> list[DesignResult]:
    """The figures of a chunk of designs: one fast-path sweep over their models in this process."""
    if not tasks:
        return []
    specs = [task.spec for task in tasks]
    result = run_sweep(settings.scenario, specs, settings.batches, settings.draft_lens)
    rows: dict[str, list[SweepRow]] = {spec.name: [] for spec in specs}
    for row in result.rows:
        rows[row.model].append(row)
    skipped = {entry["model"]: entry for entry in result.skipped}
    out = []
    for task in tasks:
        counts = param_counts(task.spec)
        entry: dict[str, Any] = skipped.get(task.spec.name, {})
        out.append(
            DesignResult(
                index=task.design.index,
                label=task.design.label(),
                overrides=task.design.as_dict(),
                solved=dict(task.solved),
                total_params=counts.total,
                active_params=counts.active,
                weights_bytes=total_weight_bytes(task.spec),
                batches=_batch_metrics(rows[task.spec.name]),
                skipped=tuple(entry.get("batches", ())),
                skip_reason=str(entry.get("reason", "")),
            )
        )
    return out


def make_tasks(
    base: ModelSpec, kept: Sequence[tuple[Design, ModelSpec, dict[str, Value]]]
) -> list[DesignTask]:
    """Tasks from constrained designs; each design's model gets a unique name (sweep rows are keyed by it)."""
    return [
        DesignTask(design, solved, replace(spec, name=design_name(base, design.index)))
        for design, spec, solved in kept
    ]


__all__ = [
    "DEFAULT_BATCHES",
    "DEFAULT_DRAFT_LENS",
    "BatchMetrics",
    "DesignItem",
    "DesignResult",
    "DesignTask",
    "DroppedDesign",
    "ScreenSettings",
    "constrain_and_evaluate",
    "evaluate_chunk",
    "make_tasks",
]

"""A screen: designs → constraints → evaluation on a backend → ranking and Pareto front, as rows or JSON."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from moesim.atomic import atomic_write_text, open_output
from moesim.errors import MoesimError
from moesim.simulator.bounds import check_screen
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.screening.backends import Progress, run_backend
from moesim.simulator.screening.constraints import Constraint, check_constraints
from moesim.simulator.screening.evaluate import (
    DesignItem,
    DesignResult,
    DroppedDesign,
    ScreenSettings,
    constrain_and_evaluate,
)
from moesim.simulator.screening.pareto import check_objective, design_front, front_axes, ranking
from moesim.simulator.screening.space import Design


@dataclass
class ScreenResult:
    """Every evaluated design, the dropped ones with reasons, the ranking and the front."""

    base: str
    settings: ScreenSettings
    results: list[DesignResult]
    dropped: list[dict[str, Any]]
    constraints: list[str]
    objective: str
    ranking: list[int]
    front: list[int]
    assumptions: dict[str, Any] = field(default_factory=dict)

    def by_index(self) -> dict[int, DesignResult]:
        return {r.index: r for r in self.results}

    def rows(self) -> list[dict[str, Any]]:
        """One flat row per design (design order): fields, counts, and per-batch figures as columns."""
        rank_of = {index: position + 1 for position, index in enumerate(self.ranking)}
        on_front = set(self.front)
        fields = sorted({name for r in self.results for name in (*r.overrides, *r.solved)})
        out = []
        for r in self.results:
            row: dict[str, Any] = {"design": r.index, "label": r.label}
            for name in fields:
                row[name] = r.solved.get(name, r.overrides.get(name, ""))
            peak = r.peak
            row.update(
                total_params=r.total_params,
                active_params=r.active_params,
                weights_gb=r.weights_bytes / 1e9,
                peak_batch=peak[0] if peak else "",
                peak_speedup=peak[1] if peak else "",
                rank=rank_of.get(r.index, ""),
                pareto=r.index in on_front,
            )
            for b in self.settings.batches:
                m = r.at(b)
                row[f"speedup_b{b}"] = m.speedup if m else ""
                row[f"best_k_b{b}"] = m.best_draft_len if m else ""
                row[f"decode_ms_b{b}"] = m.decode_step_s * 1e3 if m else ""
                row[f"verify_ms_b{b}"] = m.verify_step_s * 1e3 if m else ""
                row[f"tokens_per_s_b{b}"] = m.tokens_per_s if m else ""
                row[f"gpus_b{b}"] = m.gpus if m else ""
            out.append(row)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "hardware": self.settings.hardware.name,
            "batches": list(self.settings.batches),
            "draft_lens": list(self.settings.draft_lens),
            "constraints": list(self.constraints),
            "objective": self.objective,
            "front_axes": list(front_axes(self.settings.batches)),
            "designs": [asdict(r) for r in self.results],
            "ranking": list(self.ranking),
            "pareto_front": list(self.front),
            "dropped": list(self.dropped),
            "assumptions": dict(self.assumptions),
        }

    def to_csv(self) -> str:
        rows = self.rows()
        buffer = io.StringIO()
        if rows:
            writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        return buffer.getvalue()

    def write_csv(self, path: str | Path) -> None:
        atomic_write_text(path, self.to_csv())

    def write_parquet(self, path: str | Path) -> None:
        """The rows as a Parquet file (pyarrow is optional: a clear error when it is missing)."""
        pa, pq = parquet_modules()
        rows = self.rows()
        columns = {
            name: [None if row[name] == "" else row[name] for row in rows]
            for name in (rows[0] if rows else {})
        }
        with open_output(path, binary=True) as handle:
            pq.write_table(pa.table(columns), handle)


def parquet_modules() -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet, or the error saying how to install them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MoesimError(
            "--parquet", "pyarrow is not installed", "pip install 'moesim[parquet]', or write --csv instead"
        ) from None
    return pa, pq


def screen(
    base: ModelSpec,
    designs: Sequence[Design],
    settings: ScreenSettings,
    constraints: Sequence[Constraint] = (),
    *,
    objective: str | None = None,
    backend: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
) -> ScreenResult:
    """Evaluate `designs` around `base` under `settings`, keeping only those meeting `constraints`.
    `progress(n)` is called as designs are done, dropped ones included, so the calls sum to len(designs)."""
    objective = check_objective(objective or f"speedup@{min(settings.batches)}", settings.batches)
    settings.scenario.for_device(settings.hardware)  # acceptance, launch: refused here, not in a worker
    check_screen(len(designs), len(settings.batches) * len(settings.draft_lens), settings.max_minutes)
    check_constraints(designs, constraints)
    # The workers solve each design's constraints and check its routing, then evaluate it: no design is
    # built in this process, and the progress counts designs (dropped ones too) from the first chunk on.
    items = [DesignItem(base, design, tuple(constraints)) for design in designs]
    outcomes = run_backend(
        backend,
        settings,
        items,
        workers=workers,
        address=address,
        progress=progress,
        work=constrain_and_evaluate,
    )
    results = [o for o in outcomes if isinstance(o, DesignResult)]
    dropped: list[dict[str, Any]] = [o.as_dict() for o in outcomes if isinstance(o, DroppedDesign)]
    if any(c.kind == "fits" for c in constraints):
        fitting = []
        for r in results:
            if r.skipped:
                dropped.append({"design": r.index, "label": r.label, "reason": f"fits: {r.skip_reason}"})
            else:
                fitting.append(r)
        results = fitting
    dropped.sort(key=lambda entry: int(entry["design"]))
    base_resolved = settings.scenario.replace(model=base).resolve(check_fit=False)
    return ScreenResult(
        base=base.name,
        settings=settings,
        results=results,
        dropped=dropped,
        constraints=[c.statement(base) for c in constraints],
        objective=objective,
        ranking=ranking(results, objective),
        front=design_front(results, settings.batches),
        assumptions={
            **base_resolved.assumptions(),
            "routing": base_resolved.routing.description + " (each design: its own N, k)",
            "evaluation": "closed-form fast path (as moesim sweep), best draft length per batch",
        },
    )


__all__ = ["ScreenResult", "parquet_modules", "screen"]

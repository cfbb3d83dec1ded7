"""How far moesim has been from measured runs near a projection: the error printed beside every figure.

A projection's regime is its serving engine, batch band and model class. The shipped measured runs
(`moesim/data/measured_runs.csv`) that share it say how far moesim's own predicted speedup was from what
was measured there: the mean absolute error (MAPE) over those rows, with how many rows and sources it
rests on. Each row is predicted as `moesim validate runs` predicts it — under `ideal` for an `ideal`
projection, under the preset of the row's engine and version (`per-run`) otherwise. The presets' host
values are documented defaults, never fitted to these runs, so every row's error is out of sample: what
leave-one-source-out would give (a profile fitted with `calibrate --from-runs` reports its own held-out
error in its `[fit_quality]`).

Predicting the rows takes seconds, so the errors are precomputed into a small shipped table
(`moesim/data/measured_runs_errors.csv`, written by `python -m moesim.validation.runs.nearby`; a test
checks it is current) and a projection only reads it.
"""

from __future__ import annotations

import csv
import functools
import io
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

ERRORS_TABLE = "measured_runs_errors.csv"
# (lowest, highest) batch of each band: batch 1 alone is launch- and weight-bound, 16–64 is where a
# decode step already loads most experts; the bands are wide because the runs are few.
BATCH_BANDS: tuple[tuple[int, int | None], ...] = ((1, 4), (5, 15), (16, 64), (65, None))
FINE_GRAINED_EXPERTS = 32  # at least this many routed experts: fine-grained (Qwen3, gpt-oss, DeepSeek)
COLUMNS = (
    "run_id",
    "source",
    "serving_engine",
    "model",
    "model_class",
    "batch",
    "measured_speedup",
    "ideal_error",
    "preset",
    "preset_error",
)


def batch_band(batch: int) -> str:
    """The band a batch size falls in, in words ("1–4", "16–64", "above 64")."""
    for low, high in BATCH_BANDS:
        if high is None:
            return f"above {low - 1}"
        if low <= batch <= high:
            return f"{low}–{high}"
    raise ValueError(batch)


def model_class(n_experts: int, is_moe: bool) -> str:
    """dense, coarse MoE (fewer than 32 routed experts) or fine-grained MoE."""
    if not is_moe:
        return "dense"
    return "fine-grained MoE" if n_experts >= FINE_GRAINED_EXPERTS else "coarse MoE"


@dataclass(frozen=True)
class RowError:
    """One shipped measured row and moesim's relative speedup error on it (predicted ÷ measured − 1)."""

    run_id: str
    source: str
    serving_engine: str
    model: str
    model_class: str
    batch: int
    measured_speedup: float
    ideal_error: float
    preset: str
    preset_error: float


@dataclass(frozen=True)
class NearbyError:
    """Measured runs in a projection's regime and moesim's error on them."""

    batch_band: str
    serving_engine: str  # the engine the runs were measured with, or "any engine" for `ideal`
    model_class: str
    rows: int
    sources: tuple[str, ...]
    speedup_mape: float | None  # None when no measured run is near

    @property
    def text(self) -> str:
        where = f"batch {self.batch_band} under {self.serving_engine}, {self.model_class}"
        if self.speedup_mape is None:
            return f"no measured run near this point ({where})"
        plural = "s" if len(self.sources) > 1 else ""
        return (
            f"measured runs at {where}: moesim's speedup off by {self.speedup_mape:.0%} "
            f"(n = {self.rows}, source{plural} {', '.join(self.sources)})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_band": self.batch_band,
            "serving_engine": self.serving_engine,
            "model_class": self.model_class,
            "rows": self.rows,
            "sources": list(self.sources),
            "speedup_mape": self.speedup_mape,
            "text": self.text,
        }


@functools.cache
def shipped_errors() -> tuple[RowError, ...]:
    """The precomputed table (read once per process)."""
    text = resources.files("moesim").joinpath("data", ERRORS_TABLE).read_text(encoding="utf-8")
    return tuple(_row(r) for r in csv.DictReader(io.StringIO(text)))


def _row(r: dict[str, str]) -> RowError:
    return RowError(
        r["run_id"],
        r["source"],
        r["serving_engine"],
        r["model"],
        r["model_class"],
        int(r["batch"]),
        float(r["measured_speedup"]),
        float(r["ideal_error"]),
        r["preset"],
        float(r["preset_error"]),
    )


def nearby_error(
    engine: str, batch: int, n_experts: int, is_moe: bool, rows: Sequence[RowError] | None = None
) -> NearbyError:
    """The error of moesim on the shipped runs in the regime of a projection under serving engine
    `engine` (a profile's `provenance.engine`: "none" for `ideal`) at `batch` on a model of `n_experts`."""
    table = shipped_errors() if rows is None else rows
    band, kind = batch_band(batch), model_class(n_experts, is_moe)
    ideal = engine == "none"
    near = [
        r
        for r in table
        if batch_band(r.batch) == band and r.model_class == kind and (ideal or r.serving_engine == engine)
    ]
    errors = [abs(r.ideal_error if ideal else r.preset_error) for r in near]
    return NearbyError(
        band,
        "any engine (ideal profile)" if ideal else engine,
        kind,
        len(near),
        tuple(sorted({r.source for r in near})),
        sum(errors) / len(errors) if errors else None,
    )


def nearby_errors(engine: str, points: Iterable[tuple[int, int, bool]]) -> list[NearbyError]:
    """One `nearby_error` per distinct regime of `points` (batch, n_experts, is_moe), in first-seen order:
    what a sweep, a serving run or a screen prints once per regime, not once per point."""
    seen: dict[tuple[str, str], NearbyError] = {}
    for batch, n_experts, is_moe in points:
        key = (batch_band(batch), model_class(n_experts, is_moe))
        if key not in seen:
            seen[key] = nearby_error(engine, batch, n_experts, is_moe)
    return list(seen.values())


def engine_of(serving_engine: Any) -> str:
    """The engine a serving-engine profile (name, path or profile) models: "none" for `ideal`."""
    from moesim.simulator.engines.profile import load_serving_engine

    return load_serving_engine(serving_engine).provenance.engine


# --- the shipped table: predicted by moesim from the shipped runs -------------------------------------


def compute_errors() -> list[RowError]:
    """Every representable shipped row predicted under `ideal` and under its own engine preset."""
    from moesim.simulator.models.catalogue import load_model
    from moesim.validation.runs.predict import PER_RUN, prepare, validate_runs
    from moesim.validation.runs.schema import read_runs

    runs = read_runs()
    prepared = prepare(runs)
    ideal = {r["run_id"]: r for r in validate_runs(runs, "ideal", prepared).rows}
    per_run = {r["run_id"]: r for r in validate_runs(runs, PER_RUN, prepared).rows}
    out = []
    for predictor in prepared[0]:
        run = predictor.run
        spec = load_model(run.model)
        row, own = ideal[run.run_id], per_run[run.run_id]
        out.append(
            RowError(
                run.run_id,
                run.source,
                run.serving_engine,
                run.model,
                model_class(spec.n_experts, spec.is_moe),
                int(row["batch"]),
                float(run.speedup),
                float(row["speedup_error"]),
                str(own["serving_engine"]),
                float(own["speedup_error"]),
            )
        )
    return out


def render_errors(rows: Sequence[RowError]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        values = [getattr(r, c) for c in COLUMNS]
        writer.writerow([f"{v:.6f}" if isinstance(v, float) else v for v in values])
    return buffer.getvalue()


def shipped_table_path() -> Path:
    return Path(str(resources.files("moesim").joinpath("data", ERRORS_TABLE)))


if __name__ == "__main__":  # python -m moesim.validation.runs.nearby: rewrite the shipped table
    from moesim.atomic import atomic_write_text

    atomic_write_text(shipped_table_path(), render_errors(compute_errors()))
    sys.stdout.write(f"wrote {shipped_table_path()}\n")

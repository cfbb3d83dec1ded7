"""Predict measured runs with the step model under a serving engine, and score the predictions.

Per representable row: the speedup and the step ratio (cost of one SD round in decode steps,
AL ÷ speedup) at the row's batch (or, for a peak over batch, the highest predicted speedup over the row's
batch sizes), with the row's model, hardware, layout, drafter (chain or tree), K and acceptance length,
under one serving-engine profile or each row's own engine preset (`PER_RUN`); a row that gives its
benchmark's prompt count is priced across that closed-loop run's waves (`closed_loop_waves`), a steady
batch otherwise. The device times of a row
do not depend on the engine's host costs, so `RunPredictor` keeps them and re-prices a row for a new
profile in microseconds (what fitting needs). Rows the simulator cannot represent are returned with the
reason, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.engines.profile import (
    ServingEngineProfile,
    SpeculativeAdmission,
    load_serving_engine,
)
from moesim.simulator.models.overrides import with_overrides
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.scenario import DEFAULT_CONTEXT_LEN
from moesim.simulator.speculative.point import SpeculativePoint, engine_point, scenario_timers
from moesim.validation.runs.schema import MeasuredRun, unrepresentable_reason

PER_RUN = "per-run"  # each row under the preset of the engine it was measured with


def row_context_len(run: MeasuredRun) -> int:
    """Mean context over the generated tokens: prompt + half the output, when the row gives them (else
    the scenario's default context)."""
    if run.input_len and run.output_len:
        return int(run.input_len + run.output_len // 2)
    return DEFAULT_CONTEXT_LEN


def profile_for_run(run: MeasuredRun, serving_engine: str | ServingEngineProfile) -> ServingEngineProfile:
    """The profile a row is predicted under, with the row's own drafter shape (a tree's tokens and top-k)
    and, when the row gives it, its own cap on running requests."""
    if isinstance(serving_engine, str) and serving_engine == PER_RUN:
        name = run.engine_preset or (run.serving_engine if run.serving_engine != "other" else "ideal")
        profile = load_serving_engine(name)
    else:
        profile = load_serving_engine(serving_engine)
    style = replace(profile.drafter, shape=run.draft_shape)
    if run.draft_shape == "tree":
        style = replace(style, tree_draft_tokens=run.draft_tokens, tree_topk=run.tree_topk)
    else:
        style = replace(style, tree_draft_tokens=0, tree_topk=1)
    if run.drafter_launch:
        style = replace(style, launch=run.drafter_launch)
    if run.max_running_requests:  # the run set the cap itself: the preset's SD default does not apply
        profile = replace(profile, scheduler=SpeculativeAdmission(run.max_running_requests))
    return replace(profile, drafter=style)


def version_profile(run: MeasuredRun, base: ServingEngineProfile) -> ServingEngineProfile:
    """`base`'s engine at the version the row ran: the row's `engine_preset` when it is a preset of the
    same engine (carrying `base`'s fitted values), else `base` itself."""
    if not run.engine_preset or run.engine_preset == base.name:
        return base
    preset = load_serving_engine(run.engine_preset)
    if preset.provenance.engine != base.provenance.engine:
        return base
    return replace(preset, fitted={**preset.fitted, **base.fitted})


class RunPredictor:
    """The step model set up for one measured row; `point(profile, batch)` prices it under a profile,
    re-using the row's device times (they do not depend on the engine's host costs)."""

    def __init__(
        self, run: MeasuredRun, load_model: Callable[[str], ModelSpec], load_hardware: Callable[[str], Any]
    ):
        from moesim.simulator.execution.timer import FastTimer
        from moesim.simulator.scenario import Scenario

        self.run = run
        model = load_model(run.model)
        if run.expert_weight_format:
            model = with_overrides(model, expert_weight_format=run.expert_weight_format)
        hardware = load_hardware(run.hardware)
        shape = profile_for_run(run, "ideal")  # the row's drafter shape: the KV the verification needs
        scenario = Scenario(
            model=model,
            hardware=hardware,
            draft_len=run.draft_len,
            context_len=row_context_len(run),
            launch="graph" if run.cuda_graphs == "yes" else "eager",
            layout=ParallelLayout(gpus=run.gpus, tp=run.tp, ep=run.ep),
            drafter=run.drafter,
            acceptance_length=float(run.acceptance_length),
            temperature=run.temperature or 0.0,
            serving_engine=shape,
        )
        resolved = [scenario.replace(batch=b).resolve() for b in run.batches]  # each batch must fit
        self.resolved = resolved[0]
        self.timers = scenario_timers(self.resolved, FastTimer(hardware))

    def point(
        self, profile: ServingEngineProfile, batch: int, acceptance_length: float | None = None
    ) -> SpeculativePoint:
        """The row's point at `batch` under `profile` (at the row's acceptance length unless given)."""
        r = self.resolved
        tokens = float(self.run.acceptance_length if acceptance_length is None else acceptance_length)
        return engine_point(profile, r.drafter, batch, self.run.draft_len, tokens, r.launch, *self.timers)

    def benchmark(
        self, profile: ServingEngineProfile, batch: int, acceptance_length: float | None = None
    ) -> tuple[float, float]:
        """(speedup, step ratio) the row's benchmark measures at `batch`: the steady point's, or across the
        waves of a closed-loop run of the row's `num_prompts` with `batch` in flight (`closed_loop_speedup`)."""
        if not self.run.num_prompts:
            steady = self.point(profile, batch, acceptance_length)
            return steady.speedup, steady.step_ratio
        waves = closed_loop_waves(self.run.num_prompts, batch)
        points = {b: self.point(profile, b, acceptance_length) for b in waves}
        speedup = closed_loop_speedup(points, waves)
        tokens_per_step = next(iter(points.values())).tokens_per_step  # the acceptance length: one per row
        return speedup, tokens_per_step / speedup

    def predict(self, profile: ServingEngineProfile) -> tuple[float, float, int]:
        """(speedup, step ratio, batch): at the row's batch, or at the predicted peak over its batches."""
        figures = [(self.benchmark(profile, b), b) for b in self.run.batches]
        (speedup, step_ratio), batch = max(figures, key=lambda fb: fb[0][0])
        return speedup, step_ratio, batch


def closed_loop_waves(num_prompts: int, concurrency: int) -> dict[int, int]:
    """Batch → waves of a closed-loop benchmark: `num_prompts` requests of one output length with at most
    `concurrency` in flight run ⌊N/C⌋ waves of C and one of the N mod C left over.

    The client of SpecForge 0.2.0 (`specforge/benchmarks/sglang.py`, `_run_sglang`) is such a loop: a thread
    pool of `concurrency` workers over the prompts, output throughput = completion tokens ÷ the pool's elapsed
    time, after an untimed warm-up of `concurrency` prompts. So 80 prompts at concurrency 64 are timed over a
    wave of 64 and a wave of 16, not at a steady 64.

    >>> closed_loop_waves(80, 64), closed_loop_waves(80, 8), closed_loop_waves(3, 64)
    ({64: 1, 16: 1}, {8: 10}, {3: 1})
    """
    full, rest = divmod(num_prompts, concurrency)
    waves = {concurrency: full} if full else {}
    if rest:
        waves[rest] = 1
    return waves


def closed_loop_speedup(points: Mapping[int, SpeculativePoint], waves: Mapping[int, int]) -> float:
    """Output throughput with SD over without across a closed-loop run's waves (`closed_loop_waves`).

    A wave of b requests of L tokens takes L decode steps d(b) without SD and L·d(b) ÷ S(b) with it (S(b) the
    steady speedup at b), so the run's speedup is Σ n·d(b) ÷ Σ n·d(b)/S(b): the wave speedups weighted by
    their time, L cancelling. One output length for every request is the assumption; lengths that vary make
    the last requests finish at smaller batches still, a longer low-batch tail.
    """
    without = sum(n * points[b].decode.step_s for b, n in waves.items())
    with_sd = sum(n * points[b].decode.step_s / points[b].speedup for b, n in waves.items())
    return without / with_sd


@dataclass
class RunsValidation:
    """Predicted against measured, per row, with the rows that could not be represented."""

    serving_engine: str
    rows: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def errors(self) -> np.ndarray:
        return np.array([r["speedup_error"] for r in self.rows])

    def by_source(self) -> dict[str, dict[str, float]]:
        """MAPE of the speedup and the step ratio, and the signed mean error, per source and overall."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in self.rows:
            groups.setdefault(row["source"], []).append(row)
        groups["all"] = list(self.rows)
        return {name: summary(rows) for name, rows in groups.items() if rows}

    def to_json(self) -> dict[str, Any]:
        return {
            "serving_engine": self.serving_engine,
            "rows": self.rows,
            "by_source": self.by_source(),
            "not_represented": self.skipped,
            "notes": self.notes,
        }


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    speed = np.array([r["speedup_error"] for r in rows])
    ratio = np.array([r["step_ratio_error"] for r in rows])
    return {
        "rows": float(len(rows)),
        "speedup_mape": float(np.mean(np.abs(speed))),
        "speedup_mean_error": float(np.mean(speed)),
        "step_ratio_mape": float(np.mean(np.abs(ratio))),
    }


def prepare(
    runs: Sequence[MeasuredRun],
    load_model: Callable[[str], ModelSpec] | None = None,
    load_hardware: Callable[[str], Any] | None = None,
) -> tuple[list[RunPredictor], list[dict[str, Any]]]:
    """A predictor per representable row, and the others with their reason."""
    from moesim.simulator.hardware.profile import load_profile
    from moesim.simulator.models.catalogue import load_model as catalogue_model

    models = load_model or catalogue_model
    hardware = load_hardware or load_profile
    predictors: list[RunPredictor] = []
    skipped: list[dict[str, Any]] = []
    for run in runs:
        reason = unrepresentable_reason(run)
        if reason is None:
            try:
                predictors.append(RunPredictor(run, models, hardware))
            except MoesimError as error:
                reason = f"{error.field}: {error.problem}"
        if reason is not None:
            skipped.append({"run_id": run.run_id, "source": run.source, "reason": reason})
    return predictors, skipped


def score_row(predictor: RunPredictor, profile: ServingEngineProfile) -> dict[str, Any]:
    run = predictor.run
    speedup, step_ratio, batch = predictor.predict(profile)
    measured_ratio = run.acceptance_length / run.speedup
    return {
        "run_id": run.run_id,
        "source": run.source,
        "serving_engine": profile.name,
        "batch": batch,
        "measured_speedup": run.speedup,
        "predicted_speedup": speedup,
        "speedup_error": speedup / run.speedup - 1.0,
        "measured_step_ratio": measured_ratio,
        "predicted_step_ratio": step_ratio,
        "step_ratio_error": step_ratio / measured_ratio - 1.0,
    }


def validate_runs(
    runs: Sequence[MeasuredRun],
    serving_engine: str | ServingEngineProfile = "ideal",
    predictors: tuple[list[RunPredictor], list[dict[str, Any]]] | None = None,
) -> RunsValidation:
    """Predicted vs measured speedup and step ratio per representable row (see the module docstring)."""
    ready, skipped = predictors if predictors is not None else prepare(runs)
    rows = [score_row(p, profile_for_run(p.run, serving_engine)) for p in ready]
    label = serving_engine if serving_engine == PER_RUN else load_serving_engine(serving_engine).name
    notes = [
        "step ratio = acceptance length / speedup: one SD round in decode steps (measured: derived from AL and the published speedup)",
        "peak_speedup rows: the predicted peak over the row's batch sizes against the published peak",
        "routing: the `typical` preset (no traces of these runs)",
    ]
    return RunsValidation(str(label), rows, list(skipped), notes)


def parse_engine_list(text: str) -> list[str]:
    """`--serving-engine A,B,...`: the profiles to validate under (names, .toml paths or per-run)."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise MoesimError("--serving-engine", "needs at least one profile", "e.g. ideal,vllm or per-run")
    return names


def validate_runs_under(runs_path: str | None, serving_engines: str, silicon: bool = False) -> dict[str, Any]:
    """`moesim validate runs`: every requested profile's validation of the runs (the bundled ones for
    None), sharing the device times. With `silicon`, each run's hardware is the bundled silicon profile of
    that GPU under the run's own serving engine, where one exists."""
    from moesim.simulator.hardware.profile import silicon_profile_for
    from moesim.validation.runs.schema import read_runs

    runs = read_runs(runs_path)
    hardware: dict[str, str] = {}
    if silicon:
        mapped = []
        for run in runs:
            name = silicon_profile_for(run.hardware, run.serving_engine) or run.hardware
            hardware[run.run_id] = name
            mapped.append(replace(run, values={**run.values, "hardware": name}))
        runs = mapped
    ready = prepare(runs)
    results = [validate_runs(runs, name, ready).to_json() for name in parse_engine_list(serving_engines)]
    out: dict[str, Any] = {"runs": runs_path or "bundled measured_runs.csv", "validations": results}
    if silicon:
        out["hardware"] = hardware
    return out

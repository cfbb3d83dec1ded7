"""Fit a serving-engine profile's host parameters to measured runs: bounded least squares, cross-validated.

Only the engine's host terms move (`HOST_PARAMETERS`: per step, per sequence, per token, overlap, drafter
pass, acceptance sync); the hardware physics, the captured graph sizes and the drafter style stay as they
are. The residual of a row is log(predicted ÷ measured speedup), so every row weighs by its relative
error. Before fitting, the Jacobian of the residuals (parameters scaled to their typical size) must have
full rank: a parameter the runs cannot tell apart from the others (all runs at one batch size, no drafter
pass, no host work for the overlap to hide) is refused by name, with what runs would identify it.

Quality reported: the fit's own error, leave-one-run-out and leave-one-source-out errors (each held-out
row predicted by a fit that never saw it), and how far each parameter moved from its documented default.
`fit_parameters` fits any callable predictor, so the same machinery is tested on runs the simulator
generates itself (round trip).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.engines.profile import HOST_PARAMETERS, ServingEngineProfile
from moesim.validation.runs.predict import RunPredictor, prepare, profile_for_run, version_profile
from moesim.validation.runs.schema import MeasuredRun

DEFAULT_FIT = ("step_us", "per_sequence_us", "per_token_us", "draft_step_us", "accept_sync_us")
# Typical size of each parameter: the unit the fit and the rank test measure it in.
TYPICAL = {
    "step_us": 100.0,
    "per_sequence_us": 1.0,
    "per_token_us": 0.1,
    "overlap_fraction": 1.0,
    "draft_step_us": 10.0,
    "accept_sync_us": 10.0,
    "sd_overlap_kept": 1.0,
    "sd_per_sequence_us": 1.0,
    "runner_pass_us": 100.0,
    "runner_per_row_us": 1.0,
    "attention_plan_us": 10.0,
    "scheduler_per_sequence_us": 1.0,
    "expansion_per_token_us": 0.01,
    "output_per_token_us": 1.0,
    "plan_scan_us": 1.0,
    "tp_broadcast_us": 10.0,
    "ngram_base_us": 10.0,
    "ngram_per_sequence_us": 1.0,
}
# A scaled Jacobian whose smallest singular value is below this share of its largest cannot separate
# the parameters (a change along that direction moves no residual by more than 1e-6 of the others).
RANK_TOLERANCE = 1e-6
FD_STEP = 1e-3  # finite-difference step, in typical units
MIN_ROWS_PER_PARAMETER = 2

Predict = Callable[[dict[str, float]], np.ndarray]  # parameter values -> predicted speedup per row


@dataclass(frozen=True)
class ParameterFit:
    values: dict[str, float]
    residuals: np.ndarray  # log(predicted / measured) per row at the solution
    mape: float


def _relative(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(predicted, 1e-12) / measured)


def jacobian(
    predict: Predict, measured: np.ndarray, at: dict[str, float], names: Sequence[str]
) -> np.ndarray:
    """d residual / d parameter (parameters in typical units), by central differences inside the bounds."""
    columns = []
    for name in names:
        spec, h = HOST_PARAMETERS[name], FD_STEP * TYPICAL[name]
        up = {**at, name: min(spec.upper, at[name] + h)}
        down = {**at, name: max(spec.lower, at[name] - h)}
        span = (up[name] - down[name]) / TYPICAL[name]
        columns.append((_relative(predict(up), measured) - _relative(predict(down), measured)) / span)
    return np.stack(columns, axis=1)


def unidentified(jac: np.ndarray, names: Sequence[str]) -> list[str]:
    """Parameters the runs cannot identify: zero columns, then the heaviest in each near-null direction."""
    out = [n for n, col in zip(names, jac.T, strict=True) if not np.any(np.abs(col) > 0.0)]
    keep = [i for i, n in enumerate(names) if n not in out]
    if keep:
        sub = jac[:, keep]
        _, singular, vt = np.linalg.svd(sub, full_matrices=False)
        null = singular < RANK_TOLERANCE * singular[0] if singular[0] > 0 else np.ones_like(singular, bool)
        for direction in vt[null]:
            name = names[keep[int(np.argmax(np.abs(direction)))]]
            if name not in out:
                out.append(name)
    return out


def fit_parameters(
    predict: Predict,
    measured: Sequence[float] | np.ndarray,
    start: dict[str, float],
    names: Sequence[str],
    *,
    refuse_unidentified: bool = True,
) -> ParameterFit:
    """Bounded least squares of log(predict(values) ÷ measured) over `names`, from `start` (which also holds
    the parameters that stay fixed). Refuses (MoesimError) when the rows cannot identify a parameter, or,
    with `refuse_unidentified=False`, leaves such parameters at their start values."""
    from scipy.optimize import least_squares

    measured_arr = np.asarray(measured, dtype=float)
    names = list(names)
    if len(measured_arr) < MIN_ROWS_PER_PARAMETER * len(names):
        raise MoesimError(
            "runs",
            f"{len(measured_arr)} representable rows cannot fit {len(names)} parameters",
            f"give at least {MIN_ROWS_PER_PARAMETER * len(names)} rows, or fit fewer parameters with --fit",
        )
    blind = unidentified(jacobian(predict, measured_arr, start, names), names) if names else []
    if blind and refuse_unidentified:
        raise MoesimError(
            "runs",
            f"the runs cannot identify {', '.join(blind)} (changing it moves no prediction the others cannot)",
            "add runs at other batch sizes / draft lengths / drafters, or leave it out of --fit",
        )
    names = [n for n in names if n not in blind]
    if not names:
        residuals = _relative(predict(start), measured_arr)
        return ParameterFit(dict(start), residuals, float(np.mean(np.abs(np.expm1(residuals)))))
    scale = np.array([TYPICAL[n] for n in names])
    lower = np.array([HOST_PARAMETERS[n].lower for n in names]) / scale
    upper = np.array([HOST_PARAMETERS[n].upper for n in names]) / scale
    x0 = np.clip(np.array([start[n] for n in names]) / scale, lower, upper)

    def values_of(x: np.ndarray) -> dict[str, float]:
        return {**start, **{n: float(v) for n, v in zip(names, x * scale, strict=True)}}

    solution = least_squares(
        lambda x: _relative(predict(values_of(x)), measured_arr), x0, bounds=(lower, upper), method="trf"
    )
    values = values_of(solution.x)
    residuals = _relative(predict(values), measured_arr)
    return ParameterFit(values, residuals, float(np.mean(np.abs(np.expm1(residuals)))))


@dataclass
class EngineFit:
    """A fitted serving-engine profile and how good the fit is, in and out of sample."""

    profile: ServingEngineProfile
    base: ServingEngineProfile
    fitted_names: list[str]
    rows: list[dict[str, Any]]
    train_mape: float
    loro_mape: float
    loso_mape: float
    loso_by_source: dict[str, float]
    loro_by_source: dict[str, float]
    skipped: list[dict[str, Any]]
    fold_notes: list[str]

    def changes(self) -> dict[str, dict[str, float]]:
        """Per fitted parameter: documented default, fitted value, change, whether it ended on a bound."""
        base, fitted = self.base.effective_host, self.profile.effective_host
        return {n: parameter_change(n, getattr(base, n), getattr(fitted, n)) for n in self.fitted_names}

    def to_json(self) -> dict[str, Any]:
        return {
            "serving_engine": self.base.name,
            "fitted": self.changes(),
            "train_mape": self.train_mape,
            "leave_one_run_out_mape": self.loro_mape,
            "leave_one_source_out_mape": self.loso_mape,
            "leave_one_source_out_by_source": self.loso_by_source,
            "leave_one_run_out_by_source": self.loro_by_source,
            "rows": self.rows,
            "not_represented": self.skipped,
            "fold_notes": self.fold_notes,
        }


def parameter_change(name: str, before: float, after: float) -> dict[str, float]:
    """How far a fit moved a parameter; `at_bound` +1 / −1 when it stopped on its upper / lower bound (the
    runs pull it further than the physical bound allows), else 0."""
    spec = HOST_PARAMETERS[name]
    tolerance = 1e-6 * (spec.upper - spec.lower)
    at_bound = 0.0
    if before != after and abs(after - spec.upper) <= tolerance:
        at_bound = 1.0
    elif before != after and abs(after - spec.lower) <= tolerance:
        at_bound = -1.0
    return {"default": before, "fitted": after, "change": after - before, "at_bound": at_bound}


def _mean_abs(errors: np.ndarray) -> float:
    """Mean absolute error over the rows that have one (NaN when none has)."""
    kept = np.abs(errors[~np.isnan(errors)])
    return float(np.mean(kept)) if kept.size else float("nan")


def _engine_predict(
    predictors: Sequence[RunPredictor], base: ServingEngineProfile, names: Sequence[str]
) -> Predict:
    """Predicted speedups with the fitted `names` set: each row under `base`'s engine at its own version
    (`version_profile`: e.g. SGLang spec v1 keeps its synchronous SD rounds). A parameter on which the
    row's version differs from `base` (read from that version's source) stays the version's: the fit
    moves it only on the rows of `base`'s own version."""
    profiles = [profile_for_run(p.run, version_profile(p.run, base)) for p in predictors]
    free = [[n for n in names if getattr(prof.host, n) == getattr(base.host, n)] for prof in profiles]

    def predict(values: dict[str, float]) -> np.ndarray:
        return np.array(
            [
                p.predict(replace(prof, fitted={**prof.fitted, **{n: values[n] for n in own}}))[0]
                for p, prof, own in zip(predictors, profiles, free, strict=True)
            ]
        )

    return predict


def _held_out(
    predictors: Sequence[RunPredictor],
    base: ServingEngineProfile,
    start: dict[str, float],
    names: Sequence[str],
    groups: Sequence[str],
    notes: list[str],
    label: str,
) -> np.ndarray:
    """Relative speedup error of each row predicted by a fit on the rows outside its group."""
    errors = np.zeros(len(predictors))
    for group in dict.fromkeys(groups):
        held = [i for i, g in enumerate(groups) if g == group]
        train = [i for i, g in enumerate(groups) if g != group]
        if not train:
            notes.append(f"{label} {group}: no other rows to fit on; its error is left out")
            errors[held] = np.nan
            continue
        train_p = [predictors[i] for i in train]
        measured = [p.run.speedup for p in train_p]
        fold_names = list(names)[: max(0, len(measured) // MIN_ROWS_PER_PARAMETER)]
        if len(fold_names) < len(names):
            notes.append(
                f"{label} {group}: {len(measured)} training rows fit only {', '.join(fold_names) or 'nothing'}"
            )
        fit = fit_parameters(
            _engine_predict(train_p, base, fold_names), measured, start, fold_names, refuse_unidentified=False
        )
        dropped = [n for n in fold_names if fit.values[n] == start[n]]
        if dropped:
            notes.append(
                f"{label} {group}: {', '.join(dropped)} left at the default (not identified or unmoved)"
            )
        held_p = [predictors[i] for i in held]
        predicted = _engine_predict(held_p, base, fold_names)(fit.values)
        errors[held] = predicted / np.array([p.run.speedup for p in held_p]) - 1.0
    return errors


def fit_engine_profile(
    runs: Sequence[MeasuredRun],
    base: ServingEngineProfile,
    names: Sequence[str] = DEFAULT_FIT,
    *,
    predictors: tuple[list[RunPredictor], list[dict[str, Any]]] | None = None,
    source_label: str = "runs",
) -> EngineFit:
    """Fit `names` of `base`'s host parameters to the representable rows of `runs` (module docstring)."""
    unknown = [n for n in names if n not in HOST_PARAMETERS]
    if unknown:
        raise MoesimError(
            "fit", f"unknown parameter {unknown[0]!r}", f"choose from {', '.join(HOST_PARAMETERS)}"
        )
    ready, skipped = predictors if predictors is not None else prepare(runs)
    if not ready:
        raise MoesimError("runs", "no row can be represented by the simulator", "see `moesim validate runs`")
    start = {n: getattr(base.effective_host, n) for n in HOST_PARAMETERS}
    measured = np.array([p.run.speedup for p in ready])
    predict = _engine_predict(ready, base, names)
    fit = fit_parameters(predict, measured, start, names)
    notes: list[str] = []
    loro = _held_out(ready, base, start, names, [p.run.run_id for p in ready], notes, "leave-one-run-out")
    sources = [p.run.source for p in ready]
    loso = _held_out(ready, base, start, names, sources, notes, "leave-one-source-out")
    predicted = np.exp(fit.residuals) * measured
    rows = [
        {
            "run_id": p.run.run_id,
            "source": p.run.source,
            "measured_speedup": float(m),
            "fitted_speedup": float(f),
            "residual": float(f / m - 1.0),
            "leave_one_run_out_error": float(e1),
            "leave_one_source_out_error": float(e2),
        }
        for p, m, f, e1, e2 in zip(ready, measured, predicted, loro, loso, strict=True)
    ]
    values = {n: fit.values[n] for n in names}
    quality = {n: parameter_change(n, start[n], values[n]) for n in names}
    summary = {
        "rows": float(len(ready)),
        "train_mape": fit.mape,
        "leave_one_run_out_mape": _mean_abs(loro),
        "leave_one_source_out_mape": _mean_abs(loso),
    }
    quality["fit"] = {k: v for k, v in summary.items() if np.isfinite(v)}  # NaN: no such fold
    ids = ", ".join(p.run.run_id for p in ready)
    profile = base.with_fitted(
        values,
        quality,
        sources=(*base.provenance.sources, f"fitted by moesim calibrate --from-runs {source_label}"),
        assumptions=(*base.provenance.assumptions, f"training set ({len(ready)} rows): {ids}"),
    )
    groups = {s: np.array(sources) == s for s in dict.fromkeys(sources)}
    return EngineFit(
        profile=profile,
        base=base,
        fitted_names=list(names),
        rows=rows,
        train_mape=fit.mape,
        loro_mape=_mean_abs(loro),
        loso_mape=_mean_abs(loso),
        loso_by_source={s: _mean_abs(loso[mask]) for s, mask in groups.items()},
        loro_by_source={s: _mean_abs(loro[mask]) for s, mask in groups.items()},
        skipped=list(skipped),
        fold_notes=notes,
    )


def fit_profile_from_runs(
    runs_path: str, serving_engine: str, output: str, fit_text: str | None, all_engines: bool
) -> dict[str, Any]:
    """`moesim calibrate --from-runs`: fit the engine's host parameters to the runs measured with it (every
    row with `all_engines`) and write the fitted profile to `output`."""
    from dataclasses import replace
    from pathlib import Path

    from moesim.simulator.engines.profile import load_serving_engine, save_profile
    from moesim.validation.runs.schema import read_runs

    base = load_serving_engine(serving_engine)
    runs = read_runs(runs_path)
    if not all_engines:
        runs = [r for r in runs if r.serving_engine == base.provenance.engine]
        if not runs:
            raise MoesimError(
                "--from-runs",
                f"no row of {runs_path} was measured with {base.provenance.engine}",
                "fit a profile of the engine the runs used, or pass --all-engines",
            )
    names = tuple(p.strip() for p in fit_text.split(",") if p.strip()) if fit_text else DEFAULT_FIT
    fit = fit_engine_profile(runs, base, names, source_label=Path(runs_path).name)
    header = (
        f"Serving-engine profile {base.name} fitted by `moesim calibrate --from-runs {Path(runs_path).name} "
        f"--serving-engine {serving_engine}`: [host] keeps the documented defaults, [fitted] the fitted values."
    )
    save_profile(replace(fit.profile, name=Path(output).stem), output, header)
    return {"output": output, **fit.to_json()}

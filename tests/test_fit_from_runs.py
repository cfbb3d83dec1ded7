"""Fitting an engine profile to measured runs: round trips on simulator-generated runs, refusals."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.simulator.engines.profile import load_serving_engine
from moesim.validation.runs.fit import fit_engine_profile, fit_parameters
from moesim.validation.runs.predict import prepare, profile_for_run
from moesim.validation.runs.schema import COLUMN_NAMES, MeasuredRun


def _run(run_id: str, source: str, batch: int, draft_len: int, drafter: str = "eagle") -> MeasuredRun:
    values: dict[str, Any] = dict.fromkeys(COLUMN_NAMES)
    values.update(
        run_id=run_id,
        source=source,
        model="qwen3-30b-a3b",
        hardware="h200",
        gpus=1,
        tp=1,
        ep=1,
        serving_engine="vllm",
        cuda_graphs="yes",
        drafter=drafter,
        draft_shape="chain",
        draft_len=draft_len,
        acceptance_length=1.0 + 0.7 * draft_len,
        batch=(batch,),
        metric="speedup_throughput",
        ratio_of="tokens/s with SD / without",
        speedup=1.0,
    )
    return MeasuredRun(values)


TRUE = {"step_us": 400.0, "per_token_us": 3.0, "draft_step_us": 120.0, "accept_sync_us": 60.0}


@pytest.fixture(scope="module")
def generated() -> tuple[list[Any], list[MeasuredRun]]:
    """Runs whose 'measured' speedups are the simulator's own under a known vLLM-like profile."""
    plan = [
        (b, k, s)
        for s, batches in (("A", (1, 4)), ("B", (8, 16)), ("C", (32, 64)))
        for b in batches
        for k in (1, 3)
    ]
    runs = [_run(f"{s}-b{b}-k{k}", s, b, k) for b, k, s in plan]
    ready, skipped = prepare(runs)
    assert not skipped
    truth = load_serving_engine("vllm").with_fitted(TRUE, {})
    measured = [
        replace(p.run, values={**p.run.values, "speedup": p.predict(profile_for_run(p.run, truth))[0]})
        for p in ready
    ]
    for predictor, run in zip(ready, measured, strict=True):
        predictor.run = run
    return ready, measured


def test_fit_recovers_known_engine_parameters_from_simulated_runs(generated) -> None:  # type: ignore[no-untyped-def]
    ready, runs = generated
    fit = fit_engine_profile(runs, load_serving_engine("vllm"), tuple(TRUE), predictors=(ready, []))
    for name, value in TRUE.items():
        assert fit.changes()[name]["fitted"] == pytest.approx(value, rel=0.02), name
    assert fit.train_mape < 1e-4 and fit.loro_mape < 1e-3 and fit.loso_mape < 1e-2
    assert fit.profile.provenance.kind == "fitted" and fit.profile.host == load_serving_engine("vllm").host


def test_fit_refuses_a_parameter_the_runs_cannot_identify(generated) -> None:  # type: ignore[no-untyped-def]
    ready, _ = generated
    batch_one = [p for p in ready if p.run.batches == (1,)]
    twice = batch_one * 2  # enough rows for two parameters, still one batch size
    with pytest.raises(MoesimError, match="cannot identify"):
        # at one batch size, per-step and per-sequence host work move every prediction alike
        fit_engine_profile(
            [p.run for p in twice],
            load_serving_engine("vllm"),
            ("step_us", "per_sequence_us"),
            predictors=(twice, []),
        )


def test_fit_refuses_too_few_rows_and_unknown_parameters(generated) -> None:  # type: ignore[no-untyped-def]
    ready, runs = generated
    with pytest.raises(MoesimError, match="rows cannot fit"):
        fit_engine_profile(runs[:3], load_serving_engine("vllm"), tuple(TRUE), predictors=(ready[:3], []))
    with pytest.raises(MoesimError, match="unknown parameter"):
        fit_engine_profile(runs, load_serving_engine("vllm"), ("gpu_speed",), predictors=(ready, []))


def test_fit_parameters_fits_any_callable_predictor() -> None:
    x = np.linspace(1.0, 10.0, 12)

    def predict(values: dict[str, float]) -> np.ndarray:
        return 1.0 + values["step_us"] * 1e-3 * x + values["per_token_us"]

    measured = predict({"step_us": 250.0, "per_token_us": 2.0})
    fit = fit_parameters(
        predict, measured, {"step_us": 10.0, "per_token_us": 0.0}, ["step_us", "per_token_us"]
    )
    assert fit.values["step_us"] == pytest.approx(250.0, rel=1e-6)
    assert fit.values["per_token_us"] == pytest.approx(2.0, rel=1e-6)


def test_each_row_is_fitted_at_its_engine_version_and_keeps_that_version_s_facts() -> None:
    """SGLang rows run before spec-v2 (R4: `sglang-spec-v1`, no overlap under SD) keep sd_overlap_kept = 0
    while a fit of the `sglang` profile moves it; the spec-v2 rows (R8) follow the fitted value."""
    from moesim.validation.runs.fit import _engine_predict
    from moesim.validation.runs.predict import version_profile
    from moesim.validation.runs.schema import read_runs

    rows = [r for r in read_runs() if r.run_id in ("R4-t4-4-16-b32", "R8-120b-b64")]
    ready, _ = prepare(rows)
    base = load_serving_engine("sglang")
    assert [version_profile(p.run, base).name for p in ready] == ["sglang-spec-v1", "sglang"]
    start = {n: getattr(base.host, n) for n in ("sd_overlap_kept", "step_us")}
    predict = _engine_predict(ready, base, ["sd_overlap_kept", "step_us"])
    kept, dropped = predict(start), predict({**start, "sd_overlap_kept": 0.0})
    assert kept[0] == dropped[0]  # spec v1: already 0, read from SGLang 0.5.2's source
    assert dropped[1] < kept[1]  # spec-v2 without its overlap would be slower
    assert predict({**start, "step_us": 900.0})[0] < kept[0]  # a shared host term moves both

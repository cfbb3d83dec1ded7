"""The measured-runs CSV: schema, validation of user files, representability."""

from __future__ import annotations

import pytest

from moesim.errors import MoesimError
from moesim.validation.runs.schema import (
    COLUMN_NAMES,
    MeasuredRun,
    parse_runs,
    read_runs,
    unrepresentable_reason,
)


def test_bundled_runs_parse_with_a_source_on_every_row() -> None:
    runs = read_runs()
    assert len(runs) >= 20
    assert all(r.source and r.notes for r in runs)
    assert {r.source for r in runs} >= {"R1", "R2", "R3", "R4", "R5", "R8"}


def test_r8_rises_with_batch_and_its_speedups_are_its_published_throughputs() -> None:
    """R8 (SGLang spec-v2, gpt-oss-120b + EAGLE-3 on 1xH100): the measured curve that rises at batch 64."""
    r8 = {r.batches[0]: r for r in read_runs() if r.source == "R8" and r.model == "gpt-oss-120b"}
    assert sorted(r8) == [1, 8, 64]
    assert r8[64].speedup > r8[1].speedup > r8[8].speedup
    for run in r8.values():
        assert run.speedup == pytest.approx(run.sd_value / run.baseline_value, abs=0.001)
        assert unrepresentable_reason(run) is None


def test_every_unrepresentable_row_says_why_and_the_rest_have_k_and_al() -> None:
    for run in read_runs():
        reason = unrepresentable_reason(run)
        if reason is None:
            assert run.draft_len >= 1 and run.acceptance_length >= 1.0
        else:
            assert reason.strip()


def _csv(**overrides: str) -> str:
    first = read_runs()[0].values
    row = {name: first[name] for name in COLUMN_NAMES}
    row.update(overrides)
    cells = []
    for name in COLUMN_NAMES:
        value = row[name]
        if isinstance(value, tuple):
            value = ";".join(map(str, value))
        text = "" if value is None else str(value)
        cells.append(f'"{text}"' if "," in text else text)
    return ",".join(COLUMN_NAMES) + "\n" + ",".join(cells) + "\n"


def test_a_user_row_round_trips() -> None:
    (run,) = parse_runs(_csv(), "mine.csv")
    assert run.values == read_runs()[0].values


@pytest.mark.parametrize(
    ("column", "value", "needle"),
    [
        ("speedup", "fast", "speedup"),
        ("batch", "0", "batch"),
        ("metric", "latency", "metric"),
        ("gpus", "", "gpus"),
    ],
)
def test_bad_cells_name_the_file_line_and_column(column: str, value: str, needle: str) -> None:
    with pytest.raises(MoesimError) as info:
        parse_runs(_csv(**{column: value}), "mine.csv")
    assert info.value.field == f"mine.csv line 2: {needle}"


@pytest.mark.parametrize(
    ("column", "value", "words"),
    [
        ("speedup", "fast", "a number above 0"),
        ("temperature", "hot", "a number ≥ 0"),
        ("gpus", "many", "a whole number"),
        ("batch", "many", "whole numbers separated by semicolons"),
    ],
)
def test_a_cell_that_is_not_a_number_says_what_it_must_be(column: str, value: str, words: str) -> None:
    with pytest.raises(MoesimError) as info:
        parse_runs(_csv(**{column: value}), "mine.csv")
    assert f"{value!r} is not {words}" in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"speedup": "9.5"}, "above the 2 tokens a round of draft_len 1"),  # R1-K1: K = 1
        ({"sd_value": "500"}, "sd_value 500 and baseline_value 111 give 4.5"),
    ],
)
def test_a_speedup_a_round_cannot_give_or_its_values_contradict_is_refused(
    overrides: dict, needle: str
) -> None:
    with pytest.raises(MoesimError, match=needle) as info:
        parse_runs(_csv(**overrides), "mine.csv")
    assert info.value.field == "mine.csv line 2: speedup"


def test_missing_column_and_duplicate_ids_are_refused() -> None:
    text = _csv()
    with pytest.raises(MoesimError, match="speedup"):
        parse_runs(text.replace(",speedup,", ",speed,"), "mine.csv")
    header, row = text.splitlines()
    with pytest.raises(MoesimError, match="twice"):
        parse_runs("\n".join([header, row, row]) + "\n", "mine.csv")


def test_run_curves_meet_the_validated_rows_at_their_batch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A curve of rows that differ only in batch is priced at their mean acceptance length: for a row alone
    in its curve (R1: one K each) the curve at the row's batch is exactly what `validate --runs` predicts."""
    from moesim.validation.runs.curves import plot_run_curves, run_curves, unpredicted_points
    from moesim.validation.runs.predict import PER_RUN, prepare, profile_for_run, score_row

    runs = read_runs()
    curves = run_curves(runs, ("R1",))
    assert len(curves) == 5 and all(c.measured_batches == (1,) for c in curves)
    predictors, _ = prepare([r for r in runs if r.source == "R1"])
    validated = sorted(score_row(p, profile_for_run(p.run, PER_RUN))["predicted_speedup"] for p in predictors)
    at_one = sorted(c.predicted[c.batches.index(1)] for c in curves)
    assert at_one == pytest.approx(validated, rel=1e-12)
    assert not unpredicted_points(runs, ("R1",))
    assert {r.run_id for r in unpredicted_points(runs, ("R3",))} == {"R3-docs-b1", "R3-docs-b32"}
    plot_run_curves(curves, str(tmp_path / "curves.png"))
    assert (tmp_path / "curves.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"num_prompts": "0"}, "below 1"),
        ({"num_prompts": "80", "metric": "speedup_tpot"}, "applies to a speedup_throughput row"),
    ],
)
def test_a_prompt_count_a_throughput_benchmark_cannot_have_is_refused(overrides: dict, needle: str) -> None:
    with pytest.raises(MoesimError, match=needle) as info:
        parse_runs(_csv(**overrides), "mine.csv")
    assert info.value.field == "mine.csv line 2: num_prompts"


@pytest.mark.parametrize(
    ("prompts", "concurrency"), [(80, 64), (80, 8), (80, 1), (3, 64), (64, 64), (1000, 7)]
)
def test_a_closed_loop_run_sends_every_prompt_at_most_concurrency_at_a_time(
    prompts: int, concurrency: int
) -> None:
    from moesim.validation.runs.predict import closed_loop_waves

    waves = closed_loop_waves(prompts, concurrency)
    assert sum(batch * n for batch, n in waves.items()) == prompts
    assert max(waves) == min(prompts, concurrency)
    assert sum(n for batch, n in waves.items() if batch < concurrency) <= 1  # one short wave at most


def _r8(batch: int) -> MeasuredRun:
    return next(
        r for r in read_runs() if r.source == "R8" and r.model == "gpt-oss-120b" and r.batch == (batch,)
    )


def test_r8_is_priced_as_its_closed_loop_benchmark_of_80_prompts() -> None:
    """80 prompts at concurrency 64 are timed over a wave of 64 and a wave of 16: the run's speedup is the two
    waves' steady speedups weighted by their time (the decode time of each wave over its speedup), so it
    lies between them; at concurrency 8 the 80 prompts are ten full waves, the steady point itself."""
    from moesim.validation.runs.predict import PER_RUN, prepare, profile_for_run

    (at_64, at_8), _ = prepare([_r8(64), _r8(8)])
    assert at_64.run.num_prompts == 80
    profile = profile_for_run(at_64.run, PER_RUN)
    full, tail = at_64.point(profile, 64), at_64.point(profile, 16)
    speedup, step_ratio, batch = at_64.predict(profile)
    by_hand = (full.decode.step_s + tail.decode.step_s) / (
        full.decode.step_s / full.speedup + tail.decode.step_s / tail.speedup
    )
    assert batch == 64
    assert speedup == pytest.approx(by_hand, rel=1e-12)
    assert min(full.speedup, tail.speedup) < speedup < max(full.speedup, tail.speedup)
    assert step_ratio == pytest.approx(at_64.run.acceptance_length / speedup, rel=1e-12)
    steady = at_8.point(profile_for_run(at_8.run, PER_RUN), 8)
    assert at_8.predict(profile_for_run(at_8.run, PER_RUN))[:2] == pytest.approx(
        (steady.speedup, steady.step_ratio), rel=1e-12
    )

"""Sweeps: rows and peaks as documented, skipped models, CSV and plot files, the CLI commands."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from moesim.commands.simulate import layer_command, simulate_command, sweep_command
from moesim.errors import MoesimError
from moesim.simulator.execution.fastpath import fast_step
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.speculative.sweep import ROW_FIELDS
from tests.core_fixtures import h200, model, simulate_sd, sweep_grid

BATCHES = [1, 2, 8, 32]
KS = [1, 3]


@pytest.fixture(scope="module")
def sweep():  # type: ignore[no-untyped-def]
    models = [model("qwen3-30b-a3b"), model("olmoe-1b-7b"), model("deepseek-v3")]
    return sweep_grid(models, h200(), BATCHES, KS, drafter="fraction:0.1")


def test_rows_cover_the_grid_of_fitting_models(sweep) -> None:  # type: ignore[no-untyped-def]
    assert len(sweep.rows) == 2 * len(BATCHES) * len(KS)
    for row in sweep.rows:
        assert row.verify_over_decode == pytest.approx(row.verify_step_s / row.decode_step_s)
        assert row.speedup == pytest.approx(
            row.tokens_per_step * row.decode_step_s / (row.draft_s + row.verify_step_s)
        )
        assert row.verify_distinct_experts >= row.decode_distinct_experts


def test_skipped_models_are_listed(sweep) -> None:  # type: ignore[no-untyped-def]
    assert [s["model"] for s in sweep.skipped] == ["deepseek-v3"]
    assert sweep.skipped[0]["all_batches"]
    assert "missing" in sweep.skipped[0]["reason"]


def test_peaks_are_the_best_batch_per_model_and_k(sweep) -> None:  # type: ignore[no-untyped-def]
    assert len(sweep.peaks) == 2 * len(KS)
    for peak in sweep.peaks:
        rows = [r for r in sweep.rows if r.model == peak.model and r.draft_len == peak.draft_len]
        best = max(rows, key=lambda r: r.speedup)
        assert (peak.peak_batch, peak.peak_speedup) == (best.batch, best.speedup)


def test_sweep_matches_the_engine(sweep) -> None:  # type: ignore[no-untyped-def]
    row = next(r for r in sweep.rows if r.model == "qwen3-30b-a3b" and r.batch == 2 and r.draft_len == 3)
    result = simulate_sd("qwen3-30b-a3b", h200(), 2, 3, drafter="fraction:0.1")
    assert row.speedup == pytest.approx(result.speedup, rel=0.01)
    plan = build_plan(model("qwen3-30b-a3b"), 2, 4, 2048, "fused", None, h200())
    assert row.verify_step_s == pytest.approx(fast_step(plan, h200()).step_s)


def test_tokens_per_second_and_speedup_come_from_one_round_time(sweep) -> None:  # type: ignore[no-untyped-def]
    for row in sweep.rows:
        assert row.round_s > row.draft_s + row.verify_step_s * (1 - 1e-12)  # the acceptance sync is in it
        assert row.speedup == pytest.approx(row.tokens_per_step * row.decode_step_s / row.round_s, rel=1e-12)
        assert row.tokens_per_s == pytest.approx(row.speedup * row.batch / row.decode_step_s, rel=1e-12)


def test_csv_and_plot_are_written(sweep, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from moesim.simulator.speculative.plots import plot_sweep

    sweep.write_csv(tmp_path / "rows.csv")
    with open(tmp_path / "rows.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(sweep.rows) and tuple(rows[0]) == ROW_FIELDS
    plot_sweep(sweep, str(tmp_path / "speedup.png"))
    assert (tmp_path / "speedup.png").stat().st_size > 10_000
    with pytest.raises(MoesimError):
        plot_sweep(sweep, str(tmp_path / "speedup.txt"))


def test_bad_sweep_input_is_refused() -> None:
    with pytest.raises(MoesimError):
        sweep_grid([model("olmoe-1b-7b")], h200(), [0], [1])
    with pytest.raises(MoesimError):
        sweep_grid([model("olmoe-1b-7b")], h200(), [1], [1], launch="warp")


def test_cli_simulate_json_has_the_documented_keys() -> None:
    result = CliRunner().invoke(
        simulate_command,
        ["--model", "olmoe-1b-7b", "--hardware", "h200", "--batch", "2", "--draft-len", "2", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for key in ("draft_s", "tokens_per_step", "verify_over_decode", "speedup"):
        assert key in data
    for part in ("decode", "verify"):
        assert {"step_s", "distinct_experts_per_layer", "breakdown_s"} <= set(data[part])


def test_cli_simulate_text_and_overrides() -> None:
    result = CliRunner().invoke(
        simulate_command, ["--model", "olmoe-1b-7b", "--experts", "128", "--top-k", "4", "--batch", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "speedup" in result.output and "routed experts" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "no-such-model"],
        ["--model", "olmoe-1b-7b", "--hardware", "no-such-gpu"],
        ["--model", "olmoe-1b-7b", "--batch", "0"],
        ["--model", "olmoe-1b-7b", "--top-k", "100"],
        ["--model", "olmoe-1b-7b", "--draft", "magic"],
        ["--model", "deepseek-v3", "--gpus", "1"],  # the default picks the smallest layout that fits
    ],
)
def test_cli_bad_input_ends_in_one_line(args: list[str]) -> None:
    result = CliRunner().invoke(simulate_command, args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1


def test_cli_sweep_json_csv_plot(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        sweep_command,
        [
            "--model",
            "olmoe-1b-7b,deepseek-v3",
            "--gpus",
            "1",  # the default picks the smallest layout that fits
            "--batch",
            "1,4",
            "--draft-len",
            "1,2",
            "--json",
            "--csv",
            str(tmp_path / "s.csv"),
            "--plot",
            str(tmp_path / "s.png"),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {
        "model",
        "hardware",
        "batch",
        "draft_len",
        "speedup",
        "verify_over_decode",
        "decode_step_s",
        "verify_step_s",
    } <= set(data["rows"][0])
    assert {"model", "hardware", "draft_len", "peak_batch", "peak_speedup"} <= set(data["peaks"][0])
    assert data["skipped"][0]["model"] == "deepseek-v3"
    assert (tmp_path / "s.csv").exists() and (tmp_path / "s.png").exists()


def test_cli_layer_json() -> None:
    result = CliRunner().invoke(
        layer_command, ["--model", "olmoe-1b-7b", "--tokens", "4", "--distinct-experts", "20", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["time_s"] > 0
    bad = CliRunner().invoke(
        layer_command, ["--model", "olmoe-1b-7b", "--tokens", "1", "--distinct-experts", "20"]
    )
    assert bad.exit_code == 2


def test_best_draft_length_per_batch(sweep) -> None:  # type: ignore[no-untyped-def]
    best = sweep.to_json()["best_draft_len"]
    assert len(best) == 2 * len(BATCHES)
    for entry in best:
        rows = [r for r in sweep.rows if r.model == entry["model"] and r.batch == entry["batch"]]
        assert entry["speedup"] == max(r.speedup for r in rows)


def test_worker_processes_give_the_same_sweep() -> None:
    from moesim.simulator.scenario import Scenario
    from moesim.simulator.speculative.sweep import run_sweep

    models = [model("qwen3-30b-a3b"), model("olmoe-1b-7b"), model("mixtral-8x7b")]
    base = Scenario(models[0], h200(), drafter="fraction:0.1")  # typical routing, smallest fitting layout
    one = run_sweep(base, models, BATCHES, KS)
    seen: list[int] = []
    two = run_sweep(base, models, BATCHES, KS, workers=2, progress=seen.append)
    assert two.to_json() == one.to_json()
    assert sum(seen) == len(models) * len(BATCHES) * len(KS)
    with pytest.raises(MoesimError, match="workers"):
        run_sweep(base, models, BATCHES, KS, workers=0)

"""`moesim serve` from the shell: JSON with every metric, CSV and plot files, one-line errors."""

from __future__ import annotations

import csv
import json

from click.testing import CliRunner

from moesim.cli import cli

BASE = ["serve", "--model", "olmoe-1b-7b", "--num-prompts", "24", "--random-input-len", "256"]
BASE += ["--random-output-len", "32"]


def test_json_has_every_metric_for_sd_and_baseline_and_the_speedups(tmp_path) -> None:  # type: ignore[no-untyped-def]
    csv_path, plot_path = tmp_path / "s.csv", tmp_path / "s.png"
    args = [*BASE, "--max-concurrency", "1,4", "--csv", str(csv_path), "--plot", str(plot_path), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [p["max_concurrency"] for p in data["points"]] == [1, 4]
    for point in data["points"]:
        for mode in ("sd", "baseline"):
            assert point[mode]["completed"] == 24
            assert {"mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms"} <= set(point[mode])
        assert (
            point["speedup"]["output_throughput"]
            == point["sd"]["output_throughput"] / (point["baseline"]["output_throughput"])
        )
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["mode"] for r in rows] == ["sd", "baseline", "sd", "baseline"]
    assert plot_path.stat().st_size > 10_000


def test_table_output_and_request_rate_sweep() -> None:
    result = CliRunner().invoke(cli, [*BASE, "--request-rate", "2,inf", "--burstiness", "0.5"])
    assert result.exit_code == 0, result.output
    assert "req/s" in result.output and "not_modelled" in result.output


def test_bad_flags_end_in_one_line() -> None:
    for extra, field in (
        (["--random-range-ratio", "1.5"], "random_range_ratio"),
        (["--max-concurrency", "0"], "--max-concurrency"),
        (["--dataset-name", "jsonl"], "dataset_path"),
        (["--plot", "x.gif"], "--plot"),
        (["--burstiness", "-1"], "burstiness"),
    ):
        result = CliRunner().invoke(cli, [*BASE, *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert field in result.output and "Traceback" not in result.output


def test_the_shell_and_python_give_the_same_numbers() -> None:
    import moesim
    from moesim.simulator.serving.workload import random_workload

    result = CliRunner().invoke(cli, [*BASE, "--max-concurrency", "4", "--json"])
    shell = json.loads(result.output)["points"][0]
    python = moesim.serve(
        moesim.Scenario("olmoe-1b-7b"), random_workload(24, 256, 32), concurrencies=[4]
    ).to_json()["points"][0]
    assert shell == json.loads(json.dumps(python))


def test_expert_parallel_and_dp_attention_layouts_run_and_are_named() -> None:
    from moesim.commands.serve import serving_layout

    assert serving_layout(4).describe() == serving_layout(4, 4, 1).describe()  # --tp alone: a TP group
    assert (serving_layout(1, 8, 8).dp, serving_layout(1, 8, 8).ep) == (8, 8)  # SGLang DP attention + EP
    assert serving_layout(8, None, 8).dp == 1  # SGLang --tp 8 --ep-size 8
    args = [
        *BASE,
        "--model",
        "qwen3-30b-a3b",
        "--gpus",
        "4",
        "--tp",
        "1",
        "--ep",
        "4",
        "--max-concurrency",
        "2",
    ]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert "DP=4" in json.loads(result.stdout)["assumptions"]["layout"]
    bad = CliRunner().invoke(cli, [*BASE, "--gpus", "4", "--tp", "1"])
    assert bad.exit_code != 0 and "--ep 4" in bad.output

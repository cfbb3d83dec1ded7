"""`moesim routing` commands end to end through click, including the error path."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from moesim.commands.routing import routing_group
from moesim.simulator.routing import save_trace
from moesim.simulator.routing.independent import expected_distinct_uniform
from moesim.simulator.routing.stats import baseline_overlap, overlap_curve, window_distinct
from moesim.simulator.routing.synthetic import gating_trace


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(routing_group, list(args))
    return result.exit_code, result.output


def test_predict_independent_matches_closed_form() -> None:
    code, out = run("predict", "--experts", "128", "--top-k", "8", "--tokens", "4", "--batch", "2", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["distinct_experts"] == pytest.approx(float(expected_distinct_uniform(128, 8, 8)))
    assert data["p10"] <= data["p50"] <= data["p90"] <= data["upper_bound"] == 64


def test_predict_from_a_traces_overlap_curve_lands_near_its_counts() -> None:
    trace = gating_trace(32, 4, 300, 24, seed=11)
    curve = ",".join(f"{o:.4f}" for o in overlap_curve(trace, 0, 16))
    code, out = run(
        "predict",
        "--experts",
        "32",
        "--top-k",
        "4",
        "--tokens",
        "8",
        "--overlap",
        curve,
        "--baseline-overlap",
        f"{baseline_overlap(trace, 0):.4f}",
        "--ranks",
        "4",
        "--json",
    )
    assert code == 0, out
    data = json.loads(out)
    assert data["distinct_experts"] == pytest.approx(window_distinct(trace, 0, 8)[-1], rel=0.05)
    assert data["per_layer"][0]["per_rank"]["max_distinct"]["mean"] <= 8


def test_fit_refuses_a_trace_of_one_token_sequences(tmp_path) -> None:
    path = tmp_path / "single.npz"
    np.savez(path, experts=np.array([[[1, 2]], [[3, 4]]]), sequence_ids=np.array([0, 2**62]))
    code, out = run("fit", str(path), "--experts", "16", "--output", str(tmp_path / "s.json"))
    assert code != 0
    assert "single.npz: every sequence is one token long" in out
    assert not (tmp_path / "s.json").exists()


def test_fit_inspect_generate_round_trip(tmp_path) -> None:
    trace_path, stats_path, generated = tmp_path / "t.npz", tmp_path / "s.json", tmp_path / "g.jsonl"
    save_trace(gating_trace(16, 2, 60, 16, n_layers=2, seed=2), trace_path)
    code, out = run("fit", str(trace_path), "--output", str(stats_path), "--max-distance", "8")
    assert code == 0, out
    stats = json.loads(stats_path.read_text())
    assert [entry["layer"] for entry in stats["layers"]] == [0, 1]
    assert len(stats["layers"][0]["empirical"]["overlap"]) == 8
    code, out = run(
        "inspect", str(trace_path), "--json", "--plot", str(tmp_path / "p.png"), "--max-distance", "6"
    )
    assert code == 0, out
    summary = json.loads(out)
    assert summary["mean_distinct_vs_tokens"][0] == 2 and (tmp_path / "p.png").stat().st_size > 0
    code, out = run(
        "generate", "--stats", str(stats_path), "--sequences", "5", "--tokens", "7", "-o", str(generated)
    )
    assert code == 0, out
    assert len(generated.read_text().splitlines()) == 35
    code, out = run(
        "predict", "--experts", "16", "--top-k", "2", "--tokens", "4", "--routing", str(stats_path)
    )
    assert code == 0 and "fitted" in out


@pytest.mark.parametrize(
    "args",
    [
        ("predict", "--experts", "8", "--top-k", "9", "--tokens", "2"),
        ("predict", "--experts", "8", "--top-k", "2", "--tokens", "2", "--overlap", "a,b"),
        ("predict", "--experts", "8", "--top-k", "2", "--tokens", "2", "--routing", "nonsense"),
        ("inspect", "/nonexistent/trace.npz"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    code, out = run(*args)
    assert code == 2
    assert out.startswith("error: ") and "Traceback" not in out


def test_bad_trace_file_is_a_user_error(tmp_path) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, experts=np.array([[[1, 1]]]), sequence_ids=np.array([0]), n_experts=4)
    code, out = run("fit", str(path), "-o", str(tmp_path / "s.json"))
    assert code == 2 and "twice" in out

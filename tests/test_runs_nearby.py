"""The error beside every projection: moesim's error on the shipped measured runs in the projection's regime."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from moesim.cli import cli
from moesim.validation.runs.nearby import (
    RowError,
    batch_band,
    compute_errors,
    model_class,
    nearby_error,
    nearby_errors,
    render_errors,
    shipped_errors,
    shipped_table_path,
)


def test_the_shipped_table_is_what_moesim_predicts_now() -> None:
    """Regenerate with `python -m moesim.validation.runs.nearby` when a change moves a prediction."""
    assert shipped_table_path().read_text(encoding="utf-8") == render_errors(compute_errors())


def test_bands_and_classes() -> None:
    assert [batch_band(b) for b in (1, 4, 5, 15, 16, 64, 65, 512)] == [
        "1–4",
        "1–4",
        "5–15",
        "5–15",
        "16–64",
        "16–64",
        "above 64",
        "above 64",
    ]
    assert model_class(0, False) == "dense"
    assert model_class(8, True) == "coarse MoE" and model_class(128, True) == "fine-grained MoE"


def _row(run_id: str, source: str, engine: str, batch: int, ideal: float, preset: float) -> RowError:
    return RowError(run_id, source, engine, "m", "fine-grained MoE", batch, 1.5, ideal, engine, preset)


ROWS = [
    _row("a", "S1", "sglang", 32, 0.10, -0.20),
    _row("b", "S2", "sglang", 64, -0.30, 0.40),
    _row("c", "S3", "vllm", 16, 0.50, 0.05),
    _row("d", "S1", "sglang", 1, 0.90, 0.90),
]


def test_an_engine_projection_is_scored_on_that_engine_s_runs_under_their_presets() -> None:
    near = nearby_error("sglang", 48, 128, True, ROWS)
    assert (near.rows, near.sources, near.batch_band) == (2, ("S1", "S2"), "16–64")
    assert near.speedup_mape == pytest.approx((0.20 + 0.40) / 2)
    assert near.text.startswith("measured runs at batch 16–64 under sglang, fine-grained MoE:")
    assert "30%" in near.text and "n = 2" in near.text


def test_an_ideal_projection_is_scored_on_every_engine_s_runs_under_ideal() -> None:
    near = nearby_error("none", 20, 128, True, ROWS)
    assert near.rows == 3 and near.speedup_mape == pytest.approx((0.10 + 0.30 + 0.50) / 3)


def test_no_run_in_the_regime_says_so() -> None:
    for near in (
        nearby_error("sglang", 200, 128, True, ROWS),  # batch band
        nearby_error("sglang", 32, 8, True, ROWS),  # model class
        nearby_error("trtllm", 32, 128, True, ROWS),  # engine
    ):
        assert near.rows == 0 and near.speedup_mape is None
        assert near.text.startswith("no measured run near this point")
        assert near.to_json()["speedup_mape"] is None


def test_one_line_per_regime_of_a_grid() -> None:
    points = [(b, n, True) for n in (8, 128) for b in (1, 2, 32, 64)]
    regimes = [(e.batch_band, e.model_class) for e in nearby_errors("none", points)]
    assert regimes == [
        ("1–4", "coarse MoE"),
        ("16–64", "coarse MoE"),
        ("1–4", "fine-grained MoE"),
        ("16–64", "fine-grained MoE"),
    ]


def test_the_shipped_runs_cover_the_engines_they_were_measured_with() -> None:
    engines = {r.serving_engine for r in shipped_errors()}
    assert {"sglang", "vllm", "trtllm"} <= engines
    assert all(r.preset for r in shipped_errors())


def _json(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_simulate_sweep_serve_and_screen_carry_the_error_in_json() -> None:
    one = _json("simulate", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--batch", "32")
    assert one["measured_runs_error"]["batch_band"] == "16–64"
    assert one["measured_runs_error"]["text"]
    many = _json(
        "sweep", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--batch", "1,32", "--draft-len", "3"
    )
    assert [e["batch_band"] for e in many["measured_runs_error"]] == ["1–4", "16–64"]
    served = _json(
        "serve", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--num-prompts", "8",
        "--max-concurrency", "1", "--serving-engine", "sglang",
    )  # fmt: skip
    assert served["measured_runs_error"][0]["serving_engine"] == "sglang"
    screened = _json("screen", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--experts", "8,128")
    assert {e["model_class"] for e in screened["measured_runs_error"]} == {"coarse MoE", "fine-grained MoE"}

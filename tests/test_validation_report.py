"""Validation summaries, error attribution, the --measured CSV path and the written report."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.commands.validate import validate_group
from moesim.errors import MoesimError
from moesim.validation.reference.predict import TERMS
from moesim.validation.reference.report import (
    add_errors_and_ratios,
    attribute_error,
    read_measured_csv,
    rows_to_csv,
    summarise,
    write_report,
)

EXAMPLE = Path(str(resources.files("moesim") / "data" / "validation_example.csv"))


def synthetic_rows(measured: list[float], predicted: list[float]) -> list[dict]:
    rows = [
        {
            "model": "m",
            "batch": i + 1,
            "draft_len": 0,
            "measured_s": m,
            "predicted_s": p,
            "round_spread": 0.01,
            "spread": 0.02,
        }
        for i, (m, p) in enumerate(zip(measured, predicted, strict=True))
    ]
    add_errors_and_ratios(rows)
    return rows


def test_summary_on_a_synthetic_table():
    rows = synthetic_rows([1.0, 2.0, 4.0, 8.0], [1.1, 1.8, 4.0, 10.0])
    s = summarise(rows)
    errors = np.array([0.1, -0.1, 0.0, 0.25])
    assert s["n"] == 4
    assert s["mape"] == pytest.approx(np.mean(np.abs(errors)))
    assert s["p90_abs_error"] == pytest.approx(np.quantile(np.abs(errors), 0.9))
    assert s["median_error"] == pytest.approx(np.median(errors))
    assert s["worst"]["batch"] == 4 and s["worst"]["error"] == pytest.approx(0.25)
    assert s["noise_floor"] == pytest.approx(0.01)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1e-4, 10.0), min_size=1, max_size=20), st.floats(0.5, 2.0))
def test_uniform_scale_error_gives_that_mape(measured, factor):
    s = summarise(synthetic_rows(measured, [m * factor for m in measured]))
    assert s["mape"] == pytest.approx(abs(factor - 1.0), abs=1e-9)
    assert s["p90_abs_error"] == pytest.approx(abs(factor - 1.0), abs=1e-9)


def test_summary_refuses_an_empty_table():
    with pytest.raises(MoesimError):
        summarise([])


def test_attribution_names_the_term_that_is_off():
    """Measurements made with a launch term 1.5× the predicted one: the attribution must find it."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(30):
        terms = dict(zip(TERMS, rng.uniform(0.1, 1.0, len(TERMS)) * 1e-3, strict=True))
        predicted = sum(terms.values())
        measured = predicted + 0.5 * terms["launch"]
        rows.append(
            {
                "model": "m",
                "batch": i + 1,
                "draft_len": 0,
                "measured_s": measured,
                "predicted_s": predicted,
                "predicted_terms_s": terms,
            }
        )
    a = attribute_error(rows)
    assert a["most_explaining_term"] == "launch"
    assert a["single_term"]["launch"]["factor"] == pytest.approx(1.5, rel=1e-6)
    assert a["single_term"]["launch"]["mape_after"] == pytest.approx(0.0, abs=1e-9)
    assert a["joint_factors"]["launch"] == pytest.approx(1.5, rel=1e-6)


def test_verify_over_decode_ratios():
    rows = [
        {"model": "m", "batch": 2, "draft_len": 0, "measured_s": 1.0, "predicted_s": 2.0},
        {"model": "m", "batch": 2, "draft_len": 3, "measured_s": 1.5, "predicted_s": 2.4},
    ]
    add_errors_and_ratios(rows)
    assert rows[1]["measured_ratio"] == pytest.approx(1.5)
    assert rows[1]["predicted_ratio"] == pytest.approx(1.2)
    assert summarise(rows)["ratio_mape"] == pytest.approx(0.2)


def test_example_csv_parses():
    rows = read_measured_csv(EXAMPLE)
    assert len(rows) >= 4
    assert all(r["measured_s"] > 0 and r["batch"] >= 1 and r["draft_len"] >= 0 for r in rows)
    assert any(r["draft_len"] == 0 for r in rows)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("model,batch,draft_len\nx,1,0\n", "missing column"),
        ("model,batch,draft_len,measured_step_s\nqwen3-30b-a3b,one,0,0.01\n", "batch must be an integer"),
        (
            "model,batch,draft_len,measured_step_s\nqwen3-30b-a3b,1,0,-1\n",
            "measured_step_s must be a positive",
        ),
        ("model,batch,draft_len,measured_step_s\nqwen3-30b-a3b,0,0,0.01\n", "batch must be ≥ 1"),
        ("model,batch,draft_len,measured_step_s,launch\nqwen3-30b-a3b,1,0,0.01,turbo\n", "launch"),
        ("# only a comment\n", "no header"),
        ("model,batch,draft_len,measured_step_s\n", "no rows"),
    ],
)
def test_bad_measured_csv_names_the_problem(tmp_path, text, problem):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(MoesimError, match=problem):
        read_measured_csv(path)


def test_cli_bad_csv_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("model,batch\nx,1\n")
    result = CliRunner().invoke(validate_group, ["measured", str(path), "--profile", "h200"])
    assert result.exit_code == 2
    assert "missing column" in result.output and "Traceback" not in result.output
    missing = CliRunner().invoke(
        validate_group, ["measured", str(tmp_path / "none.csv"), "--profile", "h200"]
    )
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_cli_measured_example_json_schema(tmp_path):
    result = CliRunner().invoke(
        validate_group,
        ["measured", str(EXAMPLE), "--profile", "h200", "--json", "--report", str(tmp_path / "rep")],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) >= {"rows", "summary"}
    for key in ("mape", "p90_abs_error", "n", "noise_floor", "worst"):
        assert key in data["summary"]
    assert data["summary"]["n"] == len(data["rows"]) == len(read_measured_csv(EXAMPLE))
    for row in data["rows"]:
        assert row["error"] == pytest.approx(row["predicted_s"] / row["measured_s"] - 1.0)
        assert row["predicted_s"] > 0
    written = sorted(p.name for p in (tmp_path / "rep").iterdir())
    assert written == ["predicted_vs_measured.png", "report.md", "result.json", "rows.csv"]


def test_cli_schema_and_unknown_model():
    schema = CliRunner().invoke(validate_group, ["measured", "--schema"])
    assert schema.exit_code == 0 and "measured_step_s" in schema.output
    bad = CliRunner().invoke(validate_group, ["reference", "--profile", "h200", "--models", "nope"])
    assert bad.exit_code == 2 and "--models" in bad.output


def test_report_files_are_complete(tmp_path):
    rows = synthetic_rows([1e-3, 2e-3, 3e-3], [1.1e-3, 2e-3, 2.7e-3])
    for r in rows:
        r["predicted_terms_s"] = {t: r["predicted_s"] / len(TERMS) for t in TERMS}
        r["predicted_breakdown_s"] = {"routed_experts": r["predicted_s"]}
    result = {
        "rows": rows,
        "summary": summarise(rows),
        "meta": {"title": "synthetic", "command": "moesim validate --x"},
    }
    paths = write_report(tmp_path / "out", result)
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "moesim validate --x" in md and "MAPE" in md
    csv_lines = (tmp_path / "out" / "rows.csv").read_text().splitlines()
    assert len(csv_lines) == 4 and "term_launch_s" in csv_lines[0]
    assert rows_to_csv(rows) == "\n".join(csv_lines) + "\n"
    assert not list((tmp_path / "out").glob(".*tmp"))  # atomic writes leave no temporaries


def test_a_measured_csv_with_the_old_engine_column_reads_it_as_the_kernel_style(tmp_path: Path) -> None:
    from moesim.validation.reference.report import read_measured_csv

    new = EXAMPLE.read_text()
    assert ",kernel_style," in new
    old = tmp_path / "old.csv"
    old.write_text(new.replace(",kernel_style,", ",engine,"))
    assert read_measured_csv(old) == [
        {**row, "source_dir": str(tmp_path)} for row in read_measured_csv(EXAMPLE)
    ]
    assert {row["kernel_style"] for row in read_measured_csv(old)} == {"torch-reference"}

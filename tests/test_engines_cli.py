"""`moesim engines`, `moesim validate --runs` and `moesim calibrate --from-runs` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from moesim.cli import cli
from moesim.simulator.engines.profile import load_serving_engine
from moesim.validation.runs.schema import read_runs


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_engines_lists_every_profile_with_provenance() -> None:
    code, out, _ = invoke("engines", "--json")
    assert code == 0
    names = [e["name"] for e in json.loads(out)["serving_engines"]]
    assert names[0] == "ideal" and {"vllm", "sglang", "trtllm"} <= set(names)
    code, text, _ = invoke("engines", "vllm")
    assert code == 0 and "vllm 0.33.0" in text and "source:" in text


def test_validate_runs_reports_per_source_and_lists_what_it_cannot_represent(tmp_path: Path) -> None:
    plot = tmp_path / "runs.png"
    code, out, _ = invoke(
        "validate", "runs", "--serving-engine", "ideal,sglang", "--plot", str(plot), "--json"
    )
    assert code == 0 and plot.stat().st_size > 0
    data = json.loads(out)
    ideal, sglang = data["validations"]
    assert (ideal["serving_engine"], sglang["serving_engine"]) == ("ideal", "sglang")
    assert {"R1", "R2", "R4", "R8", "all"} <= set(ideal["by_source"])
    assert ideal["not_represented"] and all(s["reason"] for s in ideal["not_represented"])
    represented = {r["run_id"] for r in ideal["rows"]} | {s["run_id"] for s in ideal["not_represented"]}
    code, schema, _ = invoke("validate", "runs", "--schema", "--json")
    bundled = {run.run_id for run in read_runs()}
    assert code == 0 and represented == bundled and len(bundled) == 32 and json.loads(schema)["columns"]


def test_calibrate_from_runs_writes_a_fitted_profile_that_loads(tmp_path: Path) -> None:
    output = tmp_path / "my-trtllm.toml"
    code, out, err = invoke(
        "calibrate",
        "--from-runs",
        "moesim/data/measured_runs.csv",
        "--serving-engine",
        "trtllm",
        "--fit",
        "draft_step_us,accept_sync_us",
        "--output",
        str(output),
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert set(data["fitted"]) == {"draft_step_us", "accept_sync_us"}
    profile = load_serving_engine(str(output))
    assert profile.provenance.kind == "fitted" and set(profile.fitted) == {"draft_step_us", "accept_sync_us"}
    assert profile.host == load_serving_engine("trtllm").host  # documented defaults kept apart
    code, out, _ = invoke("validate", "runs", "--serving-engine", str(output), "--json")
    assert code == 0 and json.loads(out)["validations"][0]["serving_engine"] == "my-trtllm"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("validate", "runs", "--serving-engine", "vlm"), "did you mean vllm"),
        (("validate", "runs", "nope.csv"), "nope.csv does not exist"),
        (("validate", "reference", "--device", "cpu"), "--profile: is required"),
        (
            ("calibrate", "--from-runs", "moesim/data/measured_runs.csv", "--output", "x.toml"),
            "--serving-engine",
        ),
        (("calibrate", "--output", "x.toml"), "--device: is required"),
        (
            (
                "calibrate",
                "--from-runs",
                "moesim/data/measured_runs.csv",
                "--serving-engine",
                "vllm",
                "--quick",
                "--output",
                "x.toml",
            ),
            "--quick: does not apply with --from-runs",
        ),
        (
            (
                "calibrate",
                "--from-runs",
                "moesim/data/measured_runs.csv",
                "--serving-engine",
                "ideal",
                "--output",
                "x.toml",
            ),
            "no row",
        ),
    ],
)
def test_bad_input_ends_in_one_line(args: tuple[str, ...], needle: str) -> None:
    code, _, err = invoke(*args)
    assert code == 2 and needle in err and "Traceback" not in err


def test_simulate_and_sweep_take_a_serving_engine_and_report_it() -> None:
    args = ("--model", "qwen3-30b-a3b", "--hardware", "h200", "--json")
    code, out, err = invoke(
        "simulate", *args, "--batch", "200", "--draft-len", "3", "--serving-engine", "vllm"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["assumptions"]["serving_engine"] == "vllm"
    serving = data["serving_engine"]
    assert (
        serving["decode"]["launch"] == "graph" and serving["verify"]["launch"] == "eager"
    )  # 800 > 512 tokens
    for step in ("decode", "verify"):
        breakdown = data[step]["breakdown_s"]
        assert {"padding", "engine_host"} <= set(breakdown)
        assert sum(breakdown.values()) == pytest.approx(data[step]["step_s"], rel=1e-9)
    code, out, _ = invoke("simulate", *args, "--batch", "200", "--draft-len", "3")
    ideal = json.loads(out)
    assert ideal["assumptions"]["serving_engine"] == "ideal" and ideal["speedup"] != data["speedup"]
    code, out, err = invoke(
        "sweep", *args, "--batch", "1,5", "--draft-len", "2", "--serving-engine", "sglang"
    )
    assert code == 0, err
    assert json.loads(out)["assumptions"]["serving_engine"] == "sglang"
    code, _, err = invoke("sweep", *args, "--batch", "1", "--draft-len", "2", "--serving-engine", "nope")
    assert code == 2 and "unknown serving-engine profile 'nope'" in err


def test_python_and_cli_give_the_same_number_under_a_serving_engine() -> None:
    import moesim

    code, out, _ = invoke(
        "simulate",
        "--model",
        "qwen3-30b-a3b",
        "--batch",
        "5",
        "--draft-len",
        "3",
        "--serving-engine",
        "sglang",
        "--json",
    )
    assert code == 0
    api = moesim.simulate(model="qwen3-30b-a3b", batch=5, draft_len=3, serving_engine="sglang")
    assert api.speedup == json.loads(out)["speedup"]
    assert api.serving_engine["decode"]["rows_run"] == 5  # 5 is captured in SGLang's speculative grid

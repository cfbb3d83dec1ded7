"""Offline re-prediction of an earlier torch run's measured rows (`moesim validate --repredict`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from moesim.commands.validate import validate_group
from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import load_profile
from moesim.validation.reference.configs import config_seed, default_routing, row_routing, run_layers
from moesim.validation.reference.predict import predict_reference_step
from moesim.validation.reference.report import add_errors_and_ratios, markdown_report, summarise
from moesim.validation.reference.repredict import repredict_result
from moesim.validation.reference.routing_replay import sample_step_routing
from moesim.validation.reference.shapes import validation_model

GRID = [(1, 0), (1, 3), (4, 0), (4, 1)]


def fake_run(profile: str, device: str = "cuda", seed: int = 3, launch: str = "eager") -> dict:
    """A result.json as the measuring run writes it, built the way `measure_model` builds rows (measured
    times are invented: re-prediction never looks at them)."""
    hw = load_profile(profile)
    rows = []
    for key in ("fine", "shared"):
        spec = validation_model(key, device, "bf16", 2)
        routing = default_routing(spec, "typical")
        moe_layers = tuple(i for i, kind in enumerate(spec.layer_ffn) if kind == "moe")
        for batch, draft in GRID:
            step = sample_step_routing(
                routing,
                spec.n_experts,
                spec.top_k,
                batch,
                draft + 1,
                moe_layers,
                config_seed(spec.name, batch, draft, seed),
            )
            pred = predict_reference_step(spec, hw, batch, draft + 1, 512, step.loads, launch)
            rows.append(
                {
                    "model": spec.name,
                    "shape": key,
                    "device": device,
                    "launch": launch,
                    "batch": batch,
                    "draft_len": draft,
                    "context_len": 512,
                    "distinct_experts": float(np.mean(step.distinct_experts())),
                    "n_kernels": pred.n_kernels,
                    "measured_s": pred.step_s * (1.1 + 0.01 * batch),
                    "predicted_s": pred.step_s,
                    "round_spread": 0.02,
                    "spread": 0.03,
                }
            )
    add_errors_and_ratios(rows)
    meta = {"device": device, "dtype": "bf16", "launch": launch, "seed": seed, "profile": hw.name}
    return {"rows": rows, "summary": summarise(rows), "meta": meta, "notes": []}


def test_repredicting_with_the_same_profile_reproduces_the_predictions_exactly():
    run = fake_run("h200")
    again = repredict_result(run, load_profile("h200"))
    assert [r["predicted_s"] for r in again["rows"]] == [r["predicted_s"] for r in run["rows"]]
    assert [r["measured_s"] for r in again["rows"]] == [r["measured_s"] for r in run["rows"]]
    assert again["summary"]["mape"] == pytest.approx(run["summary"]["mape"], rel=1e-12)
    assert [r["n_kernels"] for r in again["rows"]] == [r["n_kernels"] for r in run["rows"]]


def test_another_profile_changes_predictions_not_measurements():
    run = fake_run("h200")
    other = repredict_result(run, load_profile("h100-sxm"), {"a100-80gb": load_profile("a100-80gb")})
    assert all(a["measured_s"] == b["measured_s"] for a, b in zip(run["rows"], other["rows"], strict=True))
    # H100 has less bandwidth than H200: every (memory-bound, small) step is predicted slower
    assert all(b["predicted_s"] > a["predicted_s"] for a, b in zip(run["rows"], other["rows"], strict=True))
    assert set(other["summary"]["cross_device"]) == {"a100-80gb"}
    assert other["meta"]["profile"] == load_profile("h100-sxm").name


def test_a_wrong_seed_is_detected_by_the_distinct_expert_counts():
    run = fake_run("h200", seed=3)
    run["meta"]["seed"] = 4
    with pytest.raises(MoesimError, match="routing differs"):
        repredict_result(run, load_profile("h200"))


def test_the_routing_is_the_seeded_sample_of_the_row():
    run = fake_run("h200")
    row = run["rows"][1]
    spec = validation_model("fine", "cuda", "bf16", 2)
    a = row_routing(run["meta"], spec, row)
    b = row_routing(run["meta"], spec, row)
    assert all(np.array_equal(x, y) for x, y in zip(a.loads, b.loads, strict=True))
    assert all(int(x.sum()) == row["batch"] * (row["draft_len"] + 1) * spec.top_k for x in a.loads)


def test_layers_come_from_meta_or_the_spec_name():
    assert run_layers({"layers": 3}, "qwen3-30b-a3b-4L-gpu") == 3
    assert run_layers({}, "qwen3-30b-a3b-4L-gpu") == 4
    assert run_layers({"layers": None}, "mixtral-8x7b-2L-cpu") == 2


def test_cli_repredict_writes_a_report(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(fake_run("h200")))
    out = tmp_path / "report"
    result = CliRunner().invoke(
        validate_group,
        ["repredict", str(path), "--profile", "h200", "--json", "--report", str(out)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["summary"]["n"] == 2 * len(GRID)
    assert "repredict" in data["meta"]["command"] or data["meta"]["repredicted_from"] == str(path)
    assert (out / "report.md").read_text().count("re-predicted") >= 1
    assert (out / "predicted_vs_measured.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "does not exist"), ("{", "not valid JSON"), ('{"rows": []}', "no measured rows")],
)
def test_cli_repredict_bad_input_is_one_line_exit_2(tmp_path, content, problem):
    path = tmp_path / "result.json"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(validate_group, ["repredict", str(path), "--profile", "h200"])
    assert result.exit_code == 2
    assert problem in result.output
    assert "Traceback" not in result.output


def test_measured_csv_rows_are_refused(tmp_path):
    run = fake_run("h200")
    del run["meta"]["device"]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(run))
    result = CliRunner().invoke(validate_group, ["repredict", str(path), "--profile", "h200"])
    assert result.exit_code == 2 and "not a torch-reference run" in result.output


def test_a_measured_cpu_run_is_predicted_from_its_rows_alone():
    """Measurement writes rows (no predictions in them); prediction reads rows + meta only, and the saved
    run re-predicts to exactly the predictions made right after measuring. A CPU run starts each step cold."""
    pytest.importorskip("torch")
    from moesim.validation.reference.predict import MEASURED_KEYS, predict_rows
    from moesim.validation.reference.run import ValidationOptions, measure_validation

    hw = load_profile("h200")
    options = ValidationOptions(
        device="cpu", models=("fine",), quick=True, batches=(1,), draft_lens=(1,), layers=1, threads=1
    )
    measured = measure_validation(hw, options)
    assert {key for row in measured["rows"] for key in row} == {*MEASURED_KEYS, "distinct_experts"}
    assert all(row["measured_s"] > 0 for row in measured["rows"])
    assert measured["meta"]["cache_between_steps"] == "cold" and measured["meta"]["flush_bytes"] >= 32 * 2**20
    run = {"rows": predict_rows(measured["meta"], measured["rows"], hw), "meta": measured["meta"]}
    again = repredict_result(json.loads(json.dumps(run)), hw)
    assert [r["predicted_s"] for r in again["rows"]] == [r["predicted_s"] for r in run["rows"]]
    assert [r["predicted_terms_s"] for r in again["rows"]] == [r["predicted_terms_s"] for r in run["rows"]]


def test_a_cold_start_never_predicts_a_faster_step_than_the_warm_steady_state():
    run = fake_run("h200", device="cpu")
    cpu = load_profile(str(Path(__file__).resolve().parents[1] / "docs/validation/cpu/cpu.toml"))
    # a server part whose 400 MiB last-level cache holds these scaled-down models from step to step
    hw = replace(cpu, empirical=replace(cpu.empirical, cache_effective_bytes=400 * 2**20))
    warm = repredict_result(run, hw)["rows"]
    cold = repredict_result(run | {"meta": run["meta"] | {"cache_between_steps": "cold"}}, hw)["rows"]
    assert all(c["predicted_s"] >= w["predicted_s"] for c, w in zip(cold, warm, strict=True))
    assert sum(c["predicted_s"] for c in cold) > 1.02 * sum(w["predicted_s"] for w in warm)
    for row in cold:
        assert sum(row["predicted_terms_s"].values()) == pytest.approx(row["predicted_s"], rel=1e-9)


def test_the_cache_state_defaults_to_cold_on_a_cpu_and_warm_on_a_gpu():
    from moesim.validation.reference.run import cache_between_steps

    assert cache_between_steps("auto", "cpu") == "cold"
    assert cache_between_steps("auto", "cuda") == "warm"
    assert cache_between_steps("warm", "cpu") == "warm"
    with pytest.raises(MoesimError, match="--cache"):
        cache_between_steps("lukewarm", "cpu")


def _probed(
    profile_name: str, memory_gbps: float, dispatch_us: float, noise: float = 0.0
) -> tuple[object, dict]:
    """A profile that recorded a calibration probe, and a run whose rows the probe measured at these rates
    (every probe median, calibration's and the rows', with relative standard error `noise`)."""
    hw = load_profile(profile_name)
    reference = {"memory_gbps": 4000.0, "compute_tflops": 700.0, "dispatch_us": 5.0}
    reference |= {f"{part}_noise": noise for part in ("memory", "compute", "dispatch")}
    hw = replace(hw, fit_quality=hw.fit_quality | {"drift_probe": reference})
    run = fake_run(profile_name)
    for row in run["rows"]:
        row |= {
            "probe_memory_gbps": memory_gbps,
            "probe_compute_tflops": 700.0,
            "probe_dispatch_us": dispatch_us,
        } | {f"probe_{part}_noise": noise for part in ("memory", "compute", "dispatch")}
    return hw, run


def test_rows_are_also_predicted_at_the_machine_speed_the_probe_measured_beside_them():
    hw, steady = _probed("h200", 4000.0, 5.0)
    same = repredict_result(steady, hw)
    assert all(r["drift_predicted_s"] == pytest.approx(r["predicted_s"], rel=1e-12) for r in same["rows"])
    assert same["summary"]["drift"]["corrected"]["mape"] == pytest.approx(same["summary"]["mape"])

    hw, slow = _probed("h200", 2000.0, 10.0)  # HBM at half speed, the host twice as slow per launch
    drifted = repredict_result(slow, hw)
    for row in drifted["rows"]:
        # No streaming-GEMM timing: the GEMMs follow the in-cache GEMM (compute).
        assert row["speed_ratio"] == {"memory": 0.5, "compute": 1.0, "dispatch": 0.5, "stream_gemm": 1.0}
        assert row["drift_predicted_s"] > row["predicted_s"]  # a slower machine: a longer step
        assert row["drift_error"] == pytest.approx(row["drift_predicted_s"] / row["measured_s"] - 1.0)
    assert "drift-corrected" in markdown_report(drifted)


def test_a_speed_change_within_the_probes_noise_is_not_corrected():
    # Memory 10% slower, the host 2x slower, each probe median with 4% noise: the threshold is three
    # standard errors of the difference, 3 x 4% x sqrt(2) = 17%; only the host moved beyond it.
    hw, run = _probed("h200", 3600.0, 10.0, noise=0.04)
    result = repredict_result(run, hw)
    for row in result["rows"]:
        assert row["measured_speed_ratio"]["memory"] == pytest.approx(0.9)
        assert row["speed_ratio"] == {"memory": 1.0, "compute": 1.0, "dispatch": 0.5, "stream_gemm": 1.0}
    assert result["summary"]["drift"]["rows_corrected"] == {
        "memory": 0,
        "compute": 0,
        "dispatch": len(result["rows"]),
        "stream_gemm": 0,
    }


def test_without_a_calibration_probe_rows_keep_one_prediction():
    _, run = _probed("h200", 2000.0, 10.0)
    plain = repredict_result(run, load_profile("h200"))  # the bundled profile recorded no probe
    assert all("drift_predicted_s" not in r for r in plain["rows"])
    assert plain["summary"]["drift"]["corrected"] is None  # the probe's spread is still reported
    assert plain["summary"]["drift"]["probe_spread"]["memory"] == 0.0

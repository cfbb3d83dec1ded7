"""`moesim calibrate`'s request: its options declared as fields, which settings go with which way of making a
profile, and the command line recorded in a measured profile."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from moesim.calibrate.request import CalibrationRequest
from moesim.commands.calibrate import calibrate_command
from moesim.errors import MoesimError
from moesim.options import option_fields


@pytest.mark.parametrize(
    ("request_", "way"),
    [
        (CalibrationRequest(device="cpu", output="p.toml"), "measure"),
        (CalibrationRequest(device="cpu", output="p.toml", from_csv=""), "from_csv"),
        (CalibrationRequest(from_runs="runs.csv", serving_engine="vllm", output="e.toml"), "from_runs"),
        (CalibrationRequest(from_silicon="list"), "from_silicon"),
        (CalibrationRequest(from_silicon="h200_sxm/sglang", output="s.toml"), "from_silicon"),
    ],
)
def test_each_way_is_told_by_its_settings(request_: CalibrationRequest, way: str) -> None:
    assert request_.way() == way


@pytest.mark.parametrize(
    ("changes", "flag", "words"),
    [
        ({"from_silicon": "list", "device": "cpu"}, "--device", "does not apply with --from-silicon"),
        ({"from_silicon": "h200_sxm/sglang"}, "--output", "is required with --from-silicon"),
        ({"silicon_data": "db", "device": "cpu", "output": "p.toml"}, "--silicon-data", "only applies"),
        ({"device": "cpu"}, "--output", "is required"),
        ({"from_runs": "r.csv", "output": "e.toml"}, "--serving-engine", "is required with --from-runs"),
        (
            {"from_runs": "r.csv", "serving_engine": "vllm", "output": "e.toml", "quick": True},
            "--quick",
            "does not apply with --from-runs",
        ),
        ({"device": "cpu", "output": "p.toml", "all_engines": True}, "--serving-engine", "only applies"),
        ({"output": "p.toml"}, "--device", "is required"),
        ({"device": "cuda", "output": "p.toml", "threads": 2}, "--threads", "only applies to --device cpu"),
        (
            {"device": "cpu", "output": "p.toml", "from_csv": "", "dtypes": ("fp32",)},
            "--dtype",
            "does not apply with --from-csv",
        ),
    ],
)
def test_a_setting_outside_its_way_is_refused_by_flag_with_the_fix(
    changes: dict[str, object], flag: str, words: str
) -> None:
    with pytest.raises(MoesimError) as info:
        CalibrationRequest(**changes).way()  # type: ignore[arg-type]
    assert info.value.field == flag and words in info.value.problem and info.value.fix


def test_dtypes_and_suites_are_checked_and_the_command_line_repeats_the_measurement() -> None:
    request = CalibrationRequest(
        device="cpu", output="out/p.toml", dtypes=("FP32", "fp32", "bf16"), suites=("memory",), threads=2
    )
    assert request.dtype_list() == ["fp32", "bf16"]
    assert request.suite_list() == ("memory",)
    assert request.command_line() == (
        "moesim calibrate --device cpu --dtype FP32,fp32,bf16 --threads 2 --suites memory --output p.toml"
    )
    assert CalibrationRequest(device="cpu", output="p.toml").suite_list() == (
        "memory",
        "launch",
        "gemm",
        "moe",
    )
    for bad, flag in (
        (CalibrationRequest(dtypes=("int3",)), "--dtype"),
        (CalibrationRequest(suites=("l2",)), "--suites"),
    ):
        with pytest.raises(MoesimError) as info:
            bad.dtype_list() if flag == "--dtype" else bad.suite_list()
        assert info.value.field == flag and "choose from" in info.value.fix


def test_the_fit_default_named_in_the_help_is_the_fits() -> None:
    from moesim.validation.runs.fit import DEFAULT_FIT

    _, info = option_fields(CalibrationRequest)["fit"]
    assert info.default_text == ", ".join(DEFAULT_FIT)


def test_every_calibrate_flag_is_a_field_and_from_csv_takes_an_optional_stem(tmp_path) -> None:  # type: ignore[no-untyped-def]
    flags = {opt for param in calibrate_command.params for opt in param.opts} - {"--json", "--help", "-h"}
    assert len(flags) == len(option_fields(CalibrationRequest))
    output = str(tmp_path / "p.toml")
    for stem in ([], ["earlier"]):  # alone: the output's own CSVs; with a value: STEM.<suite>.csv
        result = CliRunner().invoke(
            calibrate_command, ["--device", "cpu", "--output", output, "--quick", "--from-csv", *stem]
        )
        assert result.exit_code == 2 and "--quick: does not apply with --from-csv" in result.output


def test_normalise_drift_defaults_to_the_librarys_choice_and_reaches_the_fit(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from moesim.calibrate.fits.drift import DRIFT_NORMALISATION
    from moesim.calibrate.suites import runner

    assert CalibrationRequest().normalise_drift is DRIFT_NORMALISATION
    asked = CalibrationRequest(device="cpu", output="p.toml", from_csv="", normalise_drift=True)
    assert asked.way() == "from_csv"
    assert (
        asked.command_line() == "moesim calibrate --device cpu --normalise-drift --from-csv --output p.toml"
    )
    with pytest.raises(MoesimError) as info:
        CalibrationRequest(
            from_runs="r.csv", serving_engine="vllm", output="e.toml", normalise_drift=True
        ).way()
    assert info.value.field == "--normalise-drift" and "does not apply with --from-runs" in info.value.problem

    seen: dict[str, object] = {}

    def rebuild(*args: object, **kwargs: object) -> None:
        seen.update(kwargs)
        raise MoesimError("--from-csv", "stopped here by the test")

    monkeypatch.setattr(runner, "rebuild_from_csv", rebuild)
    output = str(tmp_path / "p.toml")
    for flags, wanted in (([], DRIFT_NORMALISATION), (["--normalise-drift"], True)):
        result = CliRunner().invoke(
            calibrate_command, ["--device", "cpu", "--output", output, "--from-csv", *flags]
        )
        assert "stopped here by the test" in result.output and seen["normalise_drift"] is wanted

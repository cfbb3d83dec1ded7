"""Hard edges a new user found: names the operating system refuses, empty output paths, outputs checked before
the work they follow, absurd draft lengths, and steps too large to sample. Each ends in one line naming the flag,
a non-zero exit and no traceback, or in a result without the part that could not be afforded."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from moesim.cli import cli
from moesim.errors import MoesimError

LONG = "x" * 5000
"""A name longer than any file system takes (255 bytes a component): `Path.is_file()` raises on it."""


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert isinstance(result.exception, SystemExit | None), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("simulate", "--model", LONG), "--model:"),
        (("simulate", "--model-config", LONG), "--model-config:"),
        (("simulate", "--model", "olmoe-1b-7b", "--hardware", LONG), "--hardware:"),
        (("simulate", "--model", "olmoe-1b-7b", "--serving-engine", LONG), "--serving-engine:"),
        (("simulate", "--model", "olmoe-1b-7b", "--routing", LONG), "--routing:"),
        (("simulate", "--model", "olmoe-1b-7b", "--draft", f"model:{LONG}"), "--draft:"),
        (("models", LONG), "NAME:"),
        (("engines", LONG), "NAMES:"),
    ],
)
def test_a_name_too_long_for_the_file_system_is_one_line_naming_its_flag(
    args: tuple[str, ...], flag: str
) -> None:
    code, out = invoke(*args)
    assert code == 2
    line = out.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(f"error: {flag}")
    assert "File name too long" in line and "shorter path" in line
    assert "(5,000 characters)" in line and len(line) < 300  # the name is shortened, not echoed


@pytest.mark.parametrize(
    "args",
    [
        ("sweep", "--model", "olmoe-1b-7b", "--batch", "1", "--draft-len", "1", "--csv", ""),
        ("sweep", "--model", "olmoe-1b-7b", "--batch", "1", "--draft-len", "1", "--plot", ""),
        ("validate", "runs", "--plot", ""),
    ],
)
def test_an_empty_output_path_is_refused_not_taken_for_no_output(args: tuple[str, ...]) -> None:
    code, out = invoke(*args)
    assert code == 2
    assert "empty path" in out


def test_validate_runs_checks_its_plot_path_before_predicting(monkeypatch: pytest.MonkeyPatch) -> None:
    import moesim.validation.runs.predict as predict

    def validate(*args: object, **kwargs: object) -> None:
        raise AssertionError("the runs were predicted before the plot path was checked")

    monkeypatch.setattr(predict, "validate_runs_under", validate)
    code, out = invoke("validate", "runs", "--plot", "runs.xyz")
    assert code == 2
    assert "--plot" in out and "unsupported file type '.xyz'" in out


def test_a_draft_length_beyond_the_bound_is_refused_by_the_library() -> None:
    import moesim
    from moesim.simulator.bounds import MAX_DRAFT_LEN

    with pytest.raises(MoesimError) as refused:
        moesim.Scenario("dbrx", draft_len=MAX_DRAFT_LEN + 1).resolve()
    assert refused.value.field == "draft_len"
    assert f"--draft-len ≤ {MAX_DRAFT_LEN:,}" in refused.value.fix
    moesim.Scenario(
        "olmoe-1b-7b", draft_len=MAX_DRAFT_LEN, routing="independent"
    ).resolve()  # the bound itself


def test_a_step_too_large_to_sample_has_no_distribution_but_a_small_one_keeps_it() -> None:
    from moesim.simulator.models.catalogue import load_model
    from moesim.simulator.routing.independent import IndependentRouting
    from moesim.simulator.simulate import (
        DISTRIBUTION_MAX_DRAWS,
        DISTRIBUTION_MIN_SAMPLES,
        distinct_distribution,
    )

    model = load_model("qwen3-30b-a3b")
    tokens_per_seq = 1001
    batch = DISTRIBUTION_MAX_DRAWS // (DISTRIBUTION_MIN_SAMPLES * model.n_experts * tokens_per_seq) + 1
    assert (
        distinct_distribution(model, batch, tokens_per_seq, IndependentRouting()) is None
    )  # was 31 GB at 4096
    small = distinct_distribution(model, 4, 4, IndependentRouting())
    assert small is not None and 8 <= small.mean <= model.n_experts


def test_oversized_steps_still_simulate_without_a_distribution(tmp_path: Path) -> None:
    code, out = invoke(
        "simulate", "--model", "qwen3-30b-a3b", "--batch", "2048", "--draft-len", "1000", "--routing",
        "independent", "--context-len", "16",
    )  # fmt: skip
    assert code == 0, out
    assert "distinct experts / MoE layer" in out


def test_a_config_of_a_billion_layers_is_refused_on_its_count_before_a_layer_is_built(tmp_path: Path) -> None:
    import json

    root = Path(__file__).resolve().parent / "data" / "hf_configs"
    for name in ("deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"):
        config = json.loads((root / f"{name}.json").read_text()) | {"num_hidden_layers": 10**9}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(config))
        code, out = invoke("models", str(path))
        assert code == 2
        assert "num_hidden_layers: must be ≤ 65,536, got 1,000,000,000" in out


@pytest.mark.parametrize(("value", "problem"), [("", "model: is empty"), (" ", "model: is empty")])
def test_an_empty_model_name_is_named_so(value: str, problem: str) -> None:
    code, out = invoke("simulate", "--model", value)
    assert code == 2 and problem in out


def test_a_device_given_as_a_model_config_is_described_not_called_missing() -> None:
    code, out = invoke("simulate", "--model-config", "/dev/null")
    assert code == 2
    assert "/dev/null: is empty" in out and "does not exist" not in out


def test_a_runs_csv_of_too_many_rows_is_refused_before_a_row_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import moesim.validation.runs.schema as schema
    from moesim.simulator.bounds import MAX_RUN_ROWS

    bundled = (Path(schema.__file__).resolve().parents[2] / "data" / "measured_runs.csv").read_text()
    header, row = bundled.splitlines()[:2]
    path = tmp_path / "runs.csv"
    path.write_text(header + "\n" + (row + "\n") * (MAX_RUN_ROWS + 1))

    def parse(*args: object) -> None:
        raise AssertionError("the rows were parsed before the row bound")

    monkeypatch.setattr(schema, "csv_rows", parse)
    code, out = invoke("validate", "runs", str(path))
    assert code == 2
    assert f"has {MAX_RUN_ROWS + 1:,} rows, above the {MAX_RUN_ROWS:,}" in out


def _small_trace(folder: Path) -> Path:
    """A JSON-lines trace of 4 sequences × 8 tokens over 8 experts, top-2."""
    import json

    trace = folder / "trace.jsonl"
    lines = [
        json.dumps({"sequence": s, "experts": [[t % 8, (t + 1) % 8]]}) for s in range(4) for t in range(8)
    ]
    trace.write_text("\n".join(lines) + "\n")
    return trace


def test_a_trace_output_of_an_unknown_type_is_refused_before_generating(tmp_path: Path) -> None:

    trace = _small_trace(tmp_path)
    stats = tmp_path / "stats.json"
    code, out = invoke(
        "routing", "fit", str(trace), "-o", str(stats), "--experts", "8", "--max-distance", "4"
    )
    assert code == 0, out
    code, out = invoke("routing", "generate", "--stats", str(stats), "--sequences", "2", "--tokens", "4",
                       "-o", str(tmp_path / "trace.xyz"))  # fmt: skip
    assert code == 2
    assert "unsupported file type '.xyz'" in out and ".npz, .jsonl, .json" in out
    assert not (tmp_path / "trace.xyz").exists()
    code, out = invoke("routing", "generate", "--stats", str(stats), "--sequences", "2", "--tokens", "4",
                       "-o", str(tmp_path / "trace.NPZ"))  # fmt: skip
    assert code == 0, out
    assert (tmp_path / "trace.NPZ").read_bytes()[:2] == b"PK"  # an .npz archive whatever the suffix's case


def test_a_statistics_output_that_is_not_json_is_refused_before_fitting(tmp_path: Path) -> None:
    import json

    trace = _small_trace(tmp_path)
    fit = ["routing", "fit", str(trace), "--experts", "8", "--max-distance", "4", "-o"]
    code, out = invoke(*fit, str(tmp_path / "stats.xyz"))
    assert code == 2
    assert "--output" in out and "unsupported file type '.xyz'" in out and ".json" in out
    assert not (tmp_path / "stats.xyz").exists()
    code, out = invoke(*fit, str(tmp_path / "stats.JSON"))
    assert code == 0, out
    assert json.loads((tmp_path / "stats.JSON").read_text())["layers"]


def test_calibrate_refuses_a_profile_path_that_is_not_toml_before_loading_the_suites() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom moesim.cli import cli\ntry:\n    cli(['calibrate', '--device', 'cpu', '--quick', "
        "'--output', 'out.xyz'])\nexcept SystemExit as e:\n    print(e.code)\n"
        "print('moesim.calibrate.suites.runner' in sys.modules, 'torch' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "profile files end in .toml, got 'out.xyz'" in run.stderr
    assert run.stdout.split() == ["2", "False", "False"]


@pytest.mark.parametrize(
    "args",
    [
        ("screen", "--model", "qwen3-30b-a3b", "--experts", "64,128", "--workers", "100000"),
        (
            "sweep",
            "--model",
            "olmoe-1b-7b,qwen3-30b-a3b",
            "--batch",
            "1",
            "--draft-len",
            "1",
            "--workers",
            "100000",
        ),
    ],
)
def test_a_pool_of_more_workers_than_the_machine_can_run_is_refused_before_one_starts(
    args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    import concurrent.futures
    import os

    from moesim.simulator.bounds import WORKERS_PER_CPU

    def pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process pool was started")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", pool)
    code, out = invoke(*args)
    assert code == 2
    assert f"must be ≤ {WORKERS_PER_CPU * (os.cpu_count() or 1):,}, got 100,000" in out


def test_standard_output_on_a_full_disk_is_one_line() -> None:
    import subprocess
    import sys

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        run = subprocess.run(
            [sys.executable, "-m", "moesim", "models", "--json"], stdout=full, stderr=subprocess.PIPE, text=True,
            timeout=120,
        )  # fmt: skip
    assert run.returncode == 2
    assert (
        run.stderr.strip()
        == "error: output: No space left on device (free some disk space or choose another location)"
    )


def test_profiles_derive_names_its_own_flags_and_writes_only_toml(tmp_path: Path) -> None:
    code, out = invoke(
        "profiles", "derive", "--from", "nope", "--to", "h100-sxm", "--output", str(tmp_path / "d.toml")
    )
    assert code == 2 and out.startswith("error: --from: unknown hardware profile 'nope'")
    code, out = invoke(
        "profiles", "derive", "--from", "h200", "--to", "h100", "--output", str(tmp_path / "d.toml")
    )
    assert code == 2 and out.startswith("error: --to: unknown hardware profile 'h100'")
    code, out = invoke(
        "profiles", "derive", "--from", "h200", "--to", "h100-sxm", "--output", str(tmp_path / "d.xyz")
    )
    assert code == 2 and "unsupported file type '.xyz'" in out
    assert not (tmp_path / "d.xyz").exists()


def test_experts_on_a_dense_model_without_a_top_k_name_the_model_and_the_flag() -> None:
    code, out = invoke("simulate", "--model", "llama-3.2-1b", "--experts", "64")
    assert code == 2
    assert "top_k: llama-3.2-1b is dense" in out and "--top-k" in out
    code, out = invoke("simulate", "--model", "llama-3.2-1b", "--experts", "64", "--top-k", "2")
    assert code == 0, out


def test_a_parquet_output_of_another_type_is_refused_before_screening(tmp_path: Path) -> None:
    code, out = invoke(
        "screen",
        "--model",
        "qwen3-30b-a3b",
        "--experts",
        "64,128",
        "--parquet",
        str(tmp_path / "designs.xyz"),
    )
    assert code == 2
    assert "--parquet: unsupported file type '.xyz'" in out and ".parquet, .pq" in out
    assert not (tmp_path / "designs.xyz").exists()

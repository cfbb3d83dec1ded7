"""The CLI end to end: JSON contracts of the main commands, and bad input ending in one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from moesim.cli import cli


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_simulate_json_has_the_documented_keys() -> None:
    code, out, _ = invoke(
        "simulate",
        "--model",
        "qwen3-30b-a3b",
        "--hardware",
        "h200",
        "--batch",
        "2",
        "--draft-len",
        "3",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    for key in ("draft_s", "tokens_per_step", "verify_over_decode", "speedup"):
        assert data[key] > 0
    for step in ("decode", "verify"):
        assert data[step]["step_s"] > 0
        assert data[step]["distinct_experts_per_layer"] >= 8
        assert sum(data[step]["breakdown_s"].values()) == pytest.approx(data[step]["step_s"], rel=1e-6)
    assert data["verify"]["distinct_experts_per_layer"] >= data["decode"]["distinct_experts_per_layer"]


def test_sweep_json_rows_and_peaks(tmp_path: Path) -> None:
    csv_path = tmp_path / "sweep.csv"
    code, out, _ = invoke(
        "sweep", "--model", "olmoe-1b-7b,mixtral-8x7b", "--hardware", "h100-sxm",
        "--batch", "1,4,16", "--draft-len", "1,3", "--json", "--csv", str(csv_path),
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert len(data["rows"]) == 2 * 3 * 2
    row_keys = {"model", "hardware", "batch", "draft_len", "speedup", "verify_over_decode", "decode_step_s"}
    assert row_keys <= set(data["rows"][0])
    assert {peak["model"] for peak in data["peaks"]} == {"olmoe-1b-7b", "mixtral-8x7b"}
    for peak in data["peaks"]:
        same = [
            r["speedup"]
            for r in data["rows"]
            if r["model"] == peak["model"] and r["draft_len"] == peak["draft_len"]
        ]
        assert peak["peak_speedup"] == pytest.approx(max(same))
    assert csv_path.read_text().count("\n") == len(data["rows"]) + 1


def test_layer_time_grows_with_distinct_experts() -> None:
    times = []
    for distinct in ("8", "16", "32"):
        code, out, _ = invoke(
            "layer", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--tokens", "4",
            "--distinct-experts", distinct, "--json",
        )  # fmt: skip
        assert code == 0
        times.append(json.loads(out)["time_s"])
    assert times == sorted(times) and times[0] < times[-1]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("simulate", "--model", "no-such-model"), "model"),
        (("simulate", "--model", "qwen3-30b-a3b", "--hardware", "no-such-gpu"), "hardware"),
        (("simulate", "--model", "qwen3-30b-a3b", "--top-k", "200"), "top_k"),
        (("simulate", "--model", "qwen3-30b-a3b", "--batch", "0"), "batch"),
        (("simulate", "--model", "qwen3-30b-a3b", "--expert-width", "-5"), "expert_width"),
        (("simulate", "--model", "qwen3-30b-a3b", "--acceptance", "1.5"), "acceptance"),
        (("simulate", "--model", "deepseek-v3", "--hardware", "h200", "--gpus", "1"), "memory"),
        (("sweep", "--model", "qwen3-30b-a3b", "--batch", "1,x"), "--batch"),
        (
            ("layer", "--model", "qwen3-30b-a3b", "--tokens", "4", "--distinct-experts", "200"),
            "distinct_experts",
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args: tuple[str, ...], field: str) -> None:
    code, out, err = invoke(*args)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0]
    assert "Traceback" not in err


def test_malformed_profile_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("garbage = [\n")
    code, _, err = invoke("simulate", "--model", "qwen3-30b-a3b", "--hardware", str(bad))
    assert code == 2 and str(bad) in err


def test_models_and_profiles_list_the_bundled_files() -> None:
    code, out, _ = invoke("models", "--json")
    names = {row["name"] for row in json.loads(out)["models"]}
    assert code == 0 and {"qwen3-30b-a3b", "deepseek-v3", "kimi-k2", "qwen2-0.5b"} <= names
    code, out, _ = invoke("profiles", "--json")
    profiles = {row["name"] for row in json.loads(out)["profiles"]}
    assert code == 0 and {"h200", "b200", "mi300x", "rtx-pro-6000"} <= profiles


def test_written_files_get_the_usual_permissions(tmp_path: Path) -> None:
    import os

    from moesim.atomic import atomic_write_text

    target = tmp_path / "out.txt"
    atomic_write_text(target, "x")
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temporary file left behind

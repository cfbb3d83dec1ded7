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

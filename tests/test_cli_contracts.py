"""The face's contracts: the Python facade, a light start-up, options declared once on the library, old
spellings accepted for one release, and library = CLI."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import moesim
from moesim.cli import COMMANDS, cli
from moesim.options import option_fields

COMMANDS_DIR = Path(moesim.__file__).parent / "commands"
GENERATOR = "fields.py"  # the one module that passes the fields' defaults on to click


def test_the_facade_names_exactly_the_public_api() -> None:
    assert sorted(moesim.__all__) == ["Scenario", "__version__", "serve", "simulate", "sweep"]
    for name in moesim.__all__:
        assert getattr(moesim, name) is not None
    from moesim.simulator.scenario import Scenario

    assert moesim.Scenario is Scenario
    assert all(callable(getattr(moesim, name)) for name in ("serve", "simulate", "sweep"))
    with pytest.raises(AttributeError):
        _ = moesim.no_such_name


def _modules_after(code: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return {name.split(".")[0] for name in result.stdout.split()}


def test_help_and_import_load_no_numpy() -> None:
    help_run = "from moesim.cli import cli\ntry:\n    cli(['--help'])\nexcept SystemExit:\n    pass"
    assert "numpy" not in _modules_after(help_run)
    assert "numpy" not in _modules_after("import moesim")


def test_every_listed_command_exists_and_each_summary_fits_one_line_at_80_columns() -> None:
    for name, (_, summary) in COMMANDS.items():
        command = cli.get_command(None, name)  # type: ignore[arg-type]
        assert command is not None and command.name == name
        assert 20 < len(summary) <= 64, name
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert all(f"  {name}  " in result.output for name in COMMANDS)


def _literal_defaults(source: str) -> list[str]:
    """`default=` values of click options that are not None (the library's fields hold every default)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func).startswith("click.")):
            continue
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg == "default" and not (isinstance(value, ast.Constant) and value.value is None):
                found.append(f"line {node.lineno}: default={ast.unparse(value)}")
    return found


def test_commands_hold_no_defaults_of_their_own() -> None:
    offenders = {
        path.name: _literal_defaults(path.read_text())
        for path in COMMANDS_DIR.glob("*.py")
        if path.name != GENERATOR
    }
    assert {name: lines for name, lines in offenders.items() if lines} == {}


def test_the_literal_default_scan_sees_one() -> None:
    assert _literal_defaults('click.option("--batch", type=int, default=1)') == ["line 1: default=1"]
    assert _literal_defaults('click.option("--batch", default=None)') == []


def test_generated_flags_carry_the_library_default() -> None:
    from moesim.commands.simulate import simulate_command
    from moesim.simulator.scenario import Scenario

    params = {p.name: p for p in simulate_command.params}
    for name, (field, _) in option_fields(Scenario).items():
        if name in params:
            assert params[name].default == field.default, name
    assert params["launch"].default is None  # filled in per device: graph on a GPU, eager on a CPU


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_the_old_engine_flag_still_works_with_one_deprecation_line() -> None:
    common = ("layer", "--model", "qwen3-30b-a3b", "--tokens", "4", "--distinct-experts", "24", "--json")
    code, new, _ = _invoke(*common, "--kernel-style", "per-token")
    old_code, old, err = _invoke(*common, "--engine", "per-token")
    assert code == old_code == 0
    assert json.loads(new) == json.loads(old)
    assert json.loads(new)["kernel_style"] == "per-token"
    assert [line for line in err.splitlines() if "deprecated" in line] == [
        "warning: --engine is deprecated and goes in the next release; write --kernel-style"
    ]


def test_serve_on_a_cpu_profile_uses_its_launch_mode() -> None:
    profile = Path(__file__).resolve().parents[1] / "docs" / "validation" / "cpu" / "cpu.toml"
    code, out, err = _invoke(
        "serve", "--model", "olmoe-1b-7b", "--hardware", str(profile), "--num-prompts", "4",
        "--random-input-len", "32", "--random-output-len", "4", "--max-concurrency", "2", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert "eager launch" in json.loads(out)["assumptions"]["step_cost"]


def test_library_option_fields_are_documented() -> None:
    from moesim.simulator.plan.layout import LayoutRequest
    from moesim.simulator.scenario import Scenario, SweepGrid
    from moesim.simulator.serving.options import BenchmarkClient, SchedulerLimits, ServeOptions

    for cls in (Scenario, SweepGrid, LayoutRequest, ServeOptions, SchedulerLimits, BenchmarkClient):
        for name, (field, info) in option_fields(cls).items():
            assert info.help.strip(), f"{cls.__name__}.{name} has no help"
            assert isinstance(field, dataclasses.Field)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            ["--profile", "h200", "--measured", "m.csv", "--json"],
            ["measured", "m.csv", "--profile", "h200", "--json"],
        ),
        (["--measured=m.csv", "--profile", "h200"], ["measured", "m.csv", "--profile", "h200"]),
        (["--profile", "h200", "--schema"], ["measured", "--profile", "h200", "--schema"]),
        (["--repredict", "r.json", "--profile", "h200"], ["repredict", "r.json", "--profile", "h200"]),
        (["--runs", "--serving-engine", "vllm"], ["runs", "--serving-engine", "vllm"]),
        (["--runs", "runs.csv", "--json"], ["runs", "runs.csv", "--json"]),
        (["--runs-schema", "--json"], ["runs", "--schema", "--json"]),
        (
            ["--profile", "h200", "--model", "m", "--bench-result", "sd.json", "--baseline", "b.json"],
            ["bench", "sd.json", "--profile", "h200", "--model", "m", "--baseline", "b.json"],
        ),
        (
            ["--profile", "cpu.toml", "--device", "cpu", "--quick"],
            ["reference", "--profile", "cpu.toml", "--device", "cpu", "--quick"],
        ),
    ],
)
def test_old_validate_spellings_become_sub_commands(old: list[str], new: list[str]) -> None:
    from moesim.commands.validate import _new_spelling

    assert _new_spelling(old) == new


def test_an_old_validate_spelling_gives_the_same_result_and_one_deprecation_line() -> None:
    example = Path(moesim.__file__).parent / "data" / "validation_example.csv"
    code, new, _ = _invoke("validate", "measured", str(example), "--profile", "h200", "--json")
    old_code, old, err = _invoke("validate", "--profile", "h200", "--measured", str(example), "--json")
    assert code == old_code == 0
    strip = lambda out: {**json.loads(out), "meta": {**json.loads(out)["meta"], "command": None}}  # noqa: E731
    assert strip(new) == strip(old)
    assert [line for line in err.splitlines() if "deprecated" in line] == [
        "warning: `moesim validate --measured` is deprecated and goes in the next release; "
        "write `moesim validate measured`"
    ]


def test_validate_help_lists_its_examples_one_per_line_and_its_sub_commands_in_order() -> None:
    code, out, _ = _invoke("validate", "--help")
    assert code == 0
    lines = out.splitlines()
    examples = [line.strip() for line in lines if line.strip().startswith("moesim validate ")]
    assert len(examples) == 7 and all(line.count("moesim validate") == 1 for line in examples)
    listed = [
        line.split()[0]
        for line in lines[lines.index("Commands:") + 1 :]
        if line.startswith("  ") and line[2] != " "
    ]
    assert listed == ["reference", "measured", "repredict", "runs", "bench"]


def test_a_piped_validate_table_keeps_every_name_and_digit() -> None:
    """Piped (not a terminal), rich would assume 80 columns and cut cells to '…' (issue 23)."""
    example = Path(moesim.__file__).parent / "data" / "validation_example.csv"
    code, out, _ = _invoke("validate", "measured", str(example), "--profile", "h200")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert rows
    assert "…" not in out
    assert all("qwen3-30b-a3b-2L-cpu" in row for row in rows)

"""`moesim validate ...`: the simulator against measurements, one sub-command per subject.

    reference   torch MoE steps measured on this device against the prediction of exactly the same work
    measured    a CSV of step times measured elsewhere
    repredict   the rows of an earlier `validate reference` run, re-scored with another profile
    runs        measured serving runs with speculative decoding (the bundled public runs, or a CSV)
    bench       a vLLM / SGLang serving benchmark against `moesim serve` on the workload it describes

The old spellings (`moesim validate --measured FILE`, `--repredict`, `--runs`, `--bench-result`, and the flags
of the torch reference alone) are accepted for one release with one deprecation line.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from moesim.commands.common import check_outputs, emit_json, handle_errors
from moesim.commands.fields import field_options, fields_of
from moesim.commands.renamed import deprecation
from moesim.errors import MoesimError
from moesim.options import option_fields
from moesim.simulator.scenario import Scenario
from moesim.simulator.serving.options import BenchmarkClient, ServeOptions
from moesim.validation.bench.compare import BenchFile
from moesim.validation.reference.run import ValidationOptions

# Old spelling → (sub-command, flag whose value becomes its argument, flags renamed inside it).
OLD_SPELLINGS: tuple[tuple[str, str, str | None, dict[str, str]], ...] = (
    ("--runs-schema", "runs", None, {"--runs-schema": "--schema"}),
    ("--runs", "runs", "--runs", {}),
    ("--bench-result", "bench", "--bench-result", {}),
    ("--repredict", "repredict", "--repredict", {}),
    ("--schema", "measured", None, {}),
    ("--measured", "measured", "--measured", {}),
)


def _new_spelling(args: list[str]) -> list[str]:
    """The arguments of an old `moesim validate --flag ...` call in the sub-command spelling."""
    names = [arg.split("=", 1)[0] for arg in args]
    for old, command, argument_flag, renamed in OLD_SPELLINGS:
        if old not in names:
            continue
        out = [command]
        rest = list(args)
        if argument_flag is not None:
            index = names.index(argument_flag)
            _, equals, value = rest[index].partition("=")
            takes_next = not equals and index + 1 < len(rest) and not rest[index + 1].startswith("-")
            if takes_next:
                value = rest[index + 1]
            del rest[index : index + 1 + takes_next]
            if value or takes_next:
                out.append(value)
        out += [renamed.get(arg, arg) for arg in rest]
        deprecation(f"`moesim validate {old}`", f"`moesim validate {command}`")
        return out
    deprecation("`moesim validate --profile ...` (no sub-command)", "`moesim validate reference ...`")
    return ["reference", *args]


class ValidateGroup(click.Group):
    """`validate` with sub-commands; an old flag-only spelling is turned into its sub-command first."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and not set(args) & {"-h", "--help"}:
            args = _new_spelling(args)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # in the order they are defined: reference first


@click.group("validate", cls=ValidateGroup)
def validate_group() -> None:
    """The simulator's predictions against measurements, one sub-command per subject.

    \b
    Examples:
      moesim validate reference --profile cpu.toml --device cpu --quick --json
      moesim validate reference --profile cpu.toml --device cpu --quick --reference torch-fused --report out
      moesim validate reference --profile measured/h200 --device cuda --quick --report docs/validation/h200
      moesim validate measured bench.csv --profile h200 --kernel-style fused --launch graph
      moesim validate repredict run/result.json --profile measured/h200 --report out
      moesim validate runs --serving-engine ideal,vllm,sglang,trtllm,per-run
      moesim validate bench SD.json --baseline BASE.json --profile h200 --model qwen3-30b-a3b
    """


def _profile(required_for: str) -> Any:
    return click.option(
        "--profile", default=None, help=f"Hardware profile (name or file) to predict {required_for} with."
    )


def _report_and_json(func: Any) -> Any:
    func = click.option("--json", "as_json", is_flag=True, help="Print {rows, summary, meta} as JSON.")(func)
    return click.option(
        "--report",
        "report_dir",
        type=click.Path(file_okay=False),
        default=None,
        help="Write report.md, rows.csv, result.json and predicted_vs_measured.png into this folder.",
    )(func)


def _cross_profiles(func: Any) -> Any:
    return click.option(
        "--cross-profile",
        "cross_profiles",
        multiple=True,
        help="Also predict the same measured rows with this profile (e.g. one derived for this device from "
        "another's measurements): the cost of projecting to unseen hardware. Repeatable.",
    )(func)


def _load_profile(profile: str | None) -> Any:
    from moesim.simulator.hardware.profile import load_profile

    if profile is None:
        raise MoesimError("--profile", "is required", "give a hardware profile name or file")
    return load_profile(profile)


def _finish(result: dict[str, Any], report_dir: str | None, as_json: bool) -> None:
    """Record the command line, write the report folder, print the result."""
    result["meta"]["command"] = "moesim validate " + " ".join(
        sys.argv[2:] if len(sys.argv) > 2 and sys.argv[1] == "validate" else sys.argv[1:]
    )
    if report_dir:
        from moesim.validation.reference.report import write_report

        paths = write_report(report_dir, result)
        if not as_json:
            click.echo(f"wrote {', '.join(str(p) for p in paths)}", err=True)
    if as_json:
        emit_json(result)
    else:
        from moesim.commands.validate_render import print_rows

        print_rows(result)


@validate_group.command(
    "reference", short_help="Torch MoE steps measured here vs the prediction of the same work."
)
@_profile("the measured rows")
@field_options(ValidationOptions, *option_fields(ValidationOptions))
@_cross_profiles
@_report_and_json
@handle_errors
def reference_command(
    profile: str | None,
    cross_profiles: tuple[str, ...],
    report_dir: str | None,
    as_json: bool,
    **flags: Any,
) -> None:
    """Measure real torch MoE decode and verification steps on this device and compare them with the
    simulator's prediction for exactly the same work (same model shape, routing and kernels).

    Reports per row measured and predicted step time, signed error and verify/decode ratios; overall MAPE,
    p90 error, the worst row, the noise floor, and which cost term the error comes from."""
    from moesim.atomic import check_output_dir
    from moesim.simulator.hardware.profile import load_profile
    from moesim.validation.reference.run import run_torch_validation

    hardware = _load_profile(profile)
    if report_dir is not None:
        check_output_dir("--report", report_dir)
    options = ValidationOptions(**fields_of(ValidationOptions, flags)).checked()
    progress = None if as_json else (lambda text: click.echo(f"  measuring {text}", err=True))
    cross = {name: load_profile(name) for name in cross_profiles}
    _finish(run_torch_validation(hardware, options, progress, cross), report_dir, as_json)


@validate_group.command("measured", short_help="Step times measured elsewhere (a CSV) vs the simulator.")
@click.argument("path", type=click.Path(dir_okay=False), required=False)
@_profile("the measurements")
@field_options(ValidationOptions, "context_len", "launch", "routing")
@field_options(Scenario, "kernel_style", kernel_style={"help": "The kernel style of the measured system."})
@click.option("--schema", is_flag=True, help="Print the CSV schema and exit.")
@_report_and_json
@handle_errors
def measured_command(
    path: str | None, profile: str | None, schema: bool, report_dir: str | None, as_json: bool, **flags: Any
) -> None:
    """Compare a CSV of step times measured elsewhere (PATH; columns: --schema) with the simulator."""
    from moesim.atomic import check_output_dir
    from moesim.validation.reference.report import MEASURED_SCHEMA, measured_result

    if schema:
        click.echo(MEASURED_SCHEMA)
        return
    if path is None:
        raise MoesimError("--measured", "needs the measurements CSV", "moesim validate measured FILE.csv")
    _load_profile(profile)
    if report_dir is not None:
        check_output_dir("--report", report_dir)
    options = ValidationOptions(**fields_of(ValidationOptions, flags)).checked()
    result = measured_result(path, str(profile), options, flags["kernel_style"])
    _finish(result, report_dir, as_json)


@validate_group.command("repredict", short_help="An earlier torch run re-scored with another profile.")
@click.argument("path", type=click.Path(dir_okay=False))
@_profile("the rows")
@_cross_profiles
@_report_and_json
@handle_errors
def repredict_command(
    path: str, profile: str | None, cross_profiles: tuple[str, ...], report_dir: str | None, as_json: bool
) -> None:
    """Re-score the measured rows of an earlier `validate reference` run (PATH, its result.json) with
    --profile, offline: each row's plan is rebuilt and its routing re-sampled with the run's recorded seed."""
    from moesim.atomic import check_output_dir
    from moesim.simulator.hardware.profile import load_profile
    from moesim.validation.reference.repredict import load_result, repredict_result

    hardware = _load_profile(profile)
    if report_dir is not None:
        check_output_dir("--report", report_dir)
    cross = {name: load_profile(name) for name in cross_profiles}
    _finish(repredict_result(load_result(path), hardware, cross, source=path), report_dir, as_json)


@validate_group.command("runs", short_help="Measured SD serving runs vs their predicted speedups.")
@click.argument("path", type=click.Path(dir_okay=False), required=False)
@field_options(
    Scenario,
    "serving_engine",
    serving_engine={
        "help": "Serving-engine profiles to predict under (names or .toml paths, comma-separated; per-run = "
        "each row's own engine preset)."
    },
)
@click.option(
    "--silicon",
    is_flag=True,
    help="Price each run on the bundled silicon profile of its GPU under its own serving engine "
    "(silicon/<system>-<framework>) where one exists, instead of the datasheet profile.",
)
@click.option("--plot", "plot_path", default=None, help="Write predicted vs measured as a PNG.")
@click.option("--schema", is_flag=True, help="Print the CSV columns and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the validations as JSON.")
@handle_errors
def runs_command(
    path: str | None, serving_engine: str, silicon: bool, plot_path: str | None, schema: bool, as_json: bool
) -> None:
    """Predict measured serving runs with speculative decoding (PATH, a CSV: see --schema; without it, the
    bundled public runs); each row uses its own model, hardware profile and layout."""
    from moesim.commands.engines import plot_runs_validation, print_runs_validation
    from moesim.commands.validate_render import print_runs_schema
    from moesim.validation.runs.predict import validate_runs_under

    if schema:
        print_runs_schema(as_json)
        return
    check_outputs(plot=plot_path)
    data = validate_runs_under(path, serving_engine, silicon=silicon)
    if plot_path is not None:
        plot_runs_validation(data, plot_path)
    if as_json:
        emit_json(data)
    else:
        print_runs_validation(data)


@validate_group.command("bench", short_help="A vLLM / SGLang serving benchmark vs `moesim serve`.")
@click.argument("sd_path", metavar="SD_RESULT", type=click.Path(dir_okay=False))
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(dir_okay=False),
    required=True,
    help="The same benchmark without SD.",
)
@_profile("the benchmark")
@click.option("--model", "model", required=True, help="The served model (a catalogue name or a model file).")
@field_options(Scenario, "draft_len", "drafter", "acceptance", "acceptance_length")
@field_options(BenchFile, *option_fields(BenchFile))
@field_options(ServeOptions, "kv_cache_tokens", "tp")
@field_options(Scenario, "launch", "kernel_style", "routing", "serving_engine")
@field_options(BenchmarkClient, "seed")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@handle_errors
def bench_command(
    sd_path: str, baseline_path: str, profile: str | None, model: str, as_json: bool, **flags: Any
) -> None:
    """Compare a serving benchmark with SD (SD_RESULT: `vllm bench serve --save-result` JSON or SGLang
    bench_serving JSONL) and without (--baseline), metric by metric, against `moesim serve` on the workload
    the files describe."""
    from moesim.commands.serve import serving_layout
    from moesim.commands.simulate import scenario_from_flags
    from moesim.commands.validate_render import print_bench
    from moesim.validation.bench.compare import validate_bench

    hardware = _load_profile(profile)
    scenario = scenario_from_flags(model, hardware, flags, layout=serving_layout(flags["tp"]))
    bench = validate_bench(
        sd_path,
        baseline_path,
        scenario,
        options=ServeOptions(kv_cache_tokens=flags["kv_cache_tokens"]),
        seed=flags["seed"],
        **vars(BenchFile(**fields_of(BenchFile, flags))),
    )
    if as_json:
        emit_json(bench)
    else:
        print_bench(bench)


__all__ = ["validate_group"]

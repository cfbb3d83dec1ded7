"""`moesim validate`: measured torch MoE steps (or measurements made elsewhere) against the simulator."""

from __future__ import annotations

import sys
from typing import Any

import click

from moesim.atomic import check_output_dir
from moesim.commands.common import emit_json, handle_errors, parse_int_list
from moesim.errors import MoesimError
from moesim.simulator.scenario import DEFAULT_ACCEPTANCE, DEFAULT_DRAFTER, DEFAULT_SERVING_ENGINE
from moesim.validation.reference.report import MEASURED_SCHEMA

_EXAMPLES = """
\b
Examples:
  moesim validate --profile cpu.toml --device cpu --quick --json
  moesim validate --profile cpu.toml --device cpu --quick --reference torch-fused --report out
  moesim validate --profile measured/h200 --device cuda --quick --report docs/validation/h200
  moesim validate --profile h200 --measured bench.csv --kernel-style fused --launch graph
  moesim validate --repredict run/result.json --profile measured/h200 --report out
  moesim validate --runs --serving-engine ideal,vllm,sglang,trtllm,per-run
  moesim validate --profile h200 --model qwen3-30b-a3b --bench-result SD.json --baseline BASE.json
"""


@click.command(
    "validate",
    help="Measure real torch MoE decode and verification steps on this device and compare them with the "
    "simulator's prediction for exactly the same work (same model shape, routing and kernels), or compare "
    "measurements made elsewhere (--measured). Reports per row measured and predicted step time, signed "
    "error and verify/decode ratios; overall MAPE, p90 error, the worst row, the noise floor, and which "
    "cost term the error comes from." + _EXAMPLES,
)
@click.option(
    "--profile",
    default=None,
    help="Hardware profile (name or file) to predict with, e.g. a calibrated cpu.toml (not with --runs).",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="Where to run the torch reference.",
)
@click.option(
    "--models",
    "models_text",
    default="fine,coarse,shared",
    show_default=True,
    help="Validation shapes: fine (Qwen3-30B-A3B), coarse (Mixtral-8x7B), shared (Qwen2-57B-A14B).",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Batches 1,4,32 × draft lengths 0,1,3,7 and fewer repeats (36 rows for 3 models; the full grid is 72).",
)
@click.option(
    "--launch",
    type=click.Choice(["eager", "graph"]),
    default="eager",
    show_default=True,
    help="Eager launches, or CUDA-graph replay (GPU only).",
)
@click.option("--batch", "batch_text", default=None, help="Override the batch sizes, e.g. 1,2,4,8,16,32.")
@click.option(
    "--draft-len", "draft_text", default=None, help="Override the draft lengths K (0 = decode), e.g. 0,1,3,7."
)
@click.option("--context-len", type=int, default=512, show_default=True, help="Cached tokens per sequence.")
@click.option(
    "--layers", type=int, default=None, help="Layers of each validation model (default 2 on cpu, 4 on cuda)."
)
@click.option(
    "--dtype",
    type=click.Choice(["fp32", "bf16", "fp16"]),
    default=None,
    help="Reference dtype (default: the profile's calibrated dtype, else fp32 on cpu, bf16 on cuda).",
)
@click.option(
    "--threads",
    type=int,
    default=None,
    help="CPU torch threads (default: what the profile was calibrated with, else 1).",
)
@click.option(
    "--routing",
    type=click.Choice(["typical", "uniform"]),
    default="typical",
    show_default=True,
    help="Routing model the forced expert assignments are sampled from.",
)
@click.option(
    "--clock",
    type=click.Choice(["auto", "wall", "thread"]),
    default="auto",
    show_default=True,
    help="auto: the thread's CPU time for a single-threaded CPU run (ignores preemption on a shared "
    "machine), wall clock otherwise.",
)
@click.option(
    "--reference",
    "style",
    type=click.Choice(["torch-reference", "torch-fused"]),
    default="torch-reference",
    show_default=True,
    help="The torch step's routed experts: a loop of GEMMs per distinct expert (torch-reference), or one "
    "grouped GEMM per projection over all of them (torch-fused, torch._grouped_mm: the fused style's kind of "
    "kernel), each predicted with its own exact plan.",
)
@click.option(
    "--cache",
    type=click.Choice(["auto", "cold", "warm"]),
    default="auto",
    show_default=True,
    help="Cache state each timed step starts in: cold (a read of the last-level cache's size evicts it first), "
    "warm (back to back), auto: cold on a CPU (a scaled-down model partly fits its cache), warm on a GPU.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of weights, inputs and routing samples."
)
@click.option(
    "--cross-profile",
    "cross_profiles",
    multiple=True,
    help="Also predict the same measured rows with this profile (e.g. one derived for this device from "
    "another's measurements): the cost of projecting to unseen hardware. Repeatable.",
)
@click.option(
    "--measured",
    "measured_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Compare a CSV of measurements made elsewhere instead of running torch (schema: --schema).",
)
@click.option(
    "--kernel-style",
    default="fused",
    show_default=True,
    help="With --measured: the kernel style of the measured system.",
)
@click.option(
    "--repredict",
    "repredict_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Re-score the measured rows of an earlier torch run (its result.json) with --profile, offline: "
    "each row's plan is rebuilt and its routing re-sampled with the run's recorded seed.",
)
@click.option(
    "--bench-result",
    "bench_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="A serving benchmark with SD: `vllm bench serve --save-result` JSON or SGLang bench_serving JSONL; "
    "compared, with --baseline, metric by metric against `moesim serve` on the workload it describes.",
)
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --bench-result: the same benchmark without SD.",
)
@click.option("--model", "bench_model", default=None, help="With --bench-result: the served model.")
@click.option(
    "--draft", "bench_drafter", default=DEFAULT_DRAFTER, show_default=True, help="With --bench-result."
)
@click.option(
    "--acceptance-length",
    "bench_acceptance_length",
    type=float,
    default=None,
    help="With --bench-result: mean tokens per round (default: the file's accept_length, else --acceptance).",
)
@click.option(
    "--acceptance",
    "bench_acceptance",
    type=float,
    default=None,
    help=f"With --bench-result: per-token acceptance rate α [default: {DEFAULT_ACCEPTANCE}].",
)
@click.option("--kv-cache-tokens", "bench_kv_tokens", type=int, default=None, help="With --bench-result.")
@click.option(
    "--tp",
    "bench_tp",
    type=int,
    default=1,
    show_default=True,
    help="With --bench-result: tensor-parallel GPUs.",
)
@click.option("--random-input-len", "bench_input_len", type=int, default=None, help="With --bench-result.")
@click.option("--random-output-len", "bench_output_len", type=int, default=None, help="With --bench-result.")
@click.option(
    "--num-prompts",
    "bench_num_prompts",
    type=int,
    default=None,
    help="With --bench-result, if the file lacks it.",
)
@click.option("--schema", is_flag=True, help="Print the --measured CSV schema and exit.")
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write report.md, rows.csv, result.json and predicted_vs_measured.png into this folder.",
)
@click.option(
    "--runs",
    "runs_path",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[FILE]",
    help="Predict measured serving runs (a CSV, see --runs-schema; alone: the bundled public runs) under "
    "--serving-engine; each row uses its own model, hardware profile and layout.",
)
@click.option(
    "--serving-engine",
    "serving_engine",
    default=DEFAULT_SERVING_ENGINE,
    show_default=True,
    help="With --runs (and --bench-result, one profile): serving-engine profiles (names or .toml paths, comma-separated; per-run = each "
    "row's own engine preset).",
)
@click.option("--plot", "plot_path", default=None, help="With --runs: write predicted vs measured as a PNG.")
@click.option("--runs-schema", is_flag=True, help="Print the --runs CSV columns and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print {rows, summary, meta} as JSON.")
@handle_errors
def validate_command(
    profile: str | None,
    device: str,
    models_text: str,
    quick: bool,
    launch: str,
    batch_text: str | None,
    draft_text: str | None,
    context_len: int,
    layers: int | None,
    dtype: str | None,
    threads: int | None,
    routing: str,
    clock: str,
    style: str,
    cache: str,
    seed: int,
    cross_profiles: tuple[str, ...],
    measured_path: str | None,
    repredict_path: str | None,
    kernel_style: str,
    bench_path: str | None,
    baseline_path: str | None,
    bench_model: str | None,
    bench_drafter: str,
    bench_acceptance_length: float | None,
    bench_acceptance: float | None,
    bench_kv_tokens: int | None,
    bench_tp: int,
    bench_input_len: int | None,
    bench_output_len: int | None,
    bench_num_prompts: int | None,
    schema: bool,
    report_dir: str | None,
    runs_path: str | None,
    serving_engine: str,
    plot_path: str | None,
    runs_schema: bool,
    as_json: bool,
) -> None:
    if schema:
        click.echo(MEASURED_SCHEMA)
        return
    if runs_schema or runs_path is not None:
        _runs(runs_path, runs_schema, serving_engine, plot_path, as_json)
        return
    if plot_path:
        raise MoesimError("--plot", "only applies with --runs", "use --report for the other validations")
    if profile is None:
        raise MoesimError("--profile", "is required", "give a hardware profile name or file, or use --runs")
    if report_dir:
        check_output_dir("--report", report_dir)
    from moesim.simulator.hardware.profile import load_profile

    hardware = load_profile(profile)
    if bench_path or baseline_path:
        from moesim.commands.serve import tensor_parallel
        from moesim.simulator.scenario import DEFAULT_DRAFT_LEN, Scenario
        from moesim.simulator.serving.options import ServeOptions
        from moesim.validation.bench.compare import validate_bench

        if not (bench_path and baseline_path and bench_model):
            raise MoesimError(
                "--bench-result", "needs --bench-result SD, --baseline BASE and --model NAME together"
            )
        explicit_launch = click.get_current_context().get_parameter_source("launch")
        run_draft_lens = _draft_lens(draft_text) if draft_text else [DEFAULT_DRAFT_LEN]
        if len(run_draft_lens) != 1 or run_draft_lens[0] < 1:
            raise MoesimError("--draft-len", "with --bench-result give the one draft length K ≥ 1 of the run")
        scenario = Scenario(
            bench_model,
            hardware,
            draft_len=run_draft_lens[0],
            kernel_style=kernel_style,
            launch=launch if explicit_launch == click.core.ParameterSource.COMMANDLINE else "graph",
            routing="independent" if routing == "uniform" else routing,
            layout=tensor_parallel(bench_tp),
            drafter=bench_drafter,
            acceptance=bench_acceptance,
            acceptance_length=bench_acceptance_length,
            serving_engine=serving_engine,
        )
        bench = validate_bench(
            bench_path,
            baseline_path,
            scenario,
            options=ServeOptions(kv_cache_tokens=bench_kv_tokens),
            input_len=bench_input_len,
            output_len=bench_output_len,
            seed=seed,
            num_prompts=bench_num_prompts,
        )
        if as_json:
            emit_json(bench)
        else:
            _print_bench(bench)
        return
    if context_len < 0:
        raise MoesimError("--context-len", f"must be ≥ 0, got {context_len}")
    if measured_path and repredict_path:
        raise MoesimError("--repredict", "give --repredict or --measured, not both")
    if repredict_path:
        from moesim.validation.reference.repredict import load_result, repredict_result

        cross = {name: load_profile(name) for name in cross_profiles}
        result = repredict_result(load_result(repredict_path), hardware, cross, source=repredict_path)
    elif measured_path:
        result = _measured(measured_path, profile, context_len, launch, kernel_style, routing)
    else:
        from moesim.validation.reference.run import ValidationOptions, run_torch_validation
        from moesim.validation.reference.shapes import SHAPES

        models = tuple(m.strip() for m in models_text.split(",") if m.strip())
        unknown = [m for m in models if m not in SHAPES]
        if unknown or not models:
            raise MoesimError(
                "--models",
                f"unknown validation model(s) {', '.join(unknown) or '(none)'}",
                f"choose from {', '.join(SHAPES)}",
            )
        draft_lens = tuple(_draft_lens(draft_text)) if draft_text is not None else None
        options = ValidationOptions(
            device=device,
            models=models,
            quick=quick,
            launch=launch,
            context_len=context_len,
            batches=tuple(parse_int_list("--batch", batch_text)) if batch_text else None,
            draft_lens=draft_lens,
            layers=layers,
            dtype=dtype,
            threads=threads,
            routing=routing,
            seed=seed,
            clock=clock,
            cache=cache,
            style=style,
        )
        progress = None if as_json else (lambda text: click.echo(f"  measuring {text}", err=True))
        cross = {name: load_profile(name) for name in cross_profiles}
        result = run_torch_validation(hardware, options, progress, cross)
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
        _print(result)


def _runs(
    runs_path: str | None, schema: bool, serving_engine: str, plot_path: str | None, as_json: bool
) -> None:
    from moesim.commands.engines import plot_runs_validation, print_runs_validation, runs_validation

    if schema:
        from moesim.validation.runs.schema import schema_rows

        columns = schema_rows()
        if as_json:
            emit_json({"columns": columns})
        else:
            for c in columns:
                choices = f" ({'|'.join(c['choices'])})" if c["choices"] else ""
                need = "required" if c["required"] else "optional"
                click.echo(f"{c['column']:<22} {c['type']:<7} {need:<9} {c['meaning']}{choices}")
        return
    data = runs_validation(runs_path or None, serving_engine)
    if plot_path:
        plot_runs_validation(data, plot_path)
    if as_json:
        emit_json(data)
    else:
        print_runs_validation(data)


def _measured(
    path: str, profile: str, context_len: int, launch: str, kernel_style: str, routing: str
) -> dict[str, Any]:
    from moesim.validation.reference.report import predict_measured, read_measured_csv, summarise

    rows = predict_measured(read_measured_csv(path), profile, context_len, launch, kernel_style, routing)
    return {
        "rows": rows,
        "summary": summarise(rows),
        "meta": {
            "title": f"{path} vs profile {profile}",
            "profile": profile,
            "launch": launch,
            "kernel_style": kernel_style,
            "context_len": context_len,
        },
        "notes": [
            "measured elsewhere: the prediction samples the routing model, it does not replay the measured routing"
        ],
    }


def _print_bench(result: dict[str, Any]) -> None:
    from rich.table import Table

    from moesim.commands.common import make_console

    def cell(value: float | None, fmt: str = "{:.2f}") -> str:
        return "-" if value is None else fmt.format(value)

    console = make_console()
    for point in result["points"]:
        where = f"concurrency {point['max_concurrency'] or '∞'}, rate {point['request_rate']}"
        table = Table(title=f"{point['sd_source']} vs {point['baseline_source']} ({point['tool']}): {where}")
        for column in (
            "metric",
            "SD meas.",
            "SD pred.",
            "err",
            "base meas.",
            "base pred.",
            "err",
            "speedup meas.",
            "speedup pred.",
            "err",
        ):
            table.add_column(column, justify="left" if column == "metric" else "right")
        for r in point["rows"]:
            table.add_row(
                r["metric"],
                cell(r["measured_sd"]),
                cell(r["predicted_sd"]),
                cell(r["error_sd"], "{:+.0%}"),
                cell(r["measured_baseline"]),
                cell(r["predicted_baseline"]),
                cell(r["error_baseline"], "{:+.0%}"),
                cell(r["measured_speedup"], "{:.3f}"),
                cell(r["predicted_speedup"], "{:.3f}"),
                cell(r["error_speedup"], "{:+.0%}"),
            )
        console.print(table)
        summary = point["summary"]
        console.print(
            f"  {summary['metrics_compared']} values compared, MAPE "
            f"{cell(summary['mape'], '{:.1%}')}, speedup MAPE {cell(summary['speedup_mape'], '{:.1%}')}; "
            f"workload: {point['workload']}",
            highlight=False,
        )
        for note in point["notes"]:
            console.print(f"  note: {note}", highlight=False)
    a = result["points"][0]["assumptions"] if result["points"] else {}
    for key in ("kv_cache", "step_cost", "not_modelled"):
        if key in a:
            console.print(f"  {key}: {a[key]}", highlight=False)


def _draft_lens(text: str) -> list[int]:
    """--draft-len values: like parse_int_list, but 0 (plain decode) is allowed."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise MoesimError("--draft-len", f"expected integers like 0,1,3,7, got {text!r}") from None
    if not values or min(values) < 0:
        raise MoesimError("--draft-len", f"needs draft lengths ≥ 0, got {text!r}")
    return values


def _print(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from moesim.validation.reference.report import attribution_sentence

    console = Console()
    table = Table(title=result["meta"].get("title", "validation"))
    for col in (
        "model",
        "B",
        "K",
        "U",
        "measured ms",
        "predicted ms",
        "error",
        "spread",
        "ratio meas.",
        "ratio pred.",
    ):
        table.add_column(col, justify="right" if col != "model" else "left")
    for r in result["rows"]:
        table.add_row(
            str(r["model"]),
            str(r["batch"]),
            str(r["draft_len"]),
            f"{r.get('distinct_experts') or 0:.1f}",
            f"{r['measured_s'] * 1e3:.3f}",
            f"{r['predicted_s'] * 1e3:.3f}",
            f"{r['error']:+.1%}",
            "" if r.get("spread") is None else f"{r['spread']:.1%}",
            "" if r.get("measured_ratio") is None else f"{r['measured_ratio']:.2f}",
            "" if r.get("predicted_ratio") is None else f"{r['predicted_ratio']:.2f}",
        )
    console.print(table)
    s = result["summary"]
    w = s["worst"]
    line = f"n={s['n']}  MAPE {s['mape']:.1%}  p90 |error| {s['p90_abs_error']:.1%}  bias {s['median_error']:+.1%}"
    if s.get("noise_floor") is not None:
        line += f"  noise floor {s['noise_floor']:.1%}"
    console.print(line)
    console.print(f"worst: {w['model']} B={w['batch']} K={w['draft_len']} error {w['error']:+.1%}")
    if s.get("attribution"):
        console.print(attribution_sentence(s["attribution"]))
    for name, other in s.get("cross_device", {}).items():
        console.print(
            f"cross-device: the same rows predicted with {name}: MAPE {other['mape']:.1%}, p90 {other['p90_abs_error']:.1%}, bias {other['median_error']:+.1%}"
        )
    for note in result.get("notes", []):
        console.print(f"note: {note}")


__all__ = ["validate_command"]

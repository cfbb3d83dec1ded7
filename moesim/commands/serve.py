"""`moesim serve`: a simulated `vllm bench serve` run, with and without speculative decoding."""

from __future__ import annotations

import math
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from moesim.commands.common import (
    check_outputs,
    emit_json,
    handle_errors,
    make_console,
    model_options,
    resolve_model,
)
from moesim.commands.fields import field_options, fields_of, hardware_option
from moesim.commands.progress import progress
from moesim.commands.simulate import scenario_from_flags, sd_options
from moesim.errors import MoesimError
from moesim.options import option_fields
from moesim.simulator.bounds import check_count, check_serving
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.scenario import Scenario
from moesim.simulator.serving.options import BenchmarkClient, SchedulerLimits, ServeOptions

SUMMARY_COLUMNS = (
    ("output_throughput", "out tok/s", "{:.0f}"),
    ("mean_tpot_ms", "TPOT ms", "{:.2f}"),
    ("mean_ttft_ms", "TTFT ms", "{:.1f}"),
    ("mean_e2el_ms", "E2EL ms", "{:.0f}"),
)
DETAIL_METRICS = (
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p99")),
)


def serve_options(func: Any) -> Any:
    """The flags `vllm bench serve` and the engine share with moesim, under the same names."""
    for decorate in reversed(
        (
            field_options(BenchmarkClient, *option_fields(BenchmarkClient)),
            field_options(Scenario, "draft_len"),
            field_options(SchedulerLimits, *option_fields(SchedulerLimits)),
            field_options(ServeOptions, "gpu_memory_utilization", "kv_cache_tokens"),
            field_options(Scenario, "launch"),
            field_options(ServeOptions, "tp", "gpus", "ep"),
            field_options(Scenario, "kernel_style", "serving_engine", "routing"),
        )
    ):
        func = decorate(func)
    return func


def options_from_flags(flags: dict[str, Any]) -> ServeOptions:
    return ServeOptions(
        limits=SchedulerLimits(**fields_of(SchedulerLimits, flags)),
        **fields_of(ServeOptions, flags),
    )


def serving_layout(tp: int, gpus: int | None = None, ep: int | None = None) -> ParallelLayout:
    """The layout of `--tp T [--gpus G] [--ep E]`: `--tp N` alone is a tensor-parallel group (one GPU for
    1); G > T runs attention data-parallel in G/T groups; E > 1 spreads the routed experts over E ranks.
    E.g. SGLang `--tp 8 --enable-dp-attention --dp 8 --ep-size 8` and vLLM `--data-parallel-size 8
    --enable-expert-parallel` are `--gpus 8 --tp 1 --ep 8`."""
    for flag, value in (("--tp", tp), ("--gpus", gpus), ("--ep", ep)):
        if value is not None and value < 1:
            raise MoesimError(flag, f"must be ≥ 1, got {value}")
    total = gpus if gpus is not None else max(tp, ep or 1)
    if ep is None or ep == 1:
        if total != tp:
            raise MoesimError(
                "--gpus",
                f"data-parallel attention ({total} GPUs, --tp {tp}) needs expert parallelism",
                f"add --ep {total} (as SGLang --ep-size and vLLM --enable-expert-parallel do), or drop --gpus",
            )
        return ParallelLayout(gpus=tp, tp=tp)
    return ParallelLayout(gpus=total, tp=tp, ep=ep)


def _label(point: Any) -> str:
    if point.max_concurrency is not None:
        return str(point.max_concurrency)
    return "∞" if math.isinf(point.request_rate) else f"{point.request_rate:g}"


def render_result(result: Any, console: Console) -> None:
    """A summary row per sweep point (no SD │ SD │ speedup), and every metric when there is one point."""
    by_rate = any(p.max_concurrency is None for p in result.points)
    table = Table(title="serving (means): each metric without SD, with SD, and the SD speedup ×")
    table.add_column("req/s" if by_rate else "conc.", justify="right")
    for _, text, _ in SUMMARY_COLUMNS:
        for header in (text, "SD", "×"):
            table.add_column(header, justify="right")
    for point in result.points:
        cells = [_label(point)]
        for name, _, fmt in SUMMARY_COLUMNS:
            ups = point.speedups.get(name)
            cells += [
                fmt.format(point.baseline.values[name]),
                fmt.format(point.sd.values[name]),
                f"{ups:.2f}" if ups else "-",
            ]
        table.add_row(*cells)
    console.print(table)
    if len(result.points) == 1:
        point = result.points[0]
        detail = Table(title="every metric (vLLM's names)")
        for column in ("metric", "no SD", "SD", "SD speedup"):
            detail.add_column(column, justify="left" if column == "metric" else "right")
        for name in DETAIL_METRICS:
            ups = point.speedups.get(name)
            detail.add_row(
                name,
                f"{point.baseline.values[name]:.2f}",
                f"{point.sd.values[name]:.2f}",
                f"{ups:.3f}" if ups else "-",
            )
        console.print(detail)
    for key, value in result.assumptions.items():
        console.print(f"  {key}: {value}", highlight=False)


@click.command("serve")
@model_options
@hardware_option
@serve_options
@sd_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON {points, assumptions}.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None, help="Write rows as CSV.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write throughput vs TPOT and speedup vs concurrency (png, pdf, svg).",
)
@handle_errors
def serve_command(
    model_name: str | None,
    model_config: str | None,
    hardware: str,
    as_json: bool,
    csv_path: str | None,
    plot_path: str | None,
    **flags: Any,
) -> None:
    """Simulate a serving benchmark (as `vllm bench serve`) with and without speculative decoding.

    Same workload and seed for both; every metric's SD speedup (> 1: SD better).

    Example: moesim serve --model qwen3-30b-a3b --num-prompts 200 --max-concurrency 1,8,64
    """
    from moesim.simulator.serving.plots import plot_serving
    from moesim.simulator.serving.run import serve
    from moesim.simulator.serving.workload import build_workload
    from moesim.validation.runs.nearby import engine_of, nearby_errors

    to_stdout = check_outputs(csv=csv_path, plot=plot_path, as_json=as_json)
    scenario = scenario_from_flags(
        resolve_model(model_name, model_config, flags),
        hardware,
        flags,
        layout=serving_layout(flags["tp"], flags["gpus"], flags["ep"]),
    )
    client = BenchmarkClient(**fields_of(BenchmarkClient, flags))
    concurrencies: list[int | None] = list(client.max_concurrency or [None])
    rates = list(client.request_rate)
    if client.dataset_name == "random":  # the estimate before any request is drawn
        check_count(client.num_prompts, "num_prompts", fix="give --num-prompts 1 or more")
        check_serving(
            client.num_prompts,
            client.random_output_len * (1 + abs(client.random_range_ratio)),
            concurrencies,
            2 * len(rates),
            client.max_minutes,
        )
    workload = build_workload(
        client.dataset_name,
        client.num_prompts,
        input_len=client.random_input_len,
        output_len=client.random_output_len,
        range_ratio=client.random_range_ratio,
        seed=client.seed,
        dataset_path=client.dataset_path,
    )
    total = 2 * len(workload.requests) * len(concurrencies) * len(rates)
    with progress("serve", total) as advance:
        result = serve(
            scenario,
            workload,
            concurrencies=concurrencies,
            request_rates=rates,
            burstiness=client.burstiness,
            seed=client.seed,
            options=options_from_flags(flags),
            progress=advance,
            max_minutes=client.max_minutes,
        )
    if csv_path:
        result.write_csv(csv_path)
    if plot_path:
        plot_serving(result, plot_path)
    spec = scenario.model  # the batch of a point: the mean decode batch its SD run ran
    nearby = nearby_errors(
        engine_of(flags["serving_engine"]),
        ((max(1, round(p.sd.mean_decode_batch)), spec.n_experts, spec.is_moe) for p in result.points),
    )
    if as_json:
        emit_json({**result.to_json(), "measured_runs_error": [n.to_json() for n in nearby]})
        return
    if to_stdout:  # standard output carries the CSV or the plot
        return
    console = make_console()
    render_result(result, console)
    for line in nearby:
        console.print(line.text)
    for path in (csv_path, plot_path):
        if path:
            console.print(f"wrote {path}")

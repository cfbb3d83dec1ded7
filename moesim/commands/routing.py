"""`moesim routing ...`: fit, inspect, predict, generate and record routing statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import numpy as np

from moesim.atomic import check_output_path
from moesim.commands.common import emit_json, handle_errors
from moesim.commands.fields import WHOLE_NUMBER, field_options, fields_of
from moesim.commands.progress import progress
from moesim.errors import MoesimError
from moesim.figures import check_plot_path
from moesim.options import option_fields
from moesim.reading import read_text
from moesim.simulator.routing.predict import DistinctQuery
from moesim.simulator.routing.settings import FitSettings, GenerateSettings, RecordSettings
from moesim.simulator.routing.trace import TRACE_SUFFIXES


@click.group("routing")
def routing_group() -> None:
    """Routing statistics: how many distinct experts correlated routing pulls into a step.

    \b
    moesim routing inspect trace.npz --plot overlap.png
    moesim routing fit trace.npz --output stats.json
    moesim routing predict --experts 128 --top-k 8 --tokens 4 --overlap 0.35,0.25,0.17 --baseline-overlap 0.075
    """


def _trace_options(func: Any) -> Any:
    func = click.option(
        "--experts",
        "n_experts",
        type=WHOLE_NUMBER,
        default=None,
        help="Expert count, if the trace does not store it.",
    )(func)
    return click.argument("trace", type=click.Path(dir_okay=False))(func)


@routing_group.command("fit")
@_trace_options
@click.option(
    "--output", "-o", required=True, type=click.Path(dir_okay=False), help="Statistics file (.json)."
)
@field_options(FitSettings, *option_fields(FitSettings))
@click.option("--json", "as_json", is_flag=True, help="Print the fitted parameters as JSON.")
@handle_errors
def fit_command(
    trace: str,
    n_experts: int | None,
    output: str,
    as_json: bool,
    **flags: Any,
) -> None:
    """Fit per-layer correlated routing to TRACE and write the statistics file."""
    from moesim.simulator.routing.stats_file import STATS_SUFFIXES, save_routing_stats, stats_document
    from moesim.simulator.routing.trace import load_trace

    check_output_path("--output", output, suffixes=STATS_SUFFIXES)
    settings = FitSettings(**fields_of(FitSettings, flags))
    topk_groups = 1 if settings.n_groups == 1 else settings.topk_groups
    routing_trace = load_trace(trace, n_experts)
    if routing_trace.longest_sequence_tokens < 2:
        raise MoesimError(
            "trace",
            f"{trace}: every sequence is one token long, so there is no overlap between a sequence's tokens to fit",
            "record sequences of two or more tokens (`sequence_ids` repeats a sequence's id on each of its tokens)",
        )
    # scikit-learn loads only once the trace has been read (a bad trace is refused without it)
    from moesim.simulator.routing.estimator import RoutingEstimator

    with progress(f"fitting {routing_trace.n_layers} layers of {Path(trace).name}"):
        estimator = RoutingEstimator(
            settings.max_distance, settings.n_groups, topk_groups, seed=settings.seed
        ).fit(routing_trace)
    save_routing_stats(output, estimator.model_, estimator.statistics_, source=Path(trace).name)
    if as_json:
        document = stats_document(estimator.model_, None, Path(trace).name)
        for entry in document["layers"]:
            entry["params"].pop("popularity")
        emit_json(document)
        return
    click.echo(f"fitted {routing_trace.n_layers} layers of {trace} → {output}")
    click.echo("layer  sigma  sequence_share  token_corr  o1     o_D    baseline")
    for stats, (index, layer) in zip(estimator.statistics_, estimator.model_.layers, strict=True):
        curve = stats["overlap"]
        click.echo(
            f"{index:5d}  {layer.sigma:5.2f}  {layer.sequence_share:14.3f}  {layer.token_corr:10.3f}  "
            f"{curve[0]:.3f}  {curve[-1]:.3f}  {stats['baseline_overlap']:.3f}"
        )


@routing_group.command("inspect")
@_trace_options
@field_options(FitSettings, "max_distance", max_distance={"help": "Largest distance / window length."})
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="Write a plot (png, pdf, svg).")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@handle_errors
def inspect_command(
    trace: str, n_experts: int | None, max_distance: int, plot: str | None, as_json: bool
) -> None:
    """Overlap vs token distance, popularity skew and distinct experts vs T of TRACE."""
    from moesim.simulator.routing.fit import trace_layer_statistics
    from moesim.simulator.routing.independent import expected_distinct_uniform
    from moesim.simulator.routing.trace import load_trace

    FitSettings(max_distance=max_distance)  # bounded as the fit's
    if plot is not None:
        check_plot_path("--plot", plot)
    routing_trace = load_trace(trace, n_experts)
    longest = int(np.diff(routing_trace.sequence_bounds(), axis=1).max())
    if max_distance >= longest:
        raise MoesimError(
            "--max-distance",
            f"{max_distance} reaches past the longest sequence of the trace ({longest} tokens)",
            f"use --max-distance {max(1, longest - 1)} or less",
        )
    stats = []
    with progress(f"statistics of {routing_trace.n_layers} layers", routing_trace.n_layers) as advance:
        for index in range(routing_trace.n_layers):
            stats.append(trace_layer_statistics(routing_trace, index, max_distance))
            advance(1)
    n, k = routing_trace.n_experts, routing_trace.top_k
    independent = expected_distinct_uniform(n, k, np.arange(1, max_distance + 1))
    mean_overlap = np.nanmean([s["overlap"] for s in stats], axis=0)
    mean_distinct = np.nanmean([s["distinct_vs_tokens"] for s in stats], axis=0)
    summary = {
        "trace": trace,
        "tokens": routing_trace.n_tokens,
        "sequences": int(routing_trace.sequence_bounds().shape[0]),
        "layers": routing_trace.n_layers,
        "n_experts": n,
        "top_k": k,
        "chance_overlap": k / n,
        "mean_overlap": mean_overlap,
        "mean_baseline_overlap": float(np.nanmean([s["baseline_overlap"] for s in stats])),
        "mean_distinct_vs_tokens": mean_distinct,
        "independent_uniform_distinct_vs_tokens": independent,
        "per_layer": [
            {key: value for key, value in s.items() if key != "inclusion_frequency"} for s in stats
        ],
    }
    if plot:
        _plot(plot, trace, stats, independent, k / n)
        summary["plot"] = plot
    if as_json:
        emit_json(summary)
        return
    click.echo(
        f"{trace}: {summary['tokens']} tokens in {summary['sequences']} sequences, {routing_trace.n_layers} layers, "
        f"{n} experts top-{k} (chance overlap k/N = {k / n:.3f})"
    )
    click.echo(
        f"baseline overlap (different sequences), mean over layers: {summary['mean_baseline_overlap']:.3f}"
    )
    click.echo("distance  overlap (mean over layers)")
    for d, o in enumerate(mean_overlap, start=1):
        click.echo(f"{d:8d}  {o:.3f}")
    click.echo("tokens  distinct experts (one sequence)  independent uniform")
    for t, (emp, ind) in enumerate(zip(mean_distinct, independent, strict=True), start=1):
        click.echo(f"{t:6d}  {emp:31.2f}  {ind:19.2f}")
    click.echo("layer  o1     plateau  baseline  max/mean load  effective experts")
    for s in stats:
        skew = s["popularity_skew"]
        click.echo(
            f"{s['layer']:5d}  {s['overlap'][0]:.3f}  {np.nanmean(s['overlap'][-3:]):7.3f}  "
            f"{s['baseline_overlap']:8.3f}  {skew['max_over_mean']:13.2f}  {skew['effective_experts']:17.1f}"
        )
    if plot:
        click.echo(f"plot written to {plot}")


def _plot(path: str, trace: str, stats: list[dict[str, Any]], independent: np.ndarray, chance: float) -> None:
    from moesim.figures import save_figure
    from moesim.simulator.routing.plots import plot_trace_statistics

    save_figure(plot_trace_statistics(Path(trace).name, stats, independent, chance), path, dpi=120)


@routing_group.command("predict")
@field_options(DistinctQuery, *option_fields(DistinctQuery))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def predict_command(as_json: bool, **flags: Any) -> None:
    """Distinct experts per layer for B sequences × T tokens (mean and p10/p50/p90)."""
    from moesim.simulator.routing.predict import predict_distinct

    query = DistinctQuery(**fields_of(DistinctQuery, flags))
    with progress("sampling steps per layer") as advance:
        result = predict_distinct(query, advance)
    if as_json:
        emit_json(result)
        return
    click.echo(f"routing: {result['routing']}")
    click.echo(
        f"distinct experts for {query.batch} × {query.tokens} tokens: mean {result['distinct_experts']:.2f} "
        f"(p10 {result['p10']:.0f}, p50 {result['p50']:.0f}, p90 {result['p90']:.0f}); "
        f"independent uniform {result['independent_uniform']:.2f}, at most {result['upper_bound']}"
    )
    per_layer = result.get("per_layer", [])
    for entry in per_layer if len(per_layer) > 1 or query.ranks is not None else []:
        line = f"  layer {entry['layer']}: mean {entry['distinct_experts']:.2f}"
        if "per_rank" in entry:
            busiest = entry["per_rank"]["max_distinct"]
            line += f", busiest of {query.ranks} ranks: mean {busiest['mean']:.2f} p90 {busiest['p90']:.0f} experts"
        click.echo(line)


@routing_group.command("generate")
@click.option(
    "--stats", required=True, type=click.Path(dir_okay=False), help="Statistics file from `routing fit`."
)
@click.option("--sequences", type=WHOLE_NUMBER, required=True, help="Sequences to generate.")
@click.option("--tokens", type=WHOLE_NUMBER, required=True, help="Tokens per sequence.")
@click.option(
    "--output", "-o", required=True, type=click.Path(dir_okay=False), help="Trace (.npz or .jsonl)."
)
@field_options(GenerateSettings, *option_fields(GenerateSettings))
@handle_errors
def generate_command(
    stats: str, sequences: int, tokens: int, output: str, seed: int, max_memory_gb: float
) -> None:
    """Synthetic trace from fitted statistics (fit → generate → fit round-trips)."""
    from moesim.simulator.routing.stats_file import load_routing_stats
    from moesim.simulator.routing.synthetic import generate_trace
    from moesim.simulator.routing.trace import save_trace

    settings = GenerateSettings(seed=seed, max_memory_gb=max_memory_gb)
    check_output_path("--output", output, suffixes=TRACE_SUFFIXES)
    model = load_routing_stats(stats, field="--stats")
    trace = generate_trace(model, sequences, tokens, settings.seed, max_memory_gb=settings.max_memory_gb)
    save_trace(trace, output)
    click.echo(f"wrote {trace.n_tokens} tokens ({sequences} × {tokens}, {trace.n_layers} layers) to {output}")


@routing_group.command("record")
@click.option(
    "--hf-model", required=True, help="A Hugging Face model directory, or a config.json (random weights)."
)
@click.option(
    "--prompts", required=True, type=click.Path(dir_okay=False), help="Text file, one prompt per line."
)
@click.option(
    "--output", "-o", required=True, type=click.Path(dir_okay=False), help="Trace (.npz or .jsonl)."
)
@field_options(RecordSettings, *option_fields(RecordSettings))
@handle_errors
def record_command(hf_model: str, prompts: str, output: str, **flags: Any) -> None:
    """Record a routing trace from a transformers MoE model with forward hooks on its routers (needs torch)."""
    from moesim.calibrate.routing_record import record_trace
    from moesim.simulator.routing.trace import save_trace

    settings = RecordSettings(**fields_of(RecordSettings, flags))
    check_output_path("--output", output, suffixes=TRACE_SUFFIXES)
    text = read_text("--prompts", prompts, "prompts file")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise MoesimError("--prompts", f"{prompts} has no prompts", "one prompt per line")
    trace = record_trace(
        hf_model,
        lines,
        max_tokens=settings.max_tokens,
        new_tokens=settings.new_tokens,
        seed=settings.seed,
        max_memory_gb=settings.max_memory_gb,
    )
    save_trace(trace, output)
    click.echo(
        f"recorded {trace.n_tokens} tokens of {len(lines)} prompts, {trace.n_layers} MoE layers, "
        f"{trace.n_experts} experts top-{trace.top_k} → {output}"
    )

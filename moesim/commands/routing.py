"""`moesim routing ...`: fit, inspect, predict, generate and record routing statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import numpy as np

from moesim.atomic import check_output_path
from moesim.commands.common import emit_json, handle_errors, parse_float_list
from moesim.commands.progress import progress
from moesim.errors import MoesimError
from moesim.figures import check_plot_path
from moesim.simulator.bounds import DEFAULT_MAX_MEMORY_GB
from moesim.simulator.routing.placement import PLACEMENT_SPELLINGS


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
        "--experts", "n_experts", type=int, default=None, help="Expert count, if the trace does not store it."
    )(func)
    return click.argument("trace", type=click.Path(dir_okay=False))(func)


@routing_group.command("fit")
@_trace_options
@click.option(
    "--output", "-o", required=True, type=click.Path(dir_okay=False), help="Statistics file (.json)."
)
@click.option(
    "--max-distance", type=int, default=16, show_default=True, help="Overlap distances / window lengths."
)
@click.option(
    "--groups", "n_groups", type=int, default=1, show_default=True, help="Expert groups (group-limited)."
)
@click.option("--topk-groups", type=int, default=1, show_default=True, help="Groups each token may use.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the fitted parameters as JSON.")
@handle_errors
def fit_command(
    trace: str,
    n_experts: int | None,
    output: str,
    max_distance: int,
    n_groups: int,
    topk_groups: int,
    seed: int,
    as_json: bool,
) -> None:
    """Fit per-layer correlated routing to TRACE and write the statistics file."""
    from moesim.simulator.routing.estimator import RoutingEstimator
    from moesim.simulator.routing.stats_file import save_routing_stats, stats_document
    from moesim.simulator.routing.trace import load_trace

    check_output_path("--output", output)
    if n_groups == 1:
        topk_groups = 1
    routing_trace = load_trace(trace, n_experts)
    with progress(f"fitting {routing_trace.n_layers} layers of {Path(trace).name}"):
        estimator = RoutingEstimator(max_distance, n_groups, topk_groups, seed=seed).fit(routing_trace)
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
@click.option(
    "--max-distance", type=int, default=16, show_default=True, help="Largest distance / window length."
)
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

    if max_distance < 1:
        raise MoesimError("--max-distance", f"must be ≥ 1, got {max_distance}")
    if plot:
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
@click.option("--experts", "n_experts", type=int, required=True, help="Routed experts N.")
@click.option("--top-k", type=int, required=True, help="Experts per token k.")
@click.option("--tokens", type=int, required=True, help="Tokens per sequence T (a verification step: K+1).")
@click.option("--batch", type=int, default=1, show_default=True, help="Independent sequences B.")
@click.option(
    "--overlap", default=None, help="Overlap at distances 1..D, e.g. 0.35,0.25,0.2 (last holds beyond)."
)
@click.option(
    "--baseline-overlap", type=float, default=None, help="Overlap of tokens of different sequences."
)
@click.option(
    "--routing", "routing_spec", default="independent", show_default=True, help="independent|typical|STATS"
)
@click.option(
    "--layer", type=int, default=None, help="Layer index (per-layer statistics); default: all layers."
)
@click.option(
    "--groups", "n_groups", type=int, default=1, show_default=True, help="Expert groups (group-limited)."
)
@click.option("--topk-groups", type=int, default=1, show_default=True, help="Groups each token may use.")
@click.option("--ranks", type=int, default=None, help="Expert-parallel ranks: also report the busiest rank.")
@click.option("--placement", type=click.Choice(PLACEMENT_SPELLINGS), default="contiguous", show_default=True)
@click.option(
    "--max-memory-gb",
    type=float,
    default=DEFAULT_MAX_MEMORY_GB,
    show_default=True,
    help="Refuse to sample the quantiles when that would need more memory than this.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def predict_command(
    n_experts: int,
    top_k: int,
    tokens: int,
    batch: int,
    overlap: str | None,
    baseline_overlap: float | None,
    routing_spec: str,
    layer: int | None,
    n_groups: int,
    topk_groups: int,
    ranks: int | None,
    placement: str,
    max_memory_gb: float,
    as_json: bool,
) -> None:
    """Distinct experts per layer for B sequences × T tokens (mean and p10/p50/p90)."""
    from moesim.simulator.routing.base import (
        MIN_QUANTILE_SAMPLES,
        affordable_samples,
        sampling_bytes,
    )
    from moesim.simulator.routing.correlated import CorrelatedRouting
    from moesim.simulator.routing.independent import expected_distinct_uniform
    from moesim.simulator.routing.presets import routing_from_cli

    if not 1 <= top_k <= n_experts:
        raise MoesimError("--top-k", f"must be between 1 and --experts {n_experts}, got {top_k}")
    if tokens < 1 or batch < 1:
        raise MoesimError("--tokens", f"--tokens and --batch must be ≥ 1, got {tokens} and {batch}")
    if n_groups == 1:
        topk_groups = 1
    curve = parse_float_list("--overlap", overlap) if overlap else None
    model = routing_from_cli(routing_spec, n_experts, top_k, curve, baseline_overlap, n_groups, topk_groups)
    layers: list[int | None] = [layer]
    if layer is None and isinstance(model, CorrelatedRouting) and len(model.layers) > 1:
        layers = [index for index, _ in model.layers]
    if layer is not None and layer < 0:
        raise MoesimError("--layer", f"must be ≥ 0, got {layer}")
    fitted = [index for index, _ in model.layers] if isinstance(model, CorrelatedRouting) else []
    if layer is not None and Path(routing_spec).exists() and layer not in fitted:
        raise MoesimError(
            "--layer", f"{routing_spec} has statistics for layers {fitted}, not {layer}", "choose one of them"
        )
    if ranks is not None and (ranks < 1 or n_experts % ranks):
        raise MoesimError("--ranks", f"must divide --experts {n_experts}, got {ranks}")
    if max_memory_gb <= 0:
        raise MoesimError("--max-memory-gb", f"must be > 0, got {max_memory_gb:g}")
    # enough samples for stable quantiles, as many as the memory limit allows
    wanted = int(np.clip(2e7 / (batch * tokens * n_experts), 200, 4000))
    n_samples = affordable_samples(n_experts, batch, tokens, max_memory_gb * 1e9, wanted)
    if n_samples == 0:
        need_gb = sampling_bytes(n_experts, batch, tokens, MIN_QUANTILE_SAMPLES) / 1e9
        raise MoesimError(
            "--batch",
            f"sampling {batch} × {tokens} tokens over {n_experts} experts needs about {need_gb:,.0f} GB "
            f"({MIN_QUANTILE_SAMPLES} samples), above the --max-memory-gb limit of {max_memory_gb:g} GB",
            "lower --batch or --tokens, or raise --max-memory-gb",
        )
    rng = np.random.default_rng(0)
    per_layer = []
    with progress(f"sampling {n_samples} steps per layer", len(layers)) as advance:
        for index in layers:
            per_layer.append(
                _predict_layer(
                    model, n_experts, top_k, batch, tokens, n_samples, rng, index, ranks, placement
                )
            )
            advance(1)
    result: dict[str, Any] = {
        "distinct_experts": float(np.mean([e["distinct_experts"] for e in per_layer])),
        "p10": float(np.mean([e["p10"] for e in per_layer])),
        "p50": float(np.mean([e["p50"] for e in per_layer])),
        "p90": float(np.mean([e["p90"] for e in per_layer])),
        "independent_uniform": float(expected_distinct_uniform(n_experts, top_k, batch * tokens)),
        "upper_bound": min(n_experts, batch * tokens * top_k),
        "experts": n_experts,
        "top_k": top_k,
        "tokens": tokens,
        "batch": batch,
        "routing": model.description,
    }
    if len(per_layer) > 1 or layer is not None or ranks is not None:
        result["per_layer"] = per_layer
    if as_json:
        emit_json(result)
        return
    click.echo(f"routing: {result['routing']}")
    click.echo(
        f"distinct experts for {batch} × {tokens} tokens: mean {result['distinct_experts']:.2f} "
        f"(p10 {result['p10']:.0f}, p50 {result['p50']:.0f}, p90 {result['p90']:.0f}); "
        f"independent uniform {result['independent_uniform']:.2f}, at most {result['upper_bound']}"
    )
    for entry in per_layer if len(per_layer) > 1 or ranks is not None else []:
        line = f"  layer {entry['layer']}: mean {entry['distinct_experts']:.2f}"
        if "per_rank" in entry:
            busiest = entry["per_rank"]["max_distinct"]
            line += f", busiest of {ranks} ranks: mean {busiest['mean']:.2f} p90 {busiest['p90']:.0f} experts"
        click.echo(line)


def _predict_layer(
    model: Any,
    n_experts: int,
    top_k: int,
    batch: int,
    tokens: int,
    n_samples: int,
    rng: np.random.Generator,
    index: int | None,
    ranks: int | None,
    placement: str,
) -> dict[str, Any]:
    """Mean and quantiles of distinct experts of one layer (and of the busiest expert-parallel rank)."""
    from moesim.simulator.routing.base import DistinctExperts
    from moesim.simulator.routing.correlated import rank_summary

    loads = model.sample_expert_loads(n_experts, top_k, batch, tokens, n_samples, rng, index)
    spread = DistinctExperts.from_samples((loads > 0).sum(axis=1))
    entry: dict[str, Any] = {
        "layer": index,
        "distinct_experts": model.expected_distinct(n_experts, top_k, batch, tokens, index),
        "p10": spread.p10,
        "p50": spread.p50,
        "p90": spread.p90,
    }
    if ranks is not None:
        summary = rank_summary(loads, ranks, placement)  # type: ignore[arg-type]
        entry["per_rank"] = {
            "ranks": ranks,
            "placement": summary.placement,
            "max_distinct": vars(summary.max_distinct),
            "max_tokens": vars(summary.max_tokens),
            "mean_distinct_per_rank": summary.mean_distinct_per_rank,
        }
    return entry


@routing_group.command("generate")
@click.option(
    "--stats", required=True, type=click.Path(dir_okay=False), help="Statistics file from `routing fit`."
)
@click.option("--sequences", type=int, required=True, help="Sequences to generate.")
@click.option("--tokens", type=int, required=True, help="Tokens per sequence.")
@click.option(
    "--output", "-o", required=True, type=click.Path(dir_okay=False), help="Trace (.npz or .jsonl)."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--max-memory-gb",
    type=float,
    default=DEFAULT_MAX_MEMORY_GB,
    show_default=True,
    help="Refuse a trace whose generation is estimated to need more memory.",
)
@handle_errors
def generate_command(
    stats: str, sequences: int, tokens: int, output: str, seed: int, max_memory_gb: float
) -> None:
    """Synthetic trace from fitted statistics (fit → generate → fit round-trips)."""
    from moesim.simulator.routing.stats_file import load_routing_stats
    from moesim.simulator.routing.synthetic import generate_trace
    from moesim.simulator.routing.trace import save_trace

    check_output_path("--output", output)
    model = load_routing_stats(stats, field="--stats")
    trace = generate_trace(model, sequences, tokens, seed, max_memory_gb=max_memory_gb)
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
@click.option(
    "--max-tokens", type=int, default=256, show_default=True, help="Truncate each prompt to this many tokens."
)
@click.option(
    "--generate", "new_tokens", type=int, default=0, show_default=True, help="Also record N generated tokens."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for randomly initialised weights.")
@handle_errors
def record_command(
    hf_model: str, prompts: str, output: str, max_tokens: int, new_tokens: int, seed: int
) -> None:
    """Record a routing trace from a transformers MoE model with forward hooks on its routers (needs torch)."""
    from moesim.calibrate.routing_record import record_trace
    from moesim.simulator.routing.trace import save_trace

    check_output_path("--output", output)
    lines = [line.strip() for line in Path(prompts).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise MoesimError("--prompts", f"{prompts} has no prompts", "one prompt per line")
    trace = record_trace(hf_model, lines, max_tokens=max_tokens, new_tokens=new_tokens, seed=seed)
    save_trace(trace, output)
    click.echo(
        f"recorded {trace.n_tokens} tokens of {len(lines)} prompts, {trace.n_layers} MoE layers, "
        f"{trace.n_experts} experts top-{trace.top_k} → {output}"
    )

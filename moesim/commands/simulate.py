"""`moesim simulate`, `moesim sweep` and `moesim layer`: the core simulator from the command line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from moesim.commands.common import (
    check_outputs,
    emit_json,
    handle_errors,
    make_console,
    model_options,
    override_options,
    resolve_model,
    with_override_flags,
)
from moesim.commands.fields import WHOLE_NUMBER, field_options, fields_of, hardware_option
from moesim.commands.parallel_options import layout_from_kwargs, parallel_options
from moesim.errors import MoesimError
from moesim.simulator.scenario import Scenario, SweepGrid

F = TypeVar("F", bound=Callable[..., Any])

CATEGORY_LABELS = {
    "attention": "attention (maths, rotary, norms)",
    "kv_cache": "KV cache reads",
    "dense_weights": "dense weights (attention proj., dense FFN)",
    "routed_experts": "routed experts",
    "shared_experts": "shared experts (exposed)",
    "lm_head": "LM head",
    "communication": "communication",
    "other": "other (norms, router, top-k, sampling)",
    "launch_idle": "launch / idle",
    "padding": "padding to the captured graph size",
    "engine_host": "serving-engine host work (not hidden)",
    "sd_bookkeeping": "SD host bookkeeping (not hidden)",
    "sampler": "engine sampler and acceptance passes",
    "sd_round_ops": "SD round ops outside graphs, syncs (not hidden)",
    "attention_metadata": "tree attention metadata: plans, syncs (not hidden)",
}


STEP_FIELDS = (
    "context_len",
    "launch",
    "max_memory_gb",
    "kernel_style",
    "serving_engine",
    "routing",
    "overlap",
    "baseline_overlap",
)
"""The Scenario fields of one step that simulate, sweep and serve offer as flags."""
SD_FIELDS = ("drafter", "acceptance", "acceptance_length", "temperature", "sampling_top_k", "sampling_top_p")
"""The Scenario fields of speculative decoding and of the requests' sampling."""

step_options = field_options(Scenario, *STEP_FIELDS)
sd_options = field_options(Scenario, *SD_FIELDS)


def scenario_from_flags(spec: Any, hardware: Any, flags: dict[str, Any], **fields: Any) -> Any:
    """The Scenario the flags in `flags` describe, for `spec` on `hardware`, with `fields` (batch, draft
    length, layout) as the command gives them: one place for every command. A field the command does not
    offer keeps the Scenario's default."""
    return Scenario(spec, **(fields_of(Scenario, flags) | fields | {"hardware": hardware}))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _distinct(step: dict[str, Any]) -> str:
    mean = step["distinct_experts_per_layer"]
    dist = step.get("distinct_experts_distribution")
    if not mean:
        return "- (dense)"
    if dist:
        return f"{mean:.1f} (p10–p90 {dist['p10']:.0f}–{dist['p90']:.0f})"
    return f"{mean:.1f}"


@click.command("simulate")
@model_options
@hardware_option
@field_options(Scenario, "batch", "draft_len")
@step_options
@sd_options
@parallel_options
@click.option("--timeline", is_flag=True, help="Include every kernel's start and end in the JSON.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@handle_errors
def simulate_command(
    model_name: str | None,
    model_config: str | None,
    hardware: str,
    timeline: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    """Simulate a decode step and a verification step of K draft tokens, and the SD speedup they imply.

    Example: moesim simulate --model qwen3-30b-a3b --hardware h200 --batch 1 --draft-len 3
    """
    from moesim.simulator.hardware.profile import load_profile
    from moesim.simulator.simulate import simulate
    from moesim.validation.runs.nearby import engine_of, nearby_error

    request = layout_from_kwargs(flags)
    spec = resolve_model(model_name, model_config, flags)
    profile = load_profile(hardware)
    result = simulate(scenario_from_flags(spec, profile, flags, layout=request))
    data = result.to_json(timeline)
    nearby = nearby_error(engine_of(flags["serving_engine"]), flags["batch"], spec.n_experts, spec.is_moe)
    data["measured_runs_error"] = nearby.to_json()
    if as_json:
        emit_json(data)
        return
    _print_point(data, spec, profile, flags, chosen=request.fixed() is None, nearby=nearby)


def _print_point(
    data: dict[str, Any], spec: Any, profile: Any, flags: dict[str, Any], *, chosen: bool, nearby: Any
) -> None:
    """The tables and lines `moesim simulate` prints for one SD point."""
    batch, draft_len = flags["batch"], flags["draft_len"]
    kernel_style, context_len = flags["kernel_style"], flags["context_len"]
    console = make_console()
    a = data["assumptions"]
    acceptance_text = (
        f"acceptance length {a['acceptance_length']:g}"
        if a["acceptance_length"]
        else f"acceptance α = {a['acceptance']:g}"
    )
    console.print(
        f"[bold]{spec.name}[/bold] on [bold]{profile.name}[/bold] ({profile.provenance.kind} profile): "
        f"batch {batch}, draft length {draft_len}, context {context_len}"
    )
    console.print(
        f"kernel style {kernel_style}, {a['launch']} launch, serving engine {a['serving_engine']} "
        f"({a['serving_engine_provenance']}), {a['routing']}, drafter {a['drafter']}, {acceptance_text}"
        + ("" if a["sampling"] == "greedy" else f", requests {a['sampling']}")
    )
    if a.get("compute_rule"):
        console.print(f"note: {a['compute_rule']}")
    _print_layout(console, data["parallel"], chosen, a["device"])
    table = Table(title="where the time goes (ms)")
    table.add_column("category")
    table.add_column(f"decode (M={batch})", justify="right")
    table.add_column(
        f"verify (M={data['serving_engine']['verify']['rows'] * data['serving_engine']['verify']['tokens_per_row']})",
        justify="right",
    )
    decode, verify = data["decode"], data["verify"]
    for key, label in CATEGORY_LABELS.items():
        d, v = decode["breakdown_s"].get(key, 0.0), verify["breakdown_s"].get(key, 0.0)
        if d or v:
            table.add_row(label, _ms(d), _ms(v))
    table.add_row(
        "[bold]step[/bold]", f"[bold]{_ms(decode['step_s'])}[/bold]", f"[bold]{_ms(verify['step_s'])}[/bold]"
    )
    table.add_row("distinct experts / MoE layer", _distinct(decode), _distinct(verify))
    table.add_row(
        "KV cache reads per sequence and layer",
        f"{decode['cache_reads_per_sequence']:g}",
        f"{verify['cache_reads_per_sequence']:g}",
    )
    table.add_row("kernels", str(decode["n_kernels"]), str(verify["n_kernels"]))
    console.print(table)
    console.print(
        f"verify / decode = {data['verify_over_decode']:.3f}; draft {_ms(data['draft_s'])} ms{_first_pass(data)}; "
        f"expected tokens per step = {data['tokens_per_step']:.3f}"
    )
    serving = data["serving_engine"]
    sync = f" + {_ms(serving['accept_sync_s'])}" if serving["accept_sync_s"] else ""
    for name in ("decode", "verify"):
        step = serving[name]
        if step["rows_run"] != step["rows"] or step["launch"] != a["launch"] or step["host_s"]:
            console.print(
                f"{serving['name']} {name}: {step['rows']} rows run as {step['rows_run']} ({step['launch']} launch), "
                f"host {step['host_s'] * 1e6:.1f} µs of which {step['engine_host_s'] * 1e6:.1f} µs not hidden"
            )
    drafter, served = serving["drafter"], serving["sd_sequences"]
    if drafter["host_prepared_passes"] or (drafter["rows"] and drafter["rows"] != served):
        console.print(
            f"{serving['name']} drafter: {data['draft_len']} passes of {drafter['rows']} rows "
            f"({_draft_rows(drafter, served)}) at TP {drafter['tp']}, "
            f"{drafter['host_prepared_passes']} prepared on the host: host {serving['draft_host_s'] * 1e6:.1f} µs"
        )
    if serving["overlap_fraction"] != serving["sd_overlap_fraction"] or serving["verify"]["sd_host_s"]:
        console.print(
            f"{serving['name']} scheduler under SD: hides {serving['sd_overlap_fraction']:.0%} of host work "
            f"(decode steps: {serving['overlap_fraction']:.0%}); SD bookkeeping "
            f"{serving['verify']['sd_host_s'] * 1e6:.1f} µs for {served} sequences{_bookkeeping_parts(serving['verify'])}"
        )
    share = f" × {served} / {batch}" if served != batch else ""
    if share:
        console.print(
            f"{serving['name']} scheduler under SD: at most {serving['sd_max_running_requests']} running "
            f"requests, so the SD round runs {served} of the {batch} sequences a decode step runs"
        )
    console.print(
        f"[bold]speedup = {data['speedup']:.3f}×[/bold]  "
        f"(= {data['tokens_per_step']:.3f} × {_ms(decode['step_s'])} ms ÷ ({_ms(data['draft_s'])} + {_ms(verify['step_s'])}{sync}) ms{share})"
    )
    console.print(nearby.text)


def _bookkeeping_parts(verify: dict[str, Any]) -> str:
    """Of an SD round's bookkeeping, batch expansion's copies and the output processing, where priced."""
    parts = [
        f"{label} {verify[key] * 1e6:.1f} µs"
        for key, label in (("sd_expansion_s", "batch-expansion copies"), ("sd_output_s", "output processing"))
        if verify.get(key)
    ]
    return f" (of it {', '.join(parts)})" if parts else ""


def _draft_rows(drafter: dict[str, Any], served: int) -> str:
    """What a drafter pass's rows are: the sequences (× a tree's candidates) and the bonus positions re-run."""
    candidates = drafter.get("candidates_per_sequence", 1)
    rerun = drafter["rows"] // candidates - served
    text = f"{served} sequences" + (f" × {candidates} tree candidates" if candidates > 1 else "")
    return text + (f" + {rerun} re-run before their bonus tokens" if rerun else "")


def _first_pass(data: dict[str, Any]) -> str:
    """The drafter's first pass (over the positions just verified), when it runs one."""
    first = data.get("draft_first_pass_s", 0.0)
    return f" (of which {_ms(first)} ms its first pass, over the verified tokens)" if first else ""


def _print_layout(console: Console, parallel: dict[str, Any], chosen: bool, device: str) -> None:
    """The layout simulated (and why), its memory on the busiest GPU, and the collectives' share."""
    layout, memory = parallel["layout"], parallel["memory"]
    how = "the smallest layout whose memory fits (set --gpus/--tp/--ep to choose)" if chosen else "as asked"
    console.print(f"layout: {layout['description']} — {how}")
    console.print(
        f"memory on the busiest {device}: {memory['per_rank_bytes'] / 1e9:.1f} of {memory['capacity_bytes'] / 1e9:.1f} GB "
        f"(weights {memory['weights_bytes'] / 1e9:.1f}, KV cache {memory['kv_cache_bytes'] / 1e9:.2f}, "
        f"drafter {memory['drafter_bytes'] / 1e9:.2f}, reserve {memory['reserve_bytes'] / 1e9:.1f})"
    )
    if "verify" in parallel:
        d, v = parallel["decode"], parallel["verify"]
        line = (
            f"collectives per step: decode {_ms(d['communication_per_step_s'])} ms, "
            f"verify {_ms(v['communication_per_step_s'])} ms"
        )
        if "max_distinct_experts_per_rank" in v:
            line += (
                f"; distinct experts on the slowest rank (verify) {v['max_distinct_experts_per_rank']:.1f} "
                f"vs mean {v['mean_distinct_experts_per_rank']:.1f}"
            )
        console.print(line)


@click.command("sweep")
@field_options(SweepGrid, "models", "model_configs")
@override_options
@hardware_option
@field_options(SweepGrid, "batches", "draft_lens")
@step_options
@sd_options
@parallel_options
@click.option(
    "--csv", "csv_path", type=click.Path(dir_okay=False), default=None, help="Write the rows as CSV."
)
@click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Write a plot (png, pdf, svg)."
)
@field_options(SweepGrid, "max_configs")
@click.option("--json", "as_json", is_flag=True, help="Print JSON {rows, peaks, skipped, assumptions}.")
@field_options(SweepGrid, "workers")
@handle_errors
def sweep_command(
    hardware: str, csv_path: str | None, plot_path: str | None, as_json: bool, **flags: Any
) -> None:
    """SD speedup over models × batch sizes × draft lengths (closed-form fast path), with peaks and a plot.

    Without --gpus/--tp/--ep each (model, batch) runs on the smallest layout whose memory fits (rows say which).

    Example: moesim sweep --model qwen3-30b-a3b,olmoe-1b-7b --hardware h200 --plot speedup.png
    """
    from moesim.commands.progress import progress
    from moesim.simulator.bounds import check_configs
    from moesim.simulator.hardware.profile import load_profile
    from moesim.simulator.models.catalogue import load_model
    from moesim.simulator.simulate import model_list
    from moesim.simulator.speculative.plots import plot_sweep
    from moesim.simulator.speculative.sweep import run_sweep
    from moesim.validation.runs.nearby import engine_of, nearby_errors

    to_stdout = check_outputs(csv=csv_path, plot=plot_path, as_json=as_json)
    request = layout_from_kwargs(flags)
    grid = SweepGrid(**fields_of(SweepGrid, flags))
    batch_list, k_list, max_configs = list(grid.batches), list(grid.draft_lens), grid.max_configs
    names = model_list(grid.chosen_models) + model_list(grid.model_configs)
    if not names:
        raise MoesimError("--model", "needs at least one model name (or all), or --model-config PATH")
    specs = [with_override_flags(load_model(str(name)), flags) for name in names]
    profile = load_profile(hardware)
    base = scenario_from_flags(specs[0], profile, flags, layout=request)
    total = len(specs) * len(batch_list) * len(k_list)
    check_configs(total, max_configs)
    with progress("sweep", total) as advance:
        result = run_sweep(
            base, specs, batch_list, k_list, progress=advance, max_configs=max_configs, workers=grid.workers
        )
    if csv_path:
        result.write_csv(csv_path)
    if plot_path and result.rows:
        plot_sweep(result, plot_path)
    nearby = nearby_errors(
        engine_of(flags["serving_engine"]),
        ((b, s.n_experts, s.is_moe) for s in specs for b in batch_list),
    )
    if as_json:
        emit_json({**result.to_json(), "measured_runs_error": [n.to_json() for n in nearby]})
        return
    if to_stdout:
        return  # standard output carries the CSV or the plot
    _print_sweep(result, specs, profile, flags, grid, nearby)
    for path in (csv_path, plot_path if result.rows else None):
        if path:
            make_console().print(f"wrote {path}")


def _print_sweep(
    result: Any, specs: list[Any], profile: Any, flags: dict[str, Any], grid: SweepGrid, nearby: Any
) -> None:
    """The tables `moesim sweep` prints: speedup per batch and draft length for each model, and the peaks."""
    batch_list, k_list = list(grid.batches), list(grid.draft_lens)
    kernel_style, context_len = flags["kernel_style"], flags["context_len"]
    console = make_console()
    a = result.assumptions
    console.print(
        f"[bold]{profile.name}[/bold] ({profile.provenance.kind} profile); drafter {a['drafter']}; "
        + (
            f"acceptance length {a['acceptance_length']:g}"
            if a["acceptance_length"]
            else f"α = {a['acceptance']:g}"
        )
        + f"; kernel style {kernel_style}, {a['launch']} launch, context {context_len}"
        + f"; serving engine {a['serving_engine']} ({a['serving_engine_provenance']})"
        + ("" if a["sampling"] == "greedy" else f"; requests {a['sampling']}")
    )
    capped = a.get("acceptance_length_capped_at")
    if capped:
        console.print(
            f"acceptance length {a['acceptance_length']:g} is above K + 1 at K = {', '.join(map(str, capped))}: "
            "a round there yields K + 1 tokens (every draft accepted)"
        )
    for spec in specs:
        rows = [r for r in result.rows if r.model == spec.name]
        if not rows:
            continue
        console.print(
            f"\n[bold]{spec.name}[/bold] routing: {a['routing_by_model'].get(spec.name, a['routing'])}"
        )
        table = Table(title=f"{spec.name}: speedup (best K per batch in bold)")
        table.add_column("batch", justify="right")
        for k in k_list:
            table.add_column(f"K={k}", justify="right")
        for b in batch_list:
            cells = {r.draft_len: r.speedup for r in rows if r.batch == b}
            if not cells:
                continue
            best = max(cells.values())
            table.add_row(
                str(b),
                *[
                    (f"[bold]{cells[k]:.2f}[/bold]" if cells[k] == best else f"{cells[k]:.2f}")
                    for k in k_list
                ],
            )
        console.print(table)
        for layout in dict.fromkeys(r.layout for r in rows):
            sizes = sorted({r.batch for r in rows if r.layout == layout})
            console.print(f"  layout {layout}: batch {', '.join(map(str, sizes))}")
    if result.peaks:
        peaks = Table(title="peak batch per model and draft length")
        for column in ("model", "K", "peak batch", "peak speedup"):
            peaks.add_column(column, justify="left" if column == "model" else "right")
        for p in result.peaks:
            peaks.add_row(p.model, str(p.draft_len), str(p.peak_batch), f"{p.peak_speedup:.2f}")
        console.print(peaks)
    for skip in result.skipped:
        which = "all batch sizes" if skip["all_batches"] else "batch " + ",".join(map(str, skip["batches"]))
        console.print(f"[yellow]skipped[/yellow] {skip['model']} ({which}): {skip['reason']}")
    for line in nearby:
        console.print(line.text)


@click.command("layer")
@model_options
@hardware_option
@click.option("--tokens", type=WHOLE_NUMBER, required=True, help="Tokens M entering the MoE layer.")
@click.option(
    "--distinct-experts", type=WHOLE_NUMBER, required=True, help="Distinct experts U the forced routing hits."
)
@field_options(Scenario, "launch", "kernel_style")
@click.option("--json", "as_json", is_flag=True, help="Print JSON {time_s, ...}.")
@handle_errors
def layer_command(
    model_name: str | None,
    model_config: str | None,
    hardware: str,
    tokens: int,
    distinct_experts: int,
    launch: str | None,
    kernel_style: str,
    as_json: bool,
    **overrides: Any,
) -> None:
    """One MoE layer's expert block (router to combine) with routing forced to hit exactly U experts.

    This is what `moesim calibrate` measures on real hardware. Example:
    moesim layer --model qwen3-30b-a3b --hardware h200 --tokens 4 --distinct-experts 24
    """
    from moesim.simulator.hardware.profile import load_profile
    from moesim.simulator.simulate import simulate_expert_block

    spec = resolve_model(model_name, model_config, overrides)
    profile = load_profile(hardware)
    launch = Scenario(spec, profile, launch=launch).for_device(profile).launch or ""
    seconds = simulate_expert_block(spec, profile, tokens, distinct_experts, launch, kernel_style)
    data = {
        "model": spec.name,
        "hardware": profile.name,
        "tokens": tokens,
        "distinct_experts": distinct_experts,
        "launch": launch,
        "kernel_style": kernel_style,
        "time_s": seconds,
    }
    if as_json:
        emit_json(data)
        return
    click.echo(
        f"{spec.name} on {profile.name}: expert block for {tokens} token(s) hitting {distinct_experts} experts "
        f"({launch} launch, {kernel_style} kernels): {seconds * 1e6:.1f} µs"
    )


__all__ = ["layer_command", "simulate_command", "sweep_command"]

"""`moesim screen`: rank a space of hypothetical MoE designs for speculative decoding, with a Pareto front."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from moesim.commands.common import (
    check_outputs,
    emit_json,
    handle_errors,
    make_console,
    resolve_model,
)
from moesim.commands.fields import field_options, fields_of, hardware_option
from moesim.commands.parallel_options import layout_from_kwargs, parallel_options
from moesim.commands.progress import progress
from moesim.commands.simulate import scenario_from_flags, sd_options, step_options
from moesim.simulator.models.overrides import OVERRIDE_OPTIONS
from moesim.simulator.screening.constraints import CONSTRAINT_KINDS
from moesim.simulator.screening.request import ScreenRequest


def design_axis_options(func: Any) -> Any:
    """One flag per override field, each taking values: a list 64,128 or a range 256..2048[:step]."""
    for flag, field, _, help_text in reversed(OVERRIDE_OPTIONS):
        func = click.option(
            flag,
            f"axis_{field}",
            default=None,
            help=f"{help_text}: values (64,128) or a range (256..2048[:step])",
        )(func)
    return func


@click.command("screen")
@click.option(
    "--model", "model_name", default=None, help="Base model: a catalogue name (see `moesim models`)."
)
@click.option(
    "--model-config",
    default=None,
    type=click.Path(),
    help="Base model from a config file (or a folder holding config.json).",
)
@design_axis_options
@field_options(ScreenRequest, "designs_csv", "sample", "seed", "max_minutes")
@click.option(
    "--constraint",
    "constraint_kinds",
    multiple=True,
    type=click.Choice(CONSTRAINT_KINDS),
    help="Keep designs comparable: active-params or total-params equal to the base model's, or fits (memory fits the layout at every batch). Repeatable.",
)
@field_options(ScreenRequest, "free_field", "free_multiple", "tolerance")
@hardware_option
@field_options(ScreenRequest, "batches", "draft_lens")
@step_options
@sd_options
@parallel_options
@field_options(ScreenRequest, "objective", "top", "backend", "workers", "address")
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every design's row to CSV.",
)
@click.option(
    "--parquet",
    "parquet_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every design's row to Parquet (needs pyarrow).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Plot the Pareto front (.png, .pdf or .svg).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON {designs, ranking, pareto_front, dropped, ...}."
)
@handle_errors
def screen_command(**options: Any) -> None:
    """Screen hypothetical designs around a base model: SD speedup and tokens/s per batch, ranking, Pareto front.

    Example: moesim screen --model qwen3-30b-a3b --experts 64..512 --top-k 4,8 --constraint active-params
    --free expert-width --free-multiple 64 --plot front.png
    """
    from moesim.simulator.screening.screen import screen
    from moesim.validation.runs.nearby import engine_of, nearby_errors

    to_stdout = check_outputs(  # bad outputs refused before any work
        csv=options["csv_path"],
        parquet=options["parquet_path"],
        plot=options["plot_path"],
        as_json=options["as_json"],
    )
    base, designs, request, settings = _scenario(options)
    with progress(f"screen ({request.backend})", len(designs)) as advance:
        result = screen(
            base,
            designs,
            settings,
            request.constraints(),
            objective=request.objective,
            backend=request.backend,
            workers=request.workers,
            address=request.address,
            progress=advance,
        )
    if options["csv_path"]:
        result.write_csv(options["csv_path"])
    if options["parquet_path"]:
        result.write_parquet(options["parquet_path"])
    if options["plot_path"] and result.results:
        from moesim.simulator.screening.plots import plot_front

        plot_front(result, options["plot_path"])
    nearby = nearby_errors(
        engine_of(options["serving_engine"]),
        (
            (b, n, n > 0)
            for r in result.results
            for n in [int({**r.overrides, **r.solved}.get("n_experts", base.n_experts) or 0)]
            for b in settings.batches
        ),
    )
    if options["as_json"]:
        emit_json({**result.to_json(), "measured_runs_error": [n.to_json() for n in nearby]})
        return
    if not to_stdout:  # standard output carries the CSV, the table or the plot
        _print(result, request.top)
        console = make_console()
        for line in nearby:
            console.print(line.text)


def _scenario(options: dict[str, Any]) -> tuple[Any, list[Any], ScreenRequest, Any]:
    """Flags → base model, designs, the request and the settings (the library owns every default and rule)."""
    from moesim.simulator.screening.evaluate import ScreenSettings
    from moesim.simulator.screening.space import parse_values

    base = resolve_model(options["model_name"], options["model_config"], {})  # the axes are the overrides
    axes = {
        field: parse_values(field, options[f"axis_{field}"])
        for _, field, _, _ in OVERRIDE_OPTIONS
        if options.get(f"axis_{field}") is not None
    }
    request = ScreenRequest(**fields_of(ScreenRequest, options), constraint_kinds=options["constraint_kinds"])
    designs = request.designs(axes)
    request.constraints()  # refuse a bad combination before any work
    settings = ScreenSettings(
        scenario_from_flags(base, options["hardware"], options, layout=layout_from_kwargs(options)),
        batches=request.grid_batches,
        draft_lens=request.grid_draft_lens,
        max_minutes=request.max_minutes,
    )
    if options["parquet_path"]:
        from moesim.simulator.screening.screen import parquet_modules

        parquet_modules()
    return base, designs, request, settings


def _print(result: Any, top: int) -> None:
    console = make_console()
    settings = result.settings
    console.print(
        f"[bold]{result.base}[/bold] designs on {settings.hardware.name} ({settings.hardware.provenance.kind} "
        f"profile): {len(result.results)} evaluated, {len(result.dropped)} dropped; "
        f"best draft length of K ∈ {{{', '.join(map(str, settings.draft_lens))}}} per batch"
    )
    for statement in result.constraints:
        console.print(f"  constraint: {statement}")
    a = result.assumptions
    console.print(
        f"  routing: {a['routing']}; drafter {a['drafter']}; serving engine {a['serving_engine']} "
        f"({a['serving_engine_provenance']})"
    )
    by_index = result.by_index()
    small, large = min(settings.batches), max(settings.batches)

    def table(title: str, indices: list[int]) -> Table:
        t = Table(title=title)
        t.add_column("#", justify="right")
        t.add_column("design")
        t.add_column("solved")
        t.add_column("active B", justify="right")
        t.add_column("total B", justify="right")
        for b in settings.batches:
            t.add_column(f"B={b}", justify="right")
        t.add_column(f"tok/s B={large}", justify="right")
        t.add_column("peak B", justify="right")
        for index in indices:
            r = by_index[index]
            cells = []
            for b in settings.batches:
                m = r.at(b)
                cells.append(f"{m.speedup:.2f} ({m.best_draft_len})" if m else "—")
            m_large = r.at(large)
            peak = r.peak
            t.add_row(
                str(index),
                r.label,
                " ".join(f"{k}={v}" for k, v in r.solved.items()),
                f"{r.active_params / 1e9:.2f}",
                f"{r.total_params / 1e9:.1f}",
                *cells,
                f"{m_large.tokens_per_s:,.0f}" if m_large else "—",
                str(peak[0]) if peak else "—",
            )
        return t

    console.print("  B=b: SD speedup at batch b (best K); tok/s: tokens/s with SD at the best K")
    console.print(
        table(f"ranking by {result.objective} (top {min(top, len(result.ranking))})", result.ranking[:top])
    )
    console.print(
        table(
            f"Pareto front: SD speedup at batch {small} vs tokens/s at batch {large} "
            f"({len(result.front)} design{'s' if len(result.front) != 1 else ''})",
            result.front,
        )
    )
    for entry in result.dropped[:top]:
        console.print(f"  dropped #{entry['design']} {entry['label']}: {entry['reason']}")
    if len(result.dropped) > top:
        console.print(f"  … and {len(result.dropped) - top} more dropped (see --json)")

"""`moesim screen`: rank a space of hypothetical MoE designs for speculative decoding, with a Pareto front."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from moesim.commands.common import (
    check_outputs,
    emit_json,
    handle_errors,
    hardware_option,
    make_console,
    parse_int_list,
    resolve_model,
)
from moesim.commands.parallel_options import layout_from_kwargs, parallel_options
from moesim.commands.progress import progress
from moesim.commands.simulate import scenario_from_flags, sd_options, step_options
from moesim.errors import MoesimError
from moesim.simulator.bounds import DEFAULT_MAX_MINUTES
from moesim.simulator.models.overrides import OVERRIDE_OPTIONS
from moesim.simulator.screening.backends import BACKENDS
from moesim.simulator.screening.constraints import CONSTRAINT_KINDS, DEFAULT_TOLERANCE

DEFAULT_TOP = 10


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
    "--model-config", default=None, type=click.Path(dir_okay=False), help="Base model from a config file."
)
@design_axis_options
@click.option(
    "--designs",
    "designs_csv",
    type=click.Path(dir_okay=False),
    default=None,
    help="A CSV of designs: one override field per column, one design per row.",
)
@click.option(
    "--sample", type=int, default=None, help="Evaluate N designs drawn (seeded) from the grid instead of all."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --sample.")
@click.option(
    "--max-minutes",
    type=float,
    default=DEFAULT_MAX_MINUTES,
    show_default=True,
    help="Refuse a screen estimated to take longer (minutes on two cores).",
)
@click.option(
    "--constraint",
    "constraint_kinds",
    multiple=True,
    type=click.Choice(CONSTRAINT_KINDS),
    help="Keep designs comparable: active-params or total-params equal to the base model's, or fits (memory fits the layout at every batch). Repeatable.",
)
@click.option(
    "--free",
    "free_field",
    default=None,
    help="The field solved to meet the (first) parameter constraint, e.g. expert-width; without it designs off the target are dropped.",
)
@click.option(
    "--free-multiple",
    type=int,
    default=1,
    show_default=True,
    help="The solved value is a multiple of this (e.g. 64).",
)
@click.option(
    "--tolerance",
    type=float,
    default=DEFAULT_TOLERANCE,
    show_default=True,
    help="Relative distance from the target parameter count accepted.",
)
@hardware_option
@click.option("--batch", "batches", default="1,4,16,64", show_default=True, help="Batch sizes.")
@click.option(
    "--draft-len",
    "draft_lens",
    default="1,2,3,4",
    show_default=True,
    help="Draft lengths K (the best per batch is reported).",
)
@step_options
@sd_options
@parallel_options
@click.option(
    "--objective",
    default=None,
    help="Ranking objective: speedup@B, tokens@B or peak-speedup [default: speedup at the smallest batch].",
)
@click.option(
    "--top", type=int, default=DEFAULT_TOP, show_default=True, help="Designs shown in the ranking table."
)
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="local",
    show_default=True,
    help="local: a process pool; ray: Ray tasks (pip install 'moesim[ray]').",
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Local processes (default: the CPUs available; 1 runs in this process).",
)
@click.option(
    "--address", default=None, help="Ray cluster address (with --backend ray; default: a local Ray)."
)
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
    base, designs, constraints, settings = _scenario(options)
    with progress(f"screen ({options['backend']})", len(designs)) as advance:
        result = screen(
            base,
            designs,
            settings,
            constraints,
            objective=options["objective"],
            backend=options["backend"],
            workers=options["workers"],
            address=options["address"],
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
        _print(result, options["top"])
        console = make_console()
        for line in nearby:
            console.print(line.text)


def _scenario(options: dict[str, Any]) -> tuple[Any, list[Any], list[Any], Any]:
    """Flags → base model, designs, constraints and settings (the library owns every default)."""
    from moesim.simulator.screening.constraints import Constraint
    from moesim.simulator.screening.evaluate import ScreenSettings
    from moesim.simulator.screening.space import grid, parse_values, read_designs, sample

    base = resolve_model(options["model_name"], options["model_config"], {})  # the axes are the overrides
    axes = {
        field: parse_values(field, options[f"axis_{field}"])
        for _, field, _, _ in OVERRIDE_OPTIONS
        if options.get(f"axis_{field}") is not None
    }
    if options["designs_csv"]:
        if axes or options["sample"]:
            raise MoesimError("--designs", "a CSV of designs replaces the field flags and --sample")
        designs = read_designs(options["designs_csv"])
    elif options["sample"] is not None:
        designs = sample(axes, options["sample"], options["seed"])
    else:
        designs = grid(axes)
    kinds = list(dict.fromkeys(options["constraint_kinds"]))
    free = options["free_field"]
    parameter_kinds = [kind for kind in kinds if kind != "fits"]
    if free and not parameter_kinds:
        raise MoesimError(
            "--free", "solves a parameter constraint", "add --constraint active-params or total-params"
        )
    constraints = [
        Constraint(
            kind,
            free_field=free if parameter_kinds and kind == parameter_kinds[0] else None,
            multiple=options["free_multiple"],
            tolerance=options["tolerance"],
        )
        for kind in kinds
    ]
    if options["address"] and options["backend"] != "ray":
        raise MoesimError("--address", "is for --backend ray")
    settings = ScreenSettings(
        scenario_from_flags(base, options["hardware"], options, layout=layout_from_kwargs(options)),
        batches=tuple(sorted(set(parse_int_list("--batch", options["batches"])))),
        draft_lens=tuple(sorted(set(parse_int_list("--draft-len", options["draft_lens"])))),
        max_minutes=options["max_minutes"],
    )
    if options["top"] < 1:
        raise MoesimError("--top", f"must be ≥ 1, got {options['top']}")
    if options["parquet_path"]:
        from moesim.simulator.screening.screen import parquet_modules

        parquet_modules()
    return base, designs, constraints, settings


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

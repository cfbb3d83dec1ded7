"""Serving-engine commands: `moesim engines` (the profiles and their provenance), and the renderers of
`moesim validate runs` and `moesim calibrate --from-runs`."""

from __future__ import annotations

from typing import Any

import click

from moesim.commands.common import emit_json, handle_errors, make_console

# The [sampler] fields as `moesim engines` groups them: what every request pays, and what sampling adds.
SAMPLER_ROWS = (
    (
        "greedy",
        (
            "bytes_per_logit",
            "sd_bytes_per_logit",
            "draft_pass_bytes_per_logit",
            "draft_bytes_per_logit",
            "verify_bytes_per_logit",
        ),
    ),
    (
        "sampled, more",
        (
            "sampled_bytes_per_logit",
            "sampled_verify_bytes_per_logit",
            "sampled_draft_pass_bytes_per_logit",
            "sampled_round_bytes_per_logit",
            "filter_bytes_per_logit",
        ),
    ),
)


def _sampler_label(name: str) -> str:
    return "every" if name == "bytes_per_logit" else name.removesuffix("_bytes_per_logit")


def _shown(value: Any) -> str:
    return ("yes" if value else "no") if isinstance(value, bool) else f"{value}"


def engine_summary(name: str) -> dict[str, Any]:
    from moesim.simulator.engines.profile import HOST_PARAMETERS, load_serving_engine, profile_to_dict

    profile = load_serving_engine(name)
    data = profile_to_dict(profile)
    data["effective_host"] = {
        n: {"value": getattr(profile.effective_host, n), "unit": spec.unit, "meaning": spec.meaning}
        for n, spec in HOST_PARAMETERS.items()
    }
    return data


@click.command("engines")
@click.argument("names", nargs=-1)
@click.option(
    "--json", "as_json", is_flag=True, help="Print every profile (all fields and provenance) as JSON."
)
@handle_errors
def engines_command(names: tuple[str, ...], as_json: bool) -> None:
    """List the serving-engine profiles (`--serving-engine NAME|PATH`): host costs, captured CUDA-graph
    sizes, drafter style, and where each value comes from. Give NAMES (or .toml paths) to show only those."""
    from rich.markup import escape

    from moesim.simulator.engines.profile import list_serving_engines

    summaries = [engine_summary(n) for n in (names or list_serving_engines())]
    if as_json:
        emit_json({"serving_engines": summaries})
        return
    console = make_console()
    for s in summaries:
        g, d, p = s["graphs"], s["drafter"], s["provenance"]
        software = ", ".join(f"{k} {v}" for k, v in p["software"].items()) or "-"
        console.print(
            f"[bold]{s['name']}[/bold] ({p['kind']}; {escape(software)}): {escape(s['description'])}"
        )
        host = s["effective_host"]
        fitted = set(s.get("fitted", {}))
        console.print(
            "  host   "
            + ", ".join(f"{n} {v['value']:g}{'*' if n in fitted else ''}" for n, v in host.items())
        )
        sizes = g["sizes"]
        shown = "every size" if not sizes else f"{len(sizes)} sizes {sizes[0]}…{sizes[-1]}"
        ceiling = f", ≤ {g['max_tokens']} tokens" if g["max_tokens"] else ""
        console.print(
            f"  graphs {'on' if g['enabled'] else 'off'}: {shown} {g['capture_unit']}{ceiling}; "
            f"padding {g['padding']}; uncaptured → {g['uncaptured']}"
        )
        console.print("  drafter " + ", ".join(f"{k} {_shown(v)}" for k, v in d.items()))
        for label, names in SAMPLER_ROWS:
            console.print(
                f"  sampler {label} (B per row and vocabulary entry beyond the plan's read): "
                + ", ".join(f"{_sampler_label(n)} {s['sampler'][n]:g}" for n in names)
            )
        for source in s["sampler"]["sources"]:
            console.print(f"  sampler source: {escape(source)}")
        cap = s["scheduler"]["sd_max_running_requests"]
        console.print(f"  scheduler under SD: {f'at most {cap} running requests' if cap else 'no cap'}")
        for source in p["sources"]:
            console.print(f"  source: {escape(source)}")
        for note in p["assumptions"]:
            console.print(f"  [dim]assumes: {escape(note)}[/dim]")
        if fitted:
            console.print("  * fitted from measured runs (documented default kept in [host])")


def print_runs_validation(data: dict[str, Any]) -> None:
    from rich.table import Table

    console = make_console()
    validations = data["validations"]
    table = Table(title=f"speedup MAPE per source ({data['runs']}); signed mean error in brackets")
    table.add_column("source")
    for v in validations:
        table.add_column(v["serving_engine"], justify="right")
    for source in validations[0]["by_source"]:
        cells = []
        for v in validations:
            s = v["by_source"][source]
            cells.append(f"{s['speedup_mape']:.1%} ({s['speedup_mean_error']:+.0%})")
        table.add_row(f"{source} ({int(validations[0]['by_source'][source]['rows'])})", *cells)
    console.print(table)
    if "hardware" in data:
        used = sorted(set(data["hardware"].values()))
        console.print(f"hardware profiles (--silicon): {', '.join(used)}")
    rows = Table(title="per row: measured / predicted speedup and step ratio (first profile)")
    for column in ("run", "batch", "measured", "predicted", "ratio meas.", "ratio pred."):
        rows.add_column(column, justify="right")
    for r in validations[0]["rows"]:
        rows.add_row(
            r["run_id"],
            str(r["batch"]),
            f"{r['measured_speedup']:.3f}",
            f"{r['predicted_speedup']:.3f}",
            f"{r['measured_step_ratio']:.3f}",
            f"{r['predicted_step_ratio']:.3f}",
        )
    console.print(rows)
    for s in validations[0]["not_represented"]:
        console.print(f"  not represented: {s['run_id']} ({s['source']}): {s['reason']}")
    for note in validations[0]["notes"]:
        console.print(f"  [dim]{note}[/dim]")


def plot_runs_validation(data: dict[str, Any], path: str) -> None:
    """Predicted against measured speedup, one marker per profile, the diagonal for reference."""
    from moesim.figures import pyplot, save_figure

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(5.5, 5))
    top = 0.0
    for v in data["validations"]:
        measured = [r["measured_speedup"] for r in v["rows"]]
        predicted = [r["predicted_speedup"] for r in v["rows"]]
        top = max(top, *measured, *predicted)
        ax.scatter(measured, predicted, label=v["serving_engine"], s=18)
    ax.plot([0, top * 1.05], [0, top * 1.05], color="grey", linewidth=0.8)
    ax.set_xlabel("measured speedup")
    ax.set_ylabel("predicted speedup")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def _pct(value: float) -> str:
    return "n/a" if value != value else f"{value:.1%}"


def print_fit(data: dict[str, Any]) -> None:
    console = make_console()
    console.print(f"[bold]{data['serving_engine']}[/bold] fitted → {data['output']}")
    for name, change in data["fitted"].items():
        bound = {1.0: "upper", -1.0: "lower"}.get(change["at_bound"])
        note = f"  [yellow](stopped at its {bound} bound: the runs pull it further)[/yellow]" if bound else ""
        console.print(f"  {name:<16} {change['default']:10.3f} → {change['fitted']:10.3f}{note}")
    console.print(
        f"  speedup MAPE: fit {data['train_mape']:.1%}, leave-one-run-out {_pct(data['leave_one_run_out_mape'])}, "
        f"leave-one-source-out {_pct(data['leave_one_source_out_mape'])}"
    )
    for source, error in data["leave_one_source_out_by_source"].items():
        loro = data["leave_one_run_out_by_source"][source]
        console.print(f"    {source}: leave-one-run-out {_pct(loro)}, whole source held out {_pct(error)}")
    for note in data["fold_notes"]:
        console.print(f"  [dim]{note}[/dim]")
    for s in data["not_represented"]:
        console.print(f"  not represented: {s['run_id']}: {s['reason']}")

"""`moesim models` and `moesim profiles`: what is bundled, and deriving profiles for hardware you do not have."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from moesim.commands.common import emit_json, handle_errors, make_console, override_options, resolve_model
from moesim.errors import MoesimError


@click.command("models")
@click.argument("name", required=False)
@click.option(
    "--model-config",
    type=click.Path(),
    default=None,
    help="A Hugging Face config.json (or a catalogue-style .toml): show what moesim understood of it.",
)
@override_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@handle_errors
def models_command(name: str | None, model_config: str | None, as_json: bool, **overrides: Any) -> None:
    """List the bundled model catalogue, or show one model as moesim understood it.

    With NAME or --model-config: layer pattern, attention kind, experts, widths, weight format, total and
    active parameters, weight bytes, and for an imported config the assumptions made and keys not read.
    Override flags (--experts, --top-k, --weight-format, ...) show a hypothetical design's counts.

    Examples: moesim models --json; moesim models deepseek-v3 --weight-format fp8;
    moesim models --model-config config.json
    """
    if name is not None and model_config is not None:
        raise MoesimError("--model-config", "give a model NAME or --model-config PATH, not both")
    if name is None and model_config is None:
        if any(value is not None for value in overrides.values()):
            raise MoesimError("--model-config", "override flags need a model NAME or --model-config PATH")
        _catalogue(as_json)
        return
    from moesim.simulator.models.summary import model_summary

    summary = model_summary(resolve_model(name, model_config, overrides))
    if as_json:
        emit_json(summary)
    else:
        make_console().print(_summary_table(summary))


def _summary_table(summary: dict[str, Any]) -> Table:
    """One model's summary as a two-column table."""
    table = Table(title=f"{summary['name']} ({summary['family'] or 'custom'})", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    params, experts, widths = summary["params"], summary["experts"], summary["widths"]
    table.add_row("layers", f"{summary['layers']}: {summary['layer_pattern']['text']}")
    for kind, att in summary["attention"].items():
        details = ", ".join(f"{key} {value}" for key, value in att.items() if key != "kind")
        table.add_row(f"attention ({kind})", f"{att['kind']}: {details}")
    if "linear_attention" in summary:
        lin = summary["linear_attention"]
        table.add_row("attention (linear)", ", ".join(f"{key} {value}" for key, value in lin.items()))
    if experts["routed"]:
        groups = (
            f", {experts['groups']} groups (top {experts['topk_groups']})" if experts["groups"] > 1 else ""
        )
        table.add_row(
            "experts",
            f"{experts['routed']} routed, top-{experts['top_k']}, {experts['shared']} shared, "
            f"{experts['moe_layers']} MoE layers, {experts['router_score']} router{groups}",
        )
    table.add_row("widths", ", ".join(f"{key} {value}" for key, value in widths.items() if value))
    fmt = summary["weight_format"]
    table.add_row("weight format", f"{fmt['dense']} (experts {fmt['experts']})")
    mtp = f", MTP {params['mtp'] / 1e9:.2f}B" if params["mtp"] else ""
    table.add_row(
        "parameters", f"total {params['total'] / 1e9:.2f}B, active {params['active'] / 1e9:.2f}B{mtp}"
    )
    table.add_row("weight bytes", f"{summary['weight_bytes']['total'] / 1e9:.1f} GB")
    for text in summary["assumptions"]:
        table.add_row("assumption", text)
    if summary["ignored_keys"]:
        table.add_row("keys not read", ", ".join(summary["ignored_keys"]))
    return table


def _catalogue(as_json: bool) -> None:
    """The catalogue table: one row per bundled model with its computed parameter counts."""
    from moesim.simulator.models.catalogue import list_models, load_model
    from moesim.simulator.models.weights import param_counts, params_as_published

    rows: list[dict[str, Any]] = []
    for name in list_models():
        spec = load_model(name)
        counts = param_counts(spec)
        total, active = params_as_published(spec)
        rows.append(
            {
                "name": name,
                "layers": spec.n_layers,
                "hidden": spec.hidden,
                "experts": spec.n_experts,
                "top_k": spec.top_k,
                "shared_experts": spec.n_shared_experts,
                "expert_width": spec.expert_width,
                "weight_format": spec.expert_weight_format or spec.weight_format,
                "total_params": total,
                "active_params": active,
                "active_params_with_embeddings": counts.active,
                "published_total_params": spec.published_total_params,
                "published_active_params": spec.published_active_params,
            }
        )
    if as_json:
        emit_json({"models": rows})
        return
    table = Table(title="moesim model catalogue")
    for column in (
        "name",
        "layers",
        "experts",
        "top-k",
        "shared",
        "expert width",
        "format",
        "total",
        "active",
    ):
        table.add_column(column, justify="left" if column == "name" else "right")
    for row in rows:
        table.add_row(
            row["name"],
            str(row["layers"]),
            str(row["experts"] or "dense"),
            str(row["top_k"] or "-"),
            str(row["shared_experts"]),
            str(row["expert_width"] or "-"),
            str(row["weight_format"]),
            f"{row['total_params'] / 1e9:.1f}B",
            f"{row['active_params'] / 1e9:.2f}B",
        )
    make_console().print(table)


@click.group("profiles", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
@handle_errors
def profiles_group(ctx: click.Context, as_json: bool) -> None:
    """List bundled hardware profiles, or derive one for hardware you do not have.

    Example: moesim profiles --json
    """
    if ctx.invoked_subcommand is not None:
        return
    from moesim.simulator.hardware.profile import list_profiles, load_profile

    rows: list[dict[str, Any]] = []
    for name in list_profiles():
        profile = load_profile(name)
        sheet = profile.datasheet
        rows.append(
            {
                "name": name,
                "device": sheet.device_name,
                "memory_bandwidth_gbps": sheet.memory_bandwidth_gbps,
                "memory_capacity_bytes": sheet.memory_capacity_bytes,
                "last_level_cache_bytes": sheet.last_level_cache_bytes,
                "peak_dense_tflops": dict(sheet.peak_dense_tflops),
                "provenance": profile.provenance.kind,
                "source": profile.provenance.source,
            }
        )
    if as_json:
        emit_json({"profiles": rows})
        return
    table = Table(title="moesim hardware profiles")
    for column in (
        "name",
        "device",
        "memory GB/s",
        "memory GiB",
        "LLC MiB",
        "bf16 TFLOP/s",
        "provenance",
        "source",
    ):
        table.add_column(
            column, justify="left" if column in ("name", "device", "provenance", "source") else "right"
        )
    for row in rows:
        peaks = row["peak_dense_tflops"]
        table.add_row(
            row["name"],
            row["device"],
            f"{row['memory_bandwidth_gbps']:.0f}",
            f"{row['memory_capacity_bytes'] / 2**30:.0f}",
            f"{row['last_level_cache_bytes'] / 2**20:.0f}",
            f"{peaks.get('bf16', max(peaks.values())):.0f}",
            row["provenance"],
            row["source"],
        )
    make_console().print(table)


def _flagged(flag: str, load: Any, name: str) -> Any:
    """`load(name)`, its refusal of the name under `flag` (the loaders name the field `hardware`)."""
    try:
        return load(name)
    except MoesimError as error:
        if error.field != "hardware":
            raise
        raise MoesimError(flag, error.problem, error.fix) from None


@profiles_group.command("derive")
@click.option(
    "--from",
    "source",
    required=True,
    help="A measured profile (name or path) whose efficiencies to transfer.",
)
@click.option(
    "--to", "target", required=True, help="Target: a bundled profile name or a TOML file with a [datasheet]."
)
@click.option(
    "--name", default=None, help="Name of the derived profile (default: the target's name + '-derived')."
)
@click.option(
    "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the derived profile."
)
@handle_errors
def derive_command(source: str, target: str, name: str | None, output: str) -> None:
    """Derive a profile for hardware you do not have from one you measured.

    Example: moesim profiles derive --from cpu.toml --to h200 --output h200-from-cpu.toml
    """
    from pathlib import Path

    from moesim.atomic import check_output_path
    from moesim.simulator.hardware.derive import derive_profile, load_derive_target
    from moesim.simulator.hardware.profile import load_profile, save_profile

    check_output_path("--output", output, suffixes=(".toml",))
    measured = _flagged("--from", load_profile, source)
    target_profile = _flagged("--to", load_derive_target, target)
    target_name = name or f"{Path(target).stem}-derived"
    derived = derive_profile(measured, target_profile, target_name, node=target_profile.node)
    save_profile(derived, output)
    click.echo(f"wrote {output}: {target_name} derived from {measured.name}")
    for assumption in derived.provenance.assumptions:
        click.echo(f"  assumption: {assumption}")

"""What `moesim validate` prints: the rows of a step validation, a benchmark comparison, the runs' columns."""

from __future__ import annotations

from typing import Any

import click

from moesim.commands.common import emit_json, make_console


def print_runs_schema(as_json: bool) -> None:
    """The columns of a measured-runs CSV."""
    from moesim.validation.runs.schema import schema_rows

    columns = schema_rows()
    if as_json:
        emit_json({"columns": columns})
        return
    for c in columns:
        choices = f" ({'|'.join(c['choices'])})" if c["choices"] else ""
        need = "required" if c["required"] else "optional"
        click.echo(f"{c['column']:<22} {c['type']:<7} {need:<9} {c['meaning']}{choices}")


def print_bench(result: dict[str, Any]) -> None:
    from rich.table import Table

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


def print_rows(result: dict[str, Any]) -> None:
    from rich.table import Table

    from moesim.validation.reference.report import attribution_sentence, drift_sentence

    console = make_console()
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
    if drift_sentence(s):
        console.print(drift_sentence(s))
    console.print(f"worst: {w['model']} B={w['batch']} K={w['draft_len']} error {w['error']:+.1%}")
    if s.get("attribution"):
        console.print(attribution_sentence(s["attribution"]))
    for name, other in s.get("cross_device", {}).items():
        console.print(
            f"cross-device: the same rows predicted with {name}: MAPE {other['mape']:.1%}, p90 {other['p90_abs_error']:.1%}, bias {other['median_error']:+.1%}"
        )
    for note in result.get("notes", []):
        console.print(f"note: {note}")


__all__ = ["print_bench", "print_rows", "print_runs_schema"]

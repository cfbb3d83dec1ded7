"""Validation summaries, error attribution, the --measured CSV path, and the written report.

No torch here. A row is a dict with at least `measured_s` and `predicted_s` (and, from a torch run, the
predicted cost terms); errors are fractions: (predicted − measured) / measured.
"""

from __future__ import annotations

import csv
import io
import math
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moesim.atomic import atomic_write_text
from moesim.calibrate.fits.drift import PARTS
from moesim.errors import MoesimError
from moesim.reading import csv_rows, read_text
from moesim.simulator.bounds import check_count
from moesim.validation.reference.predict import TERMS

# --------------------------------------------------------------------------------------------- summary


def errors_of(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    """Signed relative errors (predicted − measured) / measured of rows."""
    return np.array([r["predicted_s"] / r["measured_s"] - 1.0 for r in rows], dtype=float)


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """MAPE, p90 absolute error, bias, worst row, noise floor and verify/decode ratio error."""
    if not rows:
        raise MoesimError("validation", "no rows to summarise", "measure at least one configuration")
    err = errors_of(rows)
    abs_err = np.abs(err)
    worst = int(np.argmax(abs_err))
    summary: dict[str, Any] = {
        "n": len(rows),
        "mape": float(np.mean(abs_err)),
        "p90_abs_error": float(np.quantile(abs_err, 0.9)),
        "median_error": float(np.median(err)),
        "worst": {
            key: rows[worst].get(key) for key in ("model", "batch", "draft_len", "measured_s", "predicted_s")
        }
        | {"error": float(err[worst])},
    }
    round_spreads = [r["round_spread"] for r in rows if r.get("round_spread") is not None]
    spreads = [r["spread"] for r in rows if r.get("spread") is not None]
    summary["noise_floor"] = float(np.mean(round_spreads)) if round_spreads else None
    summary["sample_spread"] = float(np.median(spreads)) if spreads else None
    ratio_err = [
        abs(r["predicted_ratio"] / r["measured_ratio"] - 1.0)
        for r in rows
        if r.get("draft_len", 0) > 0 and r.get("measured_ratio") and r.get("predicted_ratio")
    ]
    summary["ratio_mape"] = float(np.mean(ratio_err)) if ratio_err else None
    by_model: dict[str, list[float]] = {}
    for r, e in zip(rows, abs_err, strict=True):
        by_model.setdefault(str(r.get("model")), []).append(float(e))
    summary["mape_by_model"] = {model: float(np.mean(v)) for model, v in by_model.items()}
    if all(r.get("predicted_terms_s") for r in rows):
        summary["attribution"] = attribute_error(rows)
    probed = drift_summary(rows)
    if probed:
        summary["drift"] = probed
    return summary


def drift_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The drift probe beside the rows: its spread over the run ((max − min) / median of the rows' probe
    rates, per part), the machine's speed relative to the calibration (median and range of the rows'
    ratios), and the errors of the drift-corrected predictions beside the raw ones; None without probes."""
    probed = {
        key: [r[f"probe_{key}"] for r in rows if r.get(f"probe_{key}")]
        for key in ("memory_gbps", "compute_tflops", "dispatch_us", "stream_gemm_tflops")
    }
    if not probed["memory_gbps"] or not probed["compute_tflops"]:
        return None

    def moved(values: list[float]) -> float:
        return float((max(values) - min(values)) / np.median(values)) if values else 0.0

    out: dict[str, Any] = {
        "probe_spread": {key.rsplit("_", 1)[0]: moved(values) for key, values in probed.items()},
        "probe_median": {key: float(np.median(values)) for key, values in probed.items() if values},
    }
    corrected = [r for r in rows if r.get("drift_predicted_s") is not None]
    if len(corrected) != len(rows):
        return out | {"corrected": None}
    err = np.array([r["drift_predicted_s"] / r["measured_s"] - 1.0 for r in rows])

    def ranges(key: str) -> dict[str, dict[str, float]]:
        ratios = {part: [(r.get(key) or r["speed_ratio"])[part] for r in rows] for part in PARTS}
        return {
            part: {"median": float(np.median(v)), "min": float(min(v)), "max": float(max(v))}
            for part, v in ratios.items()
        }

    return out | {
        "measured_speed_ratio": ranges("measured_speed_ratio"),
        "speed_ratio": ranges("speed_ratio"),
        "rows_corrected": {part: sum(r["speed_ratio"][part] != 1.0 for r in rows) for part in PARTS},
        "corrected": {
            "mape": float(np.mean(np.abs(err))),
            "p90_abs_error": float(np.quantile(np.abs(err), 0.9)),
            "median_error": float(np.median(err)),
        },
    }


def drift_sentence(summary: dict[str, Any]) -> str | None:
    """One line: raw MAPE beside the drift-corrected one, and how far the machine's speed moved."""
    probed = summary.get("drift")
    if not probed:
        return None
    moved = probed["probe_spread"]
    text = "drift probe spread over the run: " + ", ".join(f"{part} {v:.1%}" for part, v in moved.items())
    if not probed.get("corrected"):
        return text + " (no calibration probe in the profile: no drift correction)"
    return (
        f"MAPE raw {summary['mape']:.1%}, drift-corrected {probed['corrected']['mape']:.1%} "
        f"(median signed error {summary['median_error']:+.1%} -> {probed['corrected']['median_error']:+.1%}); "
        + text
        + "; machine speed vs calibration (median, range; rows beyond the probes' scatter, corrected): "
        + ", ".join(
            f"{part} x{r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f}; {probed['rows_corrected'][part]})"
            for part, r in probed["measured_speed_ratio"].items()
        )
    )


def attribute_error(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Which cost term is off: rescale one predicted term at a time (the others kept) to fit the
    measurements best in relative terms; the term whose rescaling removes most of the error is named.

    Also a joint non-negative fit of all terms. Diagnostic only: these factors are never applied to
    predictions (that would be a fudge factor fitted on the validation grid).
    """
    from scipy.optimize import nnls

    measured = np.array([r["measured_s"] for r in rows], dtype=float)
    terms = np.array([[r["predicted_terms_s"].get(t, 0.0) for t in TERMS] for r in rows], dtype=float)
    predicted = terms.sum(axis=1)
    base_mape = float(np.mean(np.abs(predicted / measured - 1.0)))
    weighted = terms / measured[:, None]
    single: dict[str, dict[str, float]] = {}
    for j, name in enumerate(TERMS):
        share = weighted[:, j]
        if not np.any(share > 1e-12):
            continue
        rest = 1.0 - (weighted.sum(axis=1) - share)  # what term j must supply, in units of the measurement
        factor = float(max(0.0, np.dot(share, rest) / np.dot(share, share)))
        fitted = predicted + (factor - 1.0) * terms[:, j]
        single[name] = {
            "factor": factor,
            "mape_after": float(np.mean(np.abs(fitted / measured - 1.0))),
            "share_of_predicted": float(np.sum(terms[:, j]) / np.sum(predicted)),
        }
    joint, _ = nnls(weighted, np.ones(len(rows)))
    best = min(single, key=lambda n: single[n]["mape_after"]) if single else None
    return {
        "mape": base_mape,
        "single_term": single,
        "joint_factors": {name: float(joint[j]) for j, name in enumerate(TERMS)},
        "most_explaining_term": best,
    }


def attribution_sentence(attribution: dict[str, Any]) -> str:
    """One line naming the term whose rescaling explains most of the error."""
    best = attribution.get("most_explaining_term")
    if not best:
        return "no cost terms to attribute the error to"
    info = attribution["single_term"][best]
    return (
        f"the {best} term explains most of the error: scaling it by {info['factor']:.2f} "
        f"(it is {info['share_of_predicted']:.0%} of predicted time) would take MAPE from "
        f"{attribution['mape']:.1%} to {info['mape_after']:.1%}"
    )


# --------------------------------------------------------------------------------------------- CSV

CSV_COLUMNS = (
    "model",
    "shape",
    "device",
    "launch",
    "batch",
    "draft_len",
    "tokens_per_seq",
    "context_len",
    "distinct_experts",
    "n_kernels",
    "measured_s",
    "predicted_s",
    "error",
    "drift_predicted_s",
    "drift_error",
    "probe_memory_gbps",
    "probe_compute_tflops",
    "probe_dispatch_us",
    "probe_stream_gemm_tflops",
    "probe_memory_noise",
    "probe_compute_noise",
    "probe_dispatch_noise",
    "probe_stream_gemm_noise",
    "spread",
    "round_spread",
    "n_samples",
    "measured_ratio",
    "predicted_ratio",
)


def rows_to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as CSV: the scalar columns, then predicted breakdown and cost terms (seconds)."""
    breakdown_keys = sorted({k for r in rows for k in r.get("predicted_breakdown_s", {})})
    term_keys = [t for t in TERMS if any(t in r.get("predicted_terms_s", {}) for r in rows)]
    header = [*CSV_COLUMNS, *(f"pred_{k}_s" for k in breakdown_keys), *(f"term_{k}_s" for k in term_keys)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for r in rows:
        line = [_cell(r.get(c)) for c in CSV_COLUMNS]
        line += [_cell(r.get("predicted_breakdown_s", {}).get(k)) for k in breakdown_keys]
        line += [_cell(r.get("predicted_terms_s", {}).get(k)) for k in term_keys]
        writer.writerow(line)
    return out.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


MEASURED_REQUIRED = ("model", "batch", "draft_len", "measured_step_s")
MEASURED_OPTIONAL = ("context_len", "launch", "kernel_style", "spread")
OLD_KERNEL_STYLE_COLUMN = "engine"  # the kernel_style column's name before 0.2, read for one more release
MEASURED_SCHEMA = """\
--measured CSV schema (one row per measured configuration; lines starting with # are comments):
  model            catalogue name (e.g. qwen3-30b-a3b) or a model file path (TOML / HF config.json),
                   relative paths resolved against the CSV's folder
  batch            sequences per step, integer ≥ 1
  draft_len        draft tokens K verified per sequence (0 = plain decode step), integer ≥ 0
  measured_step_s  measured time of one step in seconds (> 0)
  context_len      optional, cached tokens per sequence (default: --context-len)
  launch           optional, eager or graph (default: --launch)
  kernel_style     optional, kernel style of the measured system (default: --kernel-style, e.g. fused;
                   a column named engine, its old name, is read as kernel_style)
  spread           optional, relative spread of the measurement (e.g. IQR / median)"""


def read_measured_csv(path: str | Path) -> list[dict[str, Any]]:
    """Parse a --measured CSV into dicts with typed fields; every problem names the line and column."""
    file = Path(path)
    text = read_text("--measured", file, "measurements CSV")
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise MoesimError(
            "--measured",
            f"{file}: no header or rows",
            f"the header needs {', '.join(MEASURED_REQUIRED)}; `moesim validate measured --schema` shows every column",
        )
    header, records = csv_rows(
        "--measured", lines, str(file), "measurements CSV"
    )  # duplicates, ragged refused
    missing = [c for c in MEASURED_REQUIRED if c not in header]
    if missing:
        raise MoesimError(
            "--measured",
            f"{file}: missing column(s) {', '.join(missing)}",
            f"the header needs {', '.join(MEASURED_REQUIRED)} (optional: {', '.join(MEASURED_OPTIONAL)})",
        )
    rows: list[dict[str, Any]] = []
    for number, raw in enumerate(records, start=2):
        item = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
        where = f"{file.name} row {number - 1}"
        row: dict[str, Any] = {"model": item["model"], "source_dir": str(file.parent)}
        if not row["model"]:
            raise MoesimError("--measured", f"{where}: empty model", "name a catalogue model or a model file")
        row["batch"] = _int_cell(item, "batch", where, minimum=1)
        row["draft_len"] = _int_cell(item, "draft_len", where, minimum=0)
        row["measured_s"] = _float_cell(item, "measured_step_s", where)
        if item.get("context_len"):
            row["context_len"] = _int_cell(item, "context_len", where, minimum=0)
        if item.get("launch"):
            if item["launch"] not in ("eager", "graph"):
                raise MoesimError("--measured", f"{where}: launch {item['launch']!r}", "use eager or graph")
            row["launch"] = item["launch"]
        style = item.get("kernel_style") or item.get(OLD_KERNEL_STYLE_COLUMN)
        if style:
            row["kernel_style"] = style
        if item.get("spread"):
            row["spread"] = _float_cell(item, "spread", where, positive=False)
        rows.append(row)
    if not rows:
        raise MoesimError(
            "--measured", f"{file}: a header but no rows", "add one row per measured configuration"
        )
    return rows


def _int_cell(item: dict[str, str], key: str, where: str, minimum: int) -> int:
    text = item.get(key, "")
    try:
        value = int(text)
    except ValueError:
        raise MoesimError("--measured", f"{where}: {key} must be an integer, got {text!r}") from None
    if value < minimum:
        raise MoesimError("--measured", f"{where}: {key} must be ≥ {minimum}, got {value}")
    return check_count(value, key, f"--measured: {where}", low=minimum, fix=f"give {key} as a whole number")


def _float_cell(item: dict[str, str], key: str, where: str, positive: bool = True) -> float:
    text = item.get(key, "")
    try:
        value = float(text)
    except ValueError:
        raise MoesimError("--measured", f"{where}: {key} must be a number, got {text!r}") from None
    if not math.isfinite(value) or (positive and value <= 0) or value < 0:
        raise MoesimError(
            "--measured",
            f"{where}: {key} must be a {'positive' if positive else 'non-negative'} number, got {text!r}",
        )
    return value


def measured_result(path: str, profile: str, options: Any, kernel_style: str) -> dict[str, Any]:
    """`moesim validate measured`: the CSV's rows predicted with `profile` under `options` (context, launch,
    routing of `ValidationOptions`), scored, with the meta a report names."""
    rows = predict_measured(
        read_measured_csv(path), profile, options.context_len, options.launch, kernel_style, options.routing
    )
    return {
        "rows": rows,
        "summary": summarise(rows),
        "meta": {
            "title": f"{path} vs profile {profile}",
            "profile": profile,
            "launch": options.launch,
            "kernel_style": kernel_style,
            "context_len": options.context_len,
        },
        "notes": [
            "measured elsewhere: the prediction samples the routing model, it does not replay the measured routing"
        ],
    }


def predict_measured(
    rows: list[dict[str, Any]],
    hardware_name: str,
    context_len: int,
    launch: str,
    kernel_style: str,
    routing_name: str,
) -> list[dict[str, Any]]:
    """Predict each --measured row with the simulator (its routing model, not a replay)."""
    from moesim.simulator.execution.cost import CostParams
    from moesim.simulator.hardware.profile import load_profile
    from moesim.simulator.models.catalogue import load_model
    from moesim.simulator.plan.styles import build_plan
    from moesim.validation.reference.configs import default_routing
    from moesim.validation.reference.predict import cost_terms, simulate_plan

    hardware = load_profile(hardware_name)
    params = CostParams.from_hardware(hardware)
    models: dict[str, Any] = {}
    out = []
    for row in rows:
        name = row["model"]
        if name not in models:
            candidate = Path(row["source_dir"]) / name
            models[name] = load_model(str(candidate) if candidate.is_file() else name)
        model = models[name]
        row_launch = row.get("launch", launch)
        row_context = row.get("context_len", context_len)
        row_style = row.get("kernel_style", kernel_style)
        plan = build_plan(
            model,
            row["batch"],
            row["draft_len"] + 1,
            row_context,
            row_style,
            default_routing(model, routing_name),
            hardware,
        )
        step_s, breakdown, _, _ = simulate_plan(plan, hardware, row_launch, params)
        out.append(
            {
                "model": model.name,
                "shape": "measured",
                "device": hardware.name,
                "launch": row_launch,
                "kernel_style": row_style,
                "batch": row["batch"],
                "draft_len": row["draft_len"],
                "tokens_per_seq": row["draft_len"] + 1,
                "context_len": row_context,
                "distinct_experts": plan.mean_distinct_experts,
                "n_kernels": len(plan.kernels),
                "measured_s": row["measured_s"],
                "predicted_s": step_s,
                "spread": row.get("spread"),
                "round_spread": None,
                "predicted_breakdown_s": breakdown,
                "predicted_terms_s": cost_terms(plan, hardware, step_s, params),
            }
        )
    add_errors_and_ratios(out)
    return out


def add_errors_and_ratios(rows: list[dict[str, Any]]) -> None:
    """Fill error, abs_error and the verify/decode ratios (against the K = 0 row of the same model/batch)."""
    decode = {
        (r["model"], r.get("launch"), r["batch"], r.get("context_len")): r
        for r in rows
        if r["draft_len"] == 0
    }
    for r in rows:
        r["error"] = r["predicted_s"] / r["measured_s"] - 1.0
        r["abs_error"] = abs(r["error"])
        if r.get("drift_predicted_s") is not None:
            r["drift_error"] = r["drift_predicted_s"] / r["measured_s"] - 1.0
        base = decode.get((r["model"], r.get("launch"), r["batch"], r.get("context_len")))
        r["measured_ratio"] = r["measured_s"] / base["measured_s"] if base else None
        r["predicted_ratio"] = r["predicted_s"] / base["predicted_s"] if base else None


def score_rows(rows: list[dict[str, Any]], cross_names: Iterable[str] = ()) -> dict[str, Any]:
    """Fill each predicted row's errors and ratios, and summarise them (with each cross profile's summary)."""
    add_errors_and_ratios(rows)
    summary = summarise(rows)
    summary["cross_device"] = cross_device_summaries(rows, cross_names)
    return summary


def cross_device_summaries(rows: Sequence[dict[str, Any]], names: Iterable[str]) -> dict[str, Any]:
    """For each other profile in `names`: the summary of the rows re-scored with its `cross_predicted_s`."""
    summaries = {}
    for name in names:
        crossed = [
            r
            | {
                "predicted_s": r["cross_predicted_s"][name],
                "predicted_terms_s": {},
                "drift_predicted_s": None,
            }
            for r in rows
        ]
        add_errors_and_ratios(crossed)
        summaries[name] = summarise(crossed)
    return summaries


# --------------------------------------------------------------------------------------------- report


def markdown_report(result: dict[str, Any]) -> str:
    """The human-readable report: what was run, the summary, attribution, and every row."""
    s = result["summary"]
    meta = result.get("meta", {})
    lines = [f"# Validation: {meta.get('title', 'measured vs predicted step time')}", ""]
    if meta.get("command"):
        lines += ["Command:", "", "```", meta["command"], "```", ""]
    for key in (
        "profile",
        "profile_provenance",
        "machine",
        "machine_kind",
        "device",
        "device_name",
        "threads",
        "clock",
        "dtype",
        "launch",
        "reference_style",
        "cache_between_steps",
        "routing",
        "context_len",
        "date",
        "torch",
        "wall_s",
    ):
        if meta.get(key) not in (None, ""):
            lines.append(f"- {key.replace('_', ' ')}: {meta[key]}")
    lines += ["", "## Summary", ""]
    lines.append(f"- configurations: {s['n']}")
    lines.append(
        f"- MAPE (step time): {s['mape']:.1%}; p90 absolute error {s['p90_abs_error']:.1%}; median signed error {s['median_error']:+.1%}"
    )
    if s.get("noise_floor") is not None:
        lines.append(
            f"- noise floor (mean run-to-run spread of a row's median between rounds): {s['noise_floor']:.1%}; "
            f"median spread of single timings (IQR/median): {s['sample_spread']:.1%}"
        )
    if drift_sentence(s):
        lines.append(f"- {drift_sentence(s)}")
    if s.get("ratio_mape") is not None:
        lines.append(f"- verify/decode ratio MAPE: {s['ratio_mape']:.1%}")
    w = s["worst"]
    lines.append(f"- worst row: {w['model']} B={w['batch']} K={w['draft_len']}: error {w['error']:+.1%}")
    for model, mape in s.get("mape_by_model", {}).items():
        lines.append(f"- MAPE {model}: {mape:.1%}")
    if s.get("attribution"):
        a = s["attribution"]
        lines += ["", "## Where the error comes from", "", attribution_sentence(a) + ".", ""]
        lines.append(
            "| term | share of predicted time | best single factor | MAPE if only it were rescaled | joint NNLS factor |"
        )
        lines.append("|---|---|---|---|---|")
        for name, info in a["single_term"].items():
            lines.append(
                f"| {name} | {info['share_of_predicted']:.1%} | {info['factor']:.2f} | {info['mape_after']:.1%} | {a['joint_factors'][name]:.2f} |"
            )
        lines += [
            "",
            "Factors are diagnostics of the model, fitted on this grid; they are never applied to predictions.",
        ]
    if s.get("cross_device"):
        lines += ["", "## Cross-device projection", ""]
        lines.append(
            "The same measured rows, predicted with other profiles (e.g. derived for this device from another device's measurements):"
        )
        lines.append("")
        for name, other in s["cross_device"].items():
            lines.append(
                f"- {name}: MAPE {other['mape']:.1%}, p90 {other['p90_abs_error']:.1%}, median signed error {other['median_error']:+.1%}, "
                f"verify/decode ratio MAPE {_fmt(other.get('ratio_mape'), '.1%')}"
            )
    if result.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    lines += [
        "",
        "## Rows",
        "",
        "| model | B | K | U | kernels | measured ms | predicted ms | error | drift-corrected ms | corrected error "
        "| spread | ratio meas. | ratio pred. |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        corrected = r.get("drift_predicted_s")
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['draft_len']} | {_fmt(r.get('distinct_experts'), '.1f')} | {r.get('n_kernels', '')} "
            f"| {r['measured_s'] * 1e3:.3f} | {r['predicted_s'] * 1e3:.3f} | {r['error']:+.1%} "
            f"| {_fmt(None if corrected is None else corrected * 1e3, '.3f')} | {_fmt(r.get('drift_error'), '+.1%')} "
            f"| {_fmt(r.get('spread'), '.1%')} | {_fmt(r.get('measured_ratio'), '.2f')} | {_fmt(r.get('predicted_ratio'), '.2f')} |"
        )
    lines += [
        "",
        "Files: `rows.csv` (every row with predicted breakdown and cost terms), `predicted_vs_measured.png`, `result.json`.",
        "",
    ]
    return "\n".join(lines)


def _fmt(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def plot_predicted_vs_measured(
    rows: Sequence[dict[str, Any]], path: str | Path, title: str, caption: str = ""
) -> Any:
    """Log-log scatter of predicted against measured step time: a colour per model, a marker per draft length,
    y = x and a ±10% band; a one-line title, the details in a caption under the axes."""
    from moesim.figures import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 6.0), layout="constrained")
    models = sorted({str(r["model"]) for r in rows})
    marker_cycle = ("o", "s", "^", "D", "v", "P", "X", "*")
    for i, model in enumerate(models):
        sel = [r for r in rows if r["model"] == model]
        for j, k in enumerate(sorted({r["draft_len"] for r in sel})):
            pts = [r for r in sel if r["draft_len"] == k]
            ax.scatter(
                [r["measured_s"] * 1e3 for r in pts],
                [r["predicted_s"] * 1e3 for r in pts],
                color=f"C{i % 10}",
                marker=marker_cycle[j % len(marker_cycle)],
                s=28,
                label=f"{model}, K={k}" if k else f"{model}, decode",
            )
    values = [v for r in rows for v in (r["measured_s"] * 1e3, r["predicted_s"] * 1e3)]
    lo, hi = min(values) / 1.3, max(values) * 1.3
    xs = np.geomspace(lo, hi, 50)
    ax.plot(xs, xs, color="black", lw=1, label="predicted = measured")
    ax.fill_between(xs, xs * 0.9, xs * 1.1, color="grey", alpha=0.2, label="±10%")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2 if len(ax.get_legend_handles_labels()[1]) > 12 else 1, loc="upper left")
    if caption:
        fig.supxlabel(caption, fontsize=7, color="dimgrey")
    save_figure(fig, path, dpi=130)
    return fig


def write_report(directory: str | Path, result: dict[str, Any]) -> list[Path]:
    """report.md, rows.csv, result.json and predicted_vs_measured.png under `directory` (atomic writes)."""
    import json

    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise MoesimError("--report", f"{out} exists and is not a folder", "give a folder path")
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.md", out / "rows.csv", out / "result.json", out / "predicted_vs_measured.png"]
    atomic_write_text(paths[0], markdown_report(result))
    atomic_write_text(paths[1], rows_to_csv(result["rows"]))
    atomic_write_text(paths[2], json.dumps(result, indent=2, default=_json_default) + "\n")
    title = result.get("meta", {}).get("title", "validation")
    plot_predicted_vs_measured(
        result["rows"],
        paths[3],
        f"Predicted vs measured: MAPE {result['summary']['mape']:.1%} over {result['summary']['n']} configurations",
        caption=textwrap.fill(title, 110),
    )
    return paths


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


__all__ = [
    "MEASURED_SCHEMA",
    "add_errors_and_ratios",
    "attribute_error",
    "attribution_sentence",
    "cross_device_summaries",
    "drift_sentence",
    "drift_summary",
    "errors_of",
    "markdown_report",
    "measured_result",
    "plot_predicted_vs_measured",
    "predict_measured",
    "read_measured_csv",
    "rows_to_csv",
    "score_rows",
    "summarise",
    "write_report",
]

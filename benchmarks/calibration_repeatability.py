"""Run N quick calibrations back to back and report how well they agree (target: within 10%).

    python benchmarks/calibration_repeatability.py [--runs 3] [--device cpu] [--threads N] [--out DIR] [--json]
        [--validate [--models fine,coarse,shared]]
    python benchmarks/calibration_repeatability.py --compare A.toml B.toml C.toml [--json]

Each run is measured from scratch (--fresh) into its own directory; `--compare` scores profiles made
earlier instead (e.g. the runs of an older version: the "before" figures). The figures compared are the
ones the simulator is most sensitive to: memory bandwidth (on a CPU the one-row GEMMs' stream), cache
bandwidth and capacity, dispatch cost, GEMM peak. Spread = (max − min) / median over the runs. Beside it,
each run's own stated confidence where the profile records one (the dispatch cost's 95% interval, the
range of working sets the cache knee lies in, the memory plateau's timing IQR). A report, not a test:
speed and noise depend on the machine and whatever else runs on it.

Each figure is shown raw and probe-normalised: the drift probe (`moesim.calibrate.suites.probe`) ran before and after
every suite, and a figure of run i times P_median / P_i (P: the probe's median rate of the figure's part
over run i, P_median: the median of those over the runs; a time divides instead) is what run i would have
measured on the machine at its median speed over all the runs. `--validate` follows each calibration with a
quick `moesim validate` against the profile it made and reports its MAPE raw and drift-corrected, with the
probe's spread during the run. Every run records the load average (`os.getloadavg`) at its start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

TARGET = 0.10
KEY_FIGURES = ("memory_bandwidth_gbps", "cache_bandwidth_gbps", "launch_eager_us", "peak_fp32_tflops")
# The probe figure each profile figure moves with: a rate with the probe's rate, a time with its time per op.
FIGURE_PARTS = {
    "memory_bandwidth_gbps": "memory_gbps",
    "sum_plateau_gbps": "memory_gbps",
    "cache_bandwidth_gbps": "compute_tflops",
    "launch_eager_us": "dispatch_us",
    "kernel_fixed_latency_us": "dispatch_us",
    "peak_fp32_tflops": "compute_tflops",
    "peak_bf16_tflops": "compute_tflops",
}


def figures(profile: object) -> dict[str, float]:
    ds = profile.datasheet  # type: ignore[attr-defined]
    em = profile.empirical  # type: ignore[attr-defined]
    out = {
        "memory_bandwidth_gbps": ds.memory_bandwidth_gbps * em.memory_bandwidth_fraction,
        "sum_plateau_gbps": ds.memory_bandwidth_gbps
        * em.memory_bandwidth_fraction
        * em.elementwise_bandwidth_fraction,
        "cache_bandwidth_gbps": em.cache_bandwidth_gbps,
        "cache_effective_mib": em.cache_effective_bytes / 2**20,
        "launch_eager_us": em.launch_eager_us,
        "kernel_fixed_latency_us": em.kernel_fixed_latency_us,
    }
    for dtype, peak in ds.peak_dense_tflops.items():
        out[f"peak_{dtype}_tflops"] = peak
    if em.launch_graph_gap_us:
        out["launch_graph_gap_us"] = em.launch_graph_gap_us
    return out


def confidence(profile: object) -> dict[str, str]:
    """Each figure's confidence as the run stated it (empty where the profile records none)."""
    quality = profile.fit_quality  # type: ignore[attr-defined]
    out: dict[str, str] = {}
    launch = quality.get("launch_eager", {})
    if "slope_low_us" in launch:
        out["launch_eager_us"] = f"95% CI {launch['slope_low_us']:.3g}-{launch['slope_high_us']:.3g}"
    knee = quality.get("memory_cache_knee", {})
    if "knee_low_bytes" in knee:
        out["cache_effective_mib"] = (
            f"knee within {knee['knee_low_bytes'] / 2**20:.0f}-{knee['knee_high_bytes'] / 2**20:.0f} MiB"
        )
    if "memory_plateau_rel_iqr" in knee:
        out["memory_bandwidth_gbps"] = f"plateau timing IQR {knee['memory_plateau_rel_iqr']:.1%}"
    return out


def probe_medians(profile: object) -> dict[str, float]:
    """The drift probe's median rates over the profile's calibration (empty for a profile without probes)."""
    figures = profile.fit_quality.get("drift_probe", {})  # type: ignore[attr-defined]
    return {k: figures[k] for k in ("memory_gbps", "compute_tflops", "dispatch_us") if figures.get(k)}


def normalised(runs: list[dict[str, float]], probes: list[dict[str, float]]) -> list[dict[str, float]]:
    """Each run's figures at the runs' median machine speed (see the module docstring); figures without a
    probe part, or runs without probes, are left out."""
    if not probes or not all(probes):
        return []
    reference = {part: statistics.median(p[part] for p in probes) for part in probes[0]}
    out = []
    for figures, probe in zip(runs, probes, strict=True):
        out.append(
            {
                key: value * reference[FIGURE_PARTS[key]] / probe[FIGURE_PARTS[key]]
                for key, value in figures.items()
                if FIGURE_PARTS.get(key) in probe
            }
        )
    return out


def spread_rows(runs: list[dict[str, float]]) -> list[dict[str, object]]:
    """Per figure present in every run: the values, (max − min) / median and whether that is within TARGET."""
    rows: list[dict[str, object]] = []
    for key in runs[0]:
        values = [run[key] for run in runs if key in run]
        if len(values) != len(runs):
            continue
        median = statistics.median(values)
        spread = (max(values) - min(values)) / median if median else 0.0
        rows.append({"figure": key, "values": values, "spread": spread, "within_target": spread <= TARGET})
    return rows


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def validation_loop(profile: object, args: argparse.Namespace, folder: Path) -> dict[str, object]:
    """A quick validation against `profile` right after its calibration: MAPE raw and drift-corrected, and
    the probe's spread beside the rows (the run's report goes to `folder`/validate)."""
    from moesim.validation.reference.report import write_report
    from moesim.validation.reference.run import ValidationOptions, run_torch_validation

    options = ValidationOptions(device=args.device, models=tuple(args.models.split(",")), quick=True)
    start = time.perf_counter()
    result = run_torch_validation(profile, options)  # type: ignore[arg-type]
    write_report(folder / "validate", result)
    s = result["summary"]
    drift = s.get("drift") or {}
    corrected = drift.get("corrected") or {}
    return {
        "n": s["n"],
        "seconds": round(time.perf_counter() - start, 1),
        "mape": s["mape"],
        "median_error": s["median_error"],
        "mape_corrected": corrected.get("mape"),
        "median_error_corrected": corrected.get("median_error"),
        "probe_spread": drift.get("probe_spread", {}),
        "speed_ratio": drift.get("speed_ratio", {}),
        "load_end": os.getloadavg()[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="directory for the profiles and their CSVs")
    parser.add_argument(
        "--compare", nargs="+", default=None, help="score these profiles instead of calibrating"
    )
    parser.add_argument(
        "--validate", action="store_true", help="follow each calibration with a quick validation against it"
    )
    parser.add_argument("--models", default="fine,coarse,shared", help="with --validate: validation shapes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from moesim.simulator.hardware.profile import load_profile

    profiles, seconds, failures, loops = [], [], [], []
    root = None
    if args.compare:
        profiles = [load_profile(path) for path in args.compare]
    else:
        from moesim.calibrate.suites.runner import calibrate

        root = Path(args.out or tempfile.mkdtemp(prefix="moesim-repeat-"))
        for i in range(1, args.runs + 1):
            load = [os.getloadavg()[0]]
            start = time.perf_counter()
            result = calibrate(
                args.device, root / f"run{i}" / "profile.toml", quick=True, fresh=True, threads=args.threads
            )
            seconds.append(round(time.perf_counter() - start, 1))
            profiles.append(result.profile)
            failures.append(result.failures)
            load.append(os.getloadavg()[0])
            if args.validate:
                loops.append(validation_loop(result.profile, args, root / f"run{i}") | {"load_1min": load})
    raw = [figures(p) for p in profiles]
    rows = spread_rows(raw)
    at_median = normalised(raw, [probe_medians(p) for p in profiles])
    normalised_spread = {str(r["figure"]): r for r in spread_rows(at_median)} if at_median else {}
    for row in rows:
        same = normalised_spread.get(str(row["figure"]))
        row["normalised_values"] = same["values"] if same else None
        row["normalised_spread"] = same["spread"] if same else None
    stated = [confidence(p) for p in profiles]
    for row in rows:
        row["stated_confidence"] = [s.get(str(row["figure"]), "") for s in stated]
    key_rows = [r for r in rows if r["figure"] in KEY_FIGURES]
    summary = {
        "device": args.device,
        "profiles": args.compare or [str(root / f"run{i}" / "profile.toml") for i in range(1, args.runs + 1)],
        "seconds": seconds,
        "failures": failures,
        "target": TARGET,
        "figures": rows,
        "key_figures_within_target": all(r["within_target"] for r in key_rows),
        "calibration_probe": [p.fit_quality.get("drift_probe", {}) for p in profiles],
        "loops": loops,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    how = (
        "compared"
        if args.compare
        else f"quick calibrations on {args.device} ({', '.join(f'{s:.0f} s' for s in seconds)})"
    )
    print(f"{len(profiles)} {how}")
    print(
        f"{'figure':<26}{'values':>30}{'spread':>8}{'normalised':>30}{'spread':>8}  stated confidence (last run)"
    )
    for row in rows:
        values = " ".join(f"{v:.4g}" for v in row["values"])  # type: ignore[attr-defined]
        flag = "" if row["within_target"] else f" > {TARGET:.0%}"
        at_median = row["normalised_values"]
        normal = " ".join(f"{v:.4g}" for v in at_median) if at_median else "-"  # type: ignore[attr-defined]
        normal_spread = f"{row['normalised_spread']:.1%}" if at_median else "-"
        note = row["stated_confidence"][-1]  # type: ignore[index]
        print(
            f"{row['figure']:<26}{values:>30}{row['spread']:>8.1%}{normal:>30}{normal_spread:>8}{flag:6} {note}"
        )
    for i, probe in enumerate(summary["calibration_probe"], start=1):  # type: ignore[arg-type]
        if probe:
            print(
                f"run {i} calibration probe spread: memory {probe['memory_spread']:.1%}, compute "
                f"{probe['compute_spread']:.1%}, dispatch {probe.get('dispatch_spread', 0.0):.1%}; largest drift "
                f"within a suite {probe['max_suite_drift']:.1%}"
            )
    for i, loop in enumerate(loops, start=1):
        spread = loop["probe_spread"]
        print(
            f"run {i} validation ({loop['n']} rows, load {loop['load_1min'][0]:.1f} -> {loop['load_1min'][-1]:.1f}): "
            f"MAPE raw {loop['mape']:.1%}, drift-corrected {_pct(loop['mape_corrected'])}; probe spread "
            + ", ".join(f"{part} {value:.1%}" for part, value in spread.items())
        )
    print(
        f"{', '.join(KEY_FIGURES)} within {TARGET:.0%}: {'yes' if summary['key_figures_within_target'] else 'no'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

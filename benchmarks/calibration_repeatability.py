"""Run N quick calibrations back to back and report how well they agree (target: within 10%).

    python benchmarks/calibration_repeatability.py [--runs 3] [--device cpu] [--threads N] [--out DIR] [--json]
    python benchmarks/calibration_repeatability.py --compare A.toml B.toml C.toml [--json]

Each run is measured from scratch (--fresh) into its own directory; `--compare` scores profiles made
earlier instead (e.g. the runs of an older version: the "before" figures). The figures compared are the
ones the simulator is most sensitive to: memory bandwidth (on a CPU the one-row GEMMs' stream), cache
bandwidth and capacity, dispatch cost, GEMM peak. Spread = (max − min) / median over the runs. Beside it,
each run's own stated confidence where the profile records one (the dispatch cost's 95% interval, the
range of working sets the cache knee lies in, the memory plateau's timing IQR). A report, not a test:
speed and noise depend on the machine and whatever else runs on it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

TARGET = 0.10
KEY_FIGURES = ("memory_bandwidth_gbps", "cache_bandwidth_gbps", "launch_eager_us", "peak_fp32_tflops")


def figures(profile: object) -> dict[str, float]:
    ds = profile.datasheet  # type: ignore[attr-defined]
    em = profile.empirical  # type: ignore[attr-defined]
    out = {
        "memory_bandwidth_gbps": ds.memory_bandwidth_gbps * em.memory_bandwidth_fraction,
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="directory for the profiles and their CSVs")
    parser.add_argument(
        "--compare", nargs="+", default=None, help="score these profiles instead of calibrating"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from moesim.simulator.hardware.profile import load_profile

    profiles, seconds, failures = [], [], []
    root = None
    if args.compare:
        profiles = [load_profile(path) for path in args.compare]
    else:
        from moesim.calibrate.suites.runner import calibrate

        root = Path(args.out or tempfile.mkdtemp(prefix="moesim-repeat-"))
        for i in range(1, args.runs + 1):
            start = time.perf_counter()
            result = calibrate(
                args.device, root / f"run{i}" / "profile.toml", quick=True, fresh=True, threads=args.threads
            )
            seconds.append(round(time.perf_counter() - start, 1))
            profiles.append(result.profile)
            failures.append(result.failures)
    rows = spread_rows([figures(p) for p in profiles])
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
    print(f"{'figure':<26}{'values':>36}{'spread':>9}  stated confidence (last run)")
    for row in rows:
        values = " ".join(f"{v:.4g}" for v in row["values"])  # type: ignore[attr-defined]
        flag = "" if row["within_target"] else f" > {TARGET:.0%}"
        note = row["stated_confidence"][-1]  # type: ignore[index]
        print(f"{row['figure']:<26}{values:>36}{row['spread']:>8.1%}{flag:6} {note}")
    print(
        f"{', '.join(KEY_FIGURES)} within {TARGET:.0%}: {'yes' if summary['key_figures_within_target'] else 'no'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

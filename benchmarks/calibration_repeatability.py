"""Run two quick calibrations back to back and report how well they agree (target: within 15%).

    python benchmarks/calibration_repeatability.py [--device cpu] [--threads N] [--out DIR] [--json]

Each run is measured from scratch (--fresh) into its own directory; the figures compared are the ones the
simulator is most sensitive to: memory plateau, cache bandwidth and capacity, launch/dispatch cost, the
GEMM peak. A report, not a test: speed and noise depend on the machine and whatever else runs on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

TARGET = 0.15


def figures(profile: object) -> dict[str, float]:
    ds = profile.datasheet  # type: ignore[attr-defined]
    em = profile.empirical  # type: ignore[attr-defined]
    out = {
        "memory_plateau_gbps": ds.memory_bandwidth_gbps * em.memory_bandwidth_fraction,
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=None, help="directory for the two profiles and their CSVs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from moesim.calibrate.runner import calibrate

    root = Path(args.out or tempfile.mkdtemp(prefix="moesim-repeat-"))
    runs = []
    for i in (1, 2):
        start = time.perf_counter()
        result = calibrate(
            args.device, root / f"run{i}" / "profile.toml", quick=True, fresh=True, threads=args.threads
        )
        runs.append((figures(result.profile), time.perf_counter() - start, result.failures))

    (a, time_a, fail_a), (b, time_b, fail_b) = runs
    rows = []
    for key in a:
        if key not in b:
            continue
        mean = (a[key] + b[key]) / 2
        diff = abs(a[key] - b[key]) / mean if mean else 0.0
        rows.append(
            {"figure": key, "run1": a[key], "run2": b[key], "rel_diff": diff, "within_target": diff <= TARGET}
        )
    summary = {
        "device": args.device,
        "seconds": [round(time_a, 1), round(time_b, 1)],
        "failures": [fail_a, fail_b],
        "target": TARGET,
        "figures": rows,
        "output_dir": str(root),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"two quick calibrations on {args.device}: {time_a:.0f} s and {time_b:.0f} s; profiles in {root}"
        )
        print(f"{'figure':<26}{'run 1':>12}{'run 2':>12}{'diff':>8}")
        for row in rows:
            flag = "" if row["within_target"] else f"  > {TARGET:.0%}"
            print(f"{row['figure']:<26}{row['run1']:>12.4g}{row['run2']:>12.4g}{row['rel_diff']:>8.1%}{flag}")
        key_figures = [
            r
            for r in rows
            if r["figure"] in ("memory_plateau_gbps", "cache_bandwidth_gbps", "launch_eager_us")
        ]
        agree = all(r["within_target"] for r in key_figures)
        print(f"bandwidths and launch cost within {TARGET:.0%}: {'yes' if agree else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

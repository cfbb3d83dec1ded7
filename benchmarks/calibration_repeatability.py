"""Run N quick calibrate → validate loops back to back and report how well they agree (target: within 10%).

    python benchmarks/calibration_repeatability.py [--runs 3] [--validate] [--under-load] [--device cpu]
        [--threads N] [--out DIR] [--json] [--models fine,coarse,shared]
    python benchmarks/calibration_repeatability.py --compare A.toml B.toml C.toml [--json]

The issue-24 measurement is one command, `--runs 3 --validate --under-load` (about 5 minutes of CPU time:
~80 s a loop, 45 s the loaded validation): three quick calibrations, each followed by a quick `moesim validate` against the profile it made,
then one more quick validation against the last profile while a second process streams memory (a 256 MiB
numpy copy in a loop: the deliberate neighbour).

Each run is measured from scratch into its own directory; `--compare` scores profiles made earlier instead.
The figures compared are the ones the simulator is most sensitive to: memory bandwidth (on a CPU the one-row
GEMMs' stream), the memory plateau (the memory suite's large-read `torch.sum` rate), cache bandwidth and
capacity, dispatch cost, GEMM peak. Spread = (max − min) / median over the runs. A report, not a test: speed
and noise depend on the machine and whatever else runs on it.

**Raw and probe-normalised.** The drift probe (`moesim.calibrate.suites.probe`) ran before and after every
suite. Every profile is rebuilt from its run's CSVs twice (`rebuild_from_csv`): *as measured* and with
in-run normalisation (each suite brought to the run's median probe speed where it moved beyond the probe's
noise). A figure's *normalised* value across runs is its as-measured value times P_ref / P_i, where P_i is
the probe's rate of the figure's part (memory, compute, dispatch or streaming GEMM; a time divides instead) during the suite
that measured it in run i (the geometric mean of the probes before and after it) and P_ref the median of
those over the runs: what run i would have measured on a machine at the runs' median speed. If the probe
tracks the machine, normalised spreads are smaller than raw ones. The memory plateau's P_i is the median of
the reference reads the memory suite times beside its working sets (`suites/memory.py`), where the profile
records them: those sample the moments the plateau was measured; likewise the one-row GEMM stream's P_i is the
median of the probe's streaming GEMM the GEMM suite read in every round (`fit_quality.gemm_reference`).

**Validation.** Each loop's measured rows are scored against both profiles of its run, raw and
drift-corrected (each row predicted with the profile at the speed the probe measured beside it, in each part
that moved beyond the probe's noise), with the probe's spread during the run and the machine's speed beside
the rows relative to the calibration (the offset between the two runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from moesim.calibrate.fits.drift import PARTS  # light: no torch, no numpy

TARGET = 0.10
PLATEAU_TARGET = 0.05  # the memory plateau's normalised spread across the runs (issue 24)
KEY_FIGURES = (
    "memory_bandwidth_gbps",
    "sum_plateau_gbps",
    "cache_bandwidth_gbps",
    "launch_eager_us",
    "peak_fp32_tflops",
)
# The suite that measures each figure on a CPU and the probe part the figure moves with (a rate with the
# probe's rate; a time with its time per op).
FIGURE_SOURCES = {
    "memory_bandwidth_gbps": ("gemm", "stream_gemm"),  # a CPU's one-row GEMM stream
    "sum_plateau_gbps": ("memory", "memory"),
    "cache_bandwidth_gbps": ("memory", "compute"),
    "launch_eager_us": ("launch", "dispatch"),
    "kernel_fixed_latency_us": ("launch", "dispatch"),
    "peak_fp32_tflops": ("gemm", "compute"),
    "peak_bf16_tflops": ("gemm", "compute"),
}
# The deliberate neighbour: a second process streaming memory (two 256 MiB arrays copied back and forth).
STREAMER = (
    "import numpy as np\n"
    "a = np.ones(2**25); b = np.empty_like(a)\n"
    "while True:\n"
    "    np.copyto(b, a); np.copyto(a, b)\n"
)


def figures(profile: Any) -> dict[str, float]:
    ds, em = profile.datasheet, profile.empirical
    stream = ds.memory_bandwidth_gbps * em.memory_bandwidth_fraction
    out = {
        "memory_bandwidth_gbps": stream,
        "sum_plateau_gbps": stream * em.elementwise_bandwidth_fraction,
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


def suite_speeds(probe_csv: Path) -> dict[str, dict[str, float]]:
    """Per suite, the probe's rates during it (geometric mean of its before/after probes); {} without probes."""
    from moesim.calibrate.fits.drift import PART_FIGURES, between_sample, suite_drifts
    from moesim.calibrate.suites.runner import read_probes

    _, drifts = suite_drifts(read_probes(probe_csv))
    out = {}
    for suite, d in drifts.items():
        during = between_sample(d.before, d.after)
        out[suite] = {part: float(getattr(during, key)) for part, key in PART_FIGURES.items()}
    return out


def with_in_suite_reference(profile: Any, speeds: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The run's probe speeds, with the memory suite's memory speed taken from the reference reads timed
    beside its working sets (`fit_quality.memory_cache_knee.reference_gbps`) and the GEMM suite's streaming
    GEMM speed from the median of the reference it read in every round (`fit_quality.gemm_reference`) where
    the profile has them: they sample the moments the figures were measured, the probes before and after the
    suite do not."""
    quality = profile.fit_quality
    inside = {
        "memory": ("memory", float(quality.get("memory_cache_knee", {}).get("reference_gbps", 0.0) or 0.0)),
        "gemm": (
            "stream_gemm",
            float(quality.get("gemm_reference", {}).get("reference_stream_gemm_tflops", 0.0) or 0.0),
        ),
    }
    out = dict(speeds)
    for suite, (part, reference) in inside.items():
        if reference > 0 and suite in out:
            out[suite] = out[suite] | {part: reference}
    return out


def normalised(
    runs: list[dict[str, float]], speeds: list[dict[str, dict[str, float]]]
) -> list[dict[str, float]]:
    """Each run's figures at the runs' median machine speed (see the module docstring); figures whose suite
    was not probed in every run are left out."""
    keys = [k for k in runs[0] if k in FIGURE_SOURCES and all(FIGURE_SOURCES[k][0] in s for s in speeds)]
    reference = {
        key: statistics.median(s[FIGURE_SOURCES[key][0]][FIGURE_SOURCES[key][1]] for s in speeds)
        for key in keys
    }
    out = []
    for values, speed in zip(runs, speeds, strict=True):
        row = {}
        for key in keys:
            suite, part = FIGURE_SOURCES[key]
            ratio = reference[key] / speed[suite][part]  # > 1: the machine was slower than the median then
            row[key] = values[key] / ratio if part == "dispatch" else values[key] * ratio
        out.append(row)
    return out


def spread_rows(runs: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Per figure present in every run: the values, (max − min) / median and whether that is within TARGET."""
    rows: list[dict[str, Any]] = []
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


def score(s: dict[str, Any]) -> dict[str, Any]:
    """A validation's summary (`score_rows`) reduced to MAPE raw and drift-corrected, the probe's spread
    beside the rows and the machine's speed there relative to the calibration's probe median."""
    drift = s.get("drift") or {}
    corrected = drift.get("corrected") or {}
    return {
        "n": s["n"],
        "mape": s["mape"],
        "median_error": s["median_error"],
        "mape_corrected": corrected.get("mape"),
        "median_error_corrected": corrected.get("median_error"),
        "probe_spread": drift.get("probe_spread", {}),
        "speed_vs_calibration": {
            k: v["median"] for k, v in (drift.get("measured_speed_ratio") or {}).items()
        },
        "rows_corrected": drift.get("rows_corrected", {}),
    }


def validation_loop(profiles: dict[str, Any], args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """A quick validation measured once and scored against each of `profiles` (the run's report, against the
    first, goes to `folder`/validate)."""
    from moesim.validation.reference.predict import predict_rows
    from moesim.validation.reference.report import score_rows, write_report
    from moesim.validation.reference.run import ValidationOptions, measure_validation

    first = next(iter(profiles.values()))
    options = ValidationOptions(device=args.device, models=tuple(args.models.split(",")), quick=True)
    load = [os.getloadavg()[0]]
    start = time.perf_counter()
    measured = measure_validation(first, options)
    seconds = round(time.perf_counter() - start, 1)
    load.append(os.getloadavg()[0])
    scored = {}
    for i, (name, profile) in enumerate(profiles.items()):
        rows = predict_rows(measured["meta"], measured["rows"], profile)
        summary = score_rows(rows)
        if i == 0:
            write_report(folder / "validate", measured | {"rows": rows, "summary": summary})
        scored[name] = score(summary)
    return {"seconds": seconds, "load_1min": load} | scored


def calibration_loop(i: int, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One quick calibration from scratch, and its profile rebuilt as measured and normalised."""
    from moesim.calibrate.suites.runner import calibrate, rebuild_from_csv

    folder = root / f"run{i}"
    load = [os.getloadavg()[0]]
    start = time.perf_counter()
    result = calibrate(args.device, folder / "profile.toml", quick=True, fresh=True, threads=args.threads)
    seconds = round(time.perf_counter() - start, 1)
    load.append(os.getloadavg()[0])
    stem = folder / "profile"
    built = {
        name: rebuild_from_csv(
            args.device, folder / f"{name}.toml", source=stem, normalise_drift=flag
        ).profile
        for name, flag in (("as_measured", False), ("normalised", True))
    }
    probe = result.profile.fit_quality.get("drift_probe", {})
    return {
        "gemm_reference": result.profile.fit_quality.get("gemm_reference", {}),
        "seconds": seconds,
        "load_1min": load,
        "failures": result.failures,
        "repeated": [n.split(" suite repeated")[0] for n in result.notes if " suite repeated" in n],
        "probe": probe,
        "profiles": built,
        "speeds": suite_speeds(folder / "profile.probe.csv"),
    }


def progress(started: float, text: str) -> None:
    """One line on stderr as each stage ends, with the time since the start (the figures come at the end)."""
    print(f"[{time.perf_counter() - started:5.0f} s] {text}", file=sys.stderr, flush=True)


def streaming_neighbour() -> subprocess.Popen[bytes]:
    """Start the deliberate neighbour (STREAMER) and give it a second to allocate its arrays."""
    process = subprocess.Popen([sys.executable, "-c", STREAMER])
    time.sleep(1.0)
    return process


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
        "--validate", action="store_true", help="follow each calibration with a quick validation"
    )
    parser.add_argument(
        "--under-load",
        action="store_true",
        help="then validate the last profile once more while a second process streams memory",
    )
    parser.add_argument("--models", default="fine,coarse,shared", help="with --validate: validation shapes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from moesim.simulator.hardware.profile import load_profile

    started = time.perf_counter()
    loops: list[dict[str, Any]] = []
    loaded: dict[str, Any] = {}
    if args.compare:
        profiles = [load_profile(path) for path in args.compare]
        speeds: list[dict[str, dict[str, float]]] = [
            suite_speeds(Path(path).with_suffix(".probe.csv")) for path in args.compare
        ]
        root = None
    else:
        root = Path(args.out or tempfile.mkdtemp(prefix="moesim-repeat-"))
        for i in range(1, args.runs + 1):
            loop = calibration_loop(i, root, args)
            progress(started, f"run {i} calibration: {loop['seconds']:.0f} s")
            if args.validate or args.under_load:
                loop["validation"] = validation_loop(loop["profiles"], args, root / f"run{i}")
                progress(started, f"run {i} validation: {loop['validation']['seconds']:.0f} s")
            loops.append(loop)
        if args.under_load:
            neighbour = streaming_neighbour()
            try:
                loaded = validation_loop(loops[-1]["profiles"], args, root / "under-load")
            finally:
                neighbour.terminate()
                neighbour.wait()
            progress(started, f"validation under load: {loaded['seconds']:.0f} s")
        profiles = [loop["profiles"]["as_measured"] for loop in loops]
        speeds = [loop["speeds"] for loop in loops]
    speeds = [with_in_suite_reference(p, s) for p, s in zip(profiles, speeds, strict=True)]
    raw = [figures(p) for p in profiles]
    rows = spread_rows(raw)
    at_median = normalised(raw, speeds) if all(speeds) else []
    by_figure = {str(r["figure"]): r for r in spread_rows(at_median)} if at_median else {}
    for row in rows:
        same = by_figure.get(str(row["figure"]))
        row["normalised_values"] = same["values"] if same else None
        row["normalised_spread"] = same["spread"] if same else None
    plateau = next((r for r in rows if r["figure"] == "sum_plateau_gbps"), None)
    summary = {
        "device": args.device,
        "root": str(root) if root else None,
        "seconds": round(time.perf_counter() - started, 1),
        "target": TARGET,
        "plateau_target": PLATEAU_TARGET,
        "figures": rows,
        "memory_plateau": plateau,
        "loops": [{k: v for k, v in loop.items() if k != "profiles"} for loop in loops],
        "under_load": loaded,
    }
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    render(summary, args)
    return 0


def render(summary: dict[str, Any], args: argparse.Namespace) -> None:
    loops = summary["loops"]
    print(
        f"{len(summary['figures'][0]['values']) if summary['figures'] else 0} calibrations on {args.device}"
        + (f" ({', '.join(str(loop['seconds']) + ' s' for loop in loops)})" if loops else "")
        + f"; whole benchmark {summary['seconds']:.0f} s"
    )
    print(f"{'figure (as measured)':<26}{'values':>30}{'spread':>8}{'normalised':>30}{'spread':>8}")
    for row in summary["figures"]:
        values = " ".join(f"{v:.4g}" for v in row["values"])
        normal = row["normalised_values"]
        normal_text = " ".join(f"{v:.4g}" for v in normal) if normal else "-"
        print(
            f"{row['figure']:<26}{values:>30}{row['spread']:>8.1%}{normal_text:>30}{_pct(row['normalised_spread']):>8}"
        )
    plateau = summary["memory_plateau"]
    if plateau:
        print(
            f"memory plateau (sum_plateau_gbps) spread across the calibrations: raw {plateau['spread']:.1%}, "
            f"normalised {_pct(plateau['normalised_spread'])} (target <= {PLATEAU_TARGET:.0%} normalised)"
        )
    for i, loop in enumerate(loops, start=1):
        probe = loop["probe"]
        if probe:
            print(
                f"run {i} calibration ({loop['seconds']:.0f} s, load {loop['load_1min'][0]:.1f} -> "
                f"{loop['load_1min'][1]:.1f}): probe spread "
                + ", ".join(f"{part} {probe.get(f'{part}_spread', 0.0):.1%}" for part in PARTS)
                + "; one probe's noise "
                + " / ".join(f"{probe.get(f'probe_{part}_noise', 0.0):.1%}" for part in PARTS)
                + f"; suites repeated: {', '.join(loop['repeated']) or 'none'}"
                + _gemm_reference_text(loop.get("gemm_reference") or {})
            )
        if "validation" in loop:
            print(_validation_line(f"run {i} validation", loop["validation"]))
    if summary["under_load"]:
        print(
            _validation_line(
                f"under load (memory streamer) vs run {len(loops)}'s profile", summary["under_load"]
            )
        )
    for name in ("as_measured", "normalised"):
        mapes = [loop["validation"][name] for loop in loops if "validation" in loop]
        if mapes:
            print(
                f"profiles {name.replace('_', ' ')}: MAPE raw "
                + " / ".join(f"{m['mape']:.1%}" for m in mapes)
                + ", drift-corrected "
                + " / ".join(_pct(m["mape_corrected"]) for m in mapes)
                + f" (each <= {TARGET:.0%}: "
                + (
                    "yes"
                    if all(m["mape"] <= TARGET and (m["mape_corrected"] or 1) <= TARGET for m in mapes)
                    else "no"
                )
                + ")"
            )
    for line in must_show(summary):
        print(line)


def _gemm_reference_text(reference: dict[str, float]) -> str:
    """The GEMM suite's in-suite reference (`fit_quality.gemm_reference`) in a few words; '' without one."""
    if not reference:
        return ""
    return (
        f"; GEMM suite's in-suite reference {reference['reference_stream_gemm_tflops'] * 1e3:.3g} GFLOP/s, "
        f"spread {reference['reference_spread']:.1%}, one round's scatter {reference['reference_scatter']:.1%}, "
        f"{reference['reference_rounds_corrected']:.0f}/{reference['reference_rounds']:.0f} rounds corrected"
    )


def must_show(summary: dict[str, Any]) -> list[str]:
    """Issue 24's figures, for the profile `moesim calibrate` writes (as measured unless DRIFT_NORMALISATION)."""
    from moesim.calibrate.fits.drift import DRIFT_NORMALISATION

    name = "normalised" if DRIFT_NORMALISATION else "as_measured"
    loops = [loop for loop in summary["loops"] if "validation" in loop]
    lines = [f"must show (issue 24), profiles {name.replace('_', ' ')} (calibrate's default):"]
    if loops:
        scored = [loop["validation"][name] for loop in loops]
        ok = all(s["mape"] <= TARGET and (s["mape_corrected"] or 1.0) <= TARGET for s in scored)
        lines.append(
            f"- {len(loops)} back-to-back quick loops: MAPE raw "
            + " / ".join(f"{s['mape']:.1%}" for s in scored)
            + ", drift-corrected "
            + " / ".join(_pct(s["mape_corrected"]) for s in scored)
            + f"; each <= {TARGET:.0%}: {'yes' if ok else 'no'} (goal 5%)"
        )
        for i, loop in enumerate(loops, start=1):
            probe, during = loop["probe"], loop["validation"][name]["probe_spread"]
            lines.append(
                f"- run {i} probe spread ({' / '.join(PARTS)}): calibration "
                + " / ".join(f"{probe.get(f'{part}_spread', 0.0):.1%}" for part in PARTS)
                + ", validation "
                + " / ".join(f"{during.get(part, 0.0):.1%}" for part in PARTS)
            )
    plateau = summary["memory_plateau"]
    if plateau:
        lines.append(
            f"- memory plateau across the calibrations: raw {plateau['spread']:.1%}, normalised "
            f"{_pct(plateau['normalised_spread'])} (target <= {PLATEAU_TARGET:.0%} normalised)"
        )
    loaded = summary["under_load"]
    if loaded and loops:
        s, quiet = loaded[name], loops[-1]["validation"][name]
        added = s["mape"] - quiet["mape"]
        recovered = s["mape"] - (s["mape_corrected"] if s["mape_corrected"] is not None else s["mape"])
        lines.append(
            f"- under a memory-streaming neighbour, the last profile: MAPE raw {s['mape']:.1%}, drift-corrected "
            f"{_pct(s['mape_corrected'])} (quiet {quiet['mape']:.1%}): the load added {added * 100:+.1f} points, the "
            f"correction recovered {recovered * 100:+.1f}; the probe saw "
            + ", ".join(f"{part} x{value:.3f}" for part, value in s["speed_vs_calibration"].items())
        )
    return lines


def _validation_line(title: str, v: dict[str, Any]) -> str:
    parts = []
    for name in ("as_measured", "normalised"):
        s = v[name]
        parts.append(
            f"{name.replace('_', ' ')} MAPE raw {s['mape']:.1%}, drift-corrected {_pct(s['mape_corrected'])}"
        )
    s = v["as_measured"]
    return (
        f"{title} ({s['n']} rows, {v['seconds']:.0f} s, load {v['load_1min'][0]:.1f} -> {v['load_1min'][1]:.1f}): "
        + "; ".join(parts)
        + "; probe spread "
        + ", ".join(f"{part} {value:.1%}" for part, value in s["probe_spread"].items())
        + "; speed vs calibration "
        + ", ".join(f"{part} x{value:.3f}" for part, value in s["speed_vs_calibration"].items())
        + " (rows corrected "
        + "/".join(str(n) for n in s["rows_corrected"].values())
        + ")"
    )


if __name__ == "__main__":
    sys.exit(main())

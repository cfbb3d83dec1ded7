"""Run the suites with checkpoints, fit, and write the profile atomically.

Every suite's raw rows go to `<output stem>.<suite>.csv` (atomically, as soon as the suite finishes), headed
by a comment line recording what they were measured with. A rerun with the same device and settings reuses
those files and measures only what is missing, so an interrupted or partly failed run resumes; `fresh`
ignores them. The profile itself is written last, atomically.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moesim import __version__
from moesim.atomic import atomic_write_text
from moesim.calibrate import SUITES
from moesim.calibrate.fits.build import Measurements, build_profile, bundled_match, default_name, fit_rows
from moesim.calibrate.fits.drift import (
    DRIFT_NORMALISATION,
    MIN_DRIFT,
    NOISE_MULTIPLE,
    ProbeSample,
    suite_drift_in_run,
    suite_parts,
)
from moesim.calibrate.suites.plan import Plan, make_plan
from moesim.calibrate.suites.probe import PROBE_FIGURES
from moesim.calibrate.suites.timing import (
    Timer,
    check_dtype,
    cpu_caches,
    cpu_model,
    mem_total_bytes,
    provenance_software,
    resolve_device,
    today,
)
from moesim.errors import MoesimError
from moesim.reading import csv_rows, expect_table, parse_json, read_text
from moesim.simulator.hardware.profile import HardwareProfile, save_profile

PROBE_TABLE = "probe"  # `<stem>.probe.csv`: the drift probes taken before and after each suite
HEADER_PREFIX = "# moesim-calibrate "
# One thread by default on CPUs: on small VMs an OpenMP worker that went to sleep between ops takes up to a
# scheduler tick (~8 ms seen here on 2 vCPUs) to wake, which swamps every op shorter than that. --threads
# measures with more; the profile records the count, and CPU runs it predicts must use the same.
CPU_DEFAULT_THREADS = 1
Row = dict[str, Any]
Progress = Callable[[float], None]  # a suite's progress callback: the fraction done
# reporter(suite) → the SuiteReporter that shows that suite's progress and outcome.
ProgressFactory = Callable[[str], "SuiteReporter"]


class SuiteReporter:
    """What the runner tells the user about one suite; the CLI subclasses it with a rich progress bar."""

    def update(self, fraction: float) -> None:
        pass

    def done(self, status: str) -> None:
        pass


# ---------------------------------------------------------------------------------------------- CSV


def suite_path(output: Path, suite: str) -> Path:
    """Where a suite's raw rows live: next to the profile, `<stem>.<suite>.csv`."""
    return output.with_name(f"{output.stem}.{suite}.csv")


def write_rows(path: Path, rows: list[Row], meta: dict[str, Any]) -> None:
    """Write rows as CSV headed by a metadata comment, atomically."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    buffer = io.StringIO()
    buffer.write(HEADER_PREFIX + json.dumps(meta, sort_keys=True) + "\n")
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in row.items()})
    atomic_write_text(path, buffer.getvalue())


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return repr(float(value))  # full precision, and a plain number for numpy floats too
    return value


def read_rows(path: Path) -> tuple[dict[str, Any], list[Row]]:
    """Metadata and rows of a suite CSV (numbers parsed); MoesimError if it is not one of ours."""
    text = read_text("--from-csv", path, "calibration suite CSV")
    first, _, rest = text.partition("\n")
    if not first.startswith(HEADER_PREFIX):
        raise MoesimError(
            "--from-csv", f"{path} has no moesim-calibrate header", "give CSVs `calibrate` wrote"
        )
    meta = expect_table(
        "--from-csv",
        parse_json("--from-csv", first[len(HEADER_PREFIX) :], str(path), "CSV header"),
        str(path),
        "CSV header",
    )
    _, records = csv_rows(
        "--from-csv", rest, str(path), "calibration suite CSV"
    )  # duplicates, ragged refused
    rows = [{k: _parse(v) for k, v in row.items()} for row in records]
    return meta, rows


def _parse(value: str) -> Any:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value
    return int(number) if value.lstrip("-").isdigit() else number


# ---------------------------------------------------------------------------------------------- run


@dataclass
class CalibrationResult:
    profile: HardwareProfile
    output: Path
    csv_paths: dict[str, Path]
    resumed: list[str]
    failures: dict[str, str]
    fit_path: Path
    notes: list[str] = field(default_factory=list)
    wall_s: dict[str, float] = field(default_factory=dict)  # seconds each measured suite took


def _plan_digest(plan: Plan) -> str:
    return hashlib.sha256(repr(plan).encode()).hexdigest()[:16]


_META_SOFTWARE = ("torch", "cuda", "rocm", "driver", "compute_capability", "cpu_model")


def _suite_meta(suite: str, device: Any, plan: Plan, dtypes: list[str]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "suite": suite,
        "device": device.name,
        "backend": device.backend,
        "threads": device.threads,
        "quick": plan.quick,
        "plan": _plan_digest(plan),
    }
    if suite in ("gemm", "moe"):
        meta["dtypes"] = ",".join(dtypes)
    # Stable software versions (not clocks), so a profile rebuilt from these files alone can name them.
    meta["software"] = {k: v for k, v in device.details.items() if k in _META_SOFTWARE}
    return meta


def default_dtypes(is_gpu: bool) -> list[str]:
    """bf16 on GPUs; fp32 on CPUs, where bf16 GEMMs are often emulated (the gemm suite can measure both)."""
    return ["bf16"] if is_gpu else ["fp32"]


def calibrate(
    device_kind: str,
    output: str | Path,
    *,
    quick: bool = False,
    dtypes: list[str] | None = None,
    name: str | None = None,
    fresh: bool = False,
    threads: int | None = None,
    suites: tuple[str, ...] = SUITES,
    plan: Plan | None = None,
    reporter: ProgressFactory | None = None,
    command: str = "",
    normalise_drift: bool = DRIFT_NORMALISATION,
) -> CalibrationResult:
    """Measure, fit and write a profile for the local `device_kind`; returns the profile and file paths."""
    output = _profile_path(output)
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise MoesimError("--suites", f"unknown suite {unknown[0]!r}", f"choose from {', '.join(SUITES)}")
    if device_kind == "cpu" and threads is None:
        threads = CPU_DEFAULT_THREADS
    device = resolve_device(device_kind, threads)
    dtypes = dtypes or default_dtypes(device.is_gpu)
    for dtype in dtypes:
        check_dtype(device, dtype)
    plan = plan or make_plan(
        device.is_gpu, device.last_level_cache_bytes, device.memory_capacity_bytes, quick
    )
    timer = Timer(device, plan.flush_bytes)
    report = reporter or (lambda suite: SuiteReporter())
    probe = _start_probe(timer, device)
    old_probes = read_probes(suite_path(output, PROBE_TABLE)) if not fresh else []
    probes: list[ProbeSample] = []

    tables: dict[str, list[Row] | None] = {}
    csv_paths: dict[str, Path] = {}
    resumed: list[str] = []
    failures: dict[str, str] = {}
    wall_s: dict[str, float] = {}
    drift_notes: list[str] = []
    for suite in SUITES:
        path = suite_path(output, suite)
        meta = _suite_meta(suite, device, plan, dtypes)
        if not fresh and path.is_file():
            try:
                old_meta, rows = read_rows(path)
            except MoesimError:
                old_meta, rows = {}, []
            if old_meta == meta and rows:
                tables[suite] = rows
                csv_paths[suite] = path
                resumed.append(suite)
                probes += [p for p in old_probes if p.label.partition(":")[2] == suite]
                report(suite).done("resumed from " + path.name)
                continue
        if suite not in suites:
            tables[suite] = None
            continue
        bar = report(suite)
        started = time.perf_counter()
        try:
            rows, suite_probes = _run_probed(
                suite, timer, device, plan, dtypes, bar.update, probe, drift_notes, probes
            )
        except KeyboardInterrupt:
            bar.done("interrupted")
            raise
        except MoesimError:
            raise
        except Exception as error:  # one suite's failure must not lose the others
            failures[suite] = f"{type(error).__name__}: {error}"
            bar.done(f"failed: {failures[suite]}")
            tables[suite] = None
            continue
        write_rows(path, rows, meta)
        probes += suite_probes
        if probe is not None:  # checkpointed with the suite, so a resumed suite keeps its probes
            _write_probes(output, probes, device, probe)
        tables[suite] = rows
        csv_paths[suite] = path
        wall_s[suite] = time.perf_counter() - started
        bar.done(f"{len(rows)} rows → {path.name} in {wall_s[suite]:.2f} s")

    notes = [
        f"calibration dtypes: {','.join(dtypes)}"
        + (" (default for this device)" if dtypes == default_dtypes(device.is_gpu) else "")
    ]
    if not device.is_gpu:
        notes.append(
            f"cpu: measured with {device.threads} torch thread(s); predict runs that use the same count"
        )
    for suite, message in failures.items():
        notes.append(f"{suite} suite failed: {message}")
    notes += drift_notes
    if probe is not None:
        probe.close()
        if probes:
            _write_probes(output, probes, device, probe)
            csv_paths[PROBE_TABLE] = suite_path(output, PROBE_TABLE)
    if wall_s:
        notes.append(
            "suite wall time: " + ", ".join(f"{suite} {seconds:.2f} s" for suite, seconds in wall_s.items())
        )
    meas = Measurements(
        device_name=device.name,
        backend=device.backend,
        dtypes=dtypes,
        memory_capacity_bytes=device.memory_capacity_bytes,
        reported_llc_bytes=device.last_level_cache_bytes,
        compute_units=device.compute_units,
        memory=tables.get("memory"),
        launch=tables.get("launch"),
        gemm=tables.get("gemm"),
        moe=tables.get("moe"),
        software=provenance_software(device, dtypes),
        source=command or f"moesim calibrate --device {device_kind}{' --quick' if plan.quick else ''}",
        date=today(),
        notes=notes,
        probes=probes,
        probe_plan=probe.plan.figures() if probe is not None else {},
        normalise_drift=normalise_drift,
    )
    meas.software["clock"] = timer.clock_name
    if timer.lead_failures:
        meas.notes.append(
            f"warning: {timer.lead_failures} GPU timings could not keep the device busy ahead of the host "
            "(they may include host launch time)"
        )
    if device.kind == "cpu" and device.inner_cache_bytes:
        meas.software["reported_l2_bytes"] = str(int(device.inner_cache_bytes))
    profile, fit_path = _build_and_write(
        meas, name or default_name(device.name, device.backend), output, command
    )
    return CalibrationResult(profile, output, csv_paths, resumed, failures, fit_path, notes, wall_s)


def rebuild_from_csv(
    device_kind: str,
    output: str | Path,
    *,
    source: str | Path | None = None,
    name: str | None = None,
    reporter: ProgressFactory | None = None,
    command: str = "",
    normalise_drift: bool = DRIFT_NORMALISATION,
) -> CalibrationResult:
    """Fit a profile from suite CSVs already measured (`<source>.<suite>.csv`), without touching a device.

    `source` is a path stem (default: the output's own stem beside it). Suites whose CSV is missing or
    unreadable fall back exactly as a failed suite does (bundled datasheet values, noted in the profile's
    assumptions). CSVs read from elsewhere are copied beside the output under its stem.
    """
    output = _profile_path(output)
    stem = Path(source) if source else output.with_suffix("")
    report = reporter or (lambda suite: SuiteReporter())
    tables: dict[str, list[Row] | None] = {}
    metas: dict[str, dict[str, Any]] = {}
    csv_paths: dict[str, Path] = {}
    missing: dict[str, str] = {}
    for suite in SUITES:
        path = stem.with_name(f"{stem.name}.{suite}.csv")
        try:
            meta, rows = read_rows(path)
        except MoesimError as error:
            missing[suite] = error.problem
        else:
            if meta.get("suite") != suite or not rows:
                missing[suite] = f"{path.name} is not a {suite} suite table with rows"
            else:
                tables[suite], metas[suite] = rows, meta
        if suite in missing:
            tables[suite] = None
            report(suite).done(f"missing: {missing[suite]}")
            continue
        target = suite_path(output, suite)
        if path.resolve() != target.resolve():
            write_rows(target, tables[suite] or [], metas[suite])
        csv_paths[suite] = target
        report(suite).done(f"{len(rows)} rows from {path.name}")
    if not metas:
        raise MoesimError(
            "--from-csv",
            f"no suite CSV found at {stem}.<suite>.csv",
            "point --from-csv at the stem of an earlier run's files, e.g. out/h200 for out/h200.memory.csv",
        )
    first = next(iter(metas.values()))
    backend = str(first.get("backend", device_kind))
    if (backend == "cpu") != (device_kind == "cpu"):
        raise MoesimError(
            "--device",
            f"the CSVs were measured on {backend}, not {device_kind}",
            f"use --device {device_kind}",
        )
    for suite, meta in metas.items():
        if meta.get("device") != first.get("device") or meta.get("backend") != backend:
            raise MoesimError(
                "--from-csv",
                f"{suite} CSV was measured on {meta.get('device')!r}, the others on {first.get('device')!r}",
                "rebuild from one device's files",
            )
    device_name = str(first.get("device", ""))
    if backend != "cpu" and bundled_match(device_name) is None:
        raise MoesimError(
            "--from-csv",
            f"no bundled datasheet matches {device_name!r}, and without the device its capacity and "
            "peaks are unknown",
            "rerun `moesim calibrate` on that GPU (completed suites' CSVs are reused)",
        )
    dtype_text = next((str(m["dtypes"]) for m in metas.values() if m.get("dtypes")), "")
    dtypes = dtype_text.split(",") if dtype_text else default_dtypes(backend != "cpu")
    memory_bytes, llc_bytes, units = 0.0, 0.0, 1
    if backend == "cpu":
        if cpu_model() != device_name:
            raise MoesimError(
                "--from-csv",
                f"CPU CSVs from {device_name!r} cannot be rebuilt on {cpu_model()!r}: a CPU profile's datasheet "
                "(capacity, caches) is read from the machine itself",
                "rebuild on the machine that measured them, or rerun the calibration here",
            )
        llc_bytes = cpu_caches()[0]
        memory_bytes = mem_total_bytes()
        units = os.cpu_count() or 1
    notes = [
        f"rebuilt from suite CSVs without a device ({stem.name}.<suite>.csv); calibration dtypes: "
        + ",".join(dtypes)
    ]
    plans = sorted({str(m.get("plan")) for m in metas.values()})
    quick = sorted({bool(m.get("quick")) for m in metas.values()})
    notes.append(f"suite plans: {', '.join(plans)}; quick: {', '.join(str(q) for q in quick)}")
    for suite, why in missing.items():
        notes.append(f"{suite} suite missing ({why}): treated as a failed suite")
    if "moe" in missing:
        notes.append("no MoE-block measurements: fit_quality has no moe_* evidence of per-expert cost")
    software: dict[str, str] = {"device": device_name, "backend": backend, "dtypes": ",".join(dtypes)}
    for meta in metas.values():
        software.update({k: str(v) for k, v in dict(meta.get("software") or {}).items()})
    if "threads" in first:
        software["threads"] = str(first["threads"])
    if not any(k in software for k in ("torch", "cuda", "rocm")):
        notes.append("software versions: not recorded in these suite CSVs (written before moesim kept them)")
    software["moesim"] = __version__
    probe_file = stem.with_name(f"{stem.name}.{PROBE_TABLE}.csv")
    probes = read_probes(probe_file)
    probe_figures: dict[str, float] = {}
    if probes:
        probe_meta, probe_rows = read_rows(probe_file)
        probe_figures = {k: float(probe_meta[k]) for k in PROBE_FIGURES if k in probe_meta}
        target = suite_path(output, PROBE_TABLE)
        if probe_file.resolve() != target.resolve():
            write_rows(target, probe_rows, probe_meta)
        csv_paths[PROBE_TABLE] = target
    else:
        notes.append(f"no drift probes ({probe_file.name} missing): suites fitted as measured")
    meas = Measurements(
        device_name=device_name,
        backend=backend,
        dtypes=dtypes,
        memory_capacity_bytes=memory_bytes,
        reported_llc_bytes=llc_bytes,
        compute_units=units,
        memory=tables.get("memory"),
        launch=tables.get("launch"),
        gemm=tables.get("gemm"),
        moe=tables.get("moe"),
        software=software,
        source=command or f"moesim calibrate --device {device_kind} --from-csv {stem}",
        date=today(),
        notes=notes,
        probes=probes,
        probe_plan=probe_figures,
        normalise_drift=normalise_drift,
    )
    profile, fit_path = _build_and_write(
        meas, name or default_name(device_name, backend), output, meas.source
    )
    return CalibrationResult(profile, output, csv_paths, [], dict(missing), fit_path, notes)


def _profile_path(output: str | Path) -> Path:
    """The profile file to write, refused unless it is a .toml."""
    path = Path(output)
    if path.suffix != ".toml":
        raise MoesimError(
            "--output", f"profile files end in .toml, got {path.name!r}", "e.g. --output cpu.toml"
        )
    return path


def _build_and_write(
    meas: Measurements, name: str, output: Path, command: str
) -> tuple[HardwareProfile, Path]:
    """Fit the profile, write its fit residuals (`<stem>.fit.csv`) and then the profile itself."""
    profile, fits = build_profile(meas, name)
    fit_path = output.with_name(f"{output.stem}.fit.csv")
    write_rows(fit_path, fit_rows(fits), {"suite": "fit", "profile": profile.name})
    save_profile_file(profile, output, command)
    return profile, fit_path


def save_profile_file(profile: HardwareProfile, output: Path, command: str) -> None:
    """Write the profile atomically with a header naming the command and the raw CSVs."""
    header = (
        f"moesim hardware profile '{profile.name}' (measured).\n"
        f"Made by: {command or 'moesim calibrate'}\n"
        f"Raw measurements: {output.stem}.<suite>.csv beside this file; fit residuals: {output.stem}.fit.csv"
    )
    save_profile(profile, output, header)


def _start_probe(timer: Timer, device: Any) -> Any:
    """The drift probe for this device, or None where its buffers cannot be set up (the run goes on unprobed)."""
    from moesim.calibrate.suites.probe import Probe

    try:
        return Probe(timer, device)
    except (RuntimeError, MemoryError):
        return None


def _write_probes(output: Path, probes: list[ProbeSample], device: Any, probe: Any) -> None:
    """`<stem>.probe.csv`: every probe of the run so far, headed by what the probe times."""
    meta = {
        "suite": PROBE_TABLE,
        "device": device.name,
        "probe": probe.plan.describe(),
    } | probe.plan.figures()
    write_rows(suite_path(output, PROBE_TABLE), [p.as_row() for p in probes], meta)


def read_probes(path: Path) -> list[ProbeSample]:
    """The probes an earlier run wrote (for the suites a rerun resumes); none if there is no such file."""
    if not path.is_file():
        return []
    try:
        meta, rows = read_rows(path)
        return [ProbeSample.from_row(row) for row in rows] if meta.get("suite") == PROBE_TABLE else []
    except (MoesimError, KeyError, ValueError):
        return []


def _run_probed(
    suite: str,
    timer: Any,
    device: Any,
    plan: Plan,
    dtypes: list[str],
    progress: Callable[[float], None],
    probe: Any,
    notes: list[str],
    earlier: list[ProbeSample] | None = None,
) -> tuple[list[Row], list[ProbeSample]]:
    """Run a suite between two probes; if a part the suite's figures follow drifted beyond the probes' noise
    while it ran (`drift.SuiteDrift.drifted`; each probe's noise at least the scatter between successive
    probes of the run so far, `earlier` in time order: `drift.suite_drift_in_run`), warn and run it once more,
    keeping the attempt that drifted less relative to its threshold (its probes label it; the other's are
    dropped)."""
    if probe is None or not suite_parts(suite, device.is_gpu):
        return _run_suite(suite, timer, device, plan, dtypes, progress, probe), []
    attempts = []
    history = list(earlier or [])  # the earlier suites' probes: a drifted first attempt's would be circular
    for attempt in range(2):
        before = probe.sample(f"before:{suite}")
        rows = _run_suite(suite, timer, device, plan, dtypes, progress, probe)
        after = probe.sample(f"after:{suite}")
        moved = suite_drift_in_run(suite, before, after, history, is_gpu=device.is_gpu)
        attempts.append((moved, rows, [before, after]))
        if not moved.drifted:
            break
        if attempt == 0:
            notes.append(
                f"warning: the machine drifted {moved.drift:.1%} during the {suite} suite (threshold "
                f"{moved.threshold:.1%}: {NOISE_MULTIPLE:g} x the probes' noise or scatter, at least {MIN_DRIFT:.0%}; probe "
                f"memory {before.memory_gbps:.3g} -> {after.memory_gbps:.3g} GB/s, compute "
                f"{before.compute_tflops:.3g} -> {after.compute_tflops:.3g} TFLOP/s, dispatch {before.dispatch_us:.3g} "
                f"-> {after.dispatch_us:.3g} us/op): repeating the suite once"
            )
    moved, rows, kept = min(attempts, key=lambda item: item[0].excess)
    if len(attempts) > 1:
        which = "repeat" if kept is attempts[1][2] else "first run"
        notes.append(
            f"{suite} suite repeated: drift {attempts[0][0].drift:.1%} then {attempts[1][0].drift:.1%}; kept the "
            + which
            + (" (still beyond the probe's noise: its figures carry that drift)" if moved.drifted else "")
        )
    return rows, kept


def _run_suite(
    suite: str, timer: Any, device: Any, plan: Plan, dtypes: list[str], progress: Progress, probe: Any = None
) -> list[Row]:
    """One suite's rows; the GEMM suite reads the probe's streaming GEMM in every round as its reference."""
    if suite == "memory":
        from moesim.calibrate.suites.memory import run_memory

        return run_memory(timer, device, plan, progress)
    if suite == "launch":
        from moesim.calibrate.suites.launch import run_launch

        return run_launch(timer, device, plan, progress)
    if suite == "gemm":
        from moesim.calibrate.suites.gemm import run_gemm

        reference = probe.stream_reference if probe is not None else None
        return run_gemm(timer, device, plan, dtypes, progress, reference)
    from moesim.calibrate.suites.moe import run_moe

    return run_moe(timer, device, plan, dtypes[0], progress)

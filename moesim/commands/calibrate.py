"""`moesim calibrate`: measure the local device and write a hardware profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from moesim.atomic import check_output_path, is_special_target
from moesim.calibrate.request import CalibrationRequest, Way
from moesim.commands.common import emit_json, handle_errors, make_console
from moesim.commands.fields import field_options, fields_of
from moesim.errors import MoesimError
from moesim.options import option_fields


@click.command("calibrate")
@field_options(CalibrationRequest, *option_fields(CalibrationRequest))
@click.option("--json", "as_json", is_flag=True, help="Print the fitted parameters as JSON.")
@handle_errors
def calibrate_command(as_json: bool, **flags: Any) -> None:
    """Measure memory, launch, GEMM and MoE-block costs on this device and fit them into a profile
    (or, with --from-runs, fit a serving-engine profile to measured runs)."""
    request = CalibrationRequest(**fields_of(CalibrationRequest, flags))
    way = request.way()
    if way == "from_silicon":
        _from_silicon(request, as_json)
    elif way == "from_runs":
        _engine_from_runs(request, as_json)
    else:
        result = _measure(request, way, quiet=as_json)
        if as_json:
            emit_json(_summary(result))
        else:
            _print_result(result)


def _measure(request: CalibrationRequest, way: Way, quiet: bool) -> Any:
    """Run the suites (or refit their CSVs) with one progress bar per suite on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from moesim.calibrate.suites.runner import SuiteReporter, calibrate, rebuild_from_csv

    output = request.output
    assert request.device is not None and output is not None  # `way()` checked both
    check_output_path("--output", output)
    if is_special_target(output):
        raise MoesimError(
            "--output", f"{output} is not a regular file", "give a .toml path: the suite CSVs go beside it"
        )
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=False,
        disable=quiet and not console.is_terminal,
    ) as progress:

        class Bar(SuiteReporter):
            def __init__(self, suite: str) -> None:
                self.task = progress.add_task(suite, total=1.0, status="")

            def update(self, fraction: float) -> None:
                progress.update(self.task, completed=fraction)

            def done(self, status: str) -> None:
                progress.update(self.task, completed=1.0, status=status)

        name, command = request.name, request.command_line()
        if way == "from_csv":
            source = request.from_csv or None
            return rebuild_from_csv(
                request.device,
                Path(output),
                source=source,
                name=name,
                reporter=Bar,
                command=command,
                normalise_drift=request.normalise_drift,
            )
        return calibrate(
            request.device,
            Path(output),
            quick=request.quick,
            dtypes=request.dtype_list(),
            name=name,
            fresh=request.fresh,
            threads=request.threads,
            suites=request.suite_list(),
            reporter=Bar,
            command=command,
            normalise_drift=request.normalise_drift,
        )


def memory_plateau_gbps(profile: Any) -> float:
    """The memory suite's streaming plateau (GB/s) as the profile carries it: the achieved bandwidth times the
    element-wise fraction (on a CPU the achieved bandwidth is the one-row GEMMs' weight stream)."""
    em = profile.empirical
    achieved_gbps: float = profile.datasheet.memory_bandwidth_gbps * em.memory_bandwidth_fraction
    return achieved_gbps * em.elementwise_bandwidth_fraction


def _print_result(result: Any) -> None:
    """The fitted parameters of a calibration, one per line, with the probe's drift and any warnings."""
    em = result.profile.empirical
    ds = result.profile.datasheet
    console = make_console()
    console.print(f"[bold]{result.profile.name}[/bold] → {result.output}")
    achieved_gbps = ds.memory_bandwidth_gbps * em.memory_bandwidth_fraction
    console.print(f"  memory plateau        {memory_plateau_gbps(result.profile):10.1f} GB/s")
    if em.elementwise_bandwidth_fraction != 1.0:
        console.print(f"  GEMM weight stream    {achieved_gbps:10.1f} GB/s")
    console.print(f"  cache bandwidth       {em.cache_bandwidth_gbps:10.1f} GB/s")
    console.print(
        f"  cache capacity (knee) {em.cache_effective_bytes / 2**20:10.1f} MiB"
        f"   (reported LLC {ds.last_level_cache_bytes / 2**20:.1f} MiB)"
    )
    console.print(f"  half-bandwidth read   {em.half_bandwidth_transfer_bytes / 2**10:10.1f} KiB")
    console.print(f"  eager launch/dispatch {em.launch_eager_us:10.2f} us")
    if em.launch_eager_gemm_us is not None:
        console.print(f"  eager GEMM launch     {em.launch_eager_gemm_us:10.2f} us")
    console.print(f"  kernel fixed latency  {em.kernel_fixed_latency_us:10.2f} us")
    if not result.profile.is_cpu:
        console.print(f"  graph gap / launch    {em.launch_graph_gap_us:10.2f} / {em.graph_launch_us:.2f} us")
        console.print(f"  sync                  {em.sync_us:10.2f} us")
    for dtype, peak in ds.peak_dense_tflops.items():
        console.print(f"  peak {dtype:<5}            {peak:10.3f} TFLOP/s")
    if result.wall_s:
        console.print(
            "  suite wall time       " + ", ".join(f"{k} {v:.2f} s" for k, v in result.wall_s.items())
        )
    probe = result.profile.fit_quality.get("drift_probe")
    if probe:
        console.print(
            f"  drift probe           memory {probe['memory_spread']:.1%}, compute {probe['compute_spread']:.1%} "
            f"spread over {probe['n_probes']:.0f} probes; largest drift within a suite {probe['max_suite_drift']:.1%}"
        )
    for note in result.notes:
        if note.startswith("warning:") or " suite repeated: " in note:
            console.print(f"[yellow]  {note}[/yellow]")
    if result.failures:
        for suite, message in result.failures.items():
            console.print(f"[yellow]  {suite} suite failed: {message}[/yellow]")


def _engine_from_runs(request: CalibrationRequest, as_json: bool) -> None:
    from moesim.commands.engines import print_fit
    from moesim.validation.runs.fit import fit_profile_from_runs

    assert request.from_runs and request.serving_engine and request.output  # `way()` checked them
    data = fit_profile_from_runs(
        request.from_runs, request.serving_engine, request.output, request.fit, request.all_engines
    )
    if as_json:
        emit_json(data)
    else:
        print_fit(data)


def _summary(result: Any) -> dict[str, Any]:
    from moesim.simulator.hardware.profile import profile_to_dict

    return {
        "output": str(result.output),
        "profile": profile_to_dict(result.profile),
        "csv": {suite: str(path) for suite, path in result.csv_paths.items()},
        "fit_csv": str(result.fit_path),
        "resumed": result.resumed,
        "failures": result.failures,
        "wall_s": result.wall_s,
    }


def _from_silicon(request: CalibrationRequest, as_json: bool) -> None:
    """`--from-silicon list` prints the database; `--from-silicon SYSTEM/FRAMEWORK` fits and writes a profile."""
    from moesim.calibrate.fits.silicon import tables

    selection, silicon_data, output = request.from_silicon, request.silicon_data, request.output
    assert selection is not None

    if selection.strip().lower() == "list":
        root = tables.database_root(silicon_data)
        collections = tables.scan(root)
        if as_json:
            emit_json(
                [
                    {**{k: getattr(c, k) for k in ("system", "op", "framework", "version", "table", "rows")}}
                    for c in collections
                ]
            )
            return
        click.echo(tables.listing(collections, root))
        return
    assert output is not None  # `way()` checked it
    check_output_path("--output", output)
    from moesim.calibrate.fits.silicon.build import calibrate_from_silicon
    from moesim.simulator.hardware.profile import save_profile

    result = calibrate_from_silicon(selection, silicon_data)
    save_profile(
        result.profile, output, header=f"moesim silicon profile '{result.profile.name}' ({selection})"
    )
    rows = [
        {
            "term": term,
            "table": q.table,
            "rows_fit": q.rows_fit,
            "rows_held_out": q.rows_held_out,
            "mape_fit_percent": round(q.mape_fit_percent, 2),
            "mape_held_out_percent": round(q.mape_held_out_percent, 2),
            "datasheet_mape_held_out_percent": round(result.baseline[term].mape_held_out_percent, 2)
            if term in result.baseline
            else None,
        }
        for term, q in result.quality.items()
    ]
    if as_json:
        emit_json({"profile": result.profile.name, "output": output, "fits": rows})
        return
    click.echo(f"{result.profile.name} (silicon, {result.selection.name}) -> {output}")
    for r in rows:
        baseline = r["datasheet_mape_held_out_percent"]
        versus = f"; datasheet profile {baseline:.1f}%" if baseline is not None else ""
        click.echo(
            f"  {r['term']:<42} {r['rows_fit']:>5} rows fit {r['mape_fit_percent']:5.1f}% | "
            f"{r['rows_held_out']:>5} held out {r['mape_held_out_percent']:5.1f}%{versus}   ({r['table']})"
        )

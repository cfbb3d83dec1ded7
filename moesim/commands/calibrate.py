"""`moesim calibrate`: measure the local device and write a hardware profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from moesim.atomic import check_output_path, is_special_target
from moesim.commands.common import emit_json, handle_errors, make_console
from moesim.commands.fields import WHOLE_NUMBER
from moesim.errors import MoesimError
from moesim.simulator.bounds import check_count


def _dtypes(text: str | None) -> list[str] | None:
    if text is None:
        return None
    from moesim.calibrate.suites.timing import DTYPES

    values = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not values:
        raise MoesimError("--dtype", "needs at least one dtype", f"choose from {', '.join(DTYPES)}")
    for value in values:
        if value not in DTYPES:
            raise MoesimError("--dtype", f"unknown dtype {value!r}", f"choose from {', '.join(DTYPES)}")
    return list(dict.fromkeys(values))


def _suites(text: str | None) -> tuple[str, ...]:
    from moesim.calibrate.suites.runner import SUITES

    if text is None:
        return SUITES
    values = tuple(part.strip() for part in text.split(",") if part.strip())
    for value in values:
        if value not in SUITES:
            raise MoesimError("--suites", f"unknown suite {value!r}", f"choose from {', '.join(SUITES)}")
    return values


MAX_THREADS = 4096
"""The most torch threads `--threads` takes (beyond the cores of any one machine built)."""


@click.command("calibrate")
@click.option(
    "--device",
    "device",
    type=click.Choice(["cuda", "cpu"]),
    default=None,
    help="cuda (NVIDIA or ROCm) or cpu (required unless --from-runs).",
)
@click.option("--quick", is_flag=True, help="Smaller sweeps: under 3 minutes on a 2-core CPU.")
@click.option(
    "--dtype",
    "dtype_text",
    default=None,
    help="GEMM/MoE dtypes, e.g. bf16,fp32 (default bf16 on GPU, fp32 on CPU).",
)
@click.option(
    "--output",
    default=None,
    type=click.Path(dir_okay=False),
    help="Profile file to write (.toml); required except for --from-silicon list.",
)
@click.option("--name", default=None, help="Profile name (default from the device name).")
@click.option(
    "--fresh", is_flag=True, help="Ignore completed suites' CSVs from an earlier run and measure all again."
)
@click.option(
    "--threads",
    type=WHOLE_NUMBER,
    default=None,
    help="CPU only: torch threads to measure with (default: torch's).",
)
@click.option(
    "--suites",
    "suites_text",
    default=None,
    help="Only these suites (memory,launch,gemm,moe); others resume or fall back.",
)
@click.option(
    "--from-csv",
    "from_csv",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[STEM]",
    help="Measure nothing: refit the suite CSVs STEM.<suite>.csv (alone: the output's own) into the "
    "profile; missing suites fall back as failed ones do.",
)
@click.option(
    "--from-runs",
    "from_runs",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Measure nothing: fit --serving-engine's host parameters to measured serving runs (a CSV as "
    "`moesim validate runs --schema`), cross-validated, and write the fitted engine profile to --output.",
)
@click.option(
    "--serving-engine", "serving_engine", default=None, help="With --from-runs: the profile to start from."
)
@click.option(
    "--fit",
    "fit_text",
    default=None,
    help="With --from-runs: host parameters to fit, comma-separated (default: step_us, per_sequence_us, "
    "per_token_us, draft_step_us, accept_sync_us).",
)
@click.option(
    "--all-engines", is_flag=True, help="With --from-runs: fit to every row, not only the engine's own."
)
@click.option(
    "--from-silicon",
    "from_silicon",
    default=None,
    metavar="SYSTEM/FRAMEWORK[/VERSION] | list",
    help="Measure nothing: fit a `silicon` profile to NVIDIA aiconfigurator-core's measured kernel tables "
    "(e.g. h200_sxm/sglang; `list` shows what the database holds). Needs `pip install 'moesim[silicon]'`.",
)
@click.option(
    "--silicon-data",
    "silicon_data",
    default=None,
    type=click.Path(file_okay=False),
    help="With --from-silicon: the database's systems/data directory (default: the installed package's).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the fitted parameters as JSON.")
@handle_errors
def calibrate_command(
    device: str | None,
    quick: bool,
    dtype_text: str | None,
    output: str | None,
    name: str | None,
    fresh: bool,
    threads: int | None,
    suites_text: str | None,
    from_csv: str | None,
    from_runs: str | None,
    serving_engine: str | None,
    fit_text: str | None,
    all_engines: bool,
    from_silicon: str | None,
    silicon_data: str | None,
    as_json: bool,
) -> None:
    """Measure memory, launch, GEMM and MoE-block costs on this device and fit them into a profile
    (or, with --from-runs, fit a serving-engine profile to measured runs)."""
    if from_silicon is not None:
        for flag, given in (
            ("--device", device),
            ("--from-runs", from_runs),
            ("--from-csv", from_csv is not None),
        ):
            if given:
                raise MoesimError(flag, "does not apply with --from-silicon", f"drop {flag}")
        _from_silicon(from_silicon, silicon_data, output, as_json)
        return
    if silicon_data is not None:
        raise MoesimError("--silicon-data", "only applies with --from-silicon", "add --from-silicon")
    if output is None:
        raise MoesimError("--output", "is required", "give the profile file to write, e.g. --output gpu.toml")
    if from_runs is not None:
        measuring = (
            ("--device", device),
            ("--quick", quick),
            ("--dtype", dtype_text),
            ("--fresh", fresh),
            ("--threads", threads is not None),
            ("--suites", suites_text),
            ("--from-csv", from_csv is not None),
            ("--name", name),
        )
        for flag, given in measuring:
            if given:
                raise MoesimError(
                    flag, "does not apply with --from-runs (nothing is measured)", f"drop {flag}"
                )
        _engine_from_runs(from_runs, serving_engine, output, fit_text, all_engines, as_json)
        return
    if serving_engine or fit_text or all_engines:
        raise MoesimError("--serving-engine", "only applies with --from-runs", "add --from-runs FILE")
    if device is None:
        raise MoesimError("--device", "is required", "give --device cuda or --device cpu")
    if threads is not None:  # before torch is imported
        check_count(threads, "--threads", high=MAX_THREADS, fix="give at most the machine's cores")
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from moesim.calibrate.suites.runner import SuiteReporter, calibrate, rebuild_from_csv

    check_output_path("--output", output)
    if is_special_target(output):
        raise MoesimError(
            "--output", f"{output} is not a regular file", "give a .toml path: the suite CSVs go beside it"
        )
    if threads is not None and device != "cpu":
        raise MoesimError("--threads", "only applies to --device cpu", "drop --threads")
    if from_csv is not None:
        clashing = [
            flag
            for flag, given in (
                ("--quick", quick),
                ("--dtype", dtype_text),
                ("--fresh", fresh),
                ("--threads", threads is not None),
                ("--suites", suites_text),
            )
            if given
        ]
        if clashing:
            raise MoesimError(
                clashing[0], "does not apply with --from-csv (nothing is measured)", f"drop {clashing[0]}"
            )
    console = Console(stderr=True)
    command = " ".join(
        ["moesim calibrate --device", device]
        + (["--quick"] if quick else [])
        + (["--dtype", dtype_text] if dtype_text else [])
        + (["--threads", str(threads)] if threads is not None else [])
        + (["--suites", suites_text] if suites_text else [])
        + (["--from-csv", Path(from_csv).name] if from_csv else ["--from-csv"] if from_csv == "" else [])
        + ["--output", Path(output).name]
    )

    with Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=False,
        disable=as_json and not console.is_terminal,
    ) as progress:

        class Bar(SuiteReporter):
            def __init__(self, suite: str) -> None:
                self.task = progress.add_task(suite, total=1.0, status="")

            def update(self, fraction: float) -> None:
                progress.update(self.task, completed=fraction)

            def done(self, status: str) -> None:
                progress.update(self.task, completed=1.0, status=status)

        if from_csv is not None:
            result = rebuild_from_csv(
                device, Path(output), source=from_csv or None, name=name, reporter=Bar, command=command
            )
        else:
            result = calibrate(
                device,
                Path(output),
                quick=quick,
                dtypes=_dtypes(dtype_text),
                name=name,
                fresh=fresh,
                threads=threads,
                suites=_suites(suites_text),
                reporter=Bar,
                command=command,
            )
    summary = _summary(result)
    if as_json:
        emit_json(summary)
        return
    em = result.profile.empirical
    ds = result.profile.datasheet
    console = make_console()
    console.print(f"[bold]{result.profile.name}[/bold] → {result.output}")
    console.print(
        f"  memory plateau        {ds.memory_bandwidth_gbps * em.memory_bandwidth_fraction:10.1f} GB/s"
    )
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


def _engine_from_runs(
    runs: str,
    serving_engine: str | None,
    output: str,
    fit_text: str | None,
    all_engines: bool,
    as_json: bool,
) -> None:
    from moesim.commands.engines import print_fit
    from moesim.validation.runs.fit import fit_profile_from_runs

    if serving_engine is None:
        raise MoesimError("--serving-engine", "is required with --from-runs", "e.g. --serving-engine vllm")
    data = fit_profile_from_runs(runs, serving_engine, output, fit_text, all_engines)
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


def _from_silicon(selection: str, silicon_data: str | None, output: str | None, as_json: bool) -> None:
    """`--from-silicon list` prints the database; `--from-silicon SYSTEM/FRAMEWORK` fits and writes a profile."""
    from moesim.calibrate.fits.silicon import tables

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
    if output is None:
        raise MoesimError("--output", "is required with --from-silicon", "give the profile file to write")
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

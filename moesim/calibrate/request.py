"""What `moesim calibrate` is asked, declared once as option fields (`moesim.options`), and which settings
go with which way of making a profile:

- measure this device (`device`, with `quick`, `dtypes`, `threads`, `suites`, `fresh`, `name`,
  `normalise_drift`);
- refit the suite CSVs of an earlier run (`from_csv`, with `device`, `name` and `normalise_drift`);
- fit a serving-engine profile to measured runs (`from_runs`, with `serving_engine`, `fit`, `all_engines`);
- fit a `silicon` profile to aiconfigurator-core's kernel tables (`from_silicon`, with `silicon_data`).

`CalibrationRequest.way()` refuses a setting given to a way it does not apply to, naming the flag and the fix.
Light: no torch, no numpy (the CLI reads these fields to build its flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from moesim.calibrate.fits.drift import DRIFT_NORMALISATION
from moesim.errors import MoesimError
from moesim.options import option
from moesim.simulator.bounds import check_count

MAX_THREADS = 4096
"""The most torch threads `--threads` takes (beyond the cores of any one machine built)."""

Way = Literal["measure", "from_csv", "from_runs", "from_silicon"]


@dataclass(frozen=True)
class CalibrationRequest:
    """One `moesim calibrate` call (module docstring)."""

    device: str | None = option(
        None, "cuda (NVIDIA or ROCm) or cpu (required unless --from-runs).", choices=("cuda", "cpu")
    )
    quick: bool = option(False, "Smaller sweeps: under 3 minutes on a 2-core CPU.")
    dtypes: tuple[str, ...] | None = option(
        None,
        "GEMM/MoE dtypes, e.g. bf16,fp32.",
        flag="--dtype",
        list_of=str,
        metavar="DTYPE,...",
        default_text="bf16 on GPU, fp32 on CPU",
    )
    output: str | None = option(
        None, "Profile file to write (.toml); required except for --from-silicon list.", path=True
    )
    name: str | None = option(None, "Profile name (default from the device name).")
    fresh: bool = option(False, "Ignore completed suites' CSVs from an earlier run and measure all again.")
    threads: int | None = option(None, "CPU only: torch threads to measure with.", default_text="torch's")
    suites: tuple[str, ...] | None = option(
        None,
        "Only these suites (memory,launch,gemm,moe); others resume or fall back.",
        list_of=str,
        metavar="SUITE,...",
    )
    normalise_drift: bool = option(
        DRIFT_NORMALISATION,
        "Bring each suite's figures to the run's median drift-probe speed (in each part that moved beyond "
        "the probe's noise) before fitting; off by default (calibrate/fits/drift.py DRIFT_NORMALISATION "
        "states the evidence).",
    )
    from_csv: str | None = option(
        None,
        "Measure nothing: refit the suite CSVs STEM.<suite>.csv (alone: the output's own) into the "
        "profile; missing suites fall back as failed ones do.",
        flag_value="",
        metavar="[STEM]",
    )
    from_runs: str | None = option(
        None,
        "Measure nothing: fit --serving-engine's host parameters to measured serving runs (a CSV as "
        "`moesim validate runs --schema`), cross-validated, and write the fitted engine profile to --output.",
        path=True,
    )
    serving_engine: str | None = option(None, "With --from-runs: the profile to start from.")
    fit: str | None = option(
        None,
        "With --from-runs: host parameters to fit, comma-separated.",
        default_text="step_us, per_sequence_us, per_token_us, draft_step_us, accept_sync_us",
    )
    all_engines: bool = option(False, "With --from-runs: fit to every row, not only the engine's own.")
    from_silicon: str | None = option(
        None,
        "Measure nothing: fit a `silicon` profile to NVIDIA aiconfigurator-core's measured kernel tables "
        "(e.g. h200_sxm/sglang; `list` shows what the database holds). Needs `pip install 'moesim[silicon]'`.",
        metavar="SYSTEM/FRAMEWORK[/VERSION] | list",
    )
    silicon_data: str | None = option(
        None,
        "With --from-silicon: the database's systems/data directory (default: the installed package's).",
        metavar="DIR",
    )

    def way(self) -> Way:
        """How the profile is made; a setting given to a way it does not apply to is refused."""
        if self.from_silicon is not None:
            self._refuse_with(
                "with --from-silicon",
                ("--device", self.device),
                ("--from-runs", self.from_runs),
                ("--from-csv", self.from_csv is not None),
                ("--normalise-drift", self.normalise_drift != DRIFT_NORMALISATION),
            )
            if self.output is None and self.from_silicon.strip().lower() != "list":
                raise MoesimError(
                    "--output", "is required with --from-silicon", "give the profile file to write"
                )
            return "from_silicon"
        if self.silicon_data is not None:
            raise MoesimError("--silicon-data", "only applies with --from-silicon", "add --from-silicon")
        if self.output is None:
            raise MoesimError(
                "--output", "is required", "give the profile file to write, e.g. --output gpu.toml"
            )
        if self.from_runs is not None:
            self._refuse_with(
                "with --from-runs (nothing is measured)",
                ("--device", self.device),
                *self._measuring(),
                ("--from-csv", self.from_csv is not None),
                ("--name", self.name),
                ("--normalise-drift", self.normalise_drift != DRIFT_NORMALISATION),
            )
            if self.serving_engine is None:
                raise MoesimError(
                    "--serving-engine", "is required with --from-runs", "e.g. --serving-engine vllm"
                )
            return "from_runs"
        if self.serving_engine or self.fit or self.all_engines:
            raise MoesimError("--serving-engine", "only applies with --from-runs", "add --from-runs FILE")
        if self.device is None:
            raise MoesimError("--device", "is required", "give --device cuda or --device cpu")
        if self.threads is not None and self.device != "cpu":
            raise MoesimError("--threads", "only applies to --device cpu", "drop --threads")
        if self.threads is not None:  # before torch is imported (torch crashes on 10⁵ threads)
            check_count(self.threads, "--threads", high=MAX_THREADS, fix="give at most the machine's cores")
        if Path(self.output).suffix != ".toml":  # before the suites and fits load (2–4 s)
            raise MoesimError(
                "--output",
                f"profile files end in .toml, got {Path(self.output).name!r}",
                "e.g. --output cpu.toml",
            )
        if self.from_csv is not None:
            self._refuse_with("with --from-csv (nothing is measured)", *self._measuring())
            return "from_csv"
        return "measure"

    def _measuring(self) -> tuple[tuple[str, object], ...]:
        """The settings of a measurement, as (flag, given)."""
        return (
            ("--quick", self.quick),
            ("--dtype", self.dtypes is not None),
            ("--fresh", self.fresh),
            ("--threads", self.threads is not None),
            ("--suites", self.suites is not None),
        )

    @staticmethod
    def _refuse_with(way: str, *given: tuple[str, object]) -> None:
        for flag, value in given:
            if value:
                raise MoesimError(flag, f"does not apply {way}", f"drop {flag}")

    def dtype_list(self) -> list[str] | None:
        """The dtypes to measure, lower-cased, each once (None: the device's defaults)."""
        if self.dtypes is None:
            return None
        from moesim.calibrate.suites.timing import DTYPES

        values = [value.lower() for value in self.dtypes]
        if not values:
            raise MoesimError("--dtype", "needs at least one dtype", f"choose from {', '.join(DTYPES)}")
        for value in values:
            if value not in DTYPES:
                raise MoesimError("--dtype", f"unknown dtype {value!r}", f"choose from {', '.join(DTYPES)}")
        return list(dict.fromkeys(values))

    def suite_list(self) -> tuple[str, ...]:
        """The suites to measure (all unless `suites`)."""
        from moesim.calibrate import SUITES

        if self.suites is None:
            return SUITES
        for value in self.suites:
            if value not in SUITES:
                raise MoesimError("--suites", f"unknown suite {value!r}", f"choose from {', '.join(SUITES)}")
        return self.suites

    def command_line(self) -> str:
        """The command that repeats this measurement, recorded in the profile's provenance."""
        assert self.device is not None and self.output is not None  # `way()` checked both
        csv = self.from_csv
        return " ".join(
            ["moesim calibrate --device", self.device]
            + (["--quick"] if self.quick else [])
            + (["--dtype", ",".join(self.dtypes)] if self.dtypes else [])
            + (["--threads", str(self.threads)] if self.threads is not None else [])
            + (["--suites", ",".join(self.suites)] if self.suites else [])
            + (["--normalise-drift"] if self.normalise_drift != DRIFT_NORMALISATION else [])
            + (["--from-csv", Path(csv).name] if csv else ["--from-csv"] if csv == "" else [])
            + ["--output", Path(self.output).name]
        )


__all__ = ["CalibrationRequest", "Way"]

"""Measured serving benchmarks (SD and its no-SD baseline) against `moesim serve` on the same workload.

Runs of the two files are paired by (max concurrency, request rate); a single run each is paired as is. A pair
must be one benchmark run twice: the same tool's format, max concurrency, request rate and lengths
(`check_pair`), or it is refused.
Each pair is simulated on the workload the SD run describes (`bench_results.workload_of`), with the SD run's
acceptance length when the file records one (SGLang's accept_length) and no other is given. Every metric
both the file and the simulator have is compared: measured, predicted, signed error; and SD speedups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.options import option
from moesim.simulator.scenario import Scenario
from moesim.simulator.serving.metrics import speedups
from moesim.simulator.serving.options import ServeOptions
from moesim.simulator.serving.run import serve
from moesim.validation.bench.results import BenchRecord, mean_lengths, read_bench_results, workload_of

LENGTH_TOLERANCE = 0.1
"""How far (relative) the SD and baseline runs' mean prompt and output lengths may differ and still be one
workload: two draws of vLLM's random dataset with `--random-range-ratio` 0.5 and 64 prompts differ by about
3–4 % in mean; a run of other lengths is another experiment."""


def check_pair(sd: BenchRecord, baseline: BenchRecord) -> None:
    """Refuse an SD run and a baseline that did not run the same benchmark: another tool's format, another
    max concurrency or request rate, or other prompt / output lengths."""
    fix = "compare an SD run with the baseline of the same benchmark command (only the speculative flags differ)"
    if sd.tool != baseline.tool:
        raise MoesimError(
            "baseline",
            f"{sd.source} is a {sd.tool} result and {baseline.source} a {baseline.tool} one",
            fix,
        )
    for name, mine, theirs in (
        ("max_concurrency", sd.max_concurrency, baseline.max_concurrency),
        ("request_rate", sd.request_rate, baseline.request_rate),
    ):
        if mine != theirs:
            raise MoesimError(
                "baseline", f"{name} is {mine} in {sd.source} but {theirs} in {baseline.source}", fix
            )
    lengths = mean_lengths(sd), mean_lengths(baseline)
    if lengths[0] is None or lengths[1] is None:
        return
    for what, mine_len, theirs_len in zip(("prompt", "output"), lengths[0], lengths[1], strict=True):
        if abs(mine_len - theirs_len) > LENGTH_TOLERANCE * max(mine_len, theirs_len):
            raise MoesimError(
                "baseline",
                f"the mean {what} length is {mine_len:,.0f} tokens in {sd.source} but {theirs_len:,.0f} in "
                f"{baseline.source} (more than {LENGTH_TOLERANCE:.0%} apart)",
                fix,
            )


def pair_records(sd: list[BenchRecord], baseline: list[BenchRecord]) -> list[tuple[BenchRecord, BenchRecord]]:
    """SD and baseline runs at the same (max concurrency, request rate), each pair checked (`check_pair`)."""
    if len(sd) == 1 and len(baseline) == 1:
        pairs = [(sd[0], baseline[0])]
    else:
        by_key = {record.key: record for record in baseline}
        pairs = [(record, by_key[record.key]) for record in sd if record.key in by_key]
    if not pairs:
        raise MoesimError(
            "baseline",
            "no baseline run has the max concurrency and request rate of an SD run",
            "save both benchmarks with the same --max-concurrency / --request-rate",
        )
    for pair in pairs:
        check_pair(*pair)
    return pairs


def _error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured


@dataclass(frozen=True)
class BenchFile:
    """What a benchmark file may lack, given by hand (each None: read from the file)."""

    input_len: int | None = option(None, "Prompt tokens, if the file lacks them.", flag="--random-input-len")
    output_len: int | None = option(
        None, "Output tokens, if the file lacks them.", flag="--random-output-len"
    )
    num_prompts: int | None = option(None, "Requests sent, if the file lacks it.", flag="--num-prompts")


def compare_pair(
    sd: BenchRecord,
    baseline: BenchRecord,
    scenario: Scenario,
    *,
    options: ServeOptions | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    seed: int = 0,
    num_prompts: int | None = None,
) -> dict[str, Any]:
    """Measured against predicted for every metric of one SD / baseline pair, `scenario` saying what ran."""
    notes = []
    if scenario.acceptance_length is None and sd.accept_length:
        scenario = scenario.replace(acceptance_length=sd.accept_length)
        notes.append(f"acceptance length {sd.accept_length:g} from the SD file's accept_length")
    workload = workload_of(sd, input_len, output_len, seed, num_prompts)
    result = serve(
        scenario,
        workload,
        concurrencies=[sd.max_concurrency],
        request_rates=[sd.request_rate],
        burstiness=sd.burstiness,
        seed=seed,
        options=options,
    )
    point = result.points[0]
    measured_up = speedups(sd.metrics, baseline.metrics)
    predicted_up = point.speedups
    rows: list[dict[str, Any]] = []
    for name in dict.fromkeys([*sd.metrics, *baseline.metrics]):
        rows.append(
            {
                "metric": name,
                "measured_sd": sd.metrics.get(name),
                "predicted_sd": point.sd.values.get(name),
                "error_sd": _error(point.sd.values.get(name), sd.metrics.get(name)),
                "measured_baseline": baseline.metrics.get(name),
                "predicted_baseline": point.baseline.values.get(name),
                "error_baseline": _error(point.baseline.values.get(name), baseline.metrics.get(name)),
                "measured_speedup": measured_up.get(name),
                "predicted_speedup": predicted_up.get(name),
                "error_speedup": _error(predicted_up.get(name), measured_up.get(name)),
            }
        )
    errors = [abs(r[k]) for r in rows for k in ("error_sd", "error_baseline") if r[k] is not None]
    speedup_errors = [abs(r["error_speedup"]) for r in rows if r["error_speedup"] is not None]
    return {
        "sd_source": sd.source,
        "baseline_source": baseline.source,
        "tool": sd.tool,
        "max_concurrency": sd.max_concurrency,
        "request_rate": "inf" if math.isinf(sd.request_rate) else sd.request_rate,
        "workload": workload.description,
        "rows": rows,
        "summary": {
            "metrics_compared": len(errors),
            "mape": float(np.mean(errors)) if errors else None,
            "speedup_mape": float(np.mean(speedup_errors)) if speedup_errors else None,
        },
        "notes": notes,
        "assumptions": result.assumptions,
    }


def validate_bench(sd_path: str, baseline_path: str, scenario: Scenario, **kwargs: Any) -> dict[str, Any]:
    """Every paired run of the two files, compared (keyword arguments as `compare_pair`)."""
    pairs = pair_records(read_bench_results(sd_path), read_bench_results(baseline_path))
    points = [compare_pair(sd, base, scenario, **kwargs) for sd, base in pairs]
    errors = [p["summary"]["mape"] for p in points if p["summary"]["mape"] is not None]
    a = points[0]["assumptions"]
    return {
        "points": points,
        "summary": {"pairs": len(points), "mape": float(np.mean(errors)) if errors else None},
        "meta": {"sd": sd_path, "baseline": baseline_path, "model": a["model"], "hardware": a["hardware"]},
    }

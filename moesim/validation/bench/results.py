"""Serving-benchmark results in: `vllm bench serve --save-result` JSON and SGLang `bench_serving` JSONL.

Fields, from the tools' own sources (read in vLLM 0.11.0 and 0.33.0, SGLang 0.5.3 and 0.5.23):
- vLLM, vllm/benchmarks/serve.py (`benchmark` and `main`): one JSON object (several, one per line, with
  --append-result) with "backend", "model_id", "num_prompts", "request_rate" ("inf" or a number),
  "burstiness", "max_concurrency", "duration", "completed", "total_input_tokens", "total_output_tokens",
  "request_throughput", "output_throughput", "total_token_throughput", and for each of ttft, tpot, itl,
  e2el: "mean_X_ms", "median_X_ms", "std_X_ms", "pNN_X_ms" (NN from --metric-percentiles, 99 by default);
  "input_lens" / "output_lens" only with --save-detailed; 0.33 adds "spec_decode_acceptance_length".
- SGLang, sglang/bench_serving.py (0.5.3; sglang/benchmark/serving.py in 0.5.23): one JSON object per
  line, appended per run, with "backend", "dataset_name", "request_rate", "max_concurrency",
  "random_input_len", "random_output_len", "random_range_ratio", "duration", "completed",
  "total_input_tokens", "total_output_tokens", "request_throughput", "input_throughput",
  "output_throughput", "mean/median/std/p99_ttft_ms", the same for tpot and itl,
  "mean/median/std/p99_e2e_latency_ms", "concurrency" and "accept_length" (the server's average
  acceptance length under SD, else null); 0.5.23 adds "total_throughput", p90/p95 and "server_info";
  "input_lens" / "output_lens" with --output-details.
SGLang's names are mapped onto vLLM's (e2e_latency → e2el; total_throughput, or input + output throughput,
→ total_token_throughput).

The workload a record describes is rebuilt from, in order: its per-request lengths; SGLang's random-dataset
parameters (redrawn from the same ranges with moesim's generator: the same distribution, not the same
draws); its mean lengths (total tokens ÷ completed) as fixed lengths. Which one was used is reported.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.reading import read_text
from moesim.simulator.bounds import MAX_COUNT, check_count, check_finite
from moesim.simulator.serving.metrics import METRIC_NAMES
from moesim.simulator.serving.workload import RequestSpec, Workload, sglang_random_workload

SGLANG_NAMES = {
    "mean_e2e_latency_ms": "mean_e2el_ms",
    "median_e2e_latency_ms": "median_e2el_ms",
    "p99_e2e_latency_ms": "p99_e2el_ms",
    "total_throughput": "total_token_throughput",
}
MAX_RECORDS = 256


@dataclass(frozen=True)
class BenchRecord:
    """One benchmark run as a tool saved it, its metrics under vLLM's names."""

    tool: str  # "vllm" | "sglang"
    source: str
    metrics: dict[str, float]
    completed: int | None  # None when the file does not say (published figures rewritten in the format)
    max_concurrency: int | None
    request_rate: float
    burstiness: float
    accept_length: float | None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def key(self) -> tuple[int | None, float]:
        return (self.max_concurrency, self.request_rate)


def _number(value: Any) -> float | None:
    """A number as the tools write it (a float, an int, or "inf"), else None. Checked afterwards: see
    `_checked`."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if value.strip().lower() in ("inf", "infinity"):
            return math.inf
        try:
            return float(value)
        except ValueError:
            return None
    return float(value) if isinstance(value, int | float) else None


# No serving benchmark reports a metric above this: a latency of 1e12 ms is 31 years, a throughput of 1e12
# tokens/s a million of today's fastest nodes. A value past it is a corrupted or hand-edited file.
MAX_BENCH_METRIC = 1e12


def _checked(
    record: dict[str, Any],
    name: str,
    source: str,
    *,
    low: float,
    low_open: bool = False,
    high: float = MAX_BENCH_METRIC,
) -> float | None:
    """Field `name` of `record` as a finite number ≥ `low` (> with `low_open`) and ≤ `high`, None when absent
    or null; a word, NaN, infinity or an impossible size is refused with the file and field named."""
    value = record.get(name)
    if value is None:
        return None
    return check_finite(
        _number(value) if _number(value) is not None else value,
        name,
        source,
        low=low,
        high=high,
        low_open=low_open,
        fix="pass the tool's own result file",
    )


def _count(record: dict[str, Any], name: str, source: str, low: int = 1) -> int | None:
    value = record.get(name)
    if value is None:
        return None
    return check_count(value, name, source, low=low, fix="pass the tool's own result file")


def _request_rate(record: dict[str, Any], source: str) -> float:
    """Requests per second: a positive number, or "inf" (both tools' spelling of all at once; absent: inf)."""
    value = record.get("request_rate")
    if value == "trace":
        raise MoesimError(
            "bench_result", f"{source}: a trace-timestamped run", "replay it with --request-rate"
        )
    rate = _number(value) if value is not None else math.inf
    if rate is None or math.isnan(rate) or rate <= 0:
        raise MoesimError(
            f"{source}: request_rate",
            f'must be a positive number of requests per second or "inf", got {value!r}',
            "pass the tool's own result file",
        )
    return rate


def _lengths(record: dict[str, Any], source: str) -> None:
    """Per-request and total token counts whole and non-negative, and a run that generated something."""
    for name in ("input_lens", "output_lens"):
        lens = record.get(name)
        if lens is None:
            continue
        if not isinstance(lens, list) or len(lens) > MAX_COUNT:
            raise MoesimError(
                f"{source}: {name}", "must be a list of token counts", "pass the tool's own result file"
            )
        for length in lens:
            check_count(length, name, source, low=0, fix="pass the tool's own result file")
        if lens and not any(lens):
            raise MoesimError(f"{source}: {name}", "are all 0", "pass the result of a run that sent tokens")
    for name in ("total_input_tokens", "total_output_tokens", "random_input_len", "random_output_len"):
        _count(record, name, source)
    _checked(record, "random_range_ratio", source, low=0.0)


def _tool_of(record: dict[str, Any]) -> str:
    if "mean_e2e_latency_ms" in record or "dataset_name" in record or "accept_length" in record:
        return "sglang"
    return "vllm"


def parse_record(record: dict[str, Any], source: str) -> BenchRecord:
    """One saved result object as a `BenchRecord`; unknown fields are kept in `raw`, absent metrics omitted.
    Every field read is checked where it enters: metrics finite and ≥ 0, counts whole and positive, the
    request rate a positive number or "inf"."""
    tool = _tool_of(record)
    metrics: dict[str, float] = {}
    for name in record:
        target = SGLANG_NAMES.get(name, name) if tool == "sglang" else name
        if target in METRIC_NAMES:
            number = _checked(record, name, source, low=0.0)
            if number is not None:
                metrics[target] = number
    if tool == "sglang" and "total_token_throughput" not in metrics:
        inputs, outputs = (
            _checked(record, "input_throughput", source, low=0.0),
            metrics.get("output_throughput"),
        )
        if inputs is not None and outputs is not None:
            metrics["total_token_throughput"] = inputs + outputs
    if not metrics:
        raise MoesimError(
            "bench_result",
            f"{source}: no benchmark metrics found",
            "pass a `vllm bench serve --save-result` JSON or an SGLang bench_serving JSONL",
        )
    num_prompts = _count(record, "num_prompts", source)
    completed = _count(record, "completed", source)
    completed = completed if completed is not None else num_prompts
    concurrency = _count(record, "max_concurrency", source)
    _checked(record, "duration", source, low=0.0, low_open=True)
    _lengths(record, source)
    accept_length = _checked(record, "accept_length", source, low=1.0)
    if accept_length is None:
        accept_length = _checked(record, "spec_decode_acceptance_length", source, low=1.0)
    burstiness = _checked(record, "burstiness", source, low=0.0, low_open=True)
    return BenchRecord(
        tool=tool,
        source=source,
        metrics=metrics,
        completed=completed,
        max_concurrency=concurrency,
        request_rate=_request_rate(record, source),
        burstiness=1.0 if burstiness is None else burstiness,
        accept_length=accept_length,
        raw=record,
    )


def mean_lengths(record: BenchRecord) -> tuple[float, float] | None:
    """(input, output) tokens per request the run describes — its per-request lengths, SGLang's random
    dataset lengths, or its totals ÷ completed — or None when it records none."""
    raw = record.raw
    inputs, outputs = raw.get("input_lens"), raw.get("output_lens")
    if isinstance(inputs, list) and isinstance(outputs, list) and inputs and outputs:
        return sum(inputs) / len(inputs), sum(outputs) / len(outputs)
    if record.tool == "sglang" and raw.get("random_input_len") and raw.get("random_output_len"):
        return float(raw["random_input_len"]), float(raw["random_output_len"])
    total_in, total_out = raw.get("total_input_tokens"), raw.get("total_output_tokens")
    if record.completed and total_in and total_out:
        return total_in / record.completed, total_out / record.completed
    return None


def read_bench_results(path: str | Path) -> list[BenchRecord]:
    """Every run saved in a vLLM result JSON (one object, or one per line) or an SGLang JSONL."""
    text = read_text("bench_result", path, "benchmark result file")
    try:
        whole = json.loads(text)
        objects = whole if isinstance(whole, list) else [whole]
    except json.JSONDecodeError:
        objects = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                objects.append(json.loads(line))
            except json.JSONDecodeError:
                raise MoesimError(
                    "bench_result", f"{path}:{number}: not JSON", "pass the tool's own result file"
                ) from None
    if not objects or not all(isinstance(o, dict) for o in objects):
        raise MoesimError("bench_result", f"{path}: expected JSON objects", "pass the tool's own result file")
    if len(objects) > MAX_RECORDS:
        raise MoesimError("bench_result", f"{path}: more than {MAX_RECORDS} runs", "split the file")
    return [parse_record(o, f"{Path(path).name}#{i + 1}") for i, o in enumerate(objects)]


def workload_of(
    record: BenchRecord,
    input_len: int | None = None,
    output_len: int | None = None,
    seed: int = 0,
    num_prompts: int | None = None,
) -> Workload:
    """The requests the run sent (see the module docstring); `input_len`, `output_len` and `num_prompts`
    fill what it lacks."""
    raw = record.raw
    inputs, outputs = raw.get("input_lens"), raw.get("output_lens")
    if isinstance(inputs, list) and isinstance(outputs, list) and len(inputs) == len(outputs) and inputs:
        requests = tuple(RequestSpec(int(i), max(1, int(o))) for i, o in zip(inputs, outputs, strict=True))
        return Workload(requests, f"{record.source}: {len(requests)} requests' own lengths")
    count = record.completed or num_prompts
    if not count:
        raise MoesimError(
            "bench_result", f"{record.source} does not say how many requests it sent", "give --num-prompts"
        )
    if record.tool == "sglang" and str(raw.get("dataset_name", "")).startswith("random"):
        lengths = _number(raw.get("random_input_len")), _number(raw.get("random_output_len"))
        ratio = _number(raw.get("random_range_ratio"))
        if lengths[0] and lengths[1] and ratio is not None:
            return sglang_random_workload(count, int(lengths[0]), int(lengths[1]), ratio, seed)
    total_in, total_out = _number(raw.get("total_input_tokens")), _number(raw.get("total_output_tokens"))
    mean_in = input_len or (round(total_in / count) if total_in else None)
    mean_out = output_len or (round(total_out / count) if total_out else None)
    if not mean_in or not mean_out:
        raise MoesimError(
            "bench_result",
            f"{record.source} records neither request lengths nor token totals",
            "give --random-input-len and --random-output-len",
        )
    spec = RequestSpec(int(mean_in), int(mean_out))
    given = " (given)" if input_len or output_len else ""
    return Workload(
        (spec,) * count,
        f"{record.source}: {count} requests of fixed lengths {spec.input_len} in / {spec.output_len} out"
        + (given or " (the run's means)"),
    )

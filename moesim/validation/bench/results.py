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


def _tool_of(record: dict[str, Any]) -> str:
    if "mean_e2e_latency_ms" in record or "dataset_name" in record or "accept_length" in record:
        return "sglang"
    return "vllm"


def parse_record(record: dict[str, Any], source: str) -> BenchRecord:
    """One saved result object as a `BenchRecord`; unknown fields are kept in `raw`, absent metrics omitted."""
    tool = _tool_of(record)
    metrics: dict[str, float] = {}
    for name, value in record.items():
        target = SGLANG_NAMES.get(name, name) if tool == "sglang" else name
        number = _number(value)
        if target in METRIC_NAMES and number is not None:
            metrics[target] = number
    if tool == "sglang" and "total_token_throughput" not in metrics:
        inputs, outputs = _number(record.get("input_throughput")), metrics.get("output_throughput")
        if inputs is not None and outputs is not None:
            metrics["total_token_throughput"] = inputs + outputs
    if not metrics:
        raise MoesimError(
            "bench_result",
            f"{source}: no benchmark metrics found",
            "pass a `vllm bench serve --save-result` JSON or an SGLang bench_serving JSONL",
        )
    completed = _number(record.get("completed")) or _number(record.get("num_prompts"))
    if completed is not None and completed < 1:
        raise MoesimError("bench_result", f"{source}: 'completed' must be ≥ 1, got {completed:g}")
    concurrency = _number(record.get("max_concurrency"))
    if record.get("request_rate") == "trace":
        raise MoesimError(
            "bench_result", f"{source}: a trace-timestamped run", "replay it with --request-rate"
        )
    rate = _number(record.get("request_rate"))
    return BenchRecord(
        tool=tool,
        source=source,
        metrics=metrics,
        completed=int(completed) if completed else None,
        max_concurrency=int(concurrency) if concurrency else None,
        request_rate=math.inf if rate is None else rate,
        burstiness=_number(record.get("burstiness")) or 1.0,
        accept_length=_number(record.get("accept_length", record.get("spec_decode_acceptance_length"))),
        raw=record,
    )


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

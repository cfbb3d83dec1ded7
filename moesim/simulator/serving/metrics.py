"""A serving run's results in the benchmark tools' own names, from its per-request records.

Definitions follow `vllm bench serve` (vllm/benchmarks/serve.py, `calculate_metrics`, 0.11), which SGLang's
`bench_serving` shares: TTFT = first token − send; E2EL = last token − send; TPOT = (E2EL − TTFT) ÷
(output tokens − 1) for requests of more than one token; ITL = the gaps between streamed chunks (with
speculative decoding a chunk carries all tokens one round accepted); throughputs over the run's duration
(benchmark start to last token); `concurrency` = Σ E2EL ÷ duration (SGLang's). Percentiles as numpy computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from moesim.simulator.serving.loop import RequestState

LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATISTICS = ("mean", "median", "p99")
THROUGHPUTS = ("request_throughput", "output_throughput", "total_token_throughput")
# metric name → True when a larger value is better (throughputs), for speedups
METRIC_NAMES: dict[str, bool] = {
    **{name: True for name in THROUGHPUTS},
    **{f"{stat}_{lat}_ms": False for lat in LATENCIES for stat in STATISTICS},
}


@dataclass(frozen=True)
class ServingMetrics:
    """The figures a serving benchmark prints, plus what the simulator saw inside the run."""

    values: dict[str, float]  # METRIC_NAMES → value (ms for latencies, per second for throughputs)
    completed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    concurrency: float
    time_average_in_system: float  # ∫ requests in the system dt ÷ duration, counted independently
    steps: int
    mean_decode_batch: float
    preemptions: int
    peak_kv_fraction: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "completed": self.completed,
            "duration": self.duration_s,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            **self.values,
            "concurrency": self.concurrency,
            "time_average_in_system": self.time_average_in_system,
            "steps": self.steps,
            "mean_decode_batch": self.mean_decode_batch,
            "preemptions": self.preemptions,
            "peak_kv_cache_fraction": self.peak_kv_fraction,
        }


def _stats(name: str, values_s: Sequence[float] | np.ndarray) -> dict[str, float]:
    data = np.asarray(values_s if len(values_s) else [0.0], dtype=float) * 1e3
    return {
        f"mean_{name}_ms": float(np.mean(data)),
        f"median_{name}_ms": float(np.median(data)),
        f"p99_{name}_ms": float(np.percentile(data, 99)),
    }


def serving_metrics(
    requests: Sequence[RequestState],
    *,
    in_system_area: float,
    steps: int,
    decode_rows: int,
    preemptions: int,
    peak_kv_fraction: float,
) -> ServingMetrics:
    """Summarise finished requests as the benchmark tools do."""
    duration = max(r.finish_s for r in requests)  # from the benchmark's start, as vLLM times it
    ttft = [r.first_token_s - r.sent_s for r in requests]
    e2el = [r.finish_s - r.sent_s for r in requests]
    tpot = [
        (r.finish_s - r.first_token_s) / (r.spec.output_len - 1) for r in requests if r.spec.output_len > 1
    ]
    itl = np.concatenate([np.asarray(r.itls_s, dtype=float) for r in requests] or [np.zeros(0)])
    n_in = sum(r.spec.input_len for r in requests)
    n_out = sum(r.spec.output_len for r in requests)
    values = {
        "request_throughput": len(requests) / duration,
        "output_throughput": n_out / duration,
        "total_token_throughput": (n_in + n_out) / duration,
        **_stats("ttft", ttft),
        **_stats("tpot", tpot),
        **_stats("itl", itl),
        **_stats("e2el", e2el),
    }
    return ServingMetrics(
        values=values,
        completed=len(requests),
        duration_s=duration,
        total_input_tokens=n_in,
        total_output_tokens=n_out,
        concurrency=sum(e2el) / duration,
        time_average_in_system=in_system_area / duration,
        steps=steps,
        mean_decode_batch=decode_rows / steps if steps else 0.0,
        preemptions=preemptions,
        peak_kv_fraction=peak_kv_fraction,
    )


def speedups(sd: dict[str, float], baseline: dict[str, float]) -> dict[str, float]:
    """SD over no-SD for every metric both have: higher-is-better ratios for throughputs, baseline ÷ SD for
    latencies, so > 1 always means SD helps."""
    out: dict[str, float] = {}
    for name, higher_better in METRIC_NAMES.items():
        a, b = sd.get(name), baseline.get(name)
        if a is None or b is None or not (a > 0 and b > 0):
            continue
        out[name] = a / b if higher_better else b / a
    return out

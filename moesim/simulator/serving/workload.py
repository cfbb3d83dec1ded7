"""Workloads of a serving benchmark: each request's prompt and output lengths, and when requests are sent.

Datasets (named as `vllm bench serve --dataset-name` names them):
- `random`: lengths uniform on integers in [⌊L·(1 − r)⌋, ⌈L·(1 + r)⌉] for L = `--random-input-len` /
  `--random-output-len` and r = `--random-range-ratio` ∈ [0, 1), output at least 1 — vLLM's
  `get_sampling_params` (vllm/benchmarks/datasets.py in 0.11, datasets/utils.py in 0.33); r = 0 gives
  fixed lengths. Same generator, seed and order of draws as vLLM, so for a tokenizer that adds no special
  tokens these are the lengths vLLM sends. SGLang's random dataset (bench_serving.sample_random_requests
  in 0.5.3, benchmark/datasets/common.compute_random_lens in 0.5.23) draws from [max(⌊L·r⌋, 1), L]
  instead: `sglang_random_workload` rebuilds its runs.
- `chat`: a conversational length distribution, `CHAT_LENGTHS` (log-normal; see its fields for sources).
- `jsonl`: a user file with one {"input_len": N, "output_len": M} object per line.

Arrivals follow vLLM's `get_request` (vllm/benchmarks/serve.py, 0.11 and 0.33): gaps drawn from a gamma distribution
with shape `burstiness` and mean 1/rate (burstiness 1 is a Poisson process; < 1 burstier), then scaled so
the last request is sent at n/rate; an infinite rate sends everything at once.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.bounds import check_seed

DATASETS = ("random", "chat", "jsonl")
# Longest prompt or output a workload may ask for (tokens): beyond every catalogue model's context window.
MAX_REQUEST_TOKENS = 1 << 20
MAX_PROMPTS = 1_000_000


@dataclass(frozen=True)
class RequestSpec:
    """One request of the benchmark: prompt tokens to prefill and output tokens to generate."""

    input_len: int
    output_len: int


@dataclass(frozen=True)
class Workload:
    """The requests of a benchmark run, in the order they are sent, and where they came from."""

    requests: tuple[RequestSpec, ...]
    description: str


@dataclass(frozen=True)
class ChatLengths:
    """A log-normal conversational length distribution: medians and log-space spreads, in tokens.

    Medians: the Azure LLM inference trace 2023, conversation service (median prompt 1020 tokens, median
    output 129 tokens), as reported by Splitwise (Patel et al., ISCA 2024). The spreads σ are our
    assumption (the source gives medians only): σ = 1 puts the 10th–90th percentiles at 0.28–3.6× the
    median. Lengths are clipped to [1, max].
    """

    median_input: float = 1020.0
    median_output: float = 129.0
    sigma_input: float = 1.0
    sigma_output: float = 1.0
    max_input: int = 16384
    max_output: int = 4096


CHAT_LENGTHS = ChatLengths()


def _check_count(num_prompts: int) -> None:
    if not isinstance(num_prompts, int) or not 1 <= num_prompts <= MAX_PROMPTS:
        raise MoesimError("num_prompts", f"must be an integer in [1, {MAX_PROMPTS}], got {num_prompts!r}")


def _check_len(field: str, value: int) -> None:
    if not isinstance(value, int) or not 1 <= value <= MAX_REQUEST_TOKENS:
        raise MoesimError(field, f"must be an integer in [1, {MAX_REQUEST_TOKENS}], got {value!r}")


def _uniform_lengths(low: int, high: int, n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(low, high + 1, size=n)


def random_workload(
    num_prompts: int, input_len: int, output_len: int, range_ratio: float = 0.0, seed: int = 0
) -> Workload:
    """vLLM's random dataset: lengths uniform in [⌊L(1 − r)⌋, ⌈L(1 + r)⌉] (output ≥ 1)."""
    _check_count(num_prompts)
    _check_len("random_input_len", input_len)
    _check_len("random_output_len", output_len)
    if not 0.0 <= range_ratio < 1.0:
        raise MoesimError("random_range_ratio", f"must be in [0, 1), got {range_ratio}", "as vLLM requires")
    rng = np.random.default_rng(check_seed(seed))
    low_in, high_in = math.floor(input_len * (1 - range_ratio)), math.ceil(input_len * (1 + range_ratio))
    low_out = max(1, math.floor(output_len * (1 - range_ratio)))
    high_out = math.ceil(output_len * (1 + range_ratio))
    inputs = _uniform_lengths(max(1, low_in), high_in, num_prompts, rng)
    outputs = _uniform_lengths(low_out, high_out, num_prompts, rng)
    spread = f" ±{range_ratio:.0%}" if range_ratio else ""
    return Workload(
        tuple(RequestSpec(int(i), int(o)) for i, o in zip(inputs, outputs, strict=True)),
        f"random: {input_len}{spread} in / {output_len}{spread} out tokens, seed {seed}",
    )


def sglang_random_workload(
    num_prompts: int, input_len: int, output_len: int, range_ratio: float, seed: int = 0
) -> Workload:
    """SGLang's random dataset: input uniform in [max(⌊L·r⌋, 1), L], output in [⌊L·r⌋, L] (at least 1 here)."""
    _check_count(num_prompts)
    _check_len("random_input_len", input_len)
    _check_len("random_output_len", output_len)
    if not 0.0 <= range_ratio <= 1.0:
        raise MoesimError("random_range_ratio", f"must be in [0, 1], got {range_ratio}")
    rng = np.random.default_rng(check_seed(seed))
    inputs = _uniform_lengths(max(int(input_len * range_ratio), 1), input_len, num_prompts, rng)
    outputs = _uniform_lengths(max(int(output_len * range_ratio), 1), output_len, num_prompts, rng)
    return Workload(
        tuple(RequestSpec(int(i), int(o)) for i, o in zip(inputs, outputs, strict=True)),
        f"sglang random: input in [{max(int(input_len * range_ratio), 1)}, {input_len}], "
        f"output in [{max(int(output_len * range_ratio), 1)}, {output_len}] tokens, seed {seed}",
    )


def chat_workload(num_prompts: int, seed: int = 0, lengths: ChatLengths = CHAT_LENGTHS) -> Workload:
    """Conversational lengths drawn from `lengths` (log-normal around the documented medians)."""
    _check_count(num_prompts)
    rng = np.random.default_rng(check_seed(seed))

    def draw(median: float, sigma: float, cap: int) -> np.ndarray:
        values = np.rint(median * np.exp(sigma * rng.standard_normal(num_prompts)))
        return np.clip(values, 1, cap).astype(int)

    inputs = draw(lengths.median_input, lengths.sigma_input, lengths.max_input)
    outputs = draw(lengths.median_output, lengths.sigma_output, lengths.max_output)
    return Workload(
        tuple(RequestSpec(int(i), int(o)) for i, o in zip(inputs, outputs, strict=True)),
        f"chat: log-normal, median {lengths.median_input:g} in / {lengths.median_output:g} out tokens "
        f"(Azure conversation trace 2023 via Splitwise; σ {lengths.sigma_input:g}/{lengths.sigma_output:g} "
        f"assumed), seed {seed}",
    )


def jsonl_workload(path: str | Path, num_prompts: int | None = None) -> Workload:
    """Requests from a JSONL file of {"input_len": N, "output_len": M}; the first `num_prompts` when given."""
    if num_prompts is not None:
        _check_count(num_prompts)
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    requests: list[RequestSpec] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
            spec = RequestSpec(int(row["input_len"]), int(row["output_len"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise MoesimError(
                "dataset_path",
                f"{where}: expected a JSON object with integer input_len and output_len",
                'write one {"input_len": 1000, "output_len": 200} per line',
            ) from None
        _check_len(f"{where} input_len", spec.input_len)
        _check_len(f"{where} output_len", spec.output_len)
        requests.append(spec)
        if num_prompts is not None and len(requests) == num_prompts:
            break
    if not requests:
        raise MoesimError("dataset_path", f"{path} holds no requests", "one JSON object per line")
    return Workload(tuple(requests), f"jsonl: {len(requests)} requests from {Path(path).name}")


def send_times_s(n: int, request_rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """When each of n requests is sent (seconds from the start), as vLLM's benchmark client sends them."""
    if not request_rate > 0:
        raise MoesimError("request_rate", f"must be positive (or inf), got {request_rate}")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise MoesimError("burstiness", f"must be a positive number, got {burstiness}")
    if math.isinf(request_rate):
        return np.zeros(n)
    rng = np.random.default_rng([check_seed(seed), 1])
    delays = np.cumsum(rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=n))
    return delays * (n / request_rate) / delays[-1]


def build_workload(
    dataset_name: str,
    num_prompts: int,
    *,
    input_len: int = 1024,
    output_len: int = 128,
    range_ratio: float = 0.0,
    seed: int = 0,
    dataset_path: str | None = None,
) -> Workload:
    """The workload `vllm bench serve --dataset-name ...` would send (defaults: vLLM's random dataset's)."""
    if dataset_name == "random":
        return random_workload(num_prompts, input_len, output_len, range_ratio, seed)
    if dataset_name == "chat":
        return chat_workload(num_prompts, seed)
    if dataset_name == "jsonl":
        if not dataset_path:
            raise MoesimError("dataset_path", "--dataset-name jsonl needs a file", "add --dataset-path FILE")
        return jsonl_workload(dataset_path, num_prompts)
    raise MoesimError(
        "dataset_name", f"unknown dataset {dataset_name!r}", f"choose one of {', '.join(DATASETS)}"
    )

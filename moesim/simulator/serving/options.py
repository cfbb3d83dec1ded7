"""The serving engine's knobs and their defaults (vLLM's), apart from the loop so that reading them (the CLI
does at start-up) does not load simpy and the step model."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from moesim.errors import MoesimError
from moesim.options import option
from moesim.simulator.bounds import DEFAULT_MAX_MINUTES, check_finite, check_seed

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default block_size on CUDA
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of device memory for weights + KV cache


@dataclass(frozen=True)
class SchedulerLimits:
    """The engine's batching limits (vLLM 0.11's defaults for its API server on GPUs of ≥ 70 GB)."""

    max_num_batched_tokens: int = option(
        8192, "Token budget per step (vLLM's flag; its default on ≥ 70 GB GPUs)."
    )
    max_num_seqs: int = option(1024, "Most sequences per step (vLLM's flag).")

    def check(self, tokens_per_seq: int) -> None:
        if self.max_num_seqs < 1:
            raise MoesimError("max_num_seqs", f"must be ≥ 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < tokens_per_seq:
            raise MoesimError(
                "max_num_batched_tokens",
                f"{self.max_num_batched_tokens} cannot hold one sequence's {tokens_per_seq} tokens per step",
                "raise --max-num-batched-tokens",
            )


@dataclass(frozen=True)
class ServeOptions:
    """The serving engine's knobs."""

    limits: SchedulerLimits = field(default_factory=SchedulerLimits)
    gpu_memory_utilization: float = option(
        DEFAULT_GPU_MEMORY_UTILIZATION, "Share of device memory for weights and KV cache (vLLM's flag)."
    )
    block_size: int = DEFAULT_BLOCK_TOKENS
    kv_cache_tokens: int | None = option(  # the engine's KV capacity when known (vLLM logs it); else derived
        None,
        "KV-cache capacity in tokens when known (vLLM logs it); else from the memory model.",
        kind=int,
    )
    tp: int = option(
        1,
        "Tensor-parallel GPUs of attention (alone: experts split over them too, as `vllm serve -tp N` by "
        "default).",
    )
    gpus: int | None = option(
        None,
        "GPUs in all (default --tp); above --tp the attention runs data-parallel in --gpus/--tp groups "
        "(SGLang --enable-dp-attention --dp, vLLM --data-parallel-size).",
    )
    ep: int | None = option(
        None,
        "Expert-parallel ranks of the routed experts, with an all-to-all dispatch and combine per MoE layer "
        "(SGLang --ep-size, vLLM --enable-expert-parallel: EP = --gpus). Default 1: experts tensor-parallel "
        "over all GPUs.",
    )


def _datasets() -> tuple[str, ...]:
    from moesim.simulator.serving.workload import DATASETS

    return DATASETS


@dataclass(frozen=True)
class BenchmarkClient:
    """What `vllm bench serve` sends and how it paces it, under vLLM's flag names with vLLM's defaults
    (vllm 0.33.0: `vllm/benchmarks/serve.py`, `vllm/benchmarks/datasets/datasets.py`)."""

    num_prompts: int = option(1000, "Requests to send.")
    max_concurrency: tuple[int, ...] | None = option(
        None,
        "Most requests in flight (the client's semaphore); a comma list sweeps, e.g. 1,4,16,64.",
        list_of=int,
    )
    request_rate: tuple[float, ...] = option(
        (math.inf,), "Requests per second (inf: all at once); a comma list sweeps.", list_of=float
    )
    burstiness: float = option(1.0, "Gamma shape of the gaps between requests: 1 Poisson, < 1 burstier.")
    dataset_name: str = option(
        "random",
        "random (vLLM's), chat (log-normal conversational lengths) or jsonl.",
        choices=lambda: _datasets(),
    )
    dataset_path: str | None = option(None, 'JSONL of {"input_len": N, "output_len": M} per line.')
    random_input_len: int = option(1024, "Prompt tokens of the random dataset.")
    random_output_len: int = option(128, "Output tokens of the random dataset.")
    random_range_ratio: float = option(0.0, "Lengths uniform in [L(1 − r), L(1 + r)], as vLLM draws them.")
    seed: int = option(0, "Seed of the workload and of the runs' random draws.")
    max_minutes: float = option(
        DEFAULT_MAX_MINUTES, "Refuse a run estimated to take longer (minutes on two cores)."
    )

    def __post_init__(self) -> None:
        # before the run-time estimate reads them (the workload checks them again where it draws)
        check_finite(
            self.random_range_ratio, "random_range_ratio", low=0.0, high=1.0, fix="as vLLM requires [0, 1)"
        )
        check_seed(self.seed, "seed")


__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "BenchmarkClient",
    "SchedulerLimits",
    "ServeOptions",
]

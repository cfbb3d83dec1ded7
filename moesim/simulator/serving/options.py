"""The serving engine's knobs and their defaults (vLLM's), apart from the loop so that reading them (the CLI
does at start-up) does not load simpy and the step model."""

from __future__ import annotations

from dataclasses import dataclass, field

from moesim.errors import MoesimError

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default block_size on CUDA
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of device memory for weights + KV cache


@dataclass(frozen=True)
class SchedulerLimits:
    """The engine's batching limits (vLLM 0.11's defaults for its API server on GPUs of ≥ 70 GB)."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024

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
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    block_size: int = DEFAULT_BLOCK_TOKENS
    kv_cache_tokens: int | None = None  # the engine's KV capacity when known (vLLM logs it); else derived


__all__ = ["DEFAULT_BLOCK_TOKENS", "DEFAULT_GPU_MEMORY_UTILIZATION", "SchedulerLimits", "ServeOptions"]

"""The size of a run, estimated before it starts, and the documented limits it must stay under.

A run that would take the machine's memory or hours is refused with the estimate, the limit and the flag that
raises it, instead of being killed by the kernel or printing nothing for minutes.
"""

from __future__ import annotations

from typing import Any

from moesim.errors import MoesimError

DEFAULT_MAX_MEMORY_GB = 4.0
"""Memory a run may plan to use for sampling routing (GB): a quarter of a 16 GB laptop; `--max-memory-gb`."""

SWEEP_SECONDS_PER_CONFIG = 0.0076
"""Fast-path time of one sweep configuration on two cores: `moesim sweep --model all` ran 1440 in 11 s."""

DEFAULT_MAX_CONFIGS = 20_000
"""Configurations (model × batch × draft length) one sweep may run: about 2.5 minutes on two cores;
`--max-configs`."""


def sampling_bytes(routing: Any, tokens_per_seq: int) -> int:
    """Estimated peak memory a routing model needs for steps of `tokens_per_seq` tokens per sequence (0 for
    models in closed form)."""
    estimate = getattr(routing, "sampling_bytes", None)
    return int(estimate(tokens_per_seq)) if callable(estimate) else 0


def check_memory(routing: Any, tokens_per_seq: int, max_memory_gb: float, what: str) -> None:
    """Refuse a run whose routing sampling would need more than `max_memory_gb`."""
    if not max_memory_gb > 0:
        raise MoesimError("max_memory_gb", f"must be > 0, got {max_memory_gb}", "give --max-memory-gb in GB")
    need_gb = sampling_bytes(routing, tokens_per_seq) / 1e9
    if need_gb > max_memory_gb:
        raise MoesimError(
            "max_memory_gb",
            f"{what} needs about {need_gb:,.1f} GB to sample routing for {tokens_per_seq:,} tokens per sequence "
            f"over {routing.n_experts:,} experts, above the limit of {max_memory_gb:g} GB",
            "use a shorter --draft-len or fewer --experts, or raise --max-memory-gb",
        )


def check_configs(n_configs: int, max_configs: int) -> None:
    """Refuse a sweep of more configurations than `max_configs`."""
    if n_configs > max_configs:
        raise MoesimError(
            "max_configs",
            f"the sweep has {n_configs:,} configurations (models × batches × draft lengths), "
            f"above the limit of {max_configs:,} (about {n_configs * SWEEP_SECONDS_PER_CONFIG / 60:,.0f} minutes on two cores)",
            "sweep fewer values (e.g. powers of two for --batch), or raise --max-configs",
        )


__all__ = ["DEFAULT_MAX_CONFIGS", "DEFAULT_MAX_MEMORY_GB", "check_configs", "check_memory", "sampling_bytes"]

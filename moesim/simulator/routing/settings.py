"""The settings of fitting, inspecting and recording routing traces, each with its default and command-line
face (`moesim routing fit | inspect | generate | record`). Light: the CLI reads them at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from moesim.options import option
from moesim.simulator.bounds import DEFAULT_MAX_MEMORY_GB, check_count, check_max_memory_gb, check_seed

MAX_FIT_DISTANCE = 4096
"""The largest overlap distance / window length a fit measures (tokens): far past the 16–64 where measured
overlap has fallen to its floor, and small enough that the per-distance arrays stay kilobytes."""

MAX_RECORD_TOKENS = 1 << 20
"""The most tokens one prompt may be truncated to or generate while recording (about a million: beyond any
released model's context)."""


@dataclass(frozen=True)
class FitSettings:
    """How a trace is fitted (`RoutingEstimator`) or summarised."""

    max_distance: int = option(16, "Overlap distances / window lengths measured (D).")
    n_groups: int = option(1, "Expert groups (group-limited routing; DeepSeek: 8).", flag="--groups")
    topk_groups: int = option(1, "Groups each token may use (DeepSeek: 4).")
    seed: int = option(0, "Seed of the fit's simulated sequences.")

    def __post_init__(self) -> None:
        check_count(self.max_distance, "--max-distance", high=MAX_FIT_DISTANCE)
        check_count(self.n_groups, "--groups")
        check_count(
            self.topk_groups,
            "--topk-groups",
            high=self.n_groups,
            fix="give at most --groups groups (--topk-groups does nothing without --groups)",
        )
        check_seed(self.seed, "--seed")


@dataclass(frozen=True)
class GenerateSettings:
    """How a synthetic trace is drawn from fitted statistics (`synthetic.generate_trace`)."""

    seed: int = option(0, "Seed of the generated trace.")
    max_memory_gb: float = option(
        DEFAULT_MAX_MEMORY_GB, "Refuse a trace whose generation is estimated to need more memory than this."
    )

    def __post_init__(self) -> None:
        check_seed(self.seed, "--seed")
        check_max_memory_gb(self.max_memory_gb)


@dataclass(frozen=True)
class RecordSettings:
    """How a routing trace is recorded from a transformers model (`calibrate.routing_record.record_trace`)."""

    max_tokens: int = option(256, "Truncate each prompt to this many tokens.")
    new_tokens: int = option(0, "Also record N generated tokens.", flag="--generate")
    seed: int = option(0, "Seed for randomly initialised weights.")
    max_memory_gb: float = option(
        DEFAULT_MAX_MEMORY_GB,
        "Refuse a model whose float32 weights (estimated from its config before it is built) need more memory "
        "than this.",
    )

    def __post_init__(self) -> None:
        check_count(self.max_tokens, "--max-tokens", high=MAX_RECORD_TOKENS)
        check_count(self.new_tokens, "--generate", low=0, high=MAX_RECORD_TOKENS)
        check_seed(self.seed, "--seed")
        check_max_memory_gb(self.max_memory_gb)


FIT_DEFAULTS = FitSettings()
RECORD_DEFAULTS = RecordSettings()

__all__ = [
    "FIT_DEFAULTS",
    "MAX_FIT_DISTANCE",
    "MAX_RECORD_TOKENS",
    "RECORD_DEFAULTS",
    "FitSettings",
    "GenerateSettings",
    "RecordSettings",
]

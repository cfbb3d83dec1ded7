"""The settings of fitting, inspecting and recording routing traces, each with its default and command-line
face (`moesim routing fit | inspect | generate | record`). Light: the CLI reads them at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from moesim.options import option
from moesim.simulator.bounds import DEFAULT_MAX_MEMORY_GB


@dataclass(frozen=True)
class FitSettings:
    """How a trace is fitted (`RoutingEstimator`) or summarised."""

    max_distance: int = option(16, "Overlap distances / window lengths measured (D).")
    n_groups: int = option(1, "Expert groups (group-limited routing; DeepSeek: 8).", flag="--groups")
    topk_groups: int = option(1, "Groups each token may use (DeepSeek: 4).")
    seed: int = option(0, "Seed of the fit's simulated sequences.")


@dataclass(frozen=True)
class GenerateSettings:
    """How a synthetic trace is drawn from fitted statistics (`synthetic.generate_trace`)."""

    seed: int = option(0, "Seed of the generated trace.")
    max_memory_gb: float = option(
        DEFAULT_MAX_MEMORY_GB, "Refuse a trace whose generation is estimated to need more memory than this."
    )


@dataclass(frozen=True)
class RecordSettings:
    """How a routing trace is recorded from a transformers model (`calibrate.routing_record.record_trace`)."""

    max_tokens: int = option(256, "Truncate each prompt to this many tokens.")
    new_tokens: int = option(0, "Also record N generated tokens.", flag="--generate")
    seed: int = option(0, "Seed for randomly initialised weights.")


FIT_DEFAULTS = FitSettings()
RECORD_DEFAULTS = RecordSettings()

__all__ = ["FIT_DEFAULTS", "RECORD_DEFAULTS", "FitSettings", "GenerateSettings", "RecordSettings"]

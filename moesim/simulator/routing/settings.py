"""The settings of fitting, inspecting and recording routing traces, each with its default and command-line
face (`moesim routing fit | inspect | generate | record`). Light: the CLI reads them at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from moesim.options import option


@dataclass(frozen=True)
class FitSettings:
    """How a trace is fitted (`RoutingEstimator`) or summarised."""

    max_distance: int = option(16, "Overlap distances / window lengths measured (D).")
    n_groups: int = option(1, "Expert groups (group-limited routing; DeepSeek: 8).", flag="--groups")
    topk_groups: int = option(1, "Groups each token may use (DeepSeek: 4).")
    seed: int = option(0, "Seed of the fit's simulated sequences, or of a generated trace.")


@dataclass(frozen=True)
class RecordSettings:
    """How a routing trace is recorded from a transformers model (`calibrate.routing_record.record_trace`)."""

    max_tokens: int = option(256, "Truncate each prompt to this many tokens.")
    new_tokens: int = option(0, "Also record N generated tokens.", flag="--generate")
    seed: int = option(0, "Seed for randomly initialised weights.")


FIT_DEFAULTS = FitSettings()
RECORD_DEFAULTS = RecordSettings()

__all__ = ["FIT_DEFAULTS", "RECORD_DEFAULTS", "FitSettings", "RecordSettings"]

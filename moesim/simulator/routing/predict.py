"""How many distinct experts one step pulls in: the mean and spread per layer for B sequences × T tokens,
and on the busiest expert-parallel rank (`moesim routing predict`).

    predict_distinct(DistinctQuery(n_experts=128, top_k=8, tokens=4, routing="typical"))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.options import option
from moesim.simulator.bounds import DEFAULT_MAX_MEMORY_GB, check_count, check_max_memory_gb
from moesim.simulator.routing.placement import PLACEMENT_SPELLINGS

QUANTILE_SAMPLE_ENTRIES = 2e7
"""Samples × B × T × N the quantiles aim at: enough for stable p10/p90 in a fraction of a second."""
QUANTILE_SAMPLES_RANGE = (200, 4000)
"""The fewest and most sampled steps per layer, whatever the size."""


@dataclass(frozen=True)
class DistinctQuery:
    """One step's routing question: N experts, top-k, B sequences × T tokens, under a routing model."""

    n_experts: int = option(help="Routed experts N.", flag="--experts")
    top_k: int = option(help="Experts per token k.")
    tokens: int = option(help="Tokens per sequence T (a verification step: K+1).")
    batch: int = option(1, "Independent sequences B.")
    overlap: tuple[float, ...] | None = option(
        None, "Overlap at distances 1..D, e.g. 0.35,0.25,0.2 (last holds beyond).", list_of=float
    )
    baseline_overlap: float | None = option(None, "Overlap of tokens of different sequences.", kind=float)
    routing: str = option("independent", "independent|typical|STATS")
    layer: int | None = option(None, "Layer index (per-layer statistics); default: all layers.", kind=int)
    n_groups: int = option(1, "Expert groups (group-limited).", flag="--groups")
    topk_groups: int = option(1, "Groups each token may use.")
    ranks: int | None = option(None, "Expert-parallel ranks: also report the busiest rank.", kind=int)
    placement: str = option("contiguous", "How expert ids map to the ranks.", choices=PLACEMENT_SPELLINGS)
    max_memory_gb: float = option(
        DEFAULT_MAX_MEMORY_GB, "Refuse to sample the quantiles when that would need more memory than this."
    )

    def check(self) -> None:
        if not 1 <= self.top_k <= self.n_experts:
            raise MoesimError(
                "--top-k", f"must be between 1 and --experts {self.n_experts}, got {self.top_k}"
            )
        if self.tokens < 1 or self.batch < 1:
            raise MoesimError(
                "--tokens", f"--tokens and --batch must be ≥ 1, got {self.tokens} and {self.batch}"
            )
        if self.layer is not None and self.layer < 0:
            raise MoesimError("--layer", f"must be ≥ 0, got {self.layer}")
        check_count(self.n_groups, "--groups", high=self.n_experts)
        check_count(
            self.topk_groups,
            "--topk-groups",
            high=self.n_groups,
            fix="give at most --groups groups (--topk-groups does nothing without --groups)",
        )
        if self.ranks is not None and (self.ranks < 1 or self.n_experts % self.ranks):
            raise MoesimError("--ranks", f"must divide --experts {self.n_experts}, got {self.ranks}")
        check_max_memory_gb(self.max_memory_gb)  # finite, > 0 and bounded


def quantile_samples(q: DistinctQuery) -> int:
    """Sampled steps per layer: enough for stable quantiles, as many as the memory limit allows."""
    from moesim.simulator.routing.base import MIN_QUANTILE_SAMPLES, affordable_samples, sampling_bytes

    wanted = int(
        np.clip(QUANTILE_SAMPLE_ENTRIES / (q.batch * q.tokens * q.n_experts), *QUANTILE_SAMPLES_RANGE)
    )
    n_samples = affordable_samples(q.n_experts, q.batch, q.tokens, q.max_memory_gb * 1e9, wanted)
    if n_samples == 0:
        need_gb = sampling_bytes(q.n_experts, q.batch, q.tokens, MIN_QUANTILE_SAMPLES) / 1e9
        raise MoesimError(
            "--batch",
            f"sampling {q.batch} × {q.tokens} tokens over {q.n_experts} experts needs about {need_gb:,.0f} GB "
            f"({MIN_QUANTILE_SAMPLES} samples), above the --max-memory-gb limit of {q.max_memory_gb:g} GB",
            "lower --batch or --tokens, or raise --max-memory-gb",
        )
    return n_samples


def predict_distinct(q: DistinctQuery, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Distinct experts per layer for `q` (mean, p10/p50/p90), averaged over the layers asked for;
    `per_layer` when there are several, a layer was named, or ranks were asked for."""
    from moesim.simulator.routing.correlated import CorrelatedRouting
    from moesim.simulator.routing.independent import expected_distinct_uniform
    from moesim.simulator.routing.presets import routing_from_cli

    q.check()
    topk_groups = 1 if q.n_groups == 1 else q.topk_groups
    model = routing_from_cli(
        q.routing, q.n_experts, q.top_k, q.overlap, q.baseline_overlap, q.n_groups, topk_groups
    )
    fitted = [index for index, _ in model.layers] if isinstance(model, CorrelatedRouting) else []
    layers: list[int | None] = [q.layer]
    if q.layer is None and len(fitted) > 1:
        layers = list(fitted)
    if q.layer is not None and Path(q.routing).exists() and q.layer not in fitted:
        raise MoesimError(
            "--layer", f"{q.routing} has statistics for layers {fitted}, not {q.layer}", "choose one of them"
        )
    n_samples = quantile_samples(q)
    rng = np.random.default_rng(0)
    per_layer = []
    for index in layers:
        per_layer.append(layer_distinct(model, q, n_samples, rng, index))
        if progress is not None:
            progress(1)
    result: dict[str, Any] = {
        key: float(np.mean([e[key] for e in per_layer])) for key in ("distinct_experts", "p10", "p50", "p90")
    }
    result |= {
        "independent_uniform": float(expected_distinct_uniform(q.n_experts, q.top_k, q.batch * q.tokens)),
        "upper_bound": min(q.n_experts, q.batch * q.tokens * q.top_k),
        "experts": q.n_experts,
        "top_k": q.top_k,
        "tokens": q.tokens,
        "batch": q.batch,
        "routing": model.description,
    }
    if len(per_layer) > 1 or q.layer is not None or q.ranks is not None:
        result["per_layer"] = per_layer
    return result


def layer_distinct(
    model: Any, q: DistinctQuery, n_samples: int, rng: np.random.Generator, index: int | None
) -> dict[str, Any]:
    """Mean and quantiles of distinct experts of one layer (and of the busiest expert-parallel rank)."""
    from moesim.simulator.routing.base import DistinctExperts
    from moesim.simulator.routing.correlated import rank_summary

    loads = model.sample_expert_loads(q.n_experts, q.top_k, q.batch, q.tokens, n_samples, rng, index)
    spread = DistinctExperts.from_samples((loads > 0).sum(axis=1))
    entry: dict[str, Any] = {
        "layer": index,
        "distinct_experts": model.expected_distinct(q.n_experts, q.top_k, q.batch, q.tokens, index),
        "p10": spread.p10,
        "p50": spread.p50,
        "p90": spread.p90,
    }
    if q.ranks is not None:
        summary = rank_summary(loads, q.ranks, q.placement)  # type: ignore[arg-type]
        entry["per_rank"] = {
            "ranks": q.ranks,
            "placement": summary.placement,
            "max_distinct": vars(summary.max_distinct),
            "max_tokens": vars(summary.max_tokens),
            "mean_distinct_per_rank": summary.mean_distinct_per_rank,
        }
    return entry


__all__ = ["DistinctQuery", "layer_distinct", "predict_distinct", "quantile_samples"]

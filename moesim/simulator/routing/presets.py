"""Ready-made routing models: the `typical` assumption, summary statistics, and the CLI's --routing resolver.

The `typical` preset (for models without traces) is an assumption, not a measurement, stated in the
model's latent parameters (see moesim.simulator.routing.correlated):
- popularity: a Zipf skew whose baseline overlap is 1.2·k/N (load-balanced models are mildly skewed);
- most layers: sigma 4.5, sequence_share 0.35, token_corr 0.55 — for N=128, k=8 this gives an adjacent
  overlap ≈ 5–6× chance (k/N) decaying to a plateau ≈ 2.5× chance; see `typical_overlaps`;
- the first `TYPICAL_EARLY_LAYERS` layers, where measured reuse is weakest: sigma 3.0, same shares.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.routing.bank_table import shipped_entry, table_key
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.routing.correlated import (
    CorrelatedRouting,
    LayerRouting,
    chain_parents,
    layer_parts,
    sample_sequences,
)
from moesim.simulator.routing.fit import layer_from_summary, zipf_for_baseline
from moesim.simulator.routing.independent import IndependentRouting

TYPICAL_BASELINE_PER_CHANCE = 1.2
TYPICAL_LATENT = {"sigma": 4.5, "sequence_share": 0.35, "token_corr": 0.55}
TYPICAL_EARLY_LATENT = {"sigma": 3.0, "sequence_share": 0.35, "token_corr": 0.55}
TYPICAL_EARLY_LAYERS = 3
TYPICAL_DESCRIPTION_DISTANCES = 16
TYPICAL_DESCRIPTION_SEQUENCES = 128
OVERLAP_SEED = 0


def typical_overlaps(layer: LayerRouting, distances: int = 16, n_sequences: int = 256) -> np.ndarray:
    """The overlap curve o_1..o_D a layer's parameters imply (seeded simulation, for descriptions and docs;
    read from the shipped table where it holds the curve, the same floats)."""
    shipped = shipped_entry(overlaps_key(layer, distances, n_sequences))
    return simulated_overlaps(layer, distances, n_sequences) if shipped is None else shipped


def overlaps_key(layer: LayerRouting, distances: int, n_sequences: int) -> str:
    """The table key of `typical_overlaps(layer, distances, n_sequences)`."""
    return table_key("overlaps", n_sequences, OVERLAP_SEED, distances, layer_parts(layer))


def simulated_overlaps(layer: LayerRouting, distances: int, n_sequences: int) -> np.ndarray:
    """`typical_overlaps`, simulated."""
    sets = sample_sequences(
        layer, chain_parents(distances + 1), n_sequences, np.random.default_rng(OVERLAP_SEED)
    )
    masks = np.zeros((*sets.shape[:2], layer.n_experts), dtype=bool)
    np.put_along_axis(masks, sets, True, axis=2)
    return np.array(
        [(masks[:, d:] & masks[:, :-d]).sum(axis=-1).mean() / layer.top_k for d in range(1, distances + 1)]
    )


@functools.lru_cache(maxsize=1024)  # a screen meets every (N, k) of its space
def typical_routing(n_experts: int, top_k: int, n_groups: int = 1, topk_groups: int = 1) -> CorrelatedRouting:
    """The documented default for models without traces (see the module docstring for its numbers)."""
    baseline = min(TYPICAL_BASELINE_PER_CHANCE * top_k / n_experts, 1.0)
    popularity = tuple(float(p) for p in zipf_for_baseline(n_experts, top_k, baseline))
    groups = {"n_groups": n_groups, "topk_groups": topk_groups}
    main = LayerRouting(popularity, top_k, **TYPICAL_LATENT, **groups)  # type: ignore[arg-type]
    early = LayerRouting(popularity, top_k, **TYPICAL_EARLY_LATENT, **groups)  # type: ignore[arg-type]
    layers = (*((i, early) for i in range(TYPICAL_EARLY_LAYERS)), (TYPICAL_EARLY_LAYERS, main))
    curve = typical_overlaps(main, TYPICAL_DESCRIPTION_DISTANCES, TYPICAL_DESCRIPTION_SEQUENCES)
    chance = top_k / n_experts
    return CorrelatedRouting(
        main,
        layers,
        assumption=(
            f"typical routing (assumed, no trace): adjacent overlap {curve[0]:.3f} ({curve[0] / chance:.1f}× chance "
            f"k/N), {curve[-1]:.3f} at distance {TYPICAL_DESCRIPTION_DISTANCES}, baseline {baseline:.3f}; weaker in the first "
            f"{TYPICAL_EARLY_LAYERS} layers"
        ),
    )


@functools.lru_cache(maxsize=256)
def _summary_cached(
    n_experts: int,
    top_k: int,
    overlap: tuple[float, ...],
    baseline: float | None,
    n_groups: int,
    topk_groups: int,
) -> CorrelatedRouting:
    layer = layer_from_summary(n_experts, top_k, overlap, baseline, n_groups, topk_groups)
    o0 = top_k / n_experts if baseline is None else baseline
    curve = ",".join(f"{o:g}" for o in overlap) if overlap else "none"
    return CorrelatedRouting(
        layer, assumption=f"correlated routing from summary statistics (overlap {curve}, baseline {o0:g})"
    )


def summary_routing(
    n_experts: int,
    top_k: int,
    overlap: Sequence[float] | None = None,
    baseline: float | None = None,
    n_groups: int = 1,
    topk_groups: int = 1,
) -> RoutingModel:
    """From an overlap curve o1..oD and baseline o0; with neither, independent uniform routing."""
    if not overlap and baseline is None:
        if n_groups != topk_groups:
            return _summary_cached(n_experts, top_k, (), None, n_groups, topk_groups)
        return IndependentRouting()
    return _summary_cached(
        n_experts, top_k, tuple(float(o) for o in overlap or ()), baseline, n_groups, topk_groups
    )


def _parse_overlap(overlap: str | Sequence[float] | None) -> tuple[float, ...] | None:
    if overlap is None:
        return None
    if isinstance(overlap, str):
        try:
            curve = tuple(float(part) for part in overlap.split(",") if part.strip())
        except ValueError:
            raise MoesimError("--overlap", f"expected numbers like 0.4,0.3,0.25, got {overlap!r}") from None
    else:
        curve = tuple(float(o) for o in overlap)
    if not curve:  # an empty curve would silently mean independent routing
        raise MoesimError("--overlap", "needs at least one value", "give the overlap at distance 1, e.g. 0.4")
    return curve


def routing_from_cli(
    spec: str,
    n_experts: int,
    top_k: int,
    overlap: str | Sequence[float] | None = None,
    baseline: float | None = None,
    n_groups: int = 1,
    topk_groups: int = 1,
) -> RoutingModel:
    """Resolve --routing independent|typical|STATS_FILE plus the summary flags into a RoutingModel."""
    curve = _parse_overlap(overlap)
    has_summary = bool(curve) or baseline is not None
    if spec in ("independent", "summary"):
        return summary_routing(n_experts, top_k, curve, baseline, n_groups, topk_groups)
    if has_summary:
        raise MoesimError(
            "--routing",
            f"--overlap/--baseline-overlap describe the routing themselves; drop --routing {spec}",
        )
    if spec == "typical":
        return typical_routing(n_experts, top_k, n_groups, topk_groups)
    if Path(spec).suffix in (".json", ".toml") or Path(spec).exists():
        from moesim.simulator.routing.stats_file import load_routing_stats

        model = load_routing_stats(spec)
        if (model.n_experts, model.top_k) != (n_experts, top_k):
            raise MoesimError(
                "--routing",
                f"{spec} was fitted for {model.n_experts} experts top-{model.top_k}, "
                f"the model has {n_experts} experts top-{top_k}",
                "fit statistics on this model's traces",
            )
        return model
    raise MoesimError(
        "--routing", f"unknown routing {spec!r}", "use independent, typical or a stats file path"
    )

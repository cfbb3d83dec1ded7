"""Rewrites the shipped table of sampled routing statistics (`bank_table`) by simulating its entries.

`python -m moesim.simulator.routing.bank_table_writer` writes, for the typical routing of every MoE model
of the catalogue, each layer parameter set's bank hit counts for chains of up to BANK_MIN_TOKENS tokens
(every draft length up to 16) and the overlap curve the preset describes itself with.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from moesim.simulator.routing.bank_table import table_path, write_table
from moesim.simulator.routing.correlated import BANK_MIN_TOKENS, bank_hit_counts, bank_parents, hits_key
from moesim.simulator.routing.presets import (
    TYPICAL_DESCRIPTION_DISTANCES,
    TYPICAL_DESCRIPTION_SEQUENCES,
    overlaps_key,
    simulated_overlaps,
    typical_routing,
)

RoutingShape = tuple[int, int, int, int]
"""(n_experts, top_k, n_groups, topk_groups): what `typical_routing` is built from."""


def typical_entries(shape: RoutingShape) -> dict[str, np.ndarray]:
    """The table entries of `typical_routing(*shape)`, simulated: every layer parameter set's bank hit
    counts and the description's overlap curve."""
    routing = typical_routing(*shape)
    parents = bank_parents(BANK_MIN_TOKENS)
    entries = {
        hits_key(layer, parents, routing.seed): bank_hit_counts(layer, parents, routing.seed)
        for layer in routing.distinct_layers
    }
    curve_key = overlaps_key(routing.default, TYPICAL_DESCRIPTION_DISTANCES, TYPICAL_DESCRIPTION_SEQUENCES)
    entries[curve_key] = simulated_overlaps(
        routing.default, TYPICAL_DESCRIPTION_DISTANCES, TYPICAL_DESCRIPTION_SEQUENCES
    )
    return entries


def write_typical_table(shapes: Iterable[RoutingShape], path: Path) -> int:
    """Simulate the entries of every routing shape and write them as the table at `path`; the entry count."""
    entries: dict[str, np.ndarray] = {}
    for shape in dict.fromkeys(shapes):
        entries.update(typical_entries(shape))
    write_table(entries, path)
    return len(entries)


if __name__ == "__main__":  # the catalogue lives in models/, which the routing room does not import
    from moesim.simulator.models.catalogue import list_models, load_model

    specs = [load_model(name) for name in list_models()]
    catalogue_shapes = [
        (spec.n_experts, spec.top_k, spec.n_groups, spec.topk_groups)
        for spec in specs
        if spec.is_moe and spec.top_k < spec.n_experts
    ]
    count = write_typical_table(catalogue_shapes, table_path())
    print(f"{table_path()}: {count} entries for {len(set(catalogue_shapes))} routing shapes")

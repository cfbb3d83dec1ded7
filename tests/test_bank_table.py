"""The shipped table of sampled routing statistics: its entries are what simulating gives, bit for bit, and
it holds every catalogue model's typical routing (else a sweep silently simulates the banks again)."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.simulator.models.catalogue import list_models, load_model
from moesim.simulator.routing import correlated
from moesim.simulator.routing.bank_table import shipped_entry
from moesim.simulator.routing.bank_table_writer import typical_entries
from moesim.simulator.routing.correlated import (
    BANK_MIN_TOKENS,
    BANK_SEQUENCES,
    bank_parents,
    hits_key,
    miss_probability,
)
from moesim.simulator.routing.presets import (
    TYPICAL_DESCRIPTION_DISTANCES,
    TYPICAL_DESCRIPTION_SEQUENCES,
    overlaps_key,
    typical_routing,
)

REGENERATE = "python -m moesim.simulator.routing.bank_table_writer"


def _catalogue_shapes() -> list[tuple[int, int, int, int]]:
    specs = [load_model(name) for name in list_models()]
    shapes = [
        (s.n_experts, s.top_k, s.n_groups, s.topk_groups) for s in specs if s.is_moe and s.top_k < s.n_experts
    ]
    return list(dict.fromkeys(shapes))


# A sample of the table: the smallest shape, a group-limited one (DeepSeek's) and a fine-grained one.
@pytest.mark.parametrize("shape", [(8, 2, 1, 1), (256, 8, 8, 4), (128, 8, 1, 1)])
def test_shipped_entries_are_what_simulating_gives(shape: tuple[int, int, int, int]) -> None:
    for key, simulated in typical_entries(shape).items():
        shipped = shipped_entry(key)
        assert shipped is not None, f"{key} of {shape} is not in the table: run {REGENERATE}"
        assert shipped.dtype == simulated.dtype
        assert np.array_equal(shipped, simulated), f"{key} of {shape} is stale: run {REGENERATE}"


def test_every_catalogue_typical_routing_is_in_the_table() -> None:
    parents = bank_parents(BANK_MIN_TOKENS)
    for shape in _catalogue_shapes():
        routing = typical_routing(*shape)
        keys = [hits_key(layer, parents, routing.seed) for layer in routing.distinct_layers]
        keys.append(
            overlaps_key(routing.default, TYPICAL_DESCRIPTION_DISTANCES, TYPICAL_DESCRIPTION_SEQUENCES)
        )
        missing = [key for key in keys if shipped_entry(key) is None]
        assert not missing, f"typical routing {shape} is missing from the table: run {REGENERATE}"


def test_miss_probability_from_the_table_equals_the_simulated_bank(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = typical_routing(16, 4).default
    from_table = {t: miss_probability(layer, bank_parents(t), t, 0) for t in (1, 4, 9, 17)}
    miss_probability.cache_clear()
    monkeypatch.setattr(correlated, "shipped_entry", lambda key: None)
    try:
        for tokens, shipped in from_table.items():
            bank = correlated._bank(layer, bank_parents(tokens), BANK_SEQUENCES, 0, tokens=tokens)
            simulated = np.clip(1.0 - correlated._expert_masks(bank, 16).mean(axis=0), 0.0, 1.0)
            assert shipped.tobytes() == simulated.tobytes()
            assert miss_probability(layer, bank_parents(tokens), tokens, 0).tobytes() == shipped.tobytes()
    finally:
        miss_probability.cache_clear()


def test_a_routing_outside_the_table_is_simulated() -> None:
    layer = typical_routing(24, 3).default  # no catalogue model has 24 experts
    assert shipped_entry(hits_key(layer, bank_parents(1), 0)) is None
    miss = miss_probability(layer, bank_parents(3), 3, 0)
    assert miss.shape == (24,) and np.all((miss >= 0) & (miss <= 1))

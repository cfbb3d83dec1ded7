"""Correlated routing model: limits, monotonicity, bounds, group limits, trees and expert-parallel ranks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.routing import CorrelatedRouting, IndependentRouting, LayerRouting, RoutingModel
from moesim.simulator.routing.correlated import chain_parents, sample_sequences
from moesim.simulator.routing.fit import successive_inclusion
from moesim.simulator.routing.independent import expected_distinct_uniform
from moesim.simulator.routing.placement import expert_to_rank

N, K = 32, 4


def model(**params: float) -> CorrelatedRouting:
    return CorrelatedRouting(LayerRouting.uniform(N, K, **params))


def test_is_a_routing_model_with_a_description() -> None:
    m = model(sigma=2.0, sequence_share=0.5, token_corr=0.5)
    assert isinstance(m, RoutingModel)
    assert "sequence share 0.50" in m.description


def test_no_correlation_is_independent_uniform_routing() -> None:
    m = model()
    for batch, tokens in [(1, 2), (1, 8), (4, 4), (16, 2)]:
        exact = float(expected_distinct_uniform(N, K, batch * tokens))
        assert m.expected_distinct(N, K, batch, tokens) == pytest.approx(exact, rel=0.02)


def test_no_correlation_with_skew_is_independent_popularity_model() -> None:
    weights = np.arange(1, N + 1, dtype=float) ** -1.0
    m = CorrelatedRouting(LayerRouting(tuple(weights / weights.sum()), K))
    inclusion = successive_inclusion(weights, K)
    for tokens in (2, 4, 8):
        closed = float(np.sum(1 - (1 - inclusion) ** tokens))
        assert m.expected_distinct(N, K, 1, tokens) == pytest.approx(closed, rel=0.03)
    assert m.expected_distinct(N, K, 1, 8) < float(expected_distinct_uniform(N, K, 8))


def test_full_overlap_means_the_same_k_experts() -> None:
    m = model(sigma=1e4, sequence_share=1.0, token_corr=1.0)
    for tokens in (1, 2, 8, 16):
        assert m.expected_distinct(N, K, 1, tokens) == pytest.approx(K, rel=1e-3)


def test_correlation_reduces_distinct_experts() -> None:
    independent = model().expected_distinct(N, K, 1, 8)
    short = model(sigma=3.0, token_corr=0.8).expected_distinct(N, K, 1, 8)
    both = model(sigma=3.0, sequence_share=0.6, token_corr=0.8).expected_distinct(N, K, 1, 8)
    assert both < short < independent


@settings(max_examples=15, deadline=None)
@given(
    sigma=st.floats(0.0, 6.0),
    share=st.floats(0.0, 1.0),
    rho=st.floats(0.0, 0.99),
)
def test_monotone_in_tokens_and_batch_and_bounded(sigma: float, share: float, rho: float) -> None:
    m = model(sigma=sigma, sequence_share=share, token_corr=rho)
    grid = np.array([[m.expected_distinct(N, K, b, t) for t in (1, 2, 4, 8, 16)] for b in (1, 2, 8, 64)])
    assert np.all(np.diff(grid, axis=0) >= -1e-9)
    assert np.all(np.diff(grid, axis=1) >= -1e-9)
    bounds = np.array([[min(N, t * K * b) for t in (1, 2, 4, 8, 16)] for b in (1, 2, 8, 64)])
    assert np.all(grid <= bounds + 1e-9)
    assert np.all(grid >= K - 1e-9)


@settings(max_examples=10, deadline=None)
@given(topk_groups=st.integers(1, 4), sigma=st.floats(0.0, 4.0), seed=st.integers(0, 1000))
def test_group_limited_tokens_stay_in_their_groups(topk_groups: int, sigma: float, seed: int) -> None:
    layer = LayerRouting.uniform(64, 6, sigma=sigma, token_corr=0.5, n_groups=8, topk_groups=topk_groups)
    sets = sample_sequences(layer, chain_parents(6), 50, np.random.default_rng(seed))
    groups_used = np.array([[len(set(token // 8)) for token in seq] for seq in sets])
    assert groups_used.max() <= topk_groups
    assert all(len(set(token)) == 6 for seq in sets for token in seq)


def test_draft_tree_branches_share_their_prefix() -> None:
    m = model(sigma=3.0, sequence_share=0.3, token_corr=0.8)
    chain = m.expected_distinct_tree(N, K, 1, chain_parents(4))
    assert chain == pytest.approx(m.expected_distinct(N, K, 1, 4), rel=0.03)
    two_branches = (-1, 0, 1, 2, 1, 4)  # root, shared node, then two branches of two
    tree = m.expected_distinct_tree(N, K, 1, two_branches)
    assert chain < tree < m.expected_distinct(N, K, 2, 4)
    with pytest.raises(MoesimError, match="tree"):
        m.expected_distinct_tree(N, K, 1, (-1, 2, 0))


def test_loads_account_for_every_token_and_match_the_mean() -> None:
    m = model(sigma=2.0, sequence_share=0.4, token_corr=0.6)
    loads = m.sample_expert_loads(N, K, 3, 5, 4000, np.random.default_rng(0))
    assert loads.shape == (4000, N)
    assert np.all(loads.sum(axis=1) == 3 * 5 * K)
    assert (loads > 0).sum(axis=1).mean() == pytest.approx(m.expected_distinct(N, K, 3, 5), rel=0.02)
    dist = m.distinct_distribution(N, K, 3, 5)
    assert dist.p10 <= dist.p50 <= dist.p90


def test_busiest_rank() -> None:
    m = model(sigma=2.0, sequence_share=0.4, token_corr=0.6)
    one = m.rank_distribution(N, K, 4, 4, 1)
    assert one.max_distinct.mean == pytest.approx(m.expected_distinct(N, K, 4, 4), rel=0.02)
    eight = m.rank_distribution(N, K, 4, 4, 8, "round_robin")
    assert N / 8 >= eight.max_distinct.mean >= eight.mean_distinct_per_rank
    assert eight.max_tokens.mean >= 4 * 4 * K / 8
    assert list(expert_to_rank(8, 4, "contiguous")) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert list(expert_to_rank(8, 4, "round_robin")) == [0, 1, 2, 3, 0, 1, 2, 3]
    with pytest.raises(MoesimError, match="ranks"):
        m.rank_distribution(N, K, 1, 1, 5)


def test_mismatched_model_and_bad_parameters_are_user_errors() -> None:
    with pytest.raises(MoesimError, match="experts"):
        model().expected_distinct(64, K, 1, 2)
    with pytest.raises(MoesimError, match="token_corr"):
        LayerRouting.uniform(N, K, token_corr=1.5)
    with pytest.raises(MoesimError, match="topk_groups"):
        LayerRouting.uniform(N, 8, n_groups=8, topk_groups=1)
    assert IndependentRouting().expected_distinct(N, K, 1, 1) == K

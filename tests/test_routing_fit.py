"""Fitting: estimators of trace statistics, round trips, summary statistics, presets and the stats file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.routing import (
    CorrelatedRouting,
    IndependentRouting,
    LayerRouting,
    RoutingEstimator,
    RoutingTrace,
    load_routing_stats,
    routing_from_cli,
    save_routing_stats,
    summary_routing,
    typical_routing,
)
from moesim.simulator.routing.fit import successive_inclusion, weights_from_inclusion
from moesim.simulator.routing.independent import expected_distinct_uniform
from moesim.simulator.routing.stats import (
    baseline_overlap,
    inclusion_frequency,
    overlap_curve,
    sample_distinct,
    window_distinct,
)
from moesim.simulator.routing.synthetic import gating_trace, generate_trace

N, K = 32, 4


def trace_of(sets: list[list[list[int]]]) -> RoutingTrace:
    """One layer; `sets` is a list of sequences, each a list of token expert sets."""
    experts = np.array([token for seq in sets for token in seq])[:, None, :]
    ids = np.concatenate([np.full(len(seq), i) for i, seq in enumerate(sets)])
    return RoutingTrace.create(experts, ids, N)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_overlap_estimators_agree_with_brute_force(data: st.DataObject) -> None:
    lengths = data.draw(st.lists(st.integers(1, 6), min_size=2, max_size=4))
    token = st.lists(st.integers(0, N - 1), min_size=K, max_size=K, unique=True)
    sets = [[data.draw(token) for _ in range(n)] for n in lengths]
    trace = trace_of(sets)
    curve = overlap_curve(trace, 0, 3)
    for d in (1, 2, 3):
        pairs = [len(set(s[t]) & set(s[t + d])) / K for s in sets for t in range(len(s) - d)]
        assert (np.isnan(curve[d - 1]) and not pairs) or curve[d - 1] == pytest.approx(np.mean(pairs))
    across = [
        len(set(a) & set(b)) / K
        for i, s in enumerate(sets)
        for j, r in enumerate(sets)
        if i != j
        for a in s
        for b in r
    ]
    assert baseline_overlap(trace, 0) == pytest.approx(np.mean(across))
    windows = window_distinct(trace, 0, 3)
    two = [len(set(s[t]) | set(s[t + 1])) for s in sets for t in range(len(s) - 1)]
    assert windows[0] == K and (
        (np.isnan(windows[1]) and not two) or windows[1] == pytest.approx(np.mean(two))
    )
    assert inclusion_frequency(trace, 0).sum() == pytest.approx(K)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=8, max_size=40), st.integers(1, 6))
def test_successive_inclusion_sums_to_k_and_inverts(weights: list[float], k: int) -> None:
    pi = successive_inclusion(np.array(weights), k)
    assert pi.sum() == pytest.approx(k, rel=1e-6)
    assert np.all((pi >= 0) & (pi <= 1))
    order = np.argsort(weights)
    assert np.all(np.diff(pi[order]) >= -1e-12)  # more popular, more often used
    back = successive_inclusion(weights_from_inclusion(pi, k), k)
    assert back == pytest.approx(pi, abs=1e-3)


def test_uniform_independent_trace_has_chance_overlap() -> None:
    trace = generate_trace(CorrelatedRouting(LayerRouting.uniform(N, K)), 200, 10, seed=3)
    assert np.nanmean(overlap_curve(trace, 0, 4)) == pytest.approx(K / N, rel=0.05)
    assert baseline_overlap(trace, 0) == pytest.approx(K / N, rel=0.05)


def test_round_trip_recovers_parameters_and_predicts_held_out_counts() -> None:
    weights = np.arange(1, N + 1, dtype=float) ** -0.5
    truth = LayerRouting(tuple(weights / weights.sum()), K, sigma=2.0, sequence_share=0.4, token_corr=0.6)
    source = CorrelatedRouting(truth, ((0, truth),))
    fitted = RoutingEstimator(max_distance=12).fit(generate_trace(source, 400, 24, seed=1))
    got = fitted.model_.layer_params(0)
    assert got.sigma == pytest.approx(truth.sigma, rel=0.1)
    assert got.sequence_share == pytest.approx(truth.sequence_share, abs=0.07)
    assert got.token_corr == pytest.approx(truth.token_corr, abs=0.07)
    held_out = generate_trace(source, 400, 24, seed=2)
    rng = np.random.default_rng(0)
    for tokens in (2, 4, 8, 16):
        assert fitted.model_.expected_distinct(N, K, 1, tokens, 0) == pytest.approx(
            window_distinct(held_out, 0, tokens)[-1], rel=0.02
        )
        for batch in (4, 16, 64):
            empirical = sample_distinct(held_out, 0, batch, tokens, 300, rng).mean()
            assert fitted.model_.expected_distinct(N, K, batch, tokens, 0) == pytest.approx(
                empirical, rel=0.02
            )
    predicted = fitted.predict(4, 4)
    assert len(predicted) == 1 and predicted[0].p10 <= predicted[0].mean <= predicted[0].p90


def test_summary_of_a_different_process_predicts_its_counts() -> None:
    trace = gating_trace(N, K, 300, 24, seed=5)
    curve = overlap_curve(trace, 0, 16)
    model = summary_routing(N, K, list(curve), baseline_overlap(trace, 0))
    for tokens in (2, 4, 8, 16):
        assert model.expected_distinct(N, K, 1, tokens) == pytest.approx(
            window_distinct(trace, 0, tokens)[-1], rel=0.05
        )


def test_summary_limits() -> None:
    assert isinstance(summary_routing(N, K), IndependentRouting)
    at_baseline = summary_routing(N, K, [K / N] * 4, K / N)
    for tokens in (2, 8):
        assert at_baseline.expected_distinct(N, K, 1, tokens) == pytest.approx(
            float(expected_distinct_uniform(N, K, tokens)), rel=0.03
        )
    identical = summary_routing(N, K, [1.0], K / N)
    assert identical.expected_distinct(N, K, 1, 16) == pytest.approx(K, rel=1e-3)
    with pytest.raises(MoesimError, match="baseline"):
        summary_routing(N, K, [0.5], 0.01)
    with pytest.raises(MoesimError, match="overlap"):
        summary_routing(N, K, [0.1, 0.05], 0.2)


def test_typical_preset_is_between_independent_and_identical() -> None:
    model = typical_routing(N, K)
    assert "typical" in model.description and "assumed" in model.description
    independent = float(expected_distinct_uniform(N, K, 4))
    assert K < model.expected_distinct(N, K, 1, 4) < independent
    assert model.expected_distinct(N, K, 1, 4, layer=0) > model.expected_distinct(N, K, 1, 4, layer=20)


def test_routing_from_cli_resolves_every_spec(tmp_path) -> None:
    assert isinstance(routing_from_cli("independent", N, K), IndependentRouting)
    assert routing_from_cli("typical", N, K) == typical_routing(N, K)
    assert "summary" in routing_from_cli("independent", N, K, "0.5,0.3", 0.15).description
    path = tmp_path / "stats.json"
    save_routing_stats(path, typical_routing(N, K))
    loaded = routing_from_cli(str(path), N, K)
    assert loaded.expected_distinct(N, K, 2, 4) == pytest.approx(
        typical_routing(N, K).expected_distinct(N, K, 2, 4), rel=0.01
    )
    with pytest.raises(MoesimError, match="unknown routing"):
        routing_from_cli("magic", N, K)
    with pytest.raises(MoesimError, match="fitted for"):
        routing_from_cli(str(path), 64, K)
    with pytest.raises(MoesimError, match="--routing"):
        routing_from_cli("typical", N, K, "0.5", None)


def test_stats_file_errors(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(MoesimError, match="not valid JSON"):
        load_routing_stats(bad)
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(MoesimError, match="not a routing statistics file"):
        load_routing_stats(bad)
    good = tmp_path / "good.json"
    save_routing_stats(good, typical_routing(N, K))
    document = json.loads(good.read_text())
    document["layers"][0]["params"]["token_corr"] = 3
    bad.write_text(json.dumps(document))
    with pytest.raises(MoesimError, match="token_corr"):
        load_routing_stats(bad)
    with pytest.raises(MoesimError, match="does not exist"):
        load_routing_stats(tmp_path / "missing.json")

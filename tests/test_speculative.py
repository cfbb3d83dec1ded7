"""Speculative decoding: expected tokens, drafters, the speedup formula, best K and peak batch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.simulate import simulate_expert_block, simulate_step
from moesim.simulator.speculative.acceptance import (
    best_draft_len,
    expected_tokens,
    peak_batch,
    tokens_per_step,
)
from moesim.simulator.speculative.drafters import parse_drafter
from tests.core_fixtures import h200, simulate_sd


@given(st.floats(0, 1), st.integers(1, 16))
def test_tokens_per_step_closed_form(alpha: float, k: int) -> None:
    expected = sum(alpha**i for i in range(k + 1))
    assert float(tokens_per_step(alpha, k)) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert 1.0 <= float(tokens_per_step(alpha, k)) <= k + 1 + 1e-9
    assert float(tokens_per_step(alpha, k + 1)) >= float(tokens_per_step(alpha, k)) - 1e-12


def test_acceptance_length_caps_at_k_plus_one() -> None:
    assert expected_tokens(2, acceptance_length=5.0) == 3.0
    assert expected_tokens(8, acceptance_length=3.5) == 3.5
    with pytest.raises(MoesimError):
        expected_tokens(2, acceptance_length=0.5)
    with pytest.raises(MoesimError):
        expected_tokens(2, acceptance=1.5)


def test_speedup_is_the_closed_form_of_its_parts() -> None:
    result = simulate_sd("qwen3-30b-a3b", h200(), 2, 3, drafter="fraction:0.1")
    assert result.draft_s == pytest.approx(3 * 0.1 * result.decode.step_s)
    expected = result.tokens_per_step * result.decode.step_s / (result.draft_s + result.verify.step_s)
    assert result.speedup == pytest.approx(expected)
    data = result.to_json()
    for key in ("draft_s", "tokens_per_step", "verify_over_decode", "speedup", "assumptions"):
        assert key in data
    for part in ("decode", "verify"):
        for key in ("step_s", "distinct_experts_per_layer", "breakdown_s"):
            assert key in data[part]
    assert data["verify"]["distinct_experts_per_layer"] > data["decode"]["distinct_experts_per_layer"]
    assert data["assumptions"]["drafter"] == "fraction:0.1"


@pytest.mark.parametrize("drafter", ["eagle", "ngram", "model:qwen3-0.6b"])
def test_drafters_cost_what_they_run(drafter: str) -> None:
    result = simulate_sd("qwen3-30b-a3b", h200(), 1, 2, drafter=drafter)
    assert 0 < result.draft_s < 2 * 2 * result.decode.step_s
    if drafter == "ngram":
        assert result.draft_s < 1e-4


def test_mtp_needs_an_mtp_layer() -> None:
    with pytest.raises(MoesimError, match="MTP"):
        simulate_sd("qwen3-30b-a3b", h200(), 1, 2, drafter="mtp")


@pytest.mark.parametrize("text", ["", "magic", "fraction:x", "fraction:-1", "model:"])
def test_bad_drafters_are_refused(text: str) -> None:
    with pytest.raises(MoesimError):
        parse_drafter(text)


def test_best_k_and_peak_batch() -> None:
    assert best_draft_len([1, 2, 3], [1.2, 1.5, 1.4]) == (2, 1.5)
    assert peak_batch([1, 2, 4], [1.1, 1.3, 1.3]) == (2, 1.3)


def test_model_that_does_not_fit_is_refused_with_the_missing_memory() -> None:
    with pytest.raises(MoesimError, match="missing"):
        simulate_step("deepseek-v3", h200(), 1, 1)


def test_expert_block_grows_with_distinct_experts() -> None:
    times = [simulate_expert_block("qwen3-30b-a3b", h200(), 16, u) for u in (8, 32, 64, 128)]
    assert np.all(np.diff(times) > 0)
    with pytest.raises(MoesimError):
        simulate_expert_block("qwen3-30b-a3b", h200(), 1, 9)

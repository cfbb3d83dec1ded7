"""Brent's root finder and the normal cdf without scipy: the same floats as scipy.optimize.brentq and
scipy.special.ndtr, and the root finder's error paths."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.special import ndtr as scipy_ndtr

from moesim.errors import MoesimError
from moesim.simulator.routing.fit import successive_inclusion, zipf_for_baseline
from moesim.simulator.routing.normal_cdf import cephes_ndtr, ndtr
from moesim.simulator.routing.root import brent_root


@settings(max_examples=300, deadline=None)
@given(
    root=st.floats(-5, 5),
    slope=st.floats(0.05, 20),
    cubic=st.floats(0, 3),
    wiggle=st.floats(-0.9, 0.9),
    left=st.floats(0.01, 10),
    right=st.floats(0.01, 10),
    xtol=st.sampled_from([1e-12, 1e-9, 1e-6, 1e-3]),
)
def test_bit_identical_to_scipy_brentq(
    root: float, slope: float, cubic: float, wiggle: float, left: float, right: float, xtol: float
) -> None:
    def f(x: float) -> float:  # increasing, one root at `root`
        d = x - root
        return slope * d + cubic * d**3 + wiggle * slope * math.sin(d) * 0.5

    a, b = root - left, root + right
    assert brent_root(f, a, b, xtol=xtol) == brentq(f, a, b, xtol=xtol)


@pytest.mark.parametrize("n_experts, top_k", [(8, 2), (64, 6), (128, 8), (256, 8), (512, 10)])
def test_the_roots_typical_routing_solves_match_scipy(n_experts: int, top_k: int) -> None:
    ranks = np.arange(1, n_experts + 1, dtype=float)
    for alpha in (0.0, 0.3, 1.0, 2.5):
        w = ranks**-alpha / np.max(ranks**-alpha)

        def excess(log_lam: float, w: np.ndarray = w) -> float:
            return float(np.sum(-np.expm1(-np.exp(log_lam) * w))) - top_k

        assert brent_root(excess, -30.0, 60.0, xtol=1e-12) == brentq(excess, -30.0, 60.0, xtol=1e-12)
    inclusion = successive_inclusion(zipf_for_baseline(n_experts, top_k, 1.2 * top_k / n_experts), top_k)
    assert inclusion.sum() == pytest.approx(top_k, abs=1e-9)  # successive draws include k experts
    assert np.sum(inclusion**2) / top_k == pytest.approx(1.2 * top_k / n_experts, rel=1e-4)


def test_converges_to_tolerance_on_a_closed_form() -> None:
    assert brent_root(lambda x: x * x - 2.0, 0.0, 2.0, xtol=1e-14) == pytest.approx(math.sqrt(2), abs=1e-14)
    assert brent_root(lambda x: x - 1.0, 1.0, 3.0) == 1.0  # a root at the bracket's end


def test_unbracketed_and_non_converging_calls_say_so() -> None:
    with pytest.raises(MoesimError, match="same sign"):
        brent_root(lambda x: x * x + 1.0, -1.0, 1.0)
    with pytest.raises(MoesimError, match="no convergence"):
        brent_root(lambda x: math.exp(8 * x) - 1.5, 0.0, 1.0, xtol=1e-300, maxiter=3)
    with pytest.raises(ValueError):
        brent_root(lambda x: x, -1.0, 1.0, xtol=0.0)


def test_normal_cdf_is_scipy_ndtr_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    edges = [
        0.0,
        -0.0,
        1e-300,
        -1e-300,
        1.0,
        -1.0,
        math.sqrt(2),
        -math.sqrt(2),
        8 * math.sqrt(2),
        38.0,
        -38.0,
    ]
    x = np.concatenate(
        [
            rng.normal(0.0, 3.0, 200_000),
            rng.uniform(-40.0, 40.0, 200_000),
            np.linspace(-12.0, 12.0, 100_001),  # every branch: |x|/√2 below 1/√2, below 1, below 8, above
            edges,
            [math.inf, -math.inf],
        ]
    )
    assert cephes_ndtr(x).tolist() == scipy_ndtr(x).tolist()
    grid = x[:600].reshape(20, 30)
    assert cephes_ndtr(grid).shape == (20, 30) and np.array_equal(cephes_ndtr(grid), scipy_ndtr(grid))
    assert math.isnan(cephes_ndtr(np.array([math.nan]))[0])
    assert ndtr(grid).tolist() == scipy_ndtr(grid).tolist()  # scipy is loaded here: its own function


@settings(max_examples=300, deadline=None)
@given(st.floats(-60.0, 60.0))
def test_normal_cdf_agrees_with_scipy_on_any_float(value: float) -> None:
    assert cephes_ndtr(np.array([value]))[0] == scipy_ndtr(value)

"""The binomial pmf without scipy (routing/binomial.py): scipy.special's gammaln, log1p and the pmf they make,
bit for bit, and no scipy loaded on an expert-parallel sweep's per-rank work."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln, log1p, xlog1py, xlogy

from moesim.simulator.routing.binomial import binomial_pmf, cephes_log1p, lgam_whole


def test_lgam_is_scipy_gammaln_on_whole_numbers() -> None:
    whole = np.concatenate([np.arange(1, 5000), np.array([9999, 10**5, 10**8 - 1, 10**8 + 7, 10**12])])
    assert [lgam_whole(int(n)) for n in whole] == gammaln(whole.astype(float)).tolist()


def test_log1p_is_scipy_log1p() -> None:
    rng = np.random.default_rng(7)
    x = -np.concatenate(
        [rng.random(20000), rng.random(5000) ** 8, 1 - rng.random(5000) ** 6, [0.0, 1.0, 0.5]]
    )
    assert [cephes_log1p(float(v)) for v in x] == log1p(x).tolist()
    assert cephes_log1p(-1.0) == -math.inf


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-1.0, max_value=1e6, allow_nan=False))
def test_log1p_agrees_with_scipy_on_any_float(value: float) -> None:
    assert cephes_log1p(value) == log1p(value)


def scipy_binomial(n: int, p: np.ndarray) -> np.ndarray:
    count = np.arange(n + 1, dtype=float)[None, :]
    column = p[:, None]
    log_choose = gammaln(n + 1.0) - gammaln(count + 1.0) - gammaln(n - count + 1.0)
    return np.asarray(np.exp(log_choose + xlogy(count, column) + xlog1py(n - count, -column)))


def test_binomial_pmf_is_the_scipy_formula_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 7, 12, 13, 32, 64, 257, 1200):
        p = np.concatenate([rng.random(40), rng.random(10) ** 10, [0.0, 1.0, 0.5]])
        ours, theirs = binomial_pmf(n, p), scipy_binomial(n, p)
        assert ours.shape == (p.size, n + 1)
        assert np.array_equal(ours, theirs), n


def test_expert_parallel_sweep_loads_no_scipy() -> None:
    code = (
        "import sys\n"
        "from moesim.simulator.models.catalogue import load_model\n"
        "from moesim.simulator.scenario import Scenario\n"
        "from moesim.simulator.speculative.sweep import run_sweep\n"
        "m = load_model('dbrx')\n"
        "r = run_sweep(Scenario(m, 'h200'), [m], [1, 64], [1, 3])\n"
        "assert r.rows, 'no rows'\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'scipy'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_normal_cdf_saturates_where_per_rank_skips_it() -> None:
    from scipy.special import ndtr as scipy_ndtr

    from moesim.simulator.routing.normal_cdf import cephes_ndtr
    from moesim.simulator.routing.per_rank import NDTR_ONE_FROM, NDTR_ZERO_TO, _saturated_ndtr

    tail = np.concatenate([np.linspace(0.0, 60.0, 600_001), np.geomspace(60.0, 1e300, 2000), [np.inf]])
    with np.errstate(over="ignore"):
        for ndtr in (scipy_ndtr, cephes_ndtr):
            assert np.all(ndtr(NDTR_ONE_FROM + tail) == 1.0)
            assert np.all(ndtr(NDTR_ZERO_TO - tail) == 0.0)
    rng = np.random.default_rng(5)
    z = np.concatenate([rng.normal(0.0, 20.0, (50, 40)).ravel(), [NDTR_ONE_FROM, NDTR_ZERO_TO, math.nan]])
    assert np.array_equal(_saturated_ndtr(z), scipy_ndtr(z), equal_nan=True)


def test_the_quadrature_skips_only_points_where_one_minus_the_cdf_is_one() -> None:
    from scipy.special import ndtr as scipy_ndtr

    from moesim.simulator.routing.normal_cdf import cephes_ndtr
    from moesim.simulator.routing.per_rank import NDTR_NEGLIGIBLE_TO, _expected_max_normal, _saturated_ndtr

    below = NDTR_NEGLIGIBLE_TO - np.concatenate([np.linspace(0.0, 60.0, 600_001), [np.inf]])
    for ndtr in (scipy_ndtr, cephes_ndtr):
        assert np.all(ndtr(below) <= 2.0**-54)
        assert np.all(1.0 - ndtr(below) == 1.0)
    rng = np.random.default_rng(7)
    mean = rng.uniform(0.0, 500.0, (40, 8)) * rng.uniform(0.0, 1.0, (40, 1))
    std = np.sqrt(mean) * rng.uniform(0.2, 3.0, (40, 8))
    upper = np.max(mean + 8 * std, axis=1, keepdims=True)
    grid = np.linspace(0.0, 1.0, 513)[None, :] * upper
    z = (grid[:, :, None] - mean[:, None, :]) / np.maximum(std[:, None, :], 1e-12)
    every_point = np.trapezoid(1.0 - np.prod(_saturated_ndtr(z), axis=2), grid, axis=1)
    assert _expected_max_normal(mean, std).tobytes() == every_point.tobytes()

"""Per-rank expert work under expert parallelism: each rank's distinct experts and token assignments.

With experts split over E ranks the step's MoE time is set by the *slowest* rank: the expected maximum over
ranks of its distinct experts and token assignments, not the mean. Closed forms for independent and
correlated routing (Poisson-binomial distinct counts per rank, normal token counts), sampling for any other
routing model.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from moesim.errors import MoesimError
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.routing.binomial import binomial_pmf  # scipy.special's floats, without scipy
from moesim.simulator.routing.correlated import (
    CorrelatedRouting,
    LayerRouting,
    bank_parents,
    miss_probability,
)
from moesim.simulator.routing.independent import IndependentRouting, sample_topk_without_replacement
from moesim.simulator.routing.normal_cdf import (
    ndtr,  # the standard normal cdf, scipy.special.ndtr bit for bit
)
from moesim.simulator.routing.placement import Placement, expert_to_rank

# Sampled per-rank statistics (routing models without a closed form) use this many steps; enough for the
# expected maximum over ranks to settle within about 1% on 8 ranks.
RANK_SAMPLES = 256


@dataclass(frozen=True)
class RankExperts:
    """Expert work per expert-parallel rank in one MoE layer of one step (arrays broadcast over token counts).

    distinct: experts a rank must read; tokens: token-expert assignments it computes. `max_*` are the
    expected maxima over ranks (what the slowest rank does), `mean_*` the averages; `total_distinct` is the
    layer's distinct experts over all ranks (the single-GPU figure). `ranks_per_token` is the expected number
    of distinct ranks one token's top-k experts live on (the copies dispatch sends).
    """

    ranks: int
    mean_distinct: np.ndarray
    max_distinct: np.ndarray
    mean_tokens: np.ndarray
    max_tokens: np.ndarray
    total_distinct: np.ndarray
    ranks_per_token: float

    @property
    def imbalance(self) -> np.ndarray:
        """Slowest rank's distinct experts over the mean (1 = perfectly balanced)."""
        return np.asarray(self.max_distinct / np.maximum(self.mean_distinct, 1e-12))


_ARRAY_FIELDS = ("mean_distinct", "max_distinct", "mean_tokens", "max_tokens", "total_distinct")


def ranks_per_token(inclusion: np.ndarray, owner: np.ndarray, ep: int) -> float:
    """Expected distinct ranks a token's experts land on, Σ_r 1 − P(no expert of the token on r).

    Hypergeometric: P(none on r) = C(N−n_r, k)/C(N, k), exact for uniform routing; under skew n_r is the
    rank's popularity-weighted size N·Σ_{e∈r} q_e / k.
    """
    inclusion = np.asarray(inclusion, dtype=float)
    n_experts, top_k = inclusion.size, round(float(inclusion.sum()))
    effective_size = n_experts * np.bincount(owner, weights=inclusion, minlength=ep) / max(top_k, 1)
    steps = np.arange(top_k)[None, :]
    left = np.clip((n_experts - effective_size[:, None] - steps) / (n_experts - steps), 0.0, 1.0)
    return float(np.sum(1.0 - np.prod(left, axis=1)))


def _expected_max_discrete(pmfs: list[np.ndarray]) -> np.ndarray:
    """E[max_r X_r] for independent X_r on 0..n_r with pmfs [m, n_r+1]: Σ_u 1 − Π_r P(X_r ≤ u)."""
    width = max(p.shape[1] for p in pmfs)
    product = np.ones((pmfs[0].shape[0], width))
    for pmf in pmfs:
        cdf = np.cumsum(pmf, axis=1)
        padded = np.ones_like(product)
        padded[:, : cdf.shape[1]] = np.minimum(cdf, 1.0)
        product *= padded
    return np.sum(1.0 - product[:, :-1], axis=1)


def _poisson_binomial_pmf(hit: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """pmf [m, n+1] of the number of successes among n independent Bernoulli(hit[i, j]) trials.

    `uniform[i]`: row i's probabilities are (close to) equal, so its pmf is binomial with the first one's;
    the other rows go through the exact recursion. Each row's pmf depends on that row alone.
    """
    m, n = hit.shape
    pmf = np.zeros((m, n + 1))
    if uniform.any():
        pmf[uniform] = binomial_pmf(n, hit[uniform, 0])
    exact = ~uniform
    if exact.any():
        rows = np.zeros((int(exact.sum()), n + 1))
        rows[:, 0] = 1.0
        chosen = hit[exact]
        miss = 1.0 - chosen
        for j in range(n):  # after j trials only counts 0..j can be non-zero: update those and count j+1
            p, q = chosen[:, j : j + 1], miss[:, j : j + 1]
            rows[:, 1 : j + 2] = rows[:, 1 : j + 2] * q + rows[:, : j + 1] * p
            rows[:, 0] *= q[:, 0]
        pmf[exact] = rows
    return pmf


def _rank_pmfs(hit: np.ndarray, members: list[np.ndarray]) -> list[np.ndarray]:
    """Each rank's Poisson-binomial pmf of distinct experts [m, n_r + 1], as `_poisson_binomial_pmf` of
    its columns gives.

    A row of a rank whose probabilities are all close (np.allclose's test) is binomial. Ranks that hold
    equally many experts are stacked into one call (one recursion instead of one per rank).
    """
    m = hit.shape[0]
    pmfs: list[np.ndarray] = [np.empty(0)] * len(members)
    groups: dict[int, list[int]] = {}
    first = np.empty(hit.shape[1], dtype=int)  # each expert's rank's first expert (np.allclose's test)
    for idx in members:
        first[idx] = idx[0] if idx.size else 0
    reference = hit[:, first]
    close = np.abs(hit - reference) <= 1e-8 + 1e-5 * np.abs(reference)
    for rank, idx in enumerate(members):
        groups.setdefault(idx.size, []).append(rank)
    for size, ranks in groups.items():
        uniform = np.concatenate([close[:, members[r]].all(axis=1) & (size > 0) for r in ranks])
        stacked = _poisson_binomial_pmf(np.concatenate([hit[:, members[r]] for r in ranks], axis=0), uniform)
        for i, rank in enumerate(ranks):
            pmfs[rank] = stacked[i * m : (i + 1) * m]
    return pmfs


# The normal cdf is exactly 1.0 in floating point from 8.3 up and exactly 0.0 from −38.5 down (scipy's and
# Cephes' ndtr alike; tests/test_binomial_pmf.py checks both), so those arguments need no evaluation.
NDTR_ONE_FROM = 8.3
NDTR_ZERO_TO = -38.5
# From −8.3 down the cdf is at most 2^−54 (5.2e-17 at −8.3; the test checks it), so a product of cdfs with
# such a factor is too, and 1 − it is exactly 1.0: the quadrature needs no other factor at that point.
NDTR_NEGLIGIBLE_TO = -8.3


def _saturated_ndtr(z: np.ndarray) -> np.ndarray:
    """`ndtr(z)`, evaluated only where it is neither exactly 0 nor exactly 1; NaN goes through `ndtr`."""
    values = np.where(z >= NDTR_ONE_FROM, 1.0, 0.0)
    inside = ~((z >= NDTR_ONE_FROM) | (z <= NDTR_ZERO_TO))
    values[inside] = ndtr(z[inside])
    return values


def _expected_max_normal(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """E[max_r X_r] for independent normals X_r ~ N(mean[:, r], std[:, r]) floored at 0, by quadrature."""
    upper = np.max(mean + 8 * std, axis=1, keepdims=True)
    grid = np.linspace(0.0, 1.0, 513)[None, :] * upper  # [m, g]
    z = (grid[:, :, None] - mean[:, None, :]) / np.maximum(std[:, None, :], 1e-12)
    cdf = np.zeros(z.shape[:2])  # P(max ≤ x); left 0 where 1 − it is 1.0 whatever the other factors
    needed = ~(z <= NDTR_NEGLIGIBLE_TO).any(axis=2)
    cdf[needed] = np.prod(_saturated_ndtr(z[needed]), axis=1)
    return np.trapezoid(1.0 - cdf, grid, axis=1)


def rank_experts_from_inclusion(
    inclusion: np.ndarray, tokens: npt.ArrayLike, owner: np.ndarray, ep: int, hit: np.ndarray | None = None
) -> RankExperts:
    """Per-rank work when tokens route independently with per-token expert inclusion probabilities.

    `inclusion[e]` = P(a token picks expert e) (sums to k). For T tokens expert e is hit with probability
    p_e = 1 − (1 − q_e)^T; a rank's distinct experts are then Poisson-binomial (treating experts as
    independent, which is exact in the mean and close in spread for k ≪ N), and the expected maximum over
    ranks is Σ_u 1 − Π_r F_r(u). Token assignments per rank have mean T·Σq_e and variance
    T·Σq_e(1−q_e)·(1 − share_r)·N/(N−1) (the hypergeometric correction for k distinct picks per token); their
    maximum over ranks uses a normal approximation, floored by the distinct count (each hit expert has a token).
    `hit` [m, N] replaces the independent p_e where a routing model knows better (correlated routing: the
    probability that any of B sequences uses e).
    """
    inclusion = np.asarray(inclusion, dtype=float)
    n_experts, top_k = inclusion.size, float(inclusion.sum())
    t = np.atleast_1d(np.asarray(tokens, dtype=float))
    if hit is None:
        hit = 1.0 - (1.0 - np.minimum(inclusion, 1.0))[None, :] ** t[:, None]  # [m, N]
    total = hit.sum(axis=1)
    members = [np.flatnonzero(owner == rank) for rank in range(ep)]
    share = np.array([inclusion[idx].sum() for idx in members])
    mean_tokens_r = t[:, None] * share[None, :]
    if ep == 1:
        max_distinct = total
        max_tokens = mean_tokens_r[:, 0]
    else:
        max_distinct = _expected_max_discrete(_rank_pmfs(hit, members))
        var_token = np.array(
            [
                np.sum(inclusion[idx] * (1 - inclusion[idx]))
                * (1 - s / top_k)
                * n_experts
                / max(n_experts - 1, 1)
                for idx, s in zip(members, share, strict=True)
            ]
        )
        # The token counts' normals depend on the step's tokens alone: one quadrature per distinct count
        # (a sweep's shapes repeat B·T often), each row as the full grid's (the quadrature is row by row).
        unique_t, row = np.unique(t, return_inverse=True)
        std = np.sqrt(unique_t[:, None] * np.maximum(var_token, 0.0)[None, :])
        max_normal = _expected_max_normal(unique_t[:, None] * share[None, :], std)[row]
        max_tokens = np.maximum(max_normal, max_distinct)
    return RankExperts(
        ranks=ep,
        mean_distinct=total / ep,
        max_distinct=np.maximum(max_distinct, total / ep),
        mean_tokens=t * top_k / ep,
        max_tokens=np.maximum(max_tokens, t * top_k / ep),
        total_distinct=total,
        ranks_per_token=ranks_per_token(inclusion, owner, ep),
    )


def rank_experts_from_loads(loads: np.ndarray, owner: np.ndarray, ep: int, top_k: int) -> RankExperts:
    """Per-rank work from sampled steps: `loads` [samples, N] token assignments per expert (exact, any routing)."""
    loads = np.asarray(loads)
    one_hot = np.zeros((loads.shape[1], ep))
    one_hot[np.arange(loads.shape[1]), owner] = 1.0
    distinct = (loads > 0).astype(float) @ one_hot  # [S, E]
    tokens = loads.astype(float) @ one_hot
    tokens_per_step = loads.sum(axis=1).mean() / top_k
    inclusion = loads.mean(axis=0) / max(tokens_per_step, 1e-12)
    inclusion *= top_k / max(inclusion.sum(), 1e-12)
    return RankExperts(
        ranks=ep,
        mean_distinct=np.atleast_1d(distinct.mean()),
        max_distinct=np.atleast_1d(distinct.max(axis=1).mean()),
        mean_tokens=np.atleast_1d(tokens.mean()),
        max_tokens=np.atleast_1d(tokens.max(axis=1).mean()),
        total_distinct=np.atleast_1d(distinct.sum(axis=1).mean()),
        ranks_per_token=ranks_per_token(inclusion, owner, ep),
    )


@functools.lru_cache(maxsize=256)
def _independent_inclusion(popularity_alpha: float, seed: int, n_experts: int, top_k: int) -> np.ndarray:
    """Per-token inclusion probabilities of IndependentRouting (exact k/N when uniform, sampled otherwise)."""
    if popularity_alpha == 0:
        return np.full(n_experts, top_k / n_experts)
    routing = IndependentRouting(popularity_alpha=popularity_alpha, seed=seed)
    picks = sample_topk_without_replacement(
        routing.popularity(n_experts), top_k, 20000, np.random.default_rng(seed)
    )
    return np.bincount(picks.ravel(), minlength=n_experts) / picks.shape[0]


def _correlated_miss(
    params: LayerRouting, tokens: int, seed: int, siblings: tuple[LayerRouting, ...]
) -> np.ndarray:
    """P(one sequence's `tokens` tokens never use expert e), from the correlated model's cached bank."""
    return np.asarray(miss_probability(params, bank_parents(tokens), tokens, seed, siblings))


@functools.lru_cache(maxsize=1024)
def _correlated_rank_experts(
    params: LayerRouting,
    seed: int,
    batches: tuple[int, ...],
    tokens: tuple[int, ...],
    ep: int,
    placement: Placement,
    siblings: tuple[LayerRouting, ...] = (),
) -> RankExperts:
    """Per-rank work under correlated routing; cached because most layers of a model share their parameters.
    `siblings`: the routing model's other layer parameters (their banks are simulated alongside)."""
    owner = expert_to_rank(params.n_experts, ep, placement)
    inclusion = 1.0 - _correlated_miss(params, 1, seed, siblings)
    inclusion *= params.top_k / max(inclusion.sum(), 1e-12)
    misses = {tt: _correlated_miss(params, tt, seed, siblings) for tt in set(tokens)}
    hit = np.stack([1.0 - misses[tt] ** bb for bb, tt in zip(batches, tokens, strict=True)])
    step_tokens = np.asarray(batches, dtype=float) * np.asarray(tokens, dtype=float)
    return rank_experts_from_inclusion(inclusion, step_tokens, owner, ep, hit=hit)


@functools.lru_cache(maxsize=4096)
def _sampled_rank_experts(
    routing: RoutingModel,
    n_experts: int,
    top_k: int,
    batch: int,
    tokens_per_seq: int,
    ep: int,
    placement: Placement,
    layer: int | None,
    n_samples: int,
) -> RankExperts:
    rng = np.random.default_rng([n_experts, top_k, batch, tokens_per_seq, 0 if layer is None else layer + 1])
    loads = routing.sample_expert_loads(n_experts, top_k, batch, tokens_per_seq, n_samples, rng, layer=layer)
    return rank_experts_from_loads(loads, expert_to_rank(n_experts, ep, placement), ep, top_k)


# Per-shape results of `prepare_rank_experts`, keyed by (what the figures depend on, batch, tokens per sequence).
_PREPARED: dict[tuple[object, ...], RankExperts] = {}
_MAX_PREPARED = 1 << 16


def _closed_form_key(
    routing: RoutingModel, n_experts: int, top_k: int, layer: int | None
) -> tuple[object, ...] | None:
    """What the closed-form per-rank figures of one layer depend on besides the shape and the ranks (None:
    the routing model has no closed form here and is sampled)."""
    if isinstance(routing, IndependentRouting):
        return ("independent", routing.popularity_alpha, routing.seed, n_experts, top_k)
    if isinstance(routing, CorrelatedRouting):
        params = routing.layer_params(layer)
        if params.n_experts == n_experts and params.top_k == top_k:
            return ("correlated", params, routing.seed, routing.distinct_layers)
    return None


def prepare_rank_experts(
    routing: RoutingModel,
    n_experts: int,
    top_k: int,
    shapes: Iterable[tuple[int, int]],
    ep: int,
    placement: Placement = "contiguous",
    layers: Iterable[int | None] = (None,),
) -> None:
    """Work out `rank_experts` for many (batch, tokens per sequence) shapes at once, so that later calls for
    any one of them are look-ups: one vectorised pass per distinct layer parameter set instead of one per
    shape (a sweep knows every step shape it will time). The figures are those of the per-shape calls, up to
    rounding. Routing models without a closed form are left to `rank_experts` (sampled per shape)."""
    grid = sorted(set(shapes))
    if not grid:
        return
    batches, tokens = (np.array(column, dtype=int) for column in zip(*grid, strict=True))
    first_layer: dict[tuple[object, ...], int | None] = {}
    for layer in layers:
        key = _closed_form_key(routing, n_experts, top_k, layer)
        if key is not None:
            first_layer.setdefault(key, layer)
    for key, layer in first_layer.items():
        missing = [i for i, (b, t) in enumerate(grid) if (key, b, t, ep, placement) not in _PREPARED]
        if not missing:
            continue
        work = _closed_form(
            routing, n_experts, top_k, batches[missing], tokens[missing], ep, placement, layer
        )
        if len(_PREPARED) + len(missing) > _MAX_PREPARED:
            _PREPARED.clear()
        for row, index in enumerate(missing):
            b, t = grid[index]
            _PREPARED[key, b, t, ep, placement] = _map_arrays(work, operator.itemgetter(slice(row, row + 1)))


def _closed_form(
    routing: RoutingModel,
    n_experts: int,
    top_k: int,
    batch: np.ndarray,
    tokens_per_seq: np.ndarray,
    ep: int,
    placement: Placement,
    layer: int | None,
) -> RankExperts:
    """Per-rank work of flat shape arrays by the closed form of independent or correlated routing."""
    if isinstance(routing, IndependentRouting):
        inclusion = _independent_inclusion(routing.popularity_alpha, routing.seed, n_experts, top_k)
        return rank_experts_from_inclusion(
            inclusion, batch * tokens_per_seq, expert_to_rank(n_experts, ep, placement), ep
        )
    assert isinstance(routing, CorrelatedRouting)
    return _correlated_rank_experts(
        routing.layer_params(layer),
        routing.seed,
        tuple(batch.tolist()),
        tuple(tokens_per_seq.tolist()),
        ep,
        placement,
        routing.distinct_layers,
    )


def rank_experts(
    routing: RoutingModel,
    n_experts: int,
    top_k: int,
    batch: npt.ArrayLike,
    tokens_per_seq: npt.ArrayLike,
    ep: int,
    placement: Placement = "contiguous",
    layer: int | None = None,
    n_samples: int = RANK_SAMPLES,
) -> RankExperts:
    """Per-rank expert work of one MoE layer for B sequences × T tokens each (arrays broadcast together).

    Independent and correlated routing use the closed-form route from per-expert hit probabilities (fast,
    vectorised over the batch grid; experts treated as independent given those probabilities); any other
    routing model is sampled via its `sample_expert_loads` (RANK_SAMPLES steps, seeded) and cached per configuration.
    """
    key = _closed_form_key(routing, n_experts, top_k, layer)
    if key is not None and isinstance(batch, int) and isinstance(tokens_per_seq, int):
        # One step's prepared work (plan builders ask per layer group of every step): a look-up.
        prepared = _PREPARED.get((key, batch, tokens_per_seq, ep, placement))
        if prepared is not None and batch >= 1 and tokens_per_seq >= 1:
            return _scalar_view(prepared, ())
    b, t = np.broadcast_arrays(np.asarray(batch, dtype=int), np.asarray(tokens_per_seq, dtype=int))
    if np.any(b < 1) or np.any(t < 1):
        raise MoesimError("batch", "batch and tokens per sequence must be ≥ 1")
    if key is not None:
        if b.size == 1:
            prepared = _PREPARED.get((key, int(b.flat[0]), int(t.flat[0]), ep, placement))
            if prepared is not None:
                return prepared if b.shape == (1,) else _scalar_view(prepared, b.shape)
        result = _closed_form(routing, n_experts, top_k, b.ravel(), t.ravel(), ep, placement, layer)
        return _reshape(result, b.shape)
    sample: Callable[..., RankExperts] = _sampled_rank_experts
    try:
        hash(routing)
    except TypeError:  # an unhashable routing model is sampled afresh each time
        sample = _sampled_rank_experts.__wrapped__
    parts = [
        sample(routing, n_experts, top_k, int(bi), int(ti), ep, placement, layer, n_samples)
        for bi, ti in zip(b.ravel(), t.ravel(), strict=True)
    ]
    arrays: dict[str, Any] = {
        name: np.concatenate([getattr(p, name) for p in parts]) for name in _ARRAY_FIELDS
    }
    stacked = RankExperts(
        ranks=ep, ranks_per_token=float(np.mean([p.ranks_per_token for p in parts])), **arrays
    )
    return _reshape(stacked, b.shape)


# One reshaped view per prepared result and shape: plan builders ask for the same step's work per layer.
_VIEWS: dict[tuple[int, tuple[int, ...]], tuple[RankExperts, RankExperts]] = {}


def _scalar_view(prepared: RankExperts, shape: tuple[int, ...]) -> RankExperts:
    """`_reshape(prepared, shape)`, made once per prepared result (results are never written to)."""
    key = (id(prepared), shape)
    held = _VIEWS.get(key)
    if held is None or held[0] is not prepared:
        if len(_VIEWS) > _MAX_PREPARED:
            _VIEWS.clear()
        held = _VIEWS[key] = (prepared, _reshape(prepared, shape))
    return held[1]


def _map_arrays(work: RankExperts, change: Callable[[np.ndarray], np.ndarray]) -> RankExperts:
    arrays: dict[str, Any] = {name: change(getattr(work, name)) for name in _ARRAY_FIELDS}
    return dataclasses.replace(work, **arrays)


def _reshape(result: RankExperts, shape: tuple[int, ...]) -> RankExperts:
    return _map_arrays(result, lambda values: values.reshape(shape))

"""Tensor and expert parallelism across the GPUs of a node: layouts, expert placement, per-rank expert work.

A layout of G GPUs has
- attention (and dense FFN, embeddings, LM head) split by tensor parallelism over `tp` ranks; the G/tp
  groups are data-parallel attention replicas, each serving its share of the batch (SGLang's DP attention);
- routed experts split over `ep` expert-parallel ranks (contiguous blocks of expert ids, or round-robin);
  each expert is further split by tensor parallelism over the G/ep ranks of its group;
- shared experts either `replicated` on every rank and run on the rank's own tokens (DeepEP-style engines,
  no extra communication) or `split` by tensor parallelism over the attention group and summed with an
  all-reduce (vLLM/SGLang's tensor-parallel MoE).

With ep > 1 tokens reach their experts by an all-to-all *dispatch* and come back by an all-to-all *combine*
(DeepEP-style: each rank sends its 1/G share of the tokens, one copy per destination rank). With ep = 1 the
experts are tensor-parallel across all G ranks, tokens are replicated, and an all-reduce sums the outputs.

Per-rank expert work comes from the routing model: each rank's distinct experts and token assignments per
layer, and the step's MoE time is set by the *slowest* rank — the expected maximum over ranks, not the mean.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from moesim.errors import MoesimError
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.routing.correlated import (
    CorrelatedRouting,
    LayerRouting,
    bank_parents,
    miss_probability,
)
from moesim.simulator.routing.independent import IndependentRouting, sample_topk_without_replacement

Placement = Literal["contiguous", "round-robin"]
SharedExperts = Literal["replicated", "split"]
DraftOn = Literal["separate", "shared"]
PLACEMENTS: tuple[str, ...] = ("contiguous", "round-robin")
SHARED_EXPERT_MODES: tuple[str, ...] = ("replicated", "split")
DRAFT_ON: tuple[str, ...] = ("separate", "shared")

# Sampled per-rank statistics (routing models without a closed form) use this many steps; enough for the
# expected maximum over ranks to settle within about 1% on 8 ranks.
RANK_SAMPLES = 256


@dataclass(frozen=True)
class ParallelLayout:
    """How one model's step is spread over `gpus` GPUs (see the module docstring for the conventions).

    `shared_experts=None` means the engines' usual choice, `split` (vLLM, and SGLang without DeepEP);
    `replicated` costs every rank the whole shared expert but saves its all-reduce. `draft_on` says whether the drafter shares the target's GPUs or runs on a GPU of its own.
    """

    gpus: int = 1
    tp: int = 1
    ep: int = 1
    placement: Placement = "contiguous"
    shared_experts: SharedExperts | None = None
    draft_on: DraftOn = "shared"

    def __post_init__(self) -> None:
        for name in ("gpus", "tp", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise MoesimError(name, f"must be a positive integer, got {value!r}")
        if self.gpus % self.tp:
            raise MoesimError(
                "tp", f"{self.tp} does not divide --gpus {self.gpus}", "choose a divisor of --gpus"
            )
        if self.gpus % self.ep:
            raise MoesimError(
                "ep", f"{self.ep} does not divide --gpus {self.gpus}", "choose a divisor of --gpus"
            )
        if self.ep == 1 and self.tp != self.gpus:
            raise MoesimError(
                "tp",
                f"with --ep 1 the experts are tensor-parallel over all {self.gpus} GPUs, so --tp must be {self.gpus}",
                f"use --tp {self.gpus}, or --ep {self.gpus} for expert parallelism",
            )
        if self.placement not in PLACEMENTS:
            raise MoesimError(
                "placement", f"unknown expert placement {self.placement!r}", "contiguous or round-robin"
            )
        if self.shared_experts is not None and self.shared_experts not in SHARED_EXPERT_MODES:
            raise MoesimError(
                "shared_experts", f"unknown mode {self.shared_experts!r}", "replicated or split"
            )
        if self.draft_on not in DRAFT_ON:
            raise MoesimError(
                "draft_on", f"unknown drafter placement {self.draft_on!r}", "separate or shared"
            )

    @property
    def dp(self) -> int:
        """Data-parallel attention groups; each serves 1/dp of the batch."""
        return self.gpus // self.tp

    @property
    def expert_tp(self) -> int:
        """Ranks each routed expert's width is split over."""
        return self.gpus // self.ep

    @property
    def shared_mode(self) -> SharedExperts:
        return "split" if self.shared_experts is None else self.shared_experts

    @property
    def is_single(self) -> bool:
        return self.gpus == 1

    def sequences_per_group(self, batch: int) -> int:
        """Sequences the busiest data-parallel attention group serves."""
        return math.ceil(batch / self.dp)

    def describe(self) -> str:
        """The layout in words, printed with every multi-GPU result."""
        if self.is_single:
            text = "1 GPU"
        else:
            attention = f"attention TP={self.tp}" + (f" × DP={self.dp}" if self.dp > 1 else "")
            experts = f"experts EP={self.ep} ({self.placement})" if self.ep > 1 else f"experts TP={self.gpus}"
            if self.ep > 1 and self.expert_tp > 1:
                experts += f" × TP={self.expert_tp}"
            text = f"{self.gpus} GPUs: {attention}, {experts}, shared experts {self.shared_mode}"
        return text + ("; drafter on its own GPU" if self.draft_on == "separate" else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "gpus": self.gpus,
            "tp": self.tp,
            "ep": self.ep,
            "dp": self.dp,
            "expert_tp": self.expert_tp,
            "placement": self.placement,
            "shared_experts": self.shared_mode,
            "draft_on": self.draft_on,
            "description": self.describe(),
        }

    def check_model(self, spec: ModelSpec) -> None:
        """Refuse a layout the model cannot be split into."""
        if self.ep > 1 and not spec.is_moe:
            raise MoesimError("ep", f"{spec.name} has no routed experts to split", "use --ep 1")
        if spec.is_moe and self.ep > spec.n_experts:
            raise MoesimError(
                "ep", f"{self.ep} ranks exceed the {spec.n_experts} routed experts of {spec.name}"
            )
        if self.tp > spec.attention.num_heads:
            raise MoesimError(
                "tp", f"{self.tp} exceeds the {spec.attention.num_heads} attention heads of {spec.name}"
            )


def default_layout(
    gpus: int, placement: Placement = "contiguous", draft_on: DraftOn = "shared"
) -> ParallelLayout:
    """What serving engines run on G GPUs of one node: attention TP=G and experts EP=G."""
    return ParallelLayout(gpus=gpus, tp=gpus, ep=gpus, placement=placement, draft_on=draft_on)


@dataclass(frozen=True)
class LayoutRequest:
    """What the user asked for: a fixed layout when --gpus, --tp or --ep is given, else the smallest that fits.

    Missing --tp / --ep default to the GPU count (engines' usual TP = EP = G); placement, shared-expert mode
    and drafter placement apply either way.
    """

    gpus: int | None = None
    tp: int | None = None
    ep: int | None = None
    placement: Placement = "contiguous"
    shared_experts: SharedExperts | None = None
    draft_on: DraftOn = "shared"

    def fixed(self) -> ParallelLayout | None:
        """The layout asked for, or None when the smallest fitting one should be chosen."""
        gpus = self.gpus
        if gpus is None:
            if self.tp is None and self.ep is None:
                return None
            gpus = max(self.tp or 1, self.ep or 1)
        return ParallelLayout(
            gpus=gpus,
            tp=gpus if self.tp is None else self.tp,
            ep=gpus if self.ep is None else self.ep,
            placement=self.placement,
            shared_experts=self.shared_experts,
            draft_on=self.draft_on,
        )

    def candidates(self, max_gpus: int = 64) -> list[ParallelLayout]:
        """Layouts in the order the smallest-fit search tries them: 1, 2, 4, 8, ... GPUs; for each, EP = G with
        TP = G first (engines' default), then data-parallel attention (TP = G/2, ..., 1), which splits the KV
        cache of MLA models that tensor parallelism cannot split."""
        layouts, gpus = [], 1
        while gpus <= max_gpus:
            tp = gpus
            while tp >= 1:
                layouts.append(
                    ParallelLayout(gpus, tp, gpus, self.placement, self.shared_experts, self.draft_on)
                )
                tp //= 2
            gpus *= 2
        return layouts


def layout_from_options(
    gpus: int | None,
    tp: int | None,
    ep: int | None,
    placement: str = "contiguous",
    shared_experts: str | None = None,
    draft_on: str = "shared",
) -> ParallelLayout | None:
    """The layout the CLI flags ask for; None when no GPU count is given (see `LayoutRequest`)."""
    return LayoutRequest(gpus, tp, ep, placement, shared_experts, draft_on).fixed()  # type: ignore[arg-type]


def candidate_layouts(
    max_gpus: int = 64, placement: Placement = "contiguous", draft_on: DraftOn = "shared"
) -> list[ParallelLayout]:
    """`LayoutRequest.candidates` for the default request."""
    return LayoutRequest(placement=placement, draft_on=draft_on).candidates(max_gpus)


# ---------------------------------------------------------------------------------------------- placement


def expert_to_rank(n_experts: int, ep: int, placement: Placement = "contiguous") -> np.ndarray:
    """Rank holding each expert id: contiguous blocks (ids 0..N/E−1 on rank 0, ...) or round-robin (e mod E).

    When E does not divide N the first N mod E ranks hold one expert more.
    """
    if ep < 1 or n_experts < 1:
        raise MoesimError("ep", f"need at least one rank and one expert, got {ep} and {n_experts}")
    ids = np.arange(n_experts)
    if placement == "round-robin":
        return ids % ep
    if placement != "contiguous":
        raise MoesimError("placement", f"unknown expert placement {placement!r}", "contiguous or round-robin")
    sizes = np.full(ep, n_experts // ep)
    sizes[: n_experts % ep] += 1
    return np.repeat(np.arange(ep), sizes)


def experts_per_rank(n_experts: int, ep: int, placement: Placement = "contiguous") -> list[np.ndarray]:
    """The expert ids each rank holds."""
    owner = expert_to_rank(n_experts, ep, placement)
    return [np.flatnonzero(owner == rank) for rank in range(ep)]


# ------------------------------------------------------------------------------------ per-rank expert work


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


def _poisson_binomial_pmf(hit: np.ndarray) -> np.ndarray:
    """pmf [m, n+1] of the number of successes among n independent Bernoulli(hit[:, j]) trials."""
    m, n = hit.shape
    if n and np.allclose(hit, hit[:, :1]):
        from scipy import stats  # lazily: scipy.stats would slow every `moesim` start by ~1 s

        return np.asarray(stats.binom.pmf(np.arange(n + 1)[None, :], n, hit[:, :1]))
    pmf = np.zeros((m, n + 1))
    pmf[:, 0] = 1.0
    for j in range(n):
        p = hit[:, j : j + 1]
        pmf[:, 1:] = pmf[:, 1:] * (1 - p) + pmf[:, :-1] * p
        pmf[:, 0] *= 1 - p[:, 0]
    return pmf


def _expected_max_normal(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """E[max_r X_r] for independent normals X_r ~ N(mean[:, r], std[:, r]) floored at 0, by quadrature."""
    upper = np.max(mean + 8 * std, axis=1, keepdims=True)
    grid = np.linspace(0.0, 1.0, 513)[None, :] * upper  # [m, g]
    from scipy import stats

    z = (grid[:, :, None] - mean[:, None, :]) / np.maximum(std[:, None, :], 1e-12)
    cdf = np.prod(stats.norm.cdf(z), axis=2)  # P(max ≤ x)
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
        max_distinct = _expected_max_discrete([_poisson_binomial_pmf(hit[:, idx]) for idx in members])
        var_token = np.array(
            [
                np.sum(inclusion[idx] * (1 - inclusion[idx]))
                * (1 - s / top_k)
                * n_experts
                / max(n_experts - 1, 1)
                for idx, s in zip(members, share, strict=True)
            ]
        )
        std = np.sqrt(t[:, None] * np.maximum(var_token, 0.0)[None, :])
        max_tokens = np.maximum(_expected_max_normal(mean_tokens_r, std), max_distinct)
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


def _correlated_miss(params: LayerRouting, tokens: int, seed: int) -> np.ndarray:
    """P(one sequence's `tokens` tokens never use expert e), from the correlated model's cached bank."""
    return np.asarray(miss_probability(params, bank_parents(tokens), tokens, seed))


@functools.lru_cache(maxsize=1024)
def _correlated_rank_experts(
    params: LayerRouting,
    seed: int,
    batches: tuple[int, ...],
    tokens: tuple[int, ...],
    ep: int,
    placement: Placement,
) -> RankExperts:
    """Per-rank work under correlated routing; cached because most layers of a model share their parameters."""
    owner = expert_to_rank(params.n_experts, ep, placement)
    inclusion = 1.0 - _correlated_miss(params, 1, seed)
    inclusion *= params.top_k / max(inclusion.sum(), 1e-12)
    misses = {tt: _correlated_miss(params, tt, seed) for tt in set(tokens)}
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
    b, t = np.broadcast_arrays(np.asarray(batch, dtype=int), np.asarray(tokens_per_seq, dtype=int))
    if np.any(b < 1) or np.any(t < 1):
        raise MoesimError("batch", "batch and tokens per sequence must be ≥ 1")
    owner = expert_to_rank(n_experts, ep, placement)
    if isinstance(routing, IndependentRouting):
        inclusion = _independent_inclusion(routing.popularity_alpha, routing.seed, n_experts, top_k)
        result = rank_experts_from_inclusion(inclusion, (b * t).ravel(), owner, ep)
        return _reshape(result, b.shape)
    if isinstance(routing, CorrelatedRouting):
        params = routing.layer_params(layer)
        if params.n_experts == n_experts and params.top_k == top_k:
            result = _correlated_rank_experts(
                params, routing.seed, tuple(b.ravel().tolist()), tuple(t.ravel().tolist()), ep, placement
            )
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
    stacked = RankExperts(
        ranks=ep,
        mean_distinct=np.concatenate([p.mean_distinct for p in parts]),
        max_distinct=np.concatenate([p.max_distinct for p in parts]),
        mean_tokens=np.concatenate([p.mean_tokens for p in parts]),
        max_tokens=np.concatenate([p.max_tokens for p in parts]),
        total_distinct=np.concatenate([p.total_distinct for p in parts]),
        ranks_per_token=float(np.mean([p.ranks_per_token for p in parts])),
    )
    return _reshape(stacked, b.shape)


def _reshape(result: RankExperts, shape: tuple[int, ...]) -> RankExperts:
    return RankExperts(
        ranks=result.ranks,
        mean_distinct=result.mean_distinct.reshape(shape),
        max_distinct=result.max_distinct.reshape(shape),
        mean_tokens=result.mean_tokens.reshape(shape),
        max_tokens=result.max_tokens.reshape(shape),
        total_distinct=result.total_distinct.reshape(shape),
        ranks_per_token=result.ranks_per_token,
    )


# --------------------------------------------------------------------------------------- communication


@dataclass(frozen=True)
class MoeTraffic:
    """Bytes the busiest rank moves around one MoE layer (arrays over the token grid)."""

    dispatch_send_bytes: np.ndarray
    dispatch_recv_bytes: np.ndarray
    combine_send_bytes: np.ndarray
    combine_recv_bytes: np.ndarray


def moe_traffic(
    layout: ParallelLayout,
    hidden: int,
    step_tokens: npt.ArrayLike,
    work: RankExperts,
    dispatch_bytes_per_value: float = 2.0,
    combine_bytes_per_value: float = 2.0,
) -> MoeTraffic:
    """All-to-all bytes of dispatch and combine for `step_tokens` tokens in the whole step (ep > 1).

    Each rank owns 1/G of the tokens and sends every token once to each distinct expert-parallel rank its
    experts live on (times the expert-TP group size), minus the copy that stays on the rank itself; combine
    returns the same copies. The busiest rank receives in proportion to its token load (max over mean).
    """
    m = np.asarray(step_tokens, dtype=float)
    if layout.ep == 1:
        zero = np.zeros_like(m)
        return MoeTraffic(zero, zero, zero, zero)
    remote_copies = work.ranks_per_token * (layout.ep - 1) / layout.ep * layout.expert_tp
    copies = m / layout.gpus * remote_copies
    skew = work.max_tokens / np.maximum(work.mean_tokens, 1e-12)
    return MoeTraffic(
        dispatch_send_bytes=copies * hidden * dispatch_bytes_per_value,
        dispatch_recv_bytes=copies * skew * hidden * dispatch_bytes_per_value,
        combine_send_bytes=copies * skew * hidden * combine_bytes_per_value,
        combine_recv_bytes=copies * hidden * combine_bytes_per_value,
    )


__all__ = [
    "DRAFT_ON",
    "PLACEMENTS",
    "RANK_SAMPLES",
    "SHARED_EXPERT_MODES",
    "DraftOn",
    "LayoutRequest",
    "MoeTraffic",
    "ParallelLayout",
    "Placement",
    "RankExperts",
    "SharedExperts",
    "candidate_layouts",
    "default_layout",
    "expert_to_rank",
    "experts_per_rank",
    "layout_from_options",
    "moe_traffic",
    "rank_experts",
    "rank_experts_from_inclusion",
    "rank_experts_from_loads",
    "ranks_per_token",
]

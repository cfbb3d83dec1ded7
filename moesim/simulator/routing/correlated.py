"""Correlated routing: popularity skew, short- and long-range reuse within a sequence, group-limited routing.

The generative process, per MoE layer (sequences are independent of each other). Token t of sequence s
chooses its k experts as the top-k of noisy router logits

    l_{t,e} = log p_e + sigma · (√λ · z_{s,e} + √(1 − λ) · y_{t,e}) + g_{t,e},

with p the layer's popularity, g i.i.d. Gumbel noise (so with sigma = 0 tokens draw k experts without
repeats ∝ p, independently), z_s a standard normal vector fixed per sequence (long range: the sequence keeps
returning to its own experts; λ = `sequence_share`), and y_t an AR(1) standard normal process with
coefficient ρ = `token_corr` from the previous token (short range). In a draft tree the previous token is
the parent node, so branches share their prefix. Overlap at distance d therefore depends on the latent
correlation λ + (1 − λ)ρ^d: it decays with distance to a plateau (set by λ) above the baseline (sigma = 0 or
independent sequences). Group-limited routing (DeepSeek-style): each group scores the sum of its two best
logits, the token keeps its `topk_groups` best groups and takes the top-k experts within them.

Mean distinct experts for B sequences is exact given the per-expert miss probabilities of one sequence,
q_e(T) = P(e unused by T tokens): E = Σ_e 1 − q_e(T)^B. q_e(T) is estimated once per layer from a seeded bank
of simulated sequences and cached, so `expected_distinct` costs microseconds after the first call.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.routing.bank_table import shipped_entry, table_key
from moesim.simulator.routing.base import DistinctExperts
from moesim.simulator.routing.placement import Placement, expert_to_rank, normalise_placement

BANK_SEQUENCES = 1024
BANK_MIN_TOKENS = 17


@dataclass(frozen=True)
class LayerRouting:
    """Fitted routing parameters of one MoE layer (see the module docstring for their meaning)."""

    popularity: tuple[float, ...]
    top_k: int
    sigma: float = 0.0
    sequence_share: float = 0.0
    token_corr: float = 0.0
    n_groups: int = 1
    topk_groups: int = 1

    def __post_init__(self) -> None:
        n = len(self.popularity)
        if n < 1:
            raise MoesimError("popularity", "needs at least one expert")
        if not 1 <= self.top_k <= n:
            raise MoesimError("top_k", f"must be between 1 and the expert count {n}, got {self.top_k}")
        if any(not np.isfinite(p) or p <= 0 for p in self.popularity):
            raise MoesimError("popularity", "weights must be finite and positive")
        if not (np.isfinite(self.sigma) and self.sigma >= 0):
            raise MoesimError("sigma", f"must be ≥ 0, got {self.sigma}")
        if not 0.0 <= self.sequence_share <= 1.0:
            raise MoesimError("sequence_share", f"must be between 0 and 1, got {self.sequence_share}")
        if not 0.0 <= self.token_corr <= 1.0:
            raise MoesimError("token_corr", f"must be between 0 and 1, got {self.token_corr}")
        if self.n_groups < 1 or n % self.n_groups:
            raise MoesimError("n_groups", f"must divide the expert count {n}, got {self.n_groups}")
        if not 1 <= self.topk_groups <= self.n_groups:
            raise MoesimError("topk_groups", f"must be between 1 and n_groups={self.n_groups}")
        if self.topk_groups * (n // self.n_groups) < self.top_k:
            raise MoesimError(
                "topk_groups", "the selected groups hold fewer experts than top_k", "raise topk_groups"
            )

    def __hash__(self) -> int:
        # Hashed on every cache lookup (per layer, per step): hash the long popularity tuple once.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def n_experts(self) -> int:
        return len(self.popularity)

    @property
    def group_limited(self) -> bool:
        return self.topk_groups < self.n_groups

    def weights(self) -> np.ndarray:
        p = np.asarray(self.popularity, dtype=float)
        return p / p.sum()

    @classmethod
    def uniform(cls, n_experts: int, top_k: int, **kwargs: float | int) -> LayerRouting:
        return cls(popularity=(1.0 / n_experts,) * n_experts, top_k=top_k, **kwargs)  # type: ignore[arg-type]


def chain_parents(tokens: int) -> tuple[int, ...]:
    """Parent indices of a linear chain of `tokens` tokens (-1: the first token has no previous token)."""
    return tuple(range(-1, tokens - 1))


def _check_parents(parents: Sequence[int]) -> None:
    if len(parents) < 1:
        raise MoesimError("tree", "needs at least one token")
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise MoesimError(
                "tree", f"node {i} has parent {parent}; parents must come before their children"
            )


def draw_pattern(layer: LayerRouting) -> tuple[int, bool, bool]:
    """What random numbers `sample_sequences` draws for a layer: expert count, sequence and token noise.
    Layers with equal patterns consume a generator identically (see `sample_sequence_banks`)."""
    sigma, share = layer.sigma, layer.sequence_share
    return layer.n_experts, bool(sigma > 0 and share > 0), bool(sigma * np.sqrt(1.0 - share) > 0)


def sample_sequences(
    layer: LayerRouting, parents: Sequence[int], n_sequences: int, rng: np.random.Generator
) -> np.ndarray:
    """Expert ids [n_sequences, tokens, k] of independent sequences (or draft trees given by `parents`)."""
    return sample_sequence_banks((layer,), parents, n_sequences, rng)[0]


def sample_sequence_banks(
    layers: Sequence[LayerRouting], parents: Sequence[int], n_sequences: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """`sample_sequences` of several layers from one set of random draws: entry i equals what
    `sample_sequences(layers[i], ...)` gives from the same generator state. The layers must share a
    `draw_pattern`; drawing once is what makes a model's early and main layer banks cost one draw."""
    banks = _GrowingBanks(layers, parents, n_sequences, rng)
    banks.grow(len(parents))
    return [sampler.out for sampler in banks.samplers]


class _GrowingBanks:
    """Sequences of sibling layers simulated token by token, only as far as has been asked for: token t's
    draws follow those of the tokens before it, so a prefix grown later equals the full bank's prefix."""

    def __init__(
        self,
        layers: Sequence[LayerRouting],
        parents: Sequence[int],
        n_sequences: int,
        rng: np.random.Generator,
    ) -> None:
        _check_parents(parents)
        patterns = {draw_pattern(layer) for layer in layers}
        if len(patterns) != 1:
            raise ValueError(f"layers draw different random numbers: {sorted(patterns)}")
        n, self.has_sequence_noise, self.has_token_noise = patterns.pop()
        self.shape = (n_sequences, n)
        self.rng = rng
        self.parents = tuple(parents)
        sequence_noise = (
            rng.standard_normal(self.shape, dtype=np.float32) if self.has_sequence_noise else None
        )
        self.samplers = [_LayerSampler(layer, parents, n_sequences, sequence_noise) for layer in layers]
        self.grown = 0

    def grow(self, tokens: int) -> None:
        """Simulate up to `tokens` tokens (at most the tree's size)."""
        rng, shape = self.rng, self.shape
        while self.grown < min(tokens, len(self.parents)):
            t = self.grown
            exponential = np.maximum(rng.standard_exponential(shape, dtype=np.float32), np.float32(1e-30))
            gumbel_free = np.log(exponential)  # logits = log p − this, + Gumbel noise
            noise = rng.standard_normal(shape, dtype=np.float32) if self.has_token_noise else None
            for sampler in self.samplers:
                sampler.token(t, self.parents[t], gumbel_free, noise)
            self.grown += 1

    def prefix(self, index: int, tokens: int) -> np.ndarray:
        """Read-only [n_sequences, tokens, k] expert ids of layer `index`'s first `tokens` tokens."""
        self.grow(tokens)
        view = self.samplers[index].out[:, :tokens]
        view.setflags(write=False)
        return view


class _LayerSampler:
    """One layer's share of `sample_sequence_banks`: its logits, AR(1) states and output."""

    def __init__(
        self,
        layer: LayerRouting,
        parents: Sequence[int],
        n_sequences: int,
        sequence_noise: np.ndarray | None,
    ) -> None:
        self.layer = layer
        self.log_p = np.log(layer.weights()).astype(np.float32)
        sigma, share = layer.sigma, layer.sequence_share
        self.sequence_part = 0.0 if sequence_noise is None else sigma * np.sqrt(share) * sequence_noise
        self.token_scale = sigma * np.sqrt(1.0 - share)
        # A token's latent state is kept until its last child is drawn (a chain keeps one at a time).
        self.last_child = {parent: child for child, parent in enumerate(parents) if parent >= 0}
        self.states: dict[int, np.ndarray] = {}
        self.out = np.empty((n_sequences, len(parents), layer.top_k), dtype=np.int32)

    def token(self, t: int, parent: int, gumbel_free: np.ndarray, noise: np.ndarray | None) -> None:
        layer, rho = self.layer, self.layer.token_corr
        n_sequences, k = self.out.shape[0], layer.top_k
        logits = self.log_p - gumbel_free
        logits += self.sequence_part
        if noise is not None:
            state = (
                noise if parent < 0 or rho == 0 else rho * self.states[parent] + np.sqrt(1 - rho**2) * noise
            )
            if t in self.last_child:
                self.states[t] = state
            if self.last_child.get(parent) == t:
                del self.states[parent]
            logits += self.token_scale * state
        if layer.group_limited:
            group_size = layer.n_experts // layer.n_groups
            grouped = logits.reshape(n_sequences, layer.n_groups, group_size)
            best_two = -np.partition(-grouped, min(1, group_size - 1), axis=2)[:, :, : min(2, group_size)]
            group_score = best_two.sum(axis=2)
            dropped = np.argpartition(-group_score, layer.topk_groups - 1, axis=1)[:, layer.topk_groups :]
            grouped[np.arange(n_sequences)[:, None], dropped] = -np.inf
        self.out[:, t] = np.argpartition(-logits, k - 1, axis=1)[:, :k]


def _expert_masks(sets: np.ndarray, n_experts: int) -> np.ndarray:
    """[..., n_experts] bool: which experts any token of each leading index used. sets: [..., tokens, k]."""
    lead = sets.shape[:-2]
    flat = sets.reshape(-1, sets.shape[-2] * sets.shape[-1])
    mask = np.zeros((flat.shape[0], n_experts), dtype=bool)
    mask[np.arange(flat.shape[0])[:, None], flat] = True
    return mask.reshape(*lead, n_experts)


_BANKS: dict[tuple[LayerRouting, tuple[int, ...], int, int], tuple[_GrowingBanks, int]] = {}
_MAX_BANKS = 256


def _bank(
    layer: LayerRouting,
    parents: tuple[int, ...],
    n_sequences: int,
    seed: int,
    siblings: tuple[LayerRouting, ...] = (),
    tokens: int | None = None,
) -> np.ndarray:
    """The first `tokens` tokens (all by default) of the seeded bank of simulated sequences of `layer`.

    Cached, and grown only as far as asked. `siblings`, other layers of the same routing model, are
    simulated in the same pass when they draw alike, since they are asked for next.
    """
    key = (layer, parents, n_sequences, seed)
    if key not in _BANKS:
        pattern = draw_pattern(layer)
        group = [layer] + [
            other
            for other in dict.fromkeys(siblings)
            if other != layer
            and draw_pattern(other) == pattern
            and (other, parents, n_sequences, seed) not in _BANKS
        ]
        banks = _GrowingBanks(group, parents, n_sequences, np.random.default_rng(seed))
        for index, member in enumerate(group):
            while len(_BANKS) >= _MAX_BANKS:
                _BANKS.pop(next(iter(_BANKS)))
            _BANKS[(member, parents, n_sequences, seed)] = (banks, index)
    banks, index = _BANKS[key]
    return banks.prefix(index, len(parents) if tokens is None else tokens)


@functools.lru_cache(maxsize=4096)
def miss_probability(
    layer: LayerRouting,
    parents: tuple[int, ...],
    tokens: int,
    seed: int,
    siblings: tuple[LayerRouting, ...] = (),
) -> np.ndarray:
    """q_e: fraction of bank sequences whose first `tokens` tokens never use expert e (smoothed off 0).
    `siblings`: as for `_bank` (the result does not depend on them). Read from the shipped table
    (`bank_table`) where it holds the bank: the same floats, since a fraction of 1024 is exact."""
    shipped = shipped_entry(hits_key(layer, parents, seed))
    if shipped is None:
        bank = _bank(layer, parents, BANK_SEQUENCES, seed, siblings, tokens)
        hit = _expert_masks(bank, layer.n_experts).mean(axis=0)
    else:
        hit = shipped[tokens - 1] / BANK_SEQUENCES
    return np.clip(1.0 - hit, 0.0, 1.0)


def layer_parts(layer: LayerRouting) -> tuple[object, ...]:
    """Every parameter of `layer` as plain numbers (a table key's parts: an int and an equal float alike)."""
    return (
        tuple(float(p) for p in layer.popularity),
        int(layer.top_k),
        float(layer.sigma),
        float(layer.sequence_share),
        float(layer.token_corr),
        int(layer.n_groups),
        int(layer.topk_groups),
    )


def hits_key(layer: LayerRouting, parents: tuple[int, ...], seed: int) -> str:
    """The table key of the hit counts of `layer`'s bank of BANK_SEQUENCES sequences (see `bank_hit_counts`)."""
    return table_key("hits", BANK_SEQUENCES, seed, tuple(parents), layer_parts(layer))


def bank_hit_counts(layer: LayerRouting, parents: tuple[int, ...], seed: int) -> np.ndarray:
    """uint16 [tokens, n_experts]: row t counts the bank's sequences whose first t + 1 tokens use expert e,
    simulated (what the shipped table holds under `hits_key`)."""
    bank = _bank(layer, parents, BANK_SEQUENCES, seed)
    used = np.zeros((*bank.shape[:2], layer.n_experts), dtype=bool)
    np.put_along_axis(used, bank, True, axis=2)
    return np.logical_or.accumulate(used, axis=1).sum(axis=0).astype(np.uint16)


def bank_tokens(tokens: int) -> int:
    """Tokens per sequence of the bank a chain of `tokens` samples from (see `bank_parents`)."""
    return BANK_MIN_TOKENS if tokens <= BANK_MIN_TOKENS else 1 << (tokens - 1).bit_length()


def bank_parents(tokens: int) -> tuple[int, ...]:
    """Chains share one bank: BANK_MIN_TOKENS tokens, or the next power of two ≥ tokens beyond that."""
    return chain_parents(bank_tokens(tokens))


BANK_FIXED_COPIES = 13
"""Peak memory of sampling a bank beyond its expert ids, in float32 [BANK_SEQUENCES, n_experts] arrays:
logits, noise, partitions and the latent states still awaited by a child (one at a time along a chain);
measured with tracemalloc by benchmarks/routing_sampling_memory.py (12.0–13.0 over 4–1024 tokens and
128–8192 experts)."""


def bank_bytes(n_experts: int, tokens: int, top_k: int) -> int:
    """Estimated peak memory of sampling the bank for chains of `tokens` tokens over `n_experts` experts:
    the fixed working arrays plus the int32 expert ids [BANK_SEQUENCES, bank tokens, top_k] it keeps."""
    ids = BANK_SEQUENCES * bank_tokens(tokens) * top_k * 4
    return int(BANK_SEQUENCES * n_experts * 4 * BANK_FIXED_COPIES + ids)


@dataclass(frozen=True)
class RankDistinct:
    """Expert-parallel view of one step: distributions of the busiest rank's distinct experts and tokens."""

    n_ranks: int
    placement: str
    max_distinct: DistinctExperts
    max_tokens: DistinctExperts
    mean_distinct_per_rank: float


@dataclass(frozen=True)
class CorrelatedRouting:
    """A RoutingModel with per-layer `LayerRouting` parameters.

    `layers` maps a layer index (among all layers) to its parameters; a layer not listed uses the nearest
    listed one, and `layer=None` uses `default`. `assumption` says where the numbers came from.
    """

    default: LayerRouting
    layers: tuple[tuple[int, LayerRouting], ...] = ()
    assumption: str = "fitted correlated routing"
    seed: int = 0
    extras: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    @property
    def n_experts(self) -> int:
        return self.default.n_experts

    def sampling_bytes(self, tokens_per_seq: int) -> int:
        """Estimated peak memory of the sampling a step of `tokens_per_seq` tokens per sequence needs."""
        return bank_bytes(self.n_experts, tokens_per_seq, self.top_k)

    @property
    def top_k(self) -> int:
        return self.default.top_k

    @functools.cached_property
    def description(self) -> str:
        """What the routing assumes, in words (remembered: every plan of a sweep carries it)."""
        d = self.default
        parts = [
            f"{self.assumption}: latent logit spread {d.sigma:.2f}, sequence share {d.sequence_share:.2f}, "
            f"token-to-token correlation {d.token_corr:.2f}"
        ]
        if d.group_limited:
            parts.append(f"group-limited top-{d.topk_groups} of {d.n_groups} groups")
        if len({layer for _, layer in self.layers}) > 1:
            parts.append("per-layer parameters")
        return ", ".join(parts)

    @functools.cached_property
    def distinct_layers(self) -> tuple[LayerRouting, ...]:
        """Every distinct parameter set (the default first)."""
        return tuple(dict.fromkeys((self.default, *(layer for _, layer in self.layers))))

    def layer_params(self, layer: int | None = None) -> LayerRouting:
        if layer is None or not self.layers:
            return self.default
        # Asked once per layer per step: remember each answer (the instance is frozen, its answers too).
        nearest = self.__dict__.setdefault("_nearest", {})
        if layer not in nearest:
            indices = np.array([index for index, _ in self.layers])
            nearest[layer] = self.layers[int(np.argmin(np.abs(indices - layer)))][1]
        return nearest[layer]

    def _resolve(
        self, n_experts: int, top_k: int, batch: int, tokens: int, layer: int | None
    ) -> LayerRouting:
        if n_experts != self.n_experts or top_k != self.top_k:
            raise MoesimError(
                "routing",
                f"statistics are for {self.n_experts} experts top-{self.top_k}, "
                f"the model has {n_experts} experts top-{top_k}",
                "fit routing statistics on this model's traces or use --routing typical",
            )
        if batch < 1 or tokens < 1:
            raise MoesimError("batch", f"batch and tokens per sequence must be ≥ 1, got {batch} and {tokens}")
        return self.layer_params(layer)

    # ---- means: closed form over the cached per-expert miss probabilities ----

    def expected_distinct(
        self, n_experts: int, top_k: int, batch: int, tokens_per_seq: int, layer: int | None = None
    ) -> float:
        """Mean distinct experts: Σ_e 1 − q_e(T)^B (exact for independent sequences given q). Remembered per
        (layer parameters, tokens, batch): the designs of a screen that share an expert count and top-k share
        this routing model and ask it the same questions (the instance is frozen, its answers too)."""
        params = self._resolve(n_experts, top_k, batch, tokens_per_seq, layer)
        known = self.__dict__.setdefault("_distinct", {})
        key = (params, tokens_per_seq, batch)
        if key not in known:
            q = miss_probability(
                params, bank_parents(tokens_per_seq), tokens_per_seq, self.seed, self.distinct_layers
            )
            known[key] = float(np.sum(1.0 - q**batch))
        return known[key]

    def expected_distinct_tree(
        self, n_experts: int, top_k: int, batch: int, parents: Sequence[int], layer: int | None = None
    ) -> float:
        """Mean distinct experts when each of `batch` sequences verifies a draft tree (parent indices)."""
        parents = tuple(parents)
        params = self._resolve(n_experts, top_k, batch, len(parents), layer)
        _check_parents(parents)
        q = miss_probability(params, parents, len(parents), self.seed, self.distinct_layers)
        return float(np.sum(1.0 - q**batch))

    # ---- distributions: B sequences drawn (without repeats) from the cached bank ----

    def _step_sets(
        self, params: LayerRouting, batch: int, tokens: int, parents: tuple[int, ...], n_samples: int, rng
    ) -> np.ndarray:
        n_seq = max(BANK_SEQUENCES, 4 * batch)
        bank = _bank(params, parents, n_seq, self.seed, self.distinct_layers, tokens)
        keys = rng.random((n_samples, bank.shape[0]))
        picks = np.argpartition(keys, batch - 1, axis=1)[:, :batch]  # the bank holds ≥ 4·batch sequences
        return bank[picks]  # [samples, batch, tokens, k]

    def sample_expert_loads(
        self,
        n_experts: int,
        top_k: int,
        batch: int,
        tokens_per_seq: int,
        n_samples: int,
        rng: np.random.Generator,
        layer: int | None = None,
        parents: Sequence[int] | None = None,
    ) -> np.ndarray:
        """Integer array [n_samples, n_experts]: token assignments each expert receives in one step."""
        tokens = len(parents) if parents is not None else tokens_per_seq
        params = self._resolve(n_experts, top_k, batch, tokens, layer)
        tree = tuple(parents) if parents is not None else bank_parents(tokens)
        sets = self._step_sets(params, batch, tokens, tree, n_samples, rng).reshape(n_samples, -1)
        loads = np.zeros((n_samples, n_experts), dtype=np.int64)
        np.add.at(loads, (np.repeat(np.arange(n_samples), sets.shape[1]), sets.ravel()), 1)
        return loads

    def distinct_distribution(
        self,
        n_experts: int,
        top_k: int,
        batch: int,
        tokens_per_seq: int,
        layer: int | None = None,
        n_samples: int = 2000,
        parents: Sequence[int] | None = None,
    ) -> DistinctExperts:
        """Distribution of distinct experts; the mean is the closed form, the quantiles are sampled."""
        rng = np.random.default_rng(self.seed + 1)
        loads = self.sample_expert_loads(
            n_experts, top_k, batch, tokens_per_seq, n_samples, rng, layer, parents
        )
        sampled = DistinctExperts.from_samples((loads > 0).sum(axis=1))
        if parents is None:
            mean = self.expected_distinct(n_experts, top_k, batch, tokens_per_seq, layer)
        else:
            mean = self.expected_distinct_tree(n_experts, top_k, batch, parents, layer)
        return DistinctExperts(mean, sampled.p10, sampled.p50, sampled.p90)

    def rank_distribution(
        self,
        n_experts: int,
        top_k: int,
        batch: int,
        tokens_per_seq: int,
        n_ranks: int,
        placement: Placement = "contiguous",
        layer: int | None = None,
        n_samples: int = 2000,
    ) -> RankDistinct:
        """Experts split over `n_ranks` expert-parallel ranks: the busiest rank decides the step."""
        if n_ranks < 1 or n_experts % n_ranks:
            raise MoesimError("ranks", f"must divide the expert count {n_experts}, got {n_ranks}")
        rng = np.random.default_rng(self.seed + 2)
        loads = self.sample_expert_loads(n_experts, top_k, batch, tokens_per_seq, n_samples, rng, layer)
        return rank_summary(loads, n_ranks, placement)


def rank_summary(loads: np.ndarray, n_ranks: int, placement: Placement) -> RankDistinct:
    """Busiest-rank distributions from per-expert loads [samples, experts]."""
    ranks = expert_to_rank(loads.shape[1], n_ranks, placement)
    distinct = np.zeros((loads.shape[0], n_ranks))
    tokens = np.zeros((loads.shape[0], n_ranks))
    for r in range(n_ranks):
        distinct[:, r] = (loads[:, ranks == r] > 0).sum(axis=1)
        tokens[:, r] = loads[:, ranks == r].sum(axis=1)
    return RankDistinct(
        n_ranks=n_ranks,
        placement=normalise_placement(placement),
        max_distinct=DistinctExperts.from_samples(distinct.max(axis=1)),
        max_tokens=DistinctExperts.from_samples(tokens.max(axis=1)),
        mean_distinct_per_rank=float(distinct.mean()),
    )

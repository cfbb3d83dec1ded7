"""Synthetic routing traces: from a fitted model (for fit → generate → fit round trips) and from two
*different* generating processes used to test robustness:

- `gating_trace`: random token embeddings through a real softmax gating layer. Each sequence has its own
  mean hidden state (long range) and a slowly drifting AR(1) hidden state (short range); experts are the
  top-k of the router logits, plus a per-expert bias (popularity).
- `topic_trace`: a hidden-Markov "topic" router. Each sequence owns a few topics and hops between them;
  each topic prefers some experts; a token samples k experts without repeats from its topic's softmax.
"""

from __future__ import annotations

import numpy as np

from moesim.simulator.bounds import DEFAULT_MAX_MEMORY_GB, check_bytes, check_count, check_seed
from moesim.simulator.routing.correlated import CorrelatedRouting, chain_parents, sample_sequences
from moesim.simulator.routing.trace import RoutingTrace


def _sequence_ids(n_sequences: int, tokens: int) -> np.ndarray:
    return np.repeat(np.arange(n_sequences), tokens)


TRACE_BYTES_PER_ID = 24
"""Peak bytes per expert id of a generated trace: the int64 ids of each layer, their stack and the trace's copy."""
SAMPLING_COPIES = 13
"""Float32 [sequences, experts] working arrays sampling one layer keeps (as `correlated.BANK_FIXED_COPIES`)."""


def trace_bytes(model: CorrelatedRouting, n_sequences: int, tokens: int, n_layers: int) -> int:
    """Estimated peak memory of `generate_trace`: the ids it keeps plus one layer's sampling arrays."""
    ids = n_sequences * tokens * n_layers * model.top_k * TRACE_BYTES_PER_ID
    return int(ids + n_sequences * model.n_experts * 4 * SAMPLING_COPIES)


def generate_trace(
    model: CorrelatedRouting,
    n_sequences: int,
    tokens: int,
    seed: int = 0,
    layers: list[int] | None = None,
    max_memory_gb: float = DEFAULT_MAX_MEMORY_GB,
) -> RoutingTrace:
    """Sample a trace of `n_sequences` × `tokens` from a fitted model, one trace layer per model layer; refused
    first when its estimated memory is above `max_memory_gb`."""
    check_count(n_sequences, "sequences", fix="give --sequences 1 or more")
    check_count(tokens, "tokens", fix="give --tokens 1 or more")
    rng = np.random.default_rng(check_seed(seed))
    indices = layers if layers is not None else ([i for i, _ in model.layers] or [0])
    check_bytes(
        trace_bytes(model, n_sequences, tokens, len(indices)),
        max_memory_gb,
        f"a trace of {n_sequences:,} sequences × {tokens:,} tokens × {len(indices)} layers × top-{model.top_k}",
        "generate fewer --sequences or --tokens",
    )
    per_layer = [
        sample_sequences(model.layer_params(i), chain_parents(tokens), n_sequences, rng).reshape(
            -1, model.top_k
        )
        for i in indices
    ]
    return RoutingTrace.create(
        np.stack(per_layer, axis=1), _sequence_ids(n_sequences, tokens), model.n_experts, tuple(indices)
    )


def _top_k(logits: np.ndarray, top_k: int) -> np.ndarray:
    return np.argpartition(-logits, top_k - 1, axis=-1)[..., :top_k]


def gating_trace(
    n_experts: int,
    top_k: int,
    n_sequences: int,
    tokens: int,
    n_layers: int = 1,
    hidden: int = 64,
    drift: float = 0.8,
    sequence_weight: float = 0.8,
    bias_scale: float = 0.3,
    seed: int = 0,
) -> RoutingTrace:
    """Top-k of softmax router logits G·h_t + b for h_t = sequence mean + AR(1) drift (see module docstring).

    `drift` is the AR(1) coefficient of the token part (short range); `sequence_weight` the share of the
    hidden state's variance that is the sequence's own constant mean (long range).
    """
    rng = np.random.default_rng(check_seed(seed))
    layers = []
    for _ in range(n_layers):
        gate = rng.standard_normal((hidden, n_experts)) / np.sqrt(hidden)
        bias = bias_scale * rng.standard_normal(n_experts)
        mean = rng.standard_normal((n_sequences, hidden)) * np.sqrt(sequence_weight)
        state = rng.standard_normal((n_sequences, hidden))
        h = np.empty((n_sequences, tokens, hidden))
        for t in range(tokens):
            if t:
                state = drift * state + np.sqrt(1 - drift**2) * rng.standard_normal((n_sequences, hidden))
            h[:, t] = mean + state * np.sqrt(1 - sequence_weight)
        logits = h @ gate * 4.0 + bias
        layers.append(_top_k(logits, top_k).reshape(-1, top_k))
    return RoutingTrace.create(np.stack(layers, axis=1), _sequence_ids(n_sequences, tokens), n_experts)


def topic_trace(
    n_experts: int,
    top_k: int,
    n_sequences: int,
    tokens: int,
    n_layers: int = 1,
    n_topics: int = 32,
    topics_per_sequence: int = 3,
    stay: float = 0.85,
    sharpness: float = 3.0,
    seed: int = 0,
) -> RoutingTrace:
    """A hidden-Markov topic router: stay in the current topic with probability `stay`, else hop to another
    of the sequence's own topics; k experts drawn without repeats from softmax(sharpness · topic vector)."""
    rng = np.random.default_rng(check_seed(seed))
    layers = []
    for _ in range(n_layers):
        topic_logits = sharpness * rng.standard_normal((n_topics, n_experts)) + 0.5 * rng.standard_normal(
            n_experts
        )
        owned = np.argsort(rng.random((n_sequences, n_topics)), axis=1)[:, :topics_per_sequence]
        current = rng.integers(0, topics_per_sequence, size=n_sequences)
        picks = np.empty((n_sequences, tokens, top_k), dtype=np.int64)
        for t in range(tokens):
            if t:
                hop = rng.random(n_sequences) >= stay
                current = np.where(hop, rng.integers(0, topics_per_sequence, size=n_sequences), current)
            logits = topic_logits[owned[np.arange(n_sequences), current]]
            picks[:, t] = _top_k(logits + rng.gumbel(size=logits.shape), top_k)
        layers.append(picks.reshape(-1, top_k))
    return RoutingTrace.create(np.stack(layers, axis=1), _sequence_ids(n_sequences, tokens), n_experts)

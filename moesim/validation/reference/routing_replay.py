"""Forced routing for validation: sample per-layer expert loads once, drive the torch run and the prediction.

The routing model hands out *loads* (tokens per expert); the torch reference needs an *assignment* (which
k distinct experts each token uses). `assignment_from_loads` realises any load vector as an assignment,
and `ReplayRouting` replays the very same loads to the simulator, so both sides see the same experts.
No torch here: the simulator side imports this module too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.routing.base import RoutingModel


def assignment_from_loads(loads: np.ndarray, m_tokens: int, top_k: int) -> np.ndarray:
    """[m_tokens, top_k] expert ids in which expert e appears in exactly loads[e] rows, never twice in a row.

    Experts are laid out by falling load, column-major over the token × choice slots: an expert's
    loads[e] ≤ m_tokens consecutive slots then fall on distinct tokens.
    """
    loads = np.asarray(loads, dtype=np.int64)
    if loads.ndim != 1 or np.any(loads < 0):
        raise MoesimError("routing", "expert loads must be a 1-D array of non-negative counts")
    if int(loads.sum()) != m_tokens * top_k:
        raise MoesimError(
            "routing", f"loads sum to {int(loads.sum())}, expected tokens × top_k = {m_tokens * top_k}"
        )
    if loads.max(initial=0) > m_tokens:
        raise MoesimError("routing", f"an expert has {int(loads.max())} tokens but only {m_tokens} exist")
    order = np.argsort(-loads, kind="stable")
    slots = np.repeat(order, loads[order])
    # slot p -> token p % M, choice p // M
    return slots.reshape(top_k, m_tokens).T.copy()


def loads_from_assignment(topk_ids: np.ndarray, n_experts: int) -> np.ndarray:
    """Tokens per expert of an assignment [M, top_k]."""
    return np.bincount(np.asarray(topk_ids).ravel(), minlength=n_experts).astype(np.int64)


@dataclass(frozen=True)
class StepRouting:
    """The forced routing of one step: loads[l] is the load vector of MoE layer `moe_layers[l]`."""

    moe_layers: tuple[int, ...]
    loads: tuple[np.ndarray, ...]
    batch: int
    tokens_per_seq: int
    top_k: int

    @property
    def m_tokens(self) -> int:
        return self.batch * self.tokens_per_seq

    def loads_for_layer(self, layer: int | None) -> np.ndarray:
        if layer is None or layer not in self.moe_layers:
            return self.loads[0]
        return self.loads[self.moe_layers.index(layer)]

    def assignment(self, layer: int) -> np.ndarray:
        return assignment_from_loads(self.loads_for_layer(layer), self.m_tokens, self.top_k)

    def distinct_experts(self) -> list[int]:
        return [int(np.count_nonzero(load)) for load in self.loads]


def sample_step_routing(
    routing: RoutingModel,
    n_experts: int,
    top_k: int,
    batch: int,
    tokens_per_seq: int,
    moe_layers: tuple[int, ...],
    seed: int,
) -> StepRouting:
    """One seeded routing sample per MoE layer, as the routing model's `sample_expert_loads` gives it."""
    rng = np.random.default_rng(seed)
    loads = []
    for layer in moe_layers:
        sample = routing.sample_expert_loads(n_experts, top_k, batch, tokens_per_seq, 1, rng, layer)
        loads.append(np.asarray(sample, dtype=np.int64)[0])
    return StepRouting(tuple(moe_layers), tuple(loads), batch, tokens_per_seq, top_k)


@dataclass(frozen=True)
class ReplayRouting:
    """A RoutingModel that returns the recorded loads of one step, so the prediction sees the measured experts."""

    step: StepRouting

    @property
    def description(self) -> str:
        return "replay of the routing sampled for the measured run"

    def _check(self, n_experts: int, top_k: int, batch: int, tokens_per_seq: int) -> None:
        expected = (self.step.loads[0].size, self.step.top_k, self.step.batch, self.step.tokens_per_seq)
        if (n_experts, top_k, batch, tokens_per_seq) != expected:
            raise MoesimError(
                "routing",
                f"replay recorded (experts, top_k, batch, tokens) = {expected}, "
                f"asked for {(n_experts, top_k, batch, tokens_per_seq)}",
            )

    def expected_distinct(
        self, n_experts: int, top_k: int, batch: int, tokens_per_seq: int, layer: int | None = None
    ) -> float:
        self._check(n_experts, top_k, batch, tokens_per_seq)
        if layer is None:
            return float(np.mean(self.step.distinct_experts()))
        return float(np.count_nonzero(self.step.loads_for_layer(layer)))

    def sample_expert_loads(
        self,
        n_experts: int,
        top_k: int,
        batch: int,
        tokens_per_seq: int,
        n_samples: int,
        rng: np.random.Generator,
        layer: int | None = None,
    ) -> np.ndarray:
        self._check(n_experts, top_k, batch, tokens_per_seq)
        return np.tile(self.step.loads_for_layer(layer), (n_samples, 1))


__all__ = [
    "ReplayRouting",
    "StepRouting",
    "assignment_from_loads",
    "loads_from_assignment",
    "sample_step_routing",
]

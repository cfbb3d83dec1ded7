"""Shared builders for the core simulator's tests: small hand-made models and the bundled profiles."""

from __future__ import annotations

import functools
from dataclasses import replace

from moesim.simulator.hardware.profile import HardwareProfile, load_profile
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.spec import AttentionSpec, ModelSpec


@functools.cache
def h200() -> HardwareProfile:
    return load_profile("h200")


@functools.cache
def model(name: str) -> ModelSpec:
    return load_model(name)


def tiny_moe(
    n_layers: int = 4,
    hidden: int = 512,
    n_experts: int = 16,
    top_k: int = 2,
    expert_width: int = 256,
    shared: int = 0,
    weight_format: str = "bf16",
) -> ModelSpec:
    """A small MoE built by hand: fast to plan and simulate, with every part of a real layer."""
    return ModelSpec(
        name="tiny-moe",
        hidden=hidden,
        vocab=4096,
        layer_attention=("full",) * n_layers,
        layer_ffn=("moe",) * n_layers,
        attention=AttentionSpec(num_heads=8, num_kv_heads=2, head_dim=64),
        n_experts=n_experts,
        top_k=top_k,
        expert_width=expert_width,
        n_shared_experts=shared,
        shared_expert_width=expert_width if shared else 0,
        weight_format=weight_format,
    )


def tiny_dense(n_layers: int = 4, hidden: int = 512) -> ModelSpec:
    return replace(
        tiny_moe(n_layers, hidden),
        name="tiny-dense",
        layer_ffn=("dense",) * n_layers,
        dense_ffn_width=4 * hidden,
        n_experts=0,
        top_k=0,
        expert_width=0,
    )


def simulate_sd(model_name, hardware, batch, draft_len, *, parallel=None, routing=None, **fields):  # type: ignore[no-untyped-def]
    """`moesim.simulate` with the explicit choices these tests were written for: plain independent routing,
    one GPU unless `parallel` gives a layout (the scenario's own defaults are typical routing, smallest fit)."""
    from moesim.simulator.plan.layout import ParallelLayout
    from moesim.simulator.routing.independent import IndependentRouting
    from moesim.simulator.scenario import Scenario
    from moesim.simulator.simulate import simulate

    layout = ParallelLayout() if parallel is None else parallel
    scenario = Scenario(
        model_name,
        hardware,
        batch,
        draft_len,
        routing=routing or IndependentRouting(),
        layout=layout,
        **fields,
    )
    return simulate(scenario)


def sweep_grid(models, hardware, batches, draft_lens, *, parallel=None, routing=None, **fields):  # type: ignore[no-untyped-def]
    """`run_sweep` with the same explicit choices as `simulate_sd`."""
    from moesim.simulator.plan.layout import ParallelLayout
    from moesim.simulator.routing.independent import IndependentRouting
    from moesim.simulator.scenario import Scenario
    from moesim.simulator.speculative.sweep import run_sweep

    layout = ParallelLayout() if parallel is None else parallel
    base = Scenario(models[0], hardware, routing=routing or IndependentRouting(), layout=layout, **fields)
    return run_sweep(base, models, batches, draft_lens)

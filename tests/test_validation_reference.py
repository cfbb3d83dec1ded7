"""The torch reference execution: numerically right, driven by the requested routing, and described
kernel for kernel by the `torch-reference` plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.models.spec import AttentionSpec, ModelSpec
from moesim.simulator.routing.independent import IndependentRouting
from moesim.validation.reference.routing_replay import (
    ReplayRouting,
    assignment_from_loads,
    loads_from_assignment,
    sample_step_routing,
)

torch = pytest.importorskip("torch")

from moesim.simulator.plan.reference import reference_step_plan  # noqa: E402
from moesim.simulator.plan.reference_fused import fused_reference_step_plan  # noqa: E402
from moesim.validation.reference.measure import aten_name  # noqa: E402
from moesim.validation.reference.predict import REFERENCE_PLANS  # noqa: E402
from moesim.validation.reference.torch_model import ReferenceModel, count_step_ops, dense_reference_logits  # noqa: E402


def tiny_spec(
    qk_norm: bool = True, shared: int = 1, dense_first: bool = True, weight_format: str = "fp32"
) -> ModelSpec:
    ffn = ("dense", "moe", "moe") if dense_first else ("moe", "moe")
    return ModelSpec(
        name="tiny-moe",
        hidden=32,
        vocab=50,
        layer_attention=("full",) * len(ffn),
        layer_ffn=ffn,  # type: ignore[arg-type]
        attention=AttentionSpec(num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=qk_norm),
        dense_ffn_width=40,
        n_experts=8,
        top_k=2,
        expert_width=16,
        n_shared_experts=shared,
        shared_expert_width=24 if shared else 0,
        weight_format=weight_format,
    )


def prepared(
    spec: ModelSpec, batch: int, tokens: int, context: int, seed: int = 0, dtype=None, style="torch-reference"
):
    model = ReferenceModel(spec, dtype=dtype or torch.float64, seed=seed, style=style)
    routing = sample_step_routing(
        IndependentRouting(), spec.n_experts, spec.top_k, batch, tokens, model.moe_layers, seed
    )
    return model, routing, model.prepare(batch, tokens, context, routing)


@pytest.mark.parametrize("style", ["torch-reference", "torch-fused"])
@pytest.mark.parametrize(("qk_norm", "shared", "dense_first"), [(True, 1, True), (False, 0, False)])
@pytest.mark.parametrize(("batch", "tokens", "context"), [(1, 1, 5), (3, 4, 6), (2, 3, 0)])
def test_step_matches_dense_brute_force(qk_norm, shared, dense_first, batch, tokens, context, style):
    spec = tiny_spec(qk_norm, shared, dense_first)
    fused = style == "torch-fused"  # torch._grouped_mm runs fp32/bf16/fp16 only
    model, _, inputs = prepared(
        spec, batch, tokens, context, dtype=torch.float32 if fused else None, style=style
    )
    logits, next_ids = model.step(inputs)
    expected = dense_reference_logits(model, inputs)
    assert logits.shape == (batch * tokens, spec.vocab)
    tolerance = 1e-5 if fused else 1e-9
    torch.testing.assert_close(logits, expected.to(logits.dtype), rtol=tolerance, atol=tolerance)
    assert torch.equal(next_ids, expected.argmax(-1))


def test_forced_routing_overrides_the_router():
    """The experts used are the sampled ones, not the router's own top-k: changing the sample changes the output."""
    spec = tiny_spec()
    model = ReferenceModel(spec, dtype=torch.float64)
    outs = []
    for seed in (1, 2):
        routing = sample_step_routing(IndependentRouting(), 8, 2, 2, 2, model.moe_layers, seed)
        inputs = model.prepare(2, 2, 4, routing, seed=7)
        outs.append(model.step(inputs)[0].clone())
        torch.testing.assert_close(outs[-1], dense_reference_logits(model, inputs), rtol=1e-9, atol=1e-9)
    assert not torch.allclose(outs[0], outs[1])


def test_step_hits_exactly_the_requested_distinct_experts():
    spec = tiny_spec()
    model, routing, inputs = prepared(spec, 4, 3, 5, seed=3)
    for layer in model.moe_layers:
        plan = inputs.ws.moe[layer]
        load = routing.loads_for_layer(layer)
        assert plan.experts == [int(e) for e in np.flatnonzero(load)]
        assert [x.shape[0] for x in plan.x] == [int(load[e]) for e in plan.experts]
        ids = plan.forced_ids.cpu().numpy()
        assert np.array_equal(loads_from_assignment(ids, spec.n_experts), load)
        assert all(len(set(row)) == spec.top_k for row in ids.tolist())


@settings(max_examples=60, deadline=None)
@given(
    n_experts=st.integers(1, 40),
    data=st.data(),
)
def test_assignment_realises_any_feasible_loads(n_experts, data):
    top_k = data.draw(st.integers(1, n_experts))
    m = data.draw(st.integers(1, 12))
    rng = np.random.default_rng(data.draw(st.integers(0, 10**6)))
    loads = IndependentRouting(popularity_alpha=1.0).sample_expert_loads(n_experts, top_k, m, 1, 1, rng)[0]
    ids = assignment_from_loads(loads, m, top_k)
    assert ids.shape == (m, top_k)
    assert np.array_equal(loads_from_assignment(ids, n_experts), loads)
    assert all(len(set(row)) == top_k for row in ids.tolist())


def test_assignment_refuses_impossible_loads():
    with pytest.raises(MoesimError, match="tokens"):
        assignment_from_loads(np.array([3, 1]), 2, 2)  # an expert with more tokens than exist
    with pytest.raises(MoesimError, match="sum"):
        assignment_from_loads(np.array([1, 1]), 2, 2)


def test_replay_routing_returns_the_recorded_loads():
    step = sample_step_routing(IndependentRouting(), 16, 4, 3, 2, (0, 2), seed=5)
    replay = ReplayRouting(step)
    rng = np.random.default_rng(0)
    for index, layer in enumerate((0, 2)):
        loads = replay.sample_expert_loads(16, 4, 3, 2, 3, rng, layer)
        assert loads.shape == (3, 16) and (loads == step.loads[index]).all()
        assert replay.expected_distinct(16, 4, 3, 2, layer) == np.count_nonzero(step.loads[index])
    with pytest.raises(MoesimError):
        replay.expected_distinct(16, 4, 4, 2, 0)


@pytest.mark.parametrize("style", ["torch-reference", "torch-fused"])
@pytest.mark.parametrize(("qk_norm", "shared", "dense_first"), [(True, 1, True), (False, 0, False)])
def test_plan_lists_exactly_the_kernels_torch_launches(qk_norm, shared, dense_first, style):
    spec = tiny_spec(qk_norm, shared, dense_first)
    model, routing, inputs = prepared(spec, 3, 2, 5, dtype=torch.float32, style=style)
    kernels, views = count_step_ops(model, inputs)
    plan = REFERENCE_PLANS[style](spec, 3, 2, 5, routing.loads)
    assert views == []  # every view is made in prepare(), none in the timed step
    assert [aten_name(k.name) for k in plan.kernels] == [op.lstrip("_") for op in kernels]


def test_plan_expert_kernels_follow_the_distinct_experts():
    """Four kernels per distinct expert hit; the expert GEMMs read each hit expert's weights once."""
    spec = tiny_spec(shared=0, dense_first=False)
    base = None
    for tokens in (1, 2, 4):
        routing = sample_step_routing(IndependentRouting(), 8, 2, 2, tokens, (0, 1), seed=tokens)
        plan = reference_step_plan(spec, 2, tokens, 8, routing.loads)
        distinct = sum(routing.distinct_experts())
        expert_kernels = [k for k in plan.kernels if ".e" in k.name and k.category == "routed_experts"]
        assert len(expert_kernels) == 4 * distinct
        weight_bytes = sum(
            r.size_bytes for k in expert_kernels for r in k.reads if r.tensor.endswith((".w13", ".w2"))
        )
        assert weight_bytes == pytest.approx(distinct * 3 * spec.hidden * spec.expert_width * 4)
        n_other = len(plan.kernels) - len(expert_kernels)
        base = n_other if base is None else base
        assert n_other == base  # everything else is independent of routing


def test_fused_plan_does_the_loops_work_in_three_grouped_gemms_per_layer():
    """Same FLOPs and expert-weight bytes as the per-expert loop, in a kernel count independent of routing."""
    spec = tiny_spec(shared=0, dense_first=False)
    counts = set()
    for tokens in (1, 2, 4):
        routing = sample_step_routing(IndependentRouting(), 8, 2, 2, tokens, (0, 1), seed=tokens)
        loop = reference_step_plan(spec, 2, tokens, 8, routing.loads)
        fused = fused_reference_step_plan(spec, 2, tokens, 8, routing.loads)
        grouped = [
            k for k in fused.kernels if k.name.endswith(("grouped_gate", "grouped_up", "grouped_down"))
        ]
        assert len(grouped) == 3 * spec.n_moe_layers
        assert sum(k.flops for k in fused.kernels) == pytest.approx(sum(k.flops for k in loop.kernels))

        def expert_weight_bytes(plan):
            return sum(r.size_bytes for k in plan.kernels for r in k.reads if ".e" in r.tensor)

        assert expert_weight_bytes(fused) == pytest.approx(expert_weight_bytes(loop))
        distinct = routing.distinct_experts()
        for k, u in zip(grouped[::3], distinct, strict=True):
            assert k.m_tokens == pytest.approx(2 * tokens * spec.top_k / u)  # mean rows per distinct expert
        counts.add(len(fused.kernels))
    assert len(counts) == 1
    assert fused.kernel_style == "torch-fused"


def test_plan_refuses_what_the_reference_cannot_run():
    spec = tiny_spec()
    routing = sample_step_routing(IndependentRouting(), 8, 2, 1, 1, (1, 2), seed=0)
    with pytest.raises(MoesimError):
        reference_step_plan(spec, 1, 1, 4, routing.loads[:1])
    from dataclasses import replace

    with pytest.raises(MoesimError):
        reference_step_plan(replace(spec, expert_weight_format="fp8"), 1, 1, 4, routing.loads)
    with pytest.raises(MoesimError):
        ReferenceModel(replace(spec, attention=replace(spec.attention, kv_lora_rank=16)))

"""The forced-routing expert block: exactly U distinct experts, and the same output as a per-token reference."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from moesim.calibrate.suites.moe_block import ExpertBlock, forced_routing  # noqa: E402
from moesim.errors import MoesimError  # noqa: E402


@st.composite
def routing_cases(draw: st.DrawFn) -> tuple[int, int, int, int]:
    n_experts = draw(st.integers(1, 64))
    top_k = draw(st.integers(1, min(n_experts, 8)))
    m = draw(st.integers(1, 40))
    distinct = draw(st.integers(top_k, min(n_experts, m * top_k)))
    return m, distinct, n_experts, top_k


@settings(max_examples=60, deadline=None)
@given(routing_cases(), st.integers(0, 2**31 - 1))
def test_forced_routing_hits_exactly_u_distinct_experts(case: tuple[int, int, int, int], seed: int) -> None:
    m, distinct, n_experts, top_k = case
    experts = forced_routing(m, distinct, n_experts, top_k, torch.Generator().manual_seed(seed))
    assert experts.shape == (m, top_k)
    assert len(torch.unique(experts)) == distinct
    assert int(experts.min()) >= 0 and int(experts.max()) < n_experts
    for row in experts:
        assert len(torch.unique(row)) == top_k  # a token never picks one expert twice
    counts = torch.bincount(experts.reshape(-1))
    hit = counts[counts > 0]
    assert int(hit.max() - hit.min()) <= 1  # tokens spread evenly over the hit experts


@pytest.mark.parametrize(
    ("m", "distinct", "n_experts", "top_k"), [(1, 3, 16, 2), (2, 1, 16, 2), (4, 20, 16, 2), (1, 1, 4, 5)]
)
def test_impossible_routing_is_a_clear_error(m: int, distinct: int, n_experts: int, top_k: int) -> None:
    with pytest.raises(MoesimError):
        forced_routing(m, distinct, n_experts, top_k)


def reference(block: ExpertBlock, x: torch.Tensor, forced: torch.Tensor) -> torch.Tensor:
    """Token by token: softmax over the forced experts' router logits, weighted sum of SwiGLU experts."""
    logits = x @ block.router
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        experts = forced[t]
        gates = torch.softmax(logits[t, experts], dim=-1)
        for gate, e in zip(gates, experts.tolist(), strict=True):
            h = torch.nn.functional.silu(x[t] @ block.w_gate[e]) * (x[t] @ block.w_up[e])
            out[t] += gate * (h @ block.w_down[e])
    return out


def test_block_matches_the_per_token_reference_and_honours_forcing() -> None:
    gen = torch.Generator().manual_seed(0)
    block = ExpertBlock(32, 16, 8, 2, generator=gen)
    x = torch.randn(6, 32, generator=gen)
    forced = forced_routing(6, 5, 8, 2, gen)
    # Sorting each row keeps the expert set (the block's top-k may list them in another order).
    assert torch.allclose(block(x, forced), reference(block, x, forced), atol=1e-5)
    assert block.expert_bytes == 3 * 32 * 16 * 4


def test_unforced_block_routes_by_the_router() -> None:
    gen = torch.Generator().manual_seed(1)
    block = ExpertBlock(16, 8, 4, 1, generator=gen)
    x = torch.randn(5, 16, generator=gen)
    chosen = torch.argmax(x @ block.router, dim=-1, keepdim=True)
    assert torch.allclose(block(x), reference(block, x, chosen), atol=1e-5)


def test_counts_known_on_the_host_give_the_same_output_without_a_sync() -> None:
    generator = torch.Generator().manual_seed(3)
    block = ExpertBlock(16, 8, 6, 2, generator=generator)
    x = torch.randn(5, 16, generator=generator)
    forced = forced_routing(5, 4, 6, 2, generator)
    counts = torch.bincount(forced.reshape(-1), minlength=6).tolist()
    assert torch.allclose(block(x, forced, counts), block(x, forced))


@given(seconds=st.floats(1e-7, 1.0), distinct=st.integers(1, 256))
def test_gpu_moe_batches_fit_the_launch_queue(seconds: float, distinct: int) -> None:
    from moesim.calibrate.suites.moe import GPU_MAX_KERNELS_PER_BATCH, batch_calls, kernels_per_call

    gpu = batch_calls(seconds, 2e-3, distinct, is_gpu=True)
    cpu = batch_calls(seconds, 2e-3, distinct, is_gpu=False)
    assert 1 <= gpu <= cpu
    assert gpu == 1 or gpu * kernels_per_call(distinct) <= GPU_MAX_KERNELS_PER_BATCH

"""Parallel layouts, expert placement and per-rank expert work: limits, balance and the slowest rank."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.execution.collectives import parallel_step_summary, step_collective_times_s
from moesim.simulator.execution.timer import EventTimer, FastTimer, time_parallel
from moesim.simulator.models.spec import AttentionSpec, ModelSpec
from moesim.simulator.plan.layout import (
    ParallelLayout,
    candidate_layouts,
    default_layout,
    layout_from_options,
    moe_traffic,
)
from moesim.simulator.routing import IndependentRouting
from moesim.simulator.routing.per_rank import (
    RankExperts,
    rank_experts,
    rank_experts_from_loads,
    ranks_per_token,
)
from moesim.simulator.routing.placement import expert_to_rank, experts_per_rank

UNIFORM = IndependentRouting()
SKEWED = IndependentRouting(popularity_alpha=1.0)


def _moe(n_experts: int = 64, heads: int = 16) -> ModelSpec:
    return ModelSpec(
        name="toy-moe",
        hidden=512,
        vocab=1000,
        layer_attention=("full",) * 4,
        layer_ffn=("moe",) * 4,
        attention=AttentionSpec(num_heads=heads, num_kv_heads=4, head_dim=32),
        n_experts=n_experts,
        top_k=4,
        expert_width=256,
    )


# ------------------------------------------------------------------------------------------- layouts


def test_default_layout_is_tp_equals_ep_equals_gpus() -> None:
    layout = default_layout(8)
    assert (layout.gpus, layout.tp, layout.ep, layout.dp, layout.expert_tp) == (8, 8, 8, 1, 1)
    assert "EP=8" in layout.describe() and "TP=8" in layout.describe()
    assert default_layout(1).describe() == "1 GPU"


def test_data_parallel_attention_splits_the_batch() -> None:
    layout = ParallelLayout(gpus=8, tp=2, ep=8)
    assert layout.dp == 4
    assert layout.sequences_per_group(9) == 3
    assert "DP=4" in layout.describe()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpus": 8, "tp": 3, "ep": 8}, "tp"),
        ({"gpus": 8, "tp": 8, "ep": 3}, "ep"),
        ({"gpus": 8, "tp": 4, "ep": 1}, "tp"),
        ({"gpus": 0}, "gpus"),
        ({"gpus": 2, "tp": 2, "ep": 2, "placement": "random"}, "placement"),
        ({"gpus": 2, "tp": 2, "ep": 2, "shared_experts": "sharded"}, "shared_experts"),
        ({"gpus": 2, "tp": 2, "ep": 2, "draft_on": "cloud"}, "draft_on"),
    ],
)
def test_bad_layouts_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(MoesimError) as err:
        ParallelLayout(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_heads_refusal_says_gpus_alone_sets_tp() -> None:
    """`--gpus 3` with no --tp asks for TP = 3: the refusal names --tp and says where its 3 came from."""
    with pytest.raises(MoesimError) as err:
        default_layout(3).check_model(_moe(n_experts=64, heads=32))
    assert err.value.field == "tp"
    assert "--gpus alone sets --tp" in str(err.value)


def test_layout_is_checked_against_the_model() -> None:
    with pytest.raises(MoesimError, match="routed experts"):
        default_layout(128).check_model(_moe(n_experts=64, heads=128))
    with pytest.raises(MoesimError, match="attention heads"):
        default_layout(32).check_model(_moe(n_experts=64, heads=16))
    default_layout(16).check_model(_moe())


def test_layout_from_options_defaults() -> None:
    assert layout_from_options(None, None, None) is None
    assert layout_from_options(8, None, None) == default_layout(8)
    assert layout_from_options(8, 2, None) == ParallelLayout(8, 2, 8)
    assert layout_from_options(None, 4, None) == default_layout(4)
    with_options = layout_from_options(4, 4, 4, "round-robin", "replicated", "separate")
    assert with_options is not None and with_options.placement == "round-robin"
    assert with_options.shared_mode == "replicated" and with_options.draft_on == "separate"


def test_candidate_layouts_double() -> None:
    layouts = candidate_layouts(8)
    assert [(layout.gpus, layout.tp) for layout in layouts] == [
        (1, 1), (2, 2), (2, 1), (4, 4), (4, 2), (4, 1), (8, 8), (8, 4), (8, 2), (8, 1),
    ]  # fmt: skip
    assert all(layout.ep == layout.gpus for layout in layouts)


# ----------------------------------------------------------------------------------------- placement


@given(st.integers(1, 512), st.integers(1, 64), st.sampled_from(["contiguous", "round-robin"]))
def test_every_expert_has_exactly_one_rank_and_ranks_are_balanced_in_count(
    n: int, ep: int, placement: str
) -> None:
    owner = expert_to_rank(n, ep, placement)  # type: ignore[arg-type]
    assert owner.shape == (n,)
    assert owner.min() >= 0 and owner.max() < ep
    sizes = np.bincount(owner, minlength=ep)
    assert sizes.sum() == n and sizes.max() - sizes.min() <= 1
    parts = experts_per_rank(n, ep, placement)  # type: ignore[arg-type]
    assert sorted(np.concatenate(parts).tolist()) == list(range(n))


def test_contiguous_and_round_robin_placements() -> None:
    assert expert_to_rank(8, 4, "contiguous").tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert expert_to_rank(8, 4, "round-robin").tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert expert_to_rank(5, 2, "contiguous").tolist() == [0, 0, 0, 1, 1]


# -------------------------------------------------------------------------------------- per-rank work


@pytest.mark.parametrize("routing", [UNIFORM, SKEWED])
@pytest.mark.parametrize("tokens", [1, 4, 32, 512])
def test_ep_over_one_rank_is_the_single_gpu_layer(routing: IndependentRouting, tokens: int) -> None:
    work = rank_experts(routing, 128, 8, 1, tokens, ep=1)
    single = routing.expected_distinct(128, 8, 1, tokens)
    assert float(work.max_distinct) == pytest.approx(float(work.mean_distinct))
    assert float(work.max_distinct) == pytest.approx(single, rel=0.01)
    assert float(work.max_tokens) == pytest.approx(tokens * 8)
    assert work.ranks_per_token == pytest.approx(1.0)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(8, 384),
    k_frac=st.floats(0.01, 0.5),
    ep=st.sampled_from([1, 2, 4, 8, 16]),
    tokens=st.integers(1, 2048),
    alpha=st.sampled_from([0.0, 0.5, 1.2]),
    placement=st.sampled_from(["contiguous", "round-robin"]),
)
def test_expected_max_over_ranks_is_never_below_the_mean(
    n: int, k_frac: float, ep: int, tokens: int, alpha: float, placement: str
) -> None:
    k = max(1, int(n * k_frac))
    ep = min(ep, n)
    work = rank_experts(IndependentRouting(popularity_alpha=alpha), n, k, 1, tokens, ep, placement)  # type: ignore[arg-type]
    assert float(work.max_distinct) >= float(work.mean_distinct) - 1e-9
    assert float(work.max_tokens) >= float(work.mean_tokens) - 1e-9
    assert float(work.max_distinct) <= np.ceil(n / ep) + 1e-9  # a rank cannot read more experts than it holds
    assert float(work.mean_distinct) * ep == pytest.approx(float(work.total_distinct))
    assert 1.0 - 1e-9 <= work.ranks_per_token <= min(k, ep) + 1e-9


def test_uniform_total_matches_the_closed_form() -> None:
    tokens = np.array([1, 2, 3, 4])
    work = rank_experts(UNIFORM, 128, 8, 1, tokens, ep=8)
    assert np.allclose(work.total_distinct, 128 * (1 - (1 - 8 / 128) ** tokens))
    assert np.allclose(work.total_distinct, [8.0, 15.5, 22.5, 29.1], atol=0.05)


def test_a_skewed_placement_is_slower_than_a_balanced_one() -> None:
    """Popular experts packed onto one rank (contiguous under a Zipf skew) make that rank the slowest."""
    tokens = np.array([1, 4, 16, 64])
    packed = rank_experts(SKEWED, 256, 8, 1, tokens, ep=8, placement="contiguous")
    spread = rank_experts(SKEWED, 256, 8, 1, tokens, ep=8, placement="round-robin")
    assert np.allclose(packed.total_distinct, spread.total_distinct)  # same work in total
    assert np.all(packed.max_distinct > spread.max_distinct)
    assert np.all(packed.max_tokens > spread.max_tokens)
    # Under uniform routing the placement cannot matter.
    a = rank_experts(UNIFORM, 256, 8, 1, tokens, ep=8, placement="contiguous")
    b = rank_experts(UNIFORM, 256, 8, 1, tokens, ep=8, placement="round-robin")
    assert np.allclose(a.max_distinct, b.max_distinct)


def test_more_ranks_means_more_imbalance_at_small_batch() -> None:
    imbalance = [float(rank_experts(UNIFORM, 256, 8, 1, 4, ep=ep).imbalance) for ep in (1, 2, 4, 8, 16)]
    assert imbalance[0] == pytest.approx(1.0)
    assert all(b > a for a, b in itertools.pairwise(imbalance))


def test_imbalance_vanishes_when_every_expert_is_hit() -> None:
    work = rank_experts(UNIFORM, 64, 8, 64, 8, ep=8)
    assert float(work.max_distinct) == pytest.approx(8.0, rel=1e-6)
    assert float(work.imbalance) == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("routing", [UNIFORM, SKEWED])
@pytest.mark.parametrize("placement", ["contiguous", "round-robin"])
def test_closed_form_agrees_with_sampled_steps(routing: IndependentRouting, placement: str) -> None:
    n, k, ep, batch, t = 256, 8, 8, 4, 4
    owner = expert_to_rank(n, ep, placement)  # type: ignore[arg-type]
    loads = routing.sample_expert_loads(n, k, batch, t, 3000, np.random.default_rng(7))
    sampled = rank_experts_from_loads(loads, owner, ep, k)
    closed = rank_experts(routing, n, k, batch, t, ep, placement)  # type: ignore[arg-type]
    assert float(closed.total_distinct) == pytest.approx(float(sampled.total_distinct[0]), rel=0.02)
    assert float(closed.max_distinct) == pytest.approx(float(sampled.max_distinct[0]), rel=0.03)
    assert float(closed.max_tokens) == pytest.approx(float(sampled.max_tokens[0]), rel=0.06)
    assert closed.ranks_per_token == pytest.approx(sampled.ranks_per_token, rel=0.03)


def test_vectorised_over_the_batch_grid() -> None:
    batch, tokens = np.meshgrid([1, 2, 8], [1, 4])
    work = rank_experts(UNIFORM, 128, 8, batch, tokens, ep=4)
    assert work.max_distinct.shape == batch.shape
    single = rank_experts(UNIFORM, 128, 8, 8, 4, ep=4)
    assert float(work.max_distinct[1, 2]) == pytest.approx(float(single.max_distinct))
    # Monotone in the number of tokens.
    flat = rank_experts(UNIFORM, 128, 8, 1, np.arange(1, 40), ep=4)
    assert np.all(np.diff(flat.max_distinct) >= -1e-9)


def _same_work(a: RankExperts, b: RankExperts) -> bool:
    fields = ("mean_distinct", "max_distinct", "mean_tokens", "max_tokens", "total_distinct")
    return all(np.allclose(getattr(a, f), getattr(b, f), rtol=1e-12, atol=0) for f in fields) and (
        a.ranks_per_token == pytest.approx(b.ranks_per_token, rel=1e-12)
    )


@pytest.mark.parametrize("routing", [SKEWED, "typical"])
def test_prepared_shapes_give_the_per_shape_figures(routing: object) -> None:
    """A grid worked out at once (what a sweep does first) gives each shape's own figures, to rounding."""
    from moesim.simulator.routing import typical_routing
    from moesim.simulator.routing.per_rank import prepare_rank_experts

    model = typical_routing(64, 4) if routing == "typical" else routing
    shapes = [(b, t) for b in (1, 3, 16, 64) for t in (1, 2, 5)]
    layers = (0, 1, 5) if routing == "typical" else (None,)
    fresh = {
        (b, t, layer): rank_experts(model, 64, 4, b, t, 8, "round-robin", layer)  # type: ignore[arg-type]
        for b, t in shapes
        for layer in layers
    }
    prepare_rank_experts(model, 64, 4, shapes, 8, "round-robin", layers)  # type: ignore[arg-type]
    for (b, t, layer), want in fresh.items():
        got = rank_experts(model, 64, 4, b, t, 8, "round-robin", layer)  # type: ignore[arg-type]
        assert _same_work(got, want), (b, t, layer)
    a_uniform_row = rank_experts(UNIFORM, 64, 4, 1, 1, ep=8)  # binomial rows beside exact ones
    prepare_rank_experts(UNIFORM, 64, 4, [(1, 1), (2, 7)], 8)
    assert _same_work(rank_experts(UNIFORM, 64, 4, 1, 1, ep=8), a_uniform_row)


def test_a_sweep_times_every_multi_gpu_step_from_prepared_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """`step_shapes` names every step a point times: once prepared, the points work nothing out again."""
    from moesim.simulator.routing import per_rank
    from moesim.simulator.scenario import Scenario
    from moesim.simulator.speculative.point import prepare_points, speculative_point

    model = _moe(n_experts=32)
    calls: list[int] = []
    closed_form = per_rank._closed_form
    monkeypatch.setattr(per_rank, "_closed_form", lambda *a: calls.append(1) or closed_form(*a))
    resolved = [
        Scenario(model, "h200", batch=b, layout=ParallelLayout(4, 4, 4), serving_engine="vllm").resolve(
            check_fit=False
        )
        for b in (1, 5, 40)
    ]
    prepare_points(resolved, [1, 3, 6])
    prepared = len(calls)
    assert prepared >= 1
    for r in resolved:
        for k in (1, 3, 6):
            speculative_point(r, FastTimer(r.hardware), k)
    assert len(calls) == prepared


@dataclass(frozen=True)
class _StickyRouting:
    """A routing model without a closed form: each sequence reuses one fixed set of experts."""

    @property
    def description(self) -> str:
        return "sticky"

    def expected_distinct(
        self, n_experts: int, top_k: int, batch: int, tokens_per_seq: int, layer: int | None = None
    ) -> float:
        return float(min(n_experts, top_k * batch))

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
        loads = np.zeros((n_samples, n_experts), dtype=np.int64)
        for s in range(n_samples):
            for _ in range(batch):
                loads[s, rng.choice(n_experts, top_k, replace=False)] += tokens_per_seq
        return loads


def test_other_routing_models_are_sampled() -> None:
    work = rank_experts(_StickyRouting(), 64, 4, 1, 8, ep=4)
    assert float(work.total_distinct) == pytest.approx(4.0)  # T tokens of one sequence reuse 4 experts
    assert float(work.max_tokens) >= float(work.mean_tokens)
    assert float(work.mean_tokens) == pytest.approx(8 * 4 / 4)


def test_ranks_per_token_is_hypergeometric_under_uniform_routing() -> None:
    n, k = 256, 8
    for ep in (1, 2, 8, 32):
        owner = expert_to_rank(n, ep)
        expected = ep * (1 - comb(n - n // ep, k) / comb(n, k))
        assert ranks_per_token(np.full(n, k / n), owner, ep) == pytest.approx(expected)


def test_moe_traffic_scales_with_tokens_and_hidden() -> None:
    layout = default_layout(8)
    tokens = np.array([1.0, 2.0, 4.0])
    work = rank_experts(UNIFORM, 256, 8, 1, tokens.astype(int), ep=8)
    one = moe_traffic(layout, 1024, tokens, work)
    two = moe_traffic(layout, 2048, tokens, work)
    assert np.allclose(two.dispatch_send_bytes, 2 * one.dispatch_send_bytes)
    assert np.allclose(one.dispatch_send_bytes / tokens, one.dispatch_send_bytes[0])
    assert np.all(one.dispatch_recv_bytes >= one.dispatch_send_bytes)
    fp8 = moe_traffic(layout, 1024, tokens, work, dispatch_bytes_per_value=1.0)
    assert np.allclose(fp8.dispatch_send_bytes, one.dispatch_send_bytes / 2)
    none = moe_traffic(ParallelLayout(8, 8, 1), 1024, tokens, work)
    assert np.all(none.dispatch_send_bytes == 0) and np.all(none.combine_recv_bytes == 0)


def test_bad_rank_inputs() -> None:
    with pytest.raises(MoesimError):
        rank_experts(UNIFORM, 64, 4, 0, 1, ep=2)
    with pytest.raises(MoesimError):
        expert_to_rank(64, 0)
    with pytest.raises(MoesimError):
        expert_to_rank(64, 4, "striped")  # type: ignore[arg-type]


@pytest.mark.slow  # builds the correlated model's sequence bank (tens of seconds on a loaded machine)
@pytest.mark.parametrize("placement", ["contiguous", "round-robin"])
def test_correlated_routing_closed_form_agrees_with_its_samples(placement: str) -> None:
    from moesim.simulator.routing import typical_routing

    routing = typical_routing(256, 8)
    owner = expert_to_rank(256, 8, placement)  # type: ignore[arg-type]
    for batch, t in ((1, 4), (8, 4)):
        loads = routing.sample_expert_loads(256, 8, batch, t, 2000, np.random.default_rng(3))
        sampled = rank_experts_from_loads(loads, owner, 8, 8)
        closed = rank_experts(routing, 256, 8, batch, t, 8, placement)  # type: ignore[arg-type]
        assert float(closed.total_distinct) == pytest.approx(float(sampled.total_distinct[0]), rel=0.02)
        assert float(closed.max_distinct) == pytest.approx(float(sampled.max_distinct[0]), rel=0.04)
        assert float(closed.max_distinct) >= float(closed.mean_distinct)


# ------------------------------------------------------------------------------ the slowest rank's plan


@pytest.fixture(scope="module")
def h200():  # type: ignore[no-untyped-def]
    from moesim.simulator.hardware.profile import load_profile

    return load_profile("h200")


@pytest.fixture(scope="module")
def deepseek():  # type: ignore[no-untyped-def]
    from moesim.simulator.models.catalogue import load_model

    return load_model("deepseek-v3")


def test_one_gpu_layout_is_exactly_the_single_gpu_plan(h200, deepseek) -> None:  # type: ignore[no-untyped-def]
    from moesim.simulator.execution.fastpath import fast_step
    from moesim.simulator.plan.parallel import build_parallel_plan
    from moesim.simulator.plan.styles import build_plan

    for batch, t in ((1, 1), (4, 4)):
        step = build_parallel_plan(deepseek, batch, t, default_layout(1), h200, 2048)
        single = build_plan(deepseek, batch, t, 2048, "fused", None, h200)
        assert step.plan.kernels == single.kernels
        assert time_parallel(FastTimer(h200), step, "graph").step_s == fast_step(single, h200).step_s
        assert parallel_step_summary(step, h200.node)["communication_per_step_s"] == 0.0


def test_ep_over_one_rank_equals_the_single_gpu_step(h200, deepseek) -> None:  # type: ignore[no-untyped-def]
    """A layout with one expert-parallel rank and no tensor parallelism has no collectives and the same work."""
    from moesim.simulator.execution.fastpath import fast_step
    from moesim.simulator.plan.parallel import build_parallel_plan, rank_model
    from moesim.simulator.plan.styles import build_plan

    layout = ParallelLayout(1, 1, 1)
    assert rank_model(deepseek, layout) == deepseek
    step = build_parallel_plan(deepseek, 2, 4, layout, h200, 2048)
    assert time_parallel(FastTimer(h200), step, "graph").step_s == pytest.approx(
        fast_step(build_plan(deepseek, 2, 4, 2048, "fused", None, h200), h200).step_s
    )


def test_engine_and_fast_path_agree_on_parallel_plans(h200, deepseek) -> None:  # type: ignore[no-untyped-def]
    from moesim.simulator.plan.parallel import build_parallel_plan

    for layout in (default_layout(8), ParallelLayout(8, 8, 1), ParallelLayout(8, 2, 8)):
        for batch, t in ((1, 4), (16, 4)):
            step = build_parallel_plan(deepseek, batch, t, layout, h200, 2048)
            fast = time_parallel(FastTimer(h200), step, "graph").step_s
            events = time_parallel(EventTimer(h200), step, "graph").step_s
            assert fast == pytest.approx(events, rel=0.02)


def test_collectives_are_their_own_kernels_in_the_timeline(h200, deepseek) -> None:  # type: ignore[no-untyped-def]
    from moesim.simulator.plan.parallel import build_parallel_plan

    step = build_parallel_plan(deepseek, 1, 4, default_layout(8), h200, 2048)
    result = time_parallel(EventTimer(h200), step, "graph")
    names = [name for name, *_ in result.timeline]
    comm = [k for k in step.plan.kernels if k.category == "communication"]
    n_moe, n_layers = deepseek.n_moe_layers, deepseek.n_layers
    assert sum(n.endswith("comm.dispatch") for n in names) == n_moe
    assert sum(n.endswith("comm.combine") for n in names) == n_moe
    assert sum(n.endswith("comm.attn_all_reduce") for n in names) == n_layers
    assert all(k.stream != 0 for k in comm)
    assert result.breakdown_s["communication"] > 0
    # Each collective lasts exactly its α–β time in the event timer's timeline.
    for name, _, start, end in result.timeline:
        if ".comm." in name or name.startswith("comm."):
            assert end - start == pytest.approx(
                step_collective_times_s(step, h200.node)[name.rsplit("comm.", 1)[-1]], rel=1e-9
            )


def test_slowest_rank_sets_the_step_and_a_skewed_placement_is_slower(h200, deepseek) -> None:  # type: ignore[no-untyped-def]
    from moesim.simulator.plan.parallel import build_parallel_plan

    skew = IndependentRouting(popularity_alpha=1.0)
    packed = build_parallel_plan(
        deepseek, 4, 4, ParallelLayout(8, 8, 8, "contiguous"), h200, 2048, routing=skew
    )
    spread = build_parallel_plan(
        deepseek, 4, 4, ParallelLayout(8, 8, 8, "round-robin"), h200, 2048, routing=skew
    )
    assert (
        time_parallel(FastTimer(h200), packed, "graph").step_s
        > time_parallel(FastTimer(h200), spread, "graph").step_s
    )
    assert (
        step_collective_times_s(packed, h200.node)["dispatch"]
        > step_collective_times_s(spread, h200.node)["dispatch"]
    )  # the hot rank also receives more
    summary = parallel_step_summary(packed, h200.node)
    assert summary["max_distinct_experts_per_rank"] > summary["mean_distinct_experts_per_rank"]  # type: ignore[operator]


def test_collective_times_grow_with_tokens(h200, deepseek) -> None:  # type: ignore[no-untyped-def]
    from moesim.simulator.plan.parallel import build_parallel_plan

    small = step_collective_times_s(
        build_parallel_plan(deepseek, 1, 1, default_layout(8), h200, 2048), h200.node
    )
    large = step_collective_times_s(
        build_parallel_plan(deepseek, 64, 4, default_layout(8), h200, 2048), h200.node
    )
    assert set(small) == set(large)
    assert all(large[name] > small[name] for name in small)


def test_rank_model_divides_tensor_parallel_dimensions(deepseek) -> None:  # type: ignore[no-untyped-def]
    from moesim.simulator.plan.parallel import rank_model

    rank = rank_model(deepseek, ParallelLayout(8, 8, 8))
    assert rank.attention.num_heads == deepseek.attention.num_heads // 8
    assert rank.vocab == -(-deepseek.vocab // 8)
    assert rank.expert_width == deepseek.expert_width  # whole experts under EP
    assert rank.shared_expert_width == deepseek.shared_expert_width // 8  # split by default
    assert rank_model(deepseek, ParallelLayout(8, 8, 1)).expert_width == deepseek.expert_width // 8


def test_per_token_engine_is_single_gpu_only(h200, deepseek) -> None:  # type: ignore[no-untyped-def]
    from moesim.simulator.plan.parallel import build_parallel_plan

    with pytest.raises(MoesimError, match="fused"):
        build_parallel_plan(deepseek, 1, 1, default_layout(8), h200, 2048, kernel_style="per-token")

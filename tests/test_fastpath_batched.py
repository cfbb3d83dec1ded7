"""The fast path over (design × batch × K) arrays: the simpy engine stays the reference.

Seeded designs of every model family in the catalogue (a few layers each, so the engine runs quickly) are
timed three ways: by the simpy engine, by `fast_step` one plan at a time, and by `fast_steps` with all of a
design's steps in one numpy pass. The batched path must give exactly the one-plan figures (same
floating-point operations row by row: the sweep and screen figures cannot move), and match the engine to
1e-9 where every kernel runs on one stream. With shared experts on a side stream the fast path folds each
fork–join region in closed form (max of the branches and of their shared memory time) where the engine
shares bandwidth kernel by kernel, "within a few percent" (execution/fastpath.py): these small designs,
where a shared expert beside few routed ones is a large share of the step, come within 3.6 %; the test
allows 5 %.
"""

from __future__ import annotations

import numpy as np
import pytest

from moesim.simulator.execution.events import run_events
from moesim.simulator.execution.fastpath import StepRequest, fast_step, fast_steps
from moesim.simulator.execution.timer import FastTimer, StepCall
from moesim.simulator.models.catalogue import list_models, load_model
from moesim.simulator.models.overrides import apply_overrides
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.scenario import Scenario, resolve_routing
from moesim.simulator.speculative.point import point_step_keys, time_step, time_steps
from tests.core_fixtures import h200

SIDE_STREAM_REL = 0.05
SHAPES = [(1, 1), (1, 4), (4, 3), (16, 5), (64, 2)]  # (batch, tokens per sequence): decode and verify


def _one_model_per_family() -> list[str]:
    families: dict[str, str] = {}
    for name in list_models():
        families.setdefault(load_model(name).family, name)
    return sorted(families.values())


def _seeded_design(name: str, seed: int) -> object:
    """A small variant of catalogue model `name`: 2–4 layers, and for MoE models a drawn top-k and shared
    expert count."""
    rng = np.random.default_rng(seed)
    spec = load_model(name)
    overrides: dict[str, object] = {"layers": int(rng.integers(2, 5))}
    if spec.is_moe:
        overrides["top_k"] = int(rng.integers(1, min(spec.n_experts, 8) + 1))
        overrides["n_shared_experts"] = int(rng.integers(0, 2))
    return apply_overrides(spec, overrides)


@pytest.mark.parametrize("name", _one_model_per_family())
def test_batched_fast_path_is_the_one_plan_fast_path_and_matches_the_engine(name: str) -> None:
    hw = h200()
    for seed in range(2):
        spec = _seeded_design(name, seed)
        routing = resolve_routing(spec, None, None, None)  # typical routing, as screens use
        plans = [build_plan(spec, b, t, 1024, "fused", routing, hw) for b, t in SHAPES]
        for launch in ("graph", "eager"):
            batched = fast_steps([StepRequest(plan, launch) for plan in plans], hw)
            for plan, step in zip(plans, batched, strict=True):
                assert step == fast_step(plan, hw, launch)  # bit for bit, breakdown included
                engine = run_events(plan, hw, launch)
                single_stream = all(k.stream == 0 for s in plan.segments for k in s.kernels)
                assert step.step_s == pytest.approx(
                    engine.step_s, rel=1e-9 if single_stream else SIDE_STREAM_REL
                )
                assert step.hbm_bytes == pytest.approx(engine.hbm_bytes, rel=1e-9)
                assert step.cache_bytes == pytest.approx(engine.cache_bytes, rel=1e-9)


def test_a_multi_gpu_models_steps_timed_together_equal_each_timed_alone() -> None:
    """Expert-parallel steps (collectives timed on the links) through `time_steps`, as a sweep times them."""
    resolved = Scenario("deepseek-v3", "h200", batch=4).resolve()
    assert resolved.layout.gpus > 1
    timer = FastTimer(resolved.hardware)
    keys = point_step_keys(resolved.serving_engine, 4, [1, 2, 3], resolved.launch)
    together = time_steps(resolved, timer, keys)
    for rows, tokens, launch in keys:
        alone = time_step(resolved, timer, tokens, rows=rows, launch=launch)
        assert together[rows, tokens, launch].timing == alone.timing


def test_timer_steps_keeps_the_order_of_the_calls() -> None:
    hw = h200()
    spec = load_model("qwen3-30b-a3b")
    plans = [build_plan(spec, b, t, 2048, "fused", None, hw) for b, t in [(64, 2), (1, 1), (8, 4), (1, 1)]]
    timed = FastTimer(hw).steps([StepCall(plan, "graph") for plan in plans])
    assert [t.step_s for t in timed] == [fast_step(plan, hw).step_s for plan in plans]

"""A sweep (and a screen's chunk) costs its designs' steps together: one `fast_steps` pass over every model's
plans, drafter passes shared by designs whose drafter models differ only in name, distinct experts remembered
per routing model. Each figure must be exactly what the design gets swept alone (the screen's tables cannot
move), and the fast path still matches the simpy engine on a seeded sample of designs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from moesim.simulator.execution.events import run_events
from moesim.simulator.execution.fastpath import StepRequest, fast_step, fast_steps
from moesim.simulator.execution.timer import FastTimer
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.overrides import apply_overrides
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.routing.presets import typical_routing
from moesim.simulator.scenario import Scenario, resolve_routing
from moesim.simulator.speculative.drafters import DraftPassMemo, EagleHead, draft_pass_s
from moesim.simulator.speculative.sweep import run_sweep
from tests.core_fixtures import h200

SIDE_STREAM_REL = 0.05  # as tests/test_fastpath_batched.py: the fork–join closed form vs bandwidth sharing


def _designs(seed: int, count: int) -> list[ModelSpec]:
    """Seeded small variants of qwen3-30b-a3b of one layer count (so several share a plan structure)."""
    rng = np.random.default_rng(seed)
    base = load_model("qwen3-30b-a3b")
    out = []
    for index in range(count):
        overrides = {
            "layers": 3,
            "n_experts": int(rng.choice([32, 64, 128])),
            "top_k": int(rng.choice([2, 4, 8])),
            "n_shared_experts": int(rng.integers(0, 2)),
            "num_kv_heads": int(rng.choice([2, 4])),
            "weight_format": str(rng.choice(["bf16", "fp8"])),
        }
        spec = apply_overrides(base, overrides)
        out.append(dataclasses.replace(spec, name=f"{base.name}~design{index}"))
    return out


@pytest.mark.parametrize("layout", [None, ParallelLayout(gpus=4, tp=1, ep=4)])
def test_designs_swept_together_equal_each_swept_alone(layout: ParallelLayout | None) -> None:
    designs = _designs(0, 6)
    base = Scenario(designs[0], "h200", layout=layout)
    together = run_sweep(base, designs, [1, 16], [1, 3])
    alone = [row for design in designs for row in run_sweep(base, [design], [1, 16], [1, 3]).rows]
    assert together.rows == alone  # bit for bit
    assert together.skipped == []


def test_plans_of_several_designs_costed_together_equal_each_alone_and_match_the_engine() -> None:
    hw = h200()
    plans = []
    for spec in _designs(1, 5):
        routing = resolve_routing(spec, None, None, None)
        plans += [build_plan(spec, b, t, 1024, "fused", routing, hw) for b, t in [(1, 1), (4, 3), (16, 5)]]
    batched = fast_steps([StepRequest(plan, "graph") for plan in plans], hw)
    for plan, step in zip(plans, batched, strict=True):
        assert step == fast_step(plan, hw, "graph")
        engine = run_events(plan, hw, "graph")
        single_stream = all(k.stream == 0 for s in plan.segments for k in s.kernels)
        rel = 1e-9 if single_stream else SIDE_STREAM_REL
        assert step.step_s == pytest.approx(engine.step_s, rel=rel)


def test_the_draft_pass_memo_gives_each_pass_and_shares_equal_heads() -> None:
    hw = h200()
    timer = FastTimer(hw)
    memo = DraftPassMemo()
    drafter = EagleHead()
    designs = _designs(2, 4)
    layouts = [ParallelLayout(), ParallelLayout(gpus=2, tp=2, ep=2)]
    for spec in designs:
        routing = resolve_routing(spec, None, None, None)
        for layout in layouts:
            for rows, tokens in [(1, 1), (8, 4)]:
                args = (drafter, spec, layout, rows, 2048, "fused", routing, timer, "graph")
                shared = draft_pass_s(*args, tokens_per_seq=tokens, memo=memo)
                assert shared == draft_pass_s(*args, tokens_per_seq=tokens)
    heads = {(spec.attention, spec.weight_format) for spec in designs}  # what an EAGLE head copies here
    assert len(memo.seconds) <= len(heads) * len(layouts) * 2


def test_remembered_distinct_experts_are_the_fresh_ones() -> None:
    remembered = typical_routing(64, 4, 1, 1)
    for batch, tokens in [(1, 1), (4, 3), (4, 3), (16, 5)]:
        first = remembered.expected_distinct(64, 4, batch, tokens)
        fresh = dataclasses.replace(remembered).expected_distinct(64, 4, batch, tokens)
        assert remembered.expected_distinct(64, 4, batch, tokens) == first == fresh


def test_designs_timed_in_several_batches_equal_each_swept_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep times its planned steps whenever `PLANS_TIMED_TOGETHER` are held (here: every few designs)."""
    from moesim.simulator.speculative import sweep

    monkeypatch.setattr(sweep, "PLANS_TIMED_TOGETHER", 5)
    designs = _designs(3, 5)
    base = Scenario(designs[0], "h200")
    together = run_sweep(base, designs, [1, 4], [1, 2])
    alone = [row for design in designs for row in run_sweep(base, [design], [1, 4], [1, 2]).rows]
    assert together.rows == alone

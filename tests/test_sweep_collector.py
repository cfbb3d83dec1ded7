"""Sweeps and screen chunks run with the cyclic garbage collector paused (`sweep.collector_paused`): it is
paused inside, restored after (also after an error), and left alone when the caller had paused it."""

from __future__ import annotations

import gc

import pytest

from moesim.simulator.execution.fastpath import FastStep
from moesim.simulator.execution.timer import FastTimer, StepCall
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.scenario import Scenario
from moesim.simulator.speculative.sweep import collector_paused, run_sweep
from tests.core_fixtures import h200


@collector_paused
def _collector_state() -> bool:
    return gc.isenabled()


@collector_paused
def _fails() -> None:
    assert not gc.isenabled()
    raise RuntimeError("inside")


def test_the_collector_is_paused_inside_and_restored_after() -> None:
    assert gc.isenabled()
    assert _collector_state() is False
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="inside"):
        _fails()
    assert gc.isenabled()


def test_a_collector_the_caller_paused_stays_paused() -> None:
    gc.disable()
    try:
        assert _collector_state() is False
        assert not gc.isenabled()
    finally:
        gc.enable()


class _WatchingTimer(FastTimer):
    """The fast path, noting whether the collector ran while it timed steps."""

    collector_seen: set[bool]

    def steps(self, calls: list[StepCall]) -> list[FastStep]:  # type: ignore[override]
        self.collector_seen.add(gc.isenabled())
        return super().steps(calls)


def test_a_sweep_times_its_steps_with_the_collector_paused() -> None:
    timer = _WatchingTimer(h200())
    timer.collector_seen = set()
    model = load_model("qwen3-30b-a3b")
    run_sweep(Scenario(model, "h200"), [model], [1, 4], [1, 2], timer=timer)
    assert timer.collector_seen == {False}
    assert gc.isenabled()

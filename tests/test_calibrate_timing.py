"""The timer's clock choice and the device-busy lead, on the CPU (the GPU path needs a GPU)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moesim.calibrate import timing


def test_single_thread_cpu_uses_the_thread_clock() -> None:
    assert timing.cpu_clock_ns(1) is time.thread_time_ns
    assert timing.cpu_clock_ns(2) is time.perf_counter_ns


@given(issue_s=st.floats(0.0, 10.0))
def test_lead_covers_the_host_issue_time_within_bounds(issue_s: float) -> None:
    lead = timing.lead_seconds(issue_s)
    assert timing.MIN_LEAD_S <= lead <= timing.MAX_LEAD_S
    if timing.LEAD_FACTOR * issue_s <= timing.MAX_LEAD_S:
        assert lead > issue_s or lead == timing.MIN_LEAD_S  # still busy when the host finishes issuing


def test_cpu_timer_times_work_and_busy_ahead_is_a_no_op() -> None:
    pytest.importorskip("torch")
    device = timing.resolve_device("cpu", threads=1)
    timer = timing.Timer(device, flush_bytes=1 << 20)
    assert timer.clock_name == "thread CPU time"
    timer.busy_ahead(1.0)  # the CPU stand-in: returns at once, nothing queued
    calls: list[int] = []
    seconds = timer.time_once(lambda: calls.append(1), inner=5, before=lambda: calls.append(0))
    assert calls == [0, 1, 1, 1, 1, 1]  # `before` once, untimed, then the batch
    assert seconds >= 0.0
    assert timer.lead_failures == 0

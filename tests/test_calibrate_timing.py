"""The timer's clock choice and the device-busy lead, on the CPU (the GPU path needs a GPU)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moesim.calibrate.suites import timing


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


class _FakeEvent:
    def __init__(self, cuda: _FakeCuda) -> None:
        self.cuda = cuda

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return self.cuda.reached  # True: the device already got here (the host was not ahead)

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: _FakeEvent) -> float:
        return 1.0  # ms


class _FakeCuda:
    def __init__(self, reached: bool) -> None:
        self.reached = reached
        self.spins: list[int] = []

    def Event(self, enable_timing: bool = True) -> _FakeEvent:
        return _FakeEvent(self)

    def _sleep(self, cycles: int) -> None:
        self.spins.append(cycles)

    def synchronize(self) -> None:
        pass


def _fake_gpu_timer(reached: bool) -> tuple[timing.Timer, _FakeCuda]:
    pytest.importorskip("torch")
    device = timing.DeviceInfo("cuda", "cuda", "Fake GPU", "cuda", 50e6, 0.0, 80e9, 100, 1)
    timer = timing.Timer(device)
    cuda = _FakeCuda(reached)
    timer.torch = type("FakeTorch", (), {"cuda": cuda})()
    timer._cycles_per_s = 1e9
    return timer, cuda


@pytest.mark.parametrize("reached", [False, True])
def test_gpu_batch_costs_one_spin_and_at_most_one_retry(reached: bool) -> None:
    """A covered batch is timed once; a blocked one (a host sync inside) is retried once, then given up."""
    timer, cuda = _fake_gpu_timer(reached)
    calls: list[int] = []
    for _ in range(5):
        assert timer.time_once(lambda: calls.append(1), inner=10) == pytest.approx(1e-4)
    attempts = 1 + (timing.LEAD_RETRIES if reached else 0)
    assert len(cuda.spins) == 5 * attempts and len(calls) == 5 * 10 * attempts
    assert max(cuda.spins) <= timing.MAX_LEAD_S * 1e9
    assert timer.lead_failures == (5 if reached else 0)
    if reached:  # a blocked batch leaves no long spin behind for the next one
        assert timer._lead_s == timing.MIN_LEAD_S

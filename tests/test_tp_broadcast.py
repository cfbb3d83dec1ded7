"""The scheduler's broadcast to its tensor-parallel ranks (`[host] tp_broadcast_us`): every SGLang scheduler
iteration at TP > 1 broadcasts the new requests from rank 0 over a gloo CPU group (0.5.2
`Scheduler.recv_requests`, 0.5.23 `RequestReceiver.recv_requests`); a TP-1 layout does not pay it, the
overlap scheduler hides most of it behind a decode step and spec v1's synchronous SD round waits for it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moesim.errors import MoesimError
from moesim.simulator.engines import overheads as ov
from moesim.simulator.engines.profile import load_serving_engine, profile_from_dict, profile_to_dict
from moesim.simulator.execution.timer import FastTimer
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.scenario import Scenario
from moesim.simulator.speculative.point import speculative_point
from tests.core_fixtures import h200, model


def test_both_sglang_presets_carry_it_and_the_others_do_not() -> None:
    for name in ("sglang", "sglang-spec-v1"):
        assert load_serving_engine(name).effective_host.tp_broadcast_us == 50.0
    for name in ("ideal", "vllm", "vllm-v0", "trtllm"):
        assert load_serving_engine(name).effective_host.tp_broadcast_us == 0.0


def test_only_a_tensor_parallel_group_pays_it_once_per_step() -> None:
    profile = load_serving_engine("sglang-spec-v1")
    alone = ov.host_time_s(profile, 8, 8)
    assert ov.host_time_s(profile, 8, 8, tp=1) == alone
    for tp in (2, 4, 8):
        assert ov.host_time_s(profile, 8, 8, tp=tp) - alone == pytest.approx(50e-6)


def _point(engine: str, tp: int, broadcast_us: float):  # type: ignore[no-untyped-def]
    profile = load_serving_engine(engine)
    profile = replace(profile, host=replace(profile.host, tp_broadcast_us=broadcast_us))
    scenario = Scenario(
        model=model("qwen3-30b-a3b"),
        hardware=h200(),
        routing="independent",
        launch="graph",
        batch=1,
        layout=ParallelLayout(gpus=tp, tp=tp, ep=1),
        serving_engine=profile,
    )
    return speculative_point(scenario.resolve(check_fit=False), FastTimer(h200()))


def test_a_synchronous_round_waits_for_it_an_overlapped_step_hides_most() -> None:
    """At TP 4 spec v1's round pays all 50 µs (its overlap is off under SD) while its decode step, with the
    overlap scheduler on, pays the 20% that overlap_fraction 0.8 leaves; spec v2 keeps the overlap in the
    round too; at TP 1 nothing moves."""
    v1, v1_bare = _point("sglang-spec-v1", 4, 50.0), _point("sglang-spec-v1", 4, 0.0)
    assert v1.verify.engine_host_s - v1_bare.verify.engine_host_s == pytest.approx(50e-6)
    assert v1.decode.engine_host_s - v1_bare.decode.engine_host_s == pytest.approx(0.2 * 50e-6)
    assert v1.speedup < v1_bare.speedup
    v2, v2_bare = _point("sglang", 4, 50.0), _point("sglang", 4, 0.0)
    assert v2.verify.engine_host_s - v2_bare.verify.engine_host_s == pytest.approx(0.2 * 50e-6)
    one, one_bare = _point("sglang-spec-v1", 1, 50.0), _point("sglang-spec-v1", 1, 0.0)
    assert one.round_s == one_bare.round_s and one.decode.step_s == one_bare.decode.step_s


def test_it_is_read_bounded() -> None:
    data = profile_to_dict(load_serving_engine("sglang"))
    assert profile_from_dict(data, "x.toml") == load_serving_engine("sglang")
    data["host"]["tp_broadcast_us"] = -1.0
    with pytest.raises(MoesimError, match=r"host\.tp_broadcast_us"):
        profile_from_dict(data, "x.toml")

"""Collective times follow their α–β formulas: latency rounds plus bytes over the link."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.execution.collectives import (
    ACHIEVED_LINK_FRACTION,
    Link,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    collective_time_s,
    expert_all_to_all_s,
    messages_s,
    node_link,
    reduce_scatter_s,
)
from moesim.simulator.hardware.sections import AllToAllTerms, NodeSpec
from moesim.simulator.plan.kernels import Collective

LINK = Link(bandwidth_gbps=400.0, latency_us=2.0)
ranks_st = st.integers(min_value=2, max_value=64)
bytes_st = st.floats(min_value=0.0, max_value=1e10, allow_nan=False)


def test_one_rank_costs_nothing() -> None:
    sizes = np.array([0.0, 1e3, 1e9])
    for time in (all_reduce_s(sizes, 1, LINK), all_gather_s(sizes, 1, LINK), all_to_all_s(sizes, 1, LINK)):
        assert np.all(time == 0.0)


@given(ranks_st, bytes_st)
def test_ring_all_reduce_matches_closed_form(n: int, size: float) -> None:
    expected = 2 * (n - 1) * 2e-6 + 2 * (n - 1) / n * size / 400e9
    assert float(all_reduce_s(size, n, LINK, "ring")) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@given(ranks_st, bytes_st)
def test_one_and_two_shot_match_closed_forms(n: int, size: float) -> None:
    assert float(all_reduce_s(size, n, LINK, "one_shot")) == pytest.approx(2e-6 + (n - 1) * size / 400e9)
    assert float(all_reduce_s(size, n, LINK, "two_shot")) == pytest.approx(
        4e-6 + 2 * (n - 1) / n * size / 400e9
    )


@given(ranks_st, bytes_st)
def test_auto_is_the_fastest_algorithm(n: int, size: float) -> None:
    each = [float(all_reduce_s(size, n, LINK, a)) for a in ("ring", "one_shot", "two_shot")]
    assert float(all_reduce_s(size, n, LINK)) == pytest.approx(min(each))


def test_small_messages_pick_one_shot_large_ones_bandwidth_optimal() -> None:
    small, large = 16e3, 1e9
    assert float(all_reduce_s(small, 8, LINK)) == pytest.approx(
        float(all_reduce_s(small, 8, LINK, "one_shot"))
    )
    assert float(all_reduce_s(large, 8, LINK)) == pytest.approx(
        float(all_reduce_s(large, 8, LINK, "two_shot"))
    )


@given(ranks_st, st.floats(min_value=1e3, max_value=1e9))
def test_bandwidth_term_is_linear_in_bytes(n: int, size: float) -> None:
    """Doubling the message adds exactly the bandwidth term once more (latency is paid once)."""
    for fn in (
        lambda s: all_reduce_s(s, n, LINK, "ring"),
        lambda s: all_gather_s(s, n, LINK, "ring"),
        lambda s: all_to_all_s(s, n, LINK),
    ):
        t0, t1, t2 = (float(fn(s)) for s in (0.0, size, 2 * size))
        assert t2 - t1 == pytest.approx(t1 - t0, rel=1e-9)
        assert t1 > t0


def test_latency_term_grows_with_ranks_as_the_formulas_say() -> None:
    zero = 0.0
    ring = [float(all_reduce_s(zero, n, LINK, "ring")) for n in (2, 4, 8)]
    assert ring == pytest.approx([2 * (n - 1) * 2e-6 for n in (2, 4, 8)])
    gather = [float(all_gather_s(zero, n, LINK, "ring")) for n in (2, 4, 8)]
    assert gather == pytest.approx([(n - 1) * 2e-6 for n in (2, 4, 8)])
    # A direct all-to-all pays one latency however many peers.
    assert {float(all_to_all_s(zero, n, LINK)) for n in (2, 4, 8)} == {2e-6}


def test_ring_bandwidth_term_approaches_twice_the_message() -> None:
    """Ring all-reduce moves 2(n−1)/n of the message per rank: 1× at n=2, → 2× for many ranks."""
    no_latency = Link(400.0, 0.0)
    size = 1e9
    unit = size / no_latency.bytes_per_s
    assert float(all_reduce_s(size, 2, no_latency, "ring")) == pytest.approx(unit)
    assert float(all_reduce_s(size, 64, no_latency, "ring")) == pytest.approx(2 * 63 / 64 * unit)


def test_reduce_scatter_moves_what_all_gather_moves() -> None:
    assert float(reduce_scatter_s(1e8, 8, LINK)) == float(all_gather_s(1e8, 8, LINK))


def test_all_to_all_takes_the_slower_direction() -> None:
    assert float(all_to_all_s(1e6, 8, LINK, recv_bytes=3e6)) == pytest.approx(2e-6 + 3e6 / 400e9)
    assert float(all_to_all_s(3e6, 8, LINK, recv_bytes=1e6)) == pytest.approx(2e-6 + 3e6 / 400e9)


def test_vectorised_over_message_sizes() -> None:
    sizes = np.array([1e3, 1e6, 1e9])
    vector = all_reduce_s(sizes, 8, LINK)
    assert vector.shape == (3,)
    assert np.allclose(vector, [float(all_reduce_s(s, 8, LINK)) for s in sizes])
    assert np.all(np.diff(vector) > 0)


def test_node_link_uses_scale_up_inside_a_node_and_scale_out_beyond() -> None:
    node = NodeSpec(
        8,
        scale_up_bandwidth_gbps=450,
        scale_up_latency_us=3,
        scale_out_bandwidth_gbps=50,
        scale_out_latency_us=10,
    )
    inside, across = node_link(node, 8), node_link(node, 16)
    assert inside.bandwidth_gbps == pytest.approx(450 * ACHIEVED_LINK_FRACTION)
    assert inside.latency_us == 3
    assert across.bandwidth_gbps == pytest.approx(50 * ACHIEVED_LINK_FRACTION)
    assert across.latency_us == 10
    assert float(all_reduce_s(1e8, 16, across)) > float(all_reduce_s(1e8, 16, inside))


def test_missing_link_bandwidth_is_a_clear_error() -> None:
    with pytest.raises(MoesimError, match="scale_up_bandwidth_gbps"):
        node_link(NodeSpec(8, 0.0, 0.0, 0.0, 0.0), 8)
    node_link(NodeSpec(8, 0.0, 0.0, 0.0, 0.0), 1)  # one GPU never communicates


@pytest.mark.parametrize(
    "call",
    [
        lambda: Link(0.0, 1.0),
        lambda: Link(100.0, -1.0),
        lambda: all_reduce_s(-1.0, 8, LINK),
        lambda: all_reduce_s(1.0, 0, LINK),
        lambda: all_reduce_s(1.0, 8, LINK, "tree"),  # type: ignore[arg-type]
        lambda: all_gather_s(1.0, 8, LINK, "tree"),  # type: ignore[arg-type]
    ],
)
def test_bad_inputs_raise_moesim_error(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MoesimError):
        call()


def test_point_to_point_messages_cost_one_latency_each_and_the_bytes_once() -> None:
    node = NodeSpec(gpus_per_node=8, scale_up_bandwidth_gbps=450.0, scale_up_latency_us=3.0,
                    scale_out_bandwidth_gbps=50.0, scale_out_latency_us=6.0)  # fmt: skip
    inside = node_link(node, 8)
    assert messages_s(1e6, node, 8, messages=2) == pytest.approx(2 * 3e-6 + 1e6 / inside.bytes_per_s)
    assert messages_s(1e6, node, 9) == pytest.approx(6e-6 + 1e6 / node_link(node, 9).bytes_per_s)  # scale-out


NODE = NodeSpec(8, scale_up_bandwidth_gbps=450.0, scale_up_latency_us=3.0,
                scale_out_bandwidth_gbps=50.0, scale_out_latency_us=6.0)  # fmt: skip
TERMS = AllToAllTerms(dispatch_fixed_us=10.0, dispatch_bandwidth_gbps=160.0,
                      combine_fixed_us=12.0, combine_bandwidth_gbps=150.0)  # fmt: skip
FITTED = replace(NODE, all_to_all=(("low_latency", TERMS),))


def test_expert_all_to_all_is_its_phase_fixed_time_plus_the_busiest_direction_at_its_rate() -> None:
    assert float(expert_all_to_all_s(1e6, 8, NODE, TERMS, "dispatch")) == pytest.approx(10e-6 + 1e6 / 160e9)
    assert float(expert_all_to_all_s(1e6, 8, NODE, TERMS, "combine", 3e6)) == pytest.approx(
        12e-6 + 3e6 / 150e9
    )
    assert float(expert_all_to_all_s(1e6, 1, NODE, TERMS, "dispatch")) == 0.0  # one rank sends nothing
    # across nodes (16 ranks, 8 per node): 7/15 of the bytes at the term's rate, 8/15 over the achieved
    # scale-out link (50 GB/s x 0.8) plus its latency, the slower of the two
    off_node = 1e6 * 8 / 15 / (50e9 * ACHIEVED_LINK_FRACTION)
    assert off_node > 1e6 * 7 / 15 / 160e9
    assert float(expert_all_to_all_s(1e6, 16, NODE, TERMS, "dispatch")) == pytest.approx(
        10e-6 + 6e-6 + off_node
    )


@given(st.floats(min_value=0.0, max_value=1e9), st.floats(min_value=0.0, max_value=1e9))
def test_expert_all_to_all_never_falls_as_bytes_grow(a: float, b: float) -> None:
    small, large = sorted((a, b))
    for phase in ("dispatch", "combine"):
        assert expert_all_to_all_s(small, 8, NODE, TERMS, phase) <= expert_all_to_all_s(
            large, 8, NODE, TERMS, phase
        )


def test_the_terms_price_dispatch_and_combine_of_their_mode_only() -> None:
    dispatch = Collective("all_to_all", 8, 1e6, 2e6, phase="dispatch")
    assert collective_time_s(dispatch, FITTED) == pytest.approx(10e-6 + 2e6 / 160e9)
    # a mode the profile has no terms for, an all-to-all without a phase, or a node without terms: the link
    plain = float(all_to_all_s(1e6, 8, node_link(NODE, 8), 2e6))
    assert collective_time_s(dispatch, FITTED, "normal") == pytest.approx(plain)
    assert collective_time_s(replace(dispatch, phase=""), FITTED) == pytest.approx(plain)
    assert collective_time_s(dispatch, NODE) == pytest.approx(plain)
    # all-reduces never use them
    reduce = Collective("all_reduce", 8, 1e6)
    assert collective_time_s(reduce, FITTED) == collective_time_s(reduce, NODE)


def test_a_collectives_time_is_remembered_per_collective_node_and_mode() -> None:
    """`collective_time_s` prices each (collective, node, mode) once; a repeat is the same float, and
    another node or mode is priced on its own."""
    from moesim.simulator.execution.collectives import _priced_collective_s

    dispatch = Collective("all_to_all", 8, 2e6, 1e6, "dispatch")
    for node, mode in ((FITTED, "low_latency"), (FITTED, "normal"), (NODE, "low_latency")):
        first = collective_time_s(dispatch, node, mode)  # type: ignore[arg-type]
        assert first == _priced_collective_s(dispatch, node, mode)  # type: ignore[arg-type]
        assert collective_time_s(dispatch, node, mode) == first  # type: ignore[arg-type]
    assert collective_time_s(dispatch, FITTED) != collective_time_s(dispatch, NODE)

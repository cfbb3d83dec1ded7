"""Time of the collectives a tensor- or expert-parallel step runs: all-reduce, all-gather, all-to-all.

Every formula is the classic α–β model: a message costs a latency α per communication round plus its bytes
over the link bandwidth β (achieved, per GPU, one direction). With n ranks and a message of S bytes per rank:

- all-reduce, ring:        2(n−1)·α + 2·(n−1)/n · S/β   (reduce-scatter then all-gather, n−1 rounds each)
- all-reduce, one-shot:    α + (n−1)·S/β                (each rank pushes its whole buffer to every peer;
                                                           what engines' custom all-reduce does for small S)
- all-reduce, two-shot:    2·α + 2·(n−1)/n · S/β        (direct reduce-scatter then direct all-gather)
- all-gather / reduce-scatter of an S-byte result, ring: (n−1)·α + (n−1)/n · S/β; direct: α + (n−1)/n · S/β
- all-to-all, direct:      α + max(bytes sent, bytes received)/β   (every pair at once over a switch)

An expert-parallel dispatch or combine on a profile with fitted all-to-all terms (`[node.all_to_all.<mode>]`,
`hardware.sections.AllToAllTerms`) is priced by them instead: the kernel's fixed time plus the busiest
rank's bytes at its achieved rate, in the mode the step runs (`low_latency` for decode and verification
steps, `normal` for steps with prefill); across nodes the bytes bound off the node take the achieved
scale-out link.

`"auto"` takes the fastest algorithm, as NCCL's tuner and engines' custom kernels do: one-shot for small
messages, ring or two-shot for large ones. One rank costs nothing. All functions accept numpy arrays of
bytes so the sweep fast path stays vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from moesim.errors import MoesimError
from moesim.simulator.hardware.sections import AllToAllMode, AllToAllTerms, NodeSpec
from moesim.simulator.plan.kernels import Collective
from moesim.simulator.plan.parallel import ParallelStep, collective_name

AllReduceAlgorithm = Literal["ring", "one_shot", "two_shot", "auto"]
GatherAlgorithm = Literal["ring", "direct", "auto"]

# Collectives achieve a fraction of the link's datasheet bandwidth: NCCL's measured bus bandwidth on
# NVLink4/NVSwitch nodes is about 80% of the 450 GB/s per direction (nccl-tests, 8×H100). This is the one
# documented assumption for uncalibrated links; a measured node would replace it.
ACHIEVED_LINK_FRACTION = 0.8


@dataclass(frozen=True)
class Link:
    """The path a collective's bytes take: achieved bandwidth per GPU, one direction, and per-round latency."""

    bandwidth_gbps: float
    latency_us: float

    def __post_init__(self) -> None:
        if not self.bandwidth_gbps > 0:
            raise MoesimError("link.bandwidth_gbps", f"must be positive, got {self.bandwidth_gbps}")
        if self.latency_us < 0:
            raise MoesimError("link.latency_us", f"must not be negative, got {self.latency_us}")

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6


def node_link(node: NodeSpec, ranks: int, achieved_fraction: float = ACHIEVED_LINK_FRACTION) -> Link:
    """The link a collective over `ranks` GPUs is bound by: scale-up within a node, scale-out across nodes.

    Across nodes the slower scale-out link sets the pace (the hierarchical algorithms' bottleneck stage).
    """
    if ranks <= node.gpus_per_node:
        bandwidth, latency, name = node.scale_up_bandwidth_gbps, node.scale_up_latency_us, "scale_up"
    else:
        bandwidth, latency, name = node.scale_out_bandwidth_gbps, node.scale_out_latency_us, "scale_out"
    if ranks > 1 and not bandwidth > 0:
        raise MoesimError(
            f"hardware.node.{name}_bandwidth_gbps",
            f"is not set, so a collective over {ranks} GPUs cannot be timed",
            "add it to the profile's [node] section",
        )
    return Link(max(bandwidth, 1e-9) * achieved_fraction, latency)


def _bytes(message_bytes: npt.ArrayLike) -> np.ndarray:
    size = np.asarray(message_bytes, dtype=float)
    if np.any(size < 0):
        raise MoesimError("collective", "message size must not be negative")
    return size


def _check_ranks(ranks: int) -> None:
    if ranks < 1:
        raise MoesimError("ranks", f"must be at least 1, got {ranks}")


def all_reduce_s(
    message_bytes: npt.ArrayLike, ranks: int, link: Link, algorithm: AllReduceAlgorithm = "auto"
) -> np.ndarray:
    """Seconds to all-reduce `message_bytes` (the buffer each rank holds) over `ranks` ranks."""
    _check_ranks(ranks)
    size = _bytes(message_bytes)
    if ranks == 1:
        return np.zeros_like(size)
    n, alpha, beta = ranks, link.latency_s, link.bytes_per_s
    times = {
        "ring": 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / beta,
        "one_shot": alpha + (n - 1) * size / beta,
        "two_shot": 2 * alpha + 2 * (n - 1) / n * size / beta,
    }
    if algorithm == "auto":
        return np.minimum.reduce(list(times.values()))
    if algorithm not in times:
        raise MoesimError(
            "algorithm", f"unknown all-reduce algorithm {algorithm!r}", "ring, one_shot, two_shot or auto"
        )
    return times[algorithm]


def all_gather_s(
    output_bytes: npt.ArrayLike, ranks: int, link: Link, algorithm: GatherAlgorithm = "auto"
) -> np.ndarray:
    """Seconds to all-gather: each rank contributes output_bytes/ranks and ends with all `output_bytes`.

    A reduce-scatter of an `output_bytes` input moves the same bytes in the same rounds, so
    `reduce_scatter_s` is this function too.
    """
    _check_ranks(ranks)
    size = _bytes(output_bytes)
    if ranks == 1:
        return np.zeros_like(size)
    n, alpha, beta = ranks, link.latency_s, link.bytes_per_s
    times = {
        "ring": (n - 1) * alpha + (n - 1) / n * size / beta,
        "direct": alpha + (n - 1) / n * size / beta,
    }
    if algorithm == "auto":
        return np.minimum(times["ring"], times["direct"])
    if algorithm not in times:
        raise MoesimError("algorithm", f"unknown all-gather algorithm {algorithm!r}", "ring, direct or auto")
    return times[algorithm]


reduce_scatter_s = all_gather_s


def all_to_all_s(
    send_bytes: npt.ArrayLike, ranks: int, link: Link, recv_bytes: npt.ArrayLike | None = None
) -> np.ndarray:
    """Seconds for a direct all-to-all where the busiest rank sends `send_bytes` and receives `recv_bytes`.

    Only bytes that leave the rank count (the caller excludes the rank's share to itself). Links are full
    duplex, so the slower of the two directions sets the time; `recv_bytes` defaults to `send_bytes`.
    """
    _check_ranks(ranks)
    send = _bytes(send_bytes)
    recv = send if recv_bytes is None else _bytes(recv_bytes)
    if ranks == 1:
        return np.zeros(np.broadcast(send, recv).shape)
    return link.latency_s + np.maximum(send, recv) / link.bytes_per_s


def expert_all_to_all_s(
    send_bytes: npt.ArrayLike,
    ranks: int,
    node: NodeSpec,
    terms: AllToAllTerms,
    phase: str,
    recv_bytes: npt.ArrayLike | None = None,
) -> np.ndarray:
    """Seconds of one expert-parallel `phase` ('dispatch' or 'combine') priced by the fitted `terms`: the
    phase's fixed time plus the larger of the busiest rank's sent and received bytes at its achieved rate.

    A group that spans nodes sends to every other rank at once: the share of the bytes bound for the g − 1
    other ranks of its node at the term's rate, the share bound for the n − g ranks of other nodes over the
    achieved scale-out link (one more latency), whichever takes longer (DeepEP's low-latency kernels send
    to each rank directly; its normal mode sends once per remote node and forwards over NVLink, so this
    over-prices normal mode across nodes)."""
    _check_ranks(ranks)
    send = _bytes(send_bytes)
    recv = send if recv_bytes is None else _bytes(recv_bytes)
    if ranks == 1:
        return np.zeros(np.broadcast(send, recv).shape)
    if phase == "dispatch":
        fixed_us, bandwidth_gbps = terms.dispatch_fixed_us, terms.dispatch_bandwidth_gbps
    else:
        fixed_us, bandwidth_gbps = terms.combine_fixed_us, terms.combine_bandwidth_gbps
    busiest = np.maximum(send, recv)
    g = node.gpus_per_node
    if ranks <= g:
        return fixed_us * 1e-6 + busiest / (bandwidth_gbps * 1e9)
    scale_out = node_link(node, ranks)
    on_node_s = busiest * (g - 1) / (ranks - 1) / (bandwidth_gbps * 1e9)
    off_node_s = busiest * (ranks - g) / (ranks - 1) / scale_out.bytes_per_s
    both_links_s = np.maximum(on_node_s, off_node_s)  # the two shares travel at once
    return fixed_us * 1e-6 + scale_out.latency_s + both_links_s


def messages_s(total_bytes: float, node: NodeSpec, group_gpus: int, messages: int = 1) -> float:
    """Seconds of `messages` point-to-point messages carrying `total_bytes` between two GPUs of a group of
    `group_gpus` (the link `node_link` picks for that group): one latency each, the bytes at its bandwidth."""
    link = node_link(node, group_gpus)
    return messages * link.latency_s + total_bytes / link.bytes_per_s


# Seconds by (collective, node, mode): a sweep's steps repeat the same few collectives (each a description
# of bytes and ranks, hashable and frozen, as is the node), so each is priced once.
_COLLECTIVE_TIMES: dict[tuple[Collective, NodeSpec, AllToAllMode], float] = {}
_MAX_COLLECTIVE_TIMES = 65536


def collective_time_s(collective: Collective, node: NodeSpec, mode: AllToAllMode = "low_latency") -> float:
    """Seconds of one collective on the node's links (scale-up within a node, scale-out across nodes); a
    MoE dispatch or combine by the node's all-to-all terms of `mode` where the profile has them.
    Remembered per (collective, node, mode)."""
    key = (collective, node, mode)
    seconds = _COLLECTIVE_TIMES.get(key)
    if seconds is None:
        seconds = _priced_collective_s(collective, node, mode)
        if len(_COLLECTIVE_TIMES) >= _MAX_COLLECTIVE_TIMES:
            _COLLECTIVE_TIMES.pop(next(iter(_COLLECTIVE_TIMES)))
        _COLLECTIVE_TIMES[key] = seconds
    return seconds


def _priced_collective_s(collective: Collective, node: NodeSpec, mode: AllToAllMode) -> float:
    terms = node.all_to_all_terms(mode) if collective.phase else None
    if terms is not None:
        return float(
            expert_all_to_all_s(
                collective.send_bytes, collective.ranks, node, terms, collective.phase, collective.recv_bytes
            )
        )
    link = node_link(node, collective.ranks)
    if collective.op == "all_reduce":
        return float(all_reduce_s(collective.send_bytes, collective.ranks, link))
    if collective.op == "all_gather":
        return float(all_gather_s(collective.send_bytes, collective.ranks, link))
    return float(all_to_all_s(collective.send_bytes, collective.ranks, link, collective.recv_bytes))


def step_collective_times_s(step: ParallelStep, node: NodeSpec) -> dict[str, float]:
    """Seconds of each of a parallel step's collectives (the mean over MoE layers where they differ); the
    parallel plans are decode and verification steps, so all-to-all terms are of the `low_latency` mode."""
    out: dict[str, float] = {}
    for name, per_layer in step.collectives.items():
        if len(per_layer) == 1:
            out[name] = collective_time_s(per_layer[0], node)
        else:
            out[name] = float(np.mean([collective_time_s(c, node) for c in per_layer]))
    return out


def parallel_step_summary(step: ParallelStep, node: NodeSpec) -> dict[str, object]:
    """What a parallel step adds to a result: its layout, collective times and the slowest rank's work."""
    times = step_collective_times_s(step, node)
    per_step = sum(
        times.get(collective_name(k) or "", 0.0) for k in step.plan.kernels if k.category == "communication"
    )
    return {**step.rank_summary(), "collective_s": times, "communication_per_step_s": float(per_step)}


__all__ = [
    "ACHIEVED_LINK_FRACTION",
    "AllReduceAlgorithm",
    "GatherAlgorithm",
    "Link",
    "all_gather_s",
    "all_reduce_s",
    "all_to_all_s",
    "collective_time_s",
    "expert_all_to_all_s",
    "node_link",
    "parallel_step_summary",
    "reduce_scatter_s",
    "step_collective_times_s",
]

"""The launch model: what the host spends issuing a step's kernels, and the device gaps between them.

Eager: the host launches kernel by kernel (`launch_eager_us` each, a GEMM `launch_eager_gemm_us` where the
profile sets it), kernels `launch_eager_gap_us` apart. Graph replay: one `graph_launch_us` launch issues
the whole step, kernels `launch_graph_gap_us` apart. Both end with a `sync_us` synchronisation. The event
timer and the fast path read these numbers from here alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from moesim.errors import MoesimError

if TYPE_CHECKING:
    from moesim.simulator.hardware.profile import HardwareProfile

LAUNCH_MODES: tuple[str, ...] = ("eager", "graph")


def check_launch(launch: str) -> None:
    """Refuse a launch mode other than eager or graph."""
    if launch not in LAUNCH_MODES:
        raise MoesimError("launch", f"unknown launch mode {launch!r}", "choose eager or graph")


@dataclass(frozen=True)
class LaunchParams:
    """Host issue times and device gaps of one launch mode."""

    mode: str
    first_issue_s: float  # graph: the one graph launch; eager: the first kernel's launch
    per_kernel_issue_s: float  # eager: host time per launch; graph: 0
    gap_s: float
    sync_s: float
    # eager: host time to launch one GEMM (the cuBLAS path: heuristics, possibly two kernels); None = same
    per_gemm_issue_s: float | None = None

    @classmethod
    def from_hardware(cls, hw: HardwareProfile, mode: str) -> LaunchParams:
        check_launch(mode)
        em = hw.empirical
        if mode == "graph":
            return cls(
                "graph", em.graph_launch_us * 1e-6, 0.0, em.launch_graph_gap_us * 1e-6, em.sync_us * 1e-6
            )
        gemm_us = em.launch_eager_gemm_us
        return cls(
            "eager",
            em.launch_eager_us * 1e-6,
            em.launch_eager_us * 1e-6,
            float(em.launch_eager_gap_us or 0.0) * 1e-6,
            em.sync_us * 1e-6,
            None if gemm_us is None else float(gemm_us) * 1e-6,
        )

    def without_launch_and_sync(self) -> LaunchParams:
        """The same mode inside a longer sequence: no graph launch, no final sync (eager still launches)."""
        return LaunchParams(
            self.mode,
            self.per_kernel_issue_s,
            self.per_kernel_issue_s,
            self.gap_s,
            0.0,
            self.per_gemm_issue_s,
        )

    @property
    def overhead_s(self) -> float:
        """The one-off cost around a sequence of kernels: the graph launch (graph mode) and the sync."""
        return (self.first_issue_s if self.per_kernel_issue_s == 0.0 else 0.0) + self.sync_s

    def host_costs_s(self, n: int, is_gemm: np.ndarray | None = None) -> np.ndarray:
        """Host seconds to launch each of n kernels (eager; GEMMs at the GEMM launch cost when it is set)."""
        costs = np.full(n, self.per_kernel_issue_s)
        if self.per_kernel_issue_s > 0.0 and self.per_gemm_issue_s is not None and is_gemm is not None:
            costs = np.where(np.asarray(is_gemm, dtype=bool), self.per_gemm_issue_s, costs)
        return costs

    def issue_times(self, n: int, is_gemm: np.ndarray | None = None) -> np.ndarray:
        """Host time at which each of n kernels (in issue order) has been launched; `is_gemm` marks the
        GEMMs (m_tokens > 0), whose eager launch costs `per_gemm_issue_s` when set. A 2-D `is_gemm`
        (one row per plan of n kernels) gives one row of issue times per plan."""
        if n == 0:
            return np.zeros(0)
        costs = self.host_costs_s(n, is_gemm)
        if self.per_kernel_issue_s == 0.0:  # graph replay: everything is issued by the one launch
            return np.full(costs.shape, self.first_issue_s)
        # the first launch keeps `first_issue_s` (its own cost), each later one adds its own host cost
        return self.first_issue_s - costs[..., :1] + np.cumsum(costs, axis=-1)

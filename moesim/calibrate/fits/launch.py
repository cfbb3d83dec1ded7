"""The launch suite's table → eager dispatch cost, fixed kernel latency, graph gap, graph launch and sync. Pure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.calibrate.fits import primitives as fit
from moesim.calibrate.fits.primitives import Row, column


@dataclass(frozen=True)
class LaunchParams:
    launch_eager_us: float
    kernel_fixed_latency_us: float
    launch_graph_gap_us: float
    graph_launch_us: float
    sync_us: float
    eager: fit.FitResult
    graph: fit.FitResult | None
    notes: tuple[str, ...] = ()
    launch_eager_gemm_us: float | None = None  # None: no eager_gemm_host rows in this table
    eager_gemm: fit.FitResult | None = None
    eager_tight: fit.FitResult | None = None  # the identical-op tight loop, kept for reference
    chain_graph: fit.FitResult | None = None  # graph replay of the dependent mixed chain


def _line(rows: list[Row], kind: str) -> fit.FitResult | None:
    """The N-versus-seconds line of one row kind, or None when fewer than two valid batches exist."""
    n, t = column(rows, "n_kernels", kind=kind), column(rows, "seconds", kind=kind)
    ok = np.isfinite(n) & np.isfinite(t)
    if ok.sum() < 2:
        return None
    return fit.fit_line(n[ok], t[ok])


def fit_launch_table(rows: list[Row], is_gpu: bool) -> LaunchParams:
    """Per-kernel eager cost from the batch line; on GPUs also graph gap, tiny-kernel latency and sync.

    Where the table has the dependent mixed chain (`chain_eager_host`, `chain_graph_device`), its slopes
    set the eager host cost per op and the graph per-kernel time; the identical-op figures stay in the
    fits for reference. Older tables without the chain keep the identical-op rule.
    """
    tight = fit.fit_line(
        column(rows, "n_kernels", kind="eager_host"), column(rows, "seconds", kind="eager_host")
    )
    chain_eager = _line(rows, "chain_eager_host")
    eager = chain_eager if chain_eager is not None else tight
    eager_tight = tight if chain_eager is not None else None
    eager_us = max(eager.params["slope"], 0.0) * 1e6
    tight_us = max(tight.params["slope"], 0.0) * 1e6
    eager_notes = [
        "empirical.launch_eager_us = host seconds per op of a dependent chain of mixed tiny ops (mul, small "
        "mm, add, amax, index_select; each allocates its output) issued eagerly (line slope over N"
        + (", queued behind a spin kernel)" if is_gpu else "; cpu: dispatch plus negligible work)")
        + f"; the identical-op tight loop x.add_(1.0) gives {tight_us:.2f} us (fit 'launch_eager_tight')"
        if chain_eager is not None
        else "empirical.launch_eager_us = host seconds per x.add_(1.0) in a tight loop (no dependent-chain "
        "rows in this launch table)"
    ]
    gemm_counts = column(rows, "n_kernels", kind="eager_gemm_host")
    eager_gemm: fit.FitResult | None = None
    gemm_us: float | None = None
    gemm_notes: list[str] = []
    if len(gemm_counts) >= 2:
        eager_gemm = fit.fit_line(gemm_counts, column(rows, "seconds", kind="eager_gemm_host"))
        gemm_us = max(eager_gemm.params["slope"], 0.0) * 1e6
        shape = next(r for r in rows if r.get("kind") == "eager_gemm_host")
        gemm_notes.append(
            f"empirical.launch_eager_gemm_us = host seconds per call of N back-to-back eager "
            f"x[{shape.get('gemm_m')},{shape.get('gemm_k')}] @ W[{shape.get('gemm_k')},{shape.get('gemm_n')}] {shape.get('dtype')} "
            "GEMMs (line slope over N" + (", queued behind a spin kernel)" if is_gpu else "; cpu: dispatch)")
        )
    else:
        gemm_notes.append(
            "empirical.launch_eager_gemm_us not measured in this launch table (no eager_gemm_host rows): "
            "left unset, so GEMMs are charged launch_eager_us like any kernel"
        )
    if not is_gpu:
        return LaunchParams(
            launch_eager_us=eager_us,
            kernel_fixed_latency_us=eager_us,
            launch_graph_gap_us=0.0,
            graph_launch_us=0.0,
            sync_us=0.0,
            eager=eager,
            graph=None,
            notes=(
                "cpu: launch_eager_us = kernel_fixed_latency_us = measured per-op dispatch cost: the host thread "
                "that dispatches also runs the op, so each op costs its dispatch plus its work, in sequence",
                "cpu: no graph replay and no device sync: launch_graph_gap_us = graph_launch_us = sync_us = 0",
                *eager_notes,
                *gemm_notes,
            ),
            launch_eager_gemm_us=gemm_us,
            eager_gemm=eager_gemm,
            eager_tight=eager_tight,
        )
    graph = fit.fit_line(
        column(rows, "n_kernels", kind="graph_device"), column(rows, "seconds", kind="graph_device")
    )
    per_kernel_graph_us = max(graph.params["slope"], 0.0) * 1e6
    single = float(np.median(column(rows, "seconds", kind="single_kernel")))
    empty = float(np.median(column(rows, "seconds", kind="empty_events")))
    isolated_us = min(max(single - empty, 0.0) * 1e6, per_kernel_graph_us)
    # The gap: what identical back-to-back replayed kernels cost beyond one isolated kernel (0 where the
    # GPU pipelines them faster than one kernel's latency).
    gap_us = max(per_kernel_graph_us - isolated_us, 0.0)
    chain = _line(rows, "chain_graph_device")
    if chain is not None:
        chain_us = max(chain.params["slope"], 0.0) * 1e6
        # Graph replay charges each kernel gap + fixed + work; the chain's work (4x64 activations, a 64x64
        # weight: ~10 KiB per op, nanoseconds at any GPU bandwidth) is not subtracted, so a replayed chain
        # of tiny dependent kernels costs fixed + gap = the measured chain slope per kernel.
        fixed_us = max(chain_us - gap_us, 0.0)
        graph_notes = [
            f"kernel_fixed_latency_us = graph-replay slope per kernel of a DEPENDENT chain of mixed tiny kernels "
            f"(mul, small mm, add, amax, index_select: {chain_us:.3f} us) minus launch_graph_gap_us, so a "
            "replayed dependent chain costs fixed + gap = that slope per kernel (the chain's own roofline work, "
            "~10 KiB per kernel, is negligible and not subtracted); launch_graph_gap_us = identical tiny kernels' "
            f"replay slope ({per_kernel_graph_us:.3f} us) minus one isolated tiny kernel between CUDA events "
            f"({isolated_us:.3f} us), clamped >= 0: identical kernels pipeline back to back, dependent ones "
            "do not"
        ]
    else:
        fixed_us = isolated_us
        failed = [r for r in rows if r.get("kind") == "chain_graph_failed"]
        graph_notes = [
            "kernel_fixed_latency_us = one tiny kernel between CUDA events minus empty events (capped at the "
            "graph per-kernel time); launch_graph_gap_us = graph-replay per-kernel time minus that"
            + (
                f" (the dependent-chain graph capture failed: {failed[0].get('error')})"
                if failed
                else " (no dependent-chain rows in this launch table)"
            )
        ]
    graph_host = column(rows, "seconds", kind="graph_host")
    sync = column(rows, "seconds", kind="sync")
    return LaunchParams(
        launch_eager_us=eager_us,
        kernel_fixed_latency_us=fixed_us,
        launch_graph_gap_us=gap_us,
        graph_launch_us=float(np.median(graph_host)) * 1e6 if len(graph_host) else 0.0,
        sync_us=float(np.median(sync)) * 1e6 if len(sync) else 0.0,
        eager=eager,
        graph=graph,
        notes=(*graph_notes, *eager_notes, *gemm_notes),
        launch_eager_gemm_us=gemm_us,
        eager_gemm=eager_gemm,
        eager_tight=eager_tight,
        chain_graph=chain,
    )


__all__ = ["LaunchParams", "fit_launch_table"]

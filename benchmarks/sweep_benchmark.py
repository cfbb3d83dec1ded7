"""Sweep the whole catalogue × batch {1, 2, 4, ..., 256} × draft length 1–8 on one profile; print the speed.

Usage: python3 benchmarks/sweep_benchmark.py [--hardware h200] [--routing typical|independent] [--no-fit-check]
       [--single-gpu] [--serving-engine ideal|vllm|sglang|trtllm|PATH] [--against-ideal] [--repeats N]
Target: under 20 s on 2 cores. As `moesim sweep` does by default, each (model, batch) runs on the smallest
layout whose memory fits, so the trillion-parameter models run on 8–16 GPUs (expert-parallel plans with
collectives); --single-gpu keeps every model on one device and skips those that do not fit;
--no-fit-check (with --single-gpu) times every model on one device, fitting or not.
--serving-engine sweeps under a serving-engine profile; --against-ideal also times the `ideal` sweep in the
same process (alternating, best of --repeats each) and prints the ratio (target: within 1.5×).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from moesim.simulator.hardware.profile import load_profile
from moesim.simulator.models.catalogue import list_models, load_model
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.routing import IndependentRouting
from moesim.simulator.scenario import Scenario
from moesim.simulator.speculative.sweep import run_sweep

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
DRAFT_LENS = list(range(1, 9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--no-fit-check", action="store_true", help="time every model, fitting or not")
    parser.add_argument(
        "--single-gpu", action="store_true", help="one device per model (skip what does not fit)"
    )
    parser.add_argument("--routing", choices=["typical", "independent"], default="typical")
    parser.add_argument("--serving-engine", default="ideal", help="serving-engine profile to sweep under")
    parser.add_argument(
        "--against-ideal", action="store_true", help="also time the ideal sweep; print the ratio"
    )
    parser.add_argument("--repeats", type=int, default=1, help="timings per sweep (the best is kept)")
    args = parser.parse_args()
    hardware = load_profile(args.hardware)
    models = [load_model(name) for name in list_models()]

    base = Scenario(
        models[0],
        hardware,
        routing=IndependentRouting() if args.routing == "independent" else None,  # None: typical per model
        layout=ParallelLayout() if args.single_gpu or args.no_fit_check else None,  # None: smallest fit
    )
    engines = [args.serving_engine] + (["ideal"] if args.against_ideal else [])
    walls: dict[str, float] = {}
    for _ in range(max(1, args.repeats)):
        for engine in engines:
            start = time.perf_counter()
            swept = run_sweep(
                base.replace(serving_engine=engine),
                models,
                BATCHES,
                DRAFT_LENS,
                check_fit=not args.no_fit_check,
            )
            walls[engine] = min(time.perf_counter() - start, walls.get(engine, float("inf")))
            if engine == args.serving_engine:
                result = swept
    wall = walls[args.serving_engine]
    configs = len(models) * len(BATCHES) * len(DRAFT_LENS)
    computed = len(result.rows)
    print(f"routing: {args.routing}; serving engine: {args.serving_engine}")
    print(
        f"hardware {hardware.name}: {len(models)} models × {len(BATCHES)} batch sizes × {len(DRAFT_LENS)} draft lengths"
    )
    print(f"configurations: {configs} ({computed} simulated, {configs - computed} skipped as not fitting)")
    multi = sum(1 for row in result.rows if row.gpus > 1)
    print(
        f"multi-GPU configurations: {multi} ({', '.join(sorted({r.model for r in result.rows if r.gpus > 1}))})"
    )
    print(f"wall time: {wall:.2f} s  ({computed / wall:.0f} simulated configurations/s)")
    if args.against_ideal:
        print(
            f"ideal: {walls['ideal']:.2f} s; {args.serving_engine} / ideal = {wall / walls['ideal']:.2f}× "
            f"(best of {max(1, args.repeats)} each, alternating)"
        )


if __name__ == "__main__":
    main()

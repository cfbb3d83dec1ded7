"""Time the serving simulation: 1000 requests of 1000 in / 1000 out at concurrency 64 with SD, then how the
cost grows with requests and with concurrency.

Usage: python3 benchmarks/serve_benchmark.py [--model qwen3-30b-a3b] [--hardware h200] [--quick]
Target (issue 22): the headline run in under 1 s of CPU. Each line prints the CPU and wall time of one SD
run (a fresh step-cost cache, typical routing), the simulated steps, the distinct step shapes costed on the
fast path, and the simulated output throughput. --quick skips the growth tables; `benchmarks/targets.py
--only serve` times the headline run in a fresh process beside another checkout.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from moesim.simulator.scenario import Scenario
from moesim.simulator.serving.run import (
    ServeOptions,
    capacity_for,
    draws_for,
    resolve_serving,
    simulate_serving,
)
from moesim.simulator.serving.step_cost import ScenarioStepCost
from moesim.simulator.serving.workload import random_workload


def timed_run(model_name: str, hardware: str, requests: int, concurrency: int, length: int) -> str:
    resolved = resolve_serving(Scenario(model_name, hardware))  # typical routing, EAGLE, K = 3, α = 0.8
    start, cpu = time.perf_counter(), time.process_time()
    cost = ScenarioStepCost(resolved)
    options = ServeOptions()
    capacity = capacity_for(resolved, options, with_drafter=True)
    workload = random_workload(requests, length, length, seed=0)
    run = simulate_serving(
        workload, cost, capacity, draws_for(resolved, 0), max_concurrency=concurrency, options=options
    )
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return (
        f"{requests:5d} requests × {length}/{length} at concurrency {concurrency:3d}: {cpu:6.2f} CPU s, "
        f"{wall:6.2f} s wall, "
        f"{run.steps:6d} steps, {cost.evaluated_shapes:4d} shapes costed, "
        f"{run.values['output_throughput']:8.0f} output tok/s simulated"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-30b-a3b")
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--quick", action="store_true", help="the headline run only")
    args = parser.parse_args()
    print("headline (target < 1 CPU s):")
    print("  " + timed_run(args.model, args.hardware, 1000, 64, 1000))
    if args.quick:
        return
    print("growth with requests (concurrency 64):")
    for n in (250, 500, 1000, 2000):
        print("  " + timed_run(args.model, args.hardware, n, 64, 1000))
    print("growth with concurrency (1000 requests):")
    for c in (1, 16, 64, 256):
        print("  " + timed_run(args.model, args.hardware, 1000, c, 1000))


if __name__ == "__main__":
    main()

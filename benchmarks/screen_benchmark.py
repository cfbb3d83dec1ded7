"""Screen sampled MoE designs × 4 batch sizes × 4 draft lengths on H200; print designs/s per backend and size.

Usage: python3 benchmarks/screen_benchmark.py [--designs 100,1000,10000] [--backends local,ray] [--workers 2]
The designs: qwen3-30b-a3b with experts, top-k, shared experts, layers, KV heads and weight format varied
(12,960 combinations, sampled with seed 0), expert width solved so active parameters equal the base
model's. Each size is a fresh run (new worker processes, so routing banks are rebuilt): the figure includes
the pool's or Ray's start-up, which is what a user pays. Ray runs a local cluster with `--workers` CPUs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from moesim.simulator.models.catalogue import load_model
from moesim.simulator.scenario import Scenario
from moesim.simulator.screening.constraints import Constraint
from moesim.simulator.screening.evaluate import ScreenSettings
from moesim.simulator.screening.screen import screen
from moesim.simulator.screening.space import parse_values, sample

AXES = {
    "n_experts": "16,32,48,64,96,128,192,256,384,512",
    "top_k": "1,2,3,4,6,8,10,12,16",
    "n_shared_experts": "0,1,2",
    "layers": "24..80:8",
    "num_kv_heads": "2,4,8",
    "weight_format": "bf16,fp8",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", default="100,1000,10000")
    parser.add_argument("--backends", default="local,ray")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    base = load_model("qwen3-30b-a3b")
    axes = {field: parse_values(field, text) for field, text in AXES.items()}
    settings = ScreenSettings(Scenario(base, "h200"), batches=(1, 4, 16, 64), draft_lens=(1, 2, 3, 4))
    constraint = Constraint("active-params", free_field="expert_width", multiple=16)
    print(f"base {base.name}, H200, batches 1,4,16,64 × draft lengths 1-4, {args.workers} workers")
    for backend in args.backends.split(","):
        if backend == "ray":
            import ray

            ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        for n in (int(part) for part in args.designs.split(",")):
            designs = sample(axes, n, seed=0)
            start = time.perf_counter()
            result = screen(base, designs, settings, [constraint], backend=backend, workers=args.workers)
            wall = time.perf_counter() - start
            evaluated = len(result.results)
            print(
                f"{backend:5s} {n:6d} designs ({evaluated} evaluated, {len(result.dropped)} dropped): "
                f"{wall:7.1f} s, {evaluated / wall:6.1f} designs/s, {evaluated * 16 / wall:7.0f} SD points/s"
            )
        if backend == "ray":
            ray.shutdown()


if __name__ == "__main__":
    main()

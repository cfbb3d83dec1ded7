"""Screen sampled MoE designs × 4 batch sizes × 4 draft lengths on H200; print designs/s per backend and size.

Usage: python3 benchmarks/screen_benchmark.py [--designs 100,1000,10000] [--backends local,ray] [--workers 2]
The designs: qwen3-30b-a3b with experts, top-k, shared experts, layers, KV heads and weight format varied
(12,960 combinations, sampled with seed 0), expert width solved so active parameters equal the base
model's. Each size is a fresh run with new worker processes (a new pool, or a new local Ray with `--workers`
CPUs), so routing banks are rebuilt: the figure includes the workers' start-up, which is what a user pays.
Ray's own start-up (`ray.init`) is timed apart. The steady rate between two sizes (extra designs ÷ extra
seconds) is what each further design costs once the fixed part is paid. Each line also gives the CPU
seconds of this process and its finished workers (what the screen cost, whatever else the machine runs)
and the peak resident memory of this process and of the largest worker.
"""

from __future__ import annotations

import argparse
import itertools
import resource
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


def cpu_s() -> float:
    """CPU seconds of this process and of its waited-for children (the pool's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def peak_gb() -> tuple[float, float]:
    """Peak resident memory (GB) of this process and of the largest child so far (Linux reports KiB)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_maxrss / 2**20, children.ru_maxrss / 2**20


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
    sizes = [int(part) for part in args.designs.split(",")]
    print(f"base {base.name}, H200, batches 1,4,16,64 × draft lengths 1-4, {args.workers} workers")
    for backend in args.backends.split(","):
        runs: list[tuple[int, float]] = []
        for n in sizes:
            designs = sample(axes, n, seed=0)
            startup = ""
            if backend == "ray":
                import ray

                start = time.perf_counter()
                ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
                startup = f" (+ {time.perf_counter() - start:.1f} s ray.init)"
            try:
                start, cpu_start = time.perf_counter(), cpu_s()
                result = screen(base, designs, settings, [constraint], backend=backend, workers=args.workers)
                wall, cpu = time.perf_counter() - start, cpu_s() - cpu_start
            finally:
                if backend == "ray":
                    ray.shutdown()
            evaluated = len(result.results)
            runs.append((evaluated, wall))
            print(
                f"{backend:5s} {n:6d} designs ({evaluated} evaluated, {len(result.dropped)} dropped): "
                f"{wall:7.1f} s{startup}, {evaluated / wall:6.1f} designs/s, "
                f"{evaluated * 16 / wall:7.0f} SD points/s; {cpu:7.1f} CPU s "
                f"({1e3 * cpu / max(n, 1):.1f} ms per design); peak RSS {peak_gb()[0]:.2f} GB main, "
                f"{peak_gb()[1]:.2f} GB largest worker"
            )
        for (n0, wall0), (n1, wall1) in itertools.pairwise(runs):
            print(f"{backend:5s} steady {n0}→{n1}: {(n1 - n0) / (wall1 - wall0):6.1f} designs/s")


if __name__ == "__main__":
    main()

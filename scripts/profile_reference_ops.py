"""Where an eager reference step spends host time: torch profiler table of one step, per aten op.

Usage: python3 scripts/profile_reference_ops.py [--device cuda] [--batch 1] [--tokens 4] [--model fine]
Prints host (CPU) time and CUDA kernels per aten op, so the torch-reference plan's launch costs can be
checked op class by op class.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from moesim.simulator.routing.presets import typical_routing
from moesim.validation.reference.routing_replay import sample_step_routing
from moesim.validation.reference.shapes import validation_model
from moesim.validation.reference.torch_model import ReferenceModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="fine")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--context-len", type=int, default=512)
    args = parser.parse_args()
    dtype = "bf16" if args.device == "cuda" else "fp32"
    spec = validation_model(args.model, args.device, dtype)
    model = ReferenceModel(spec, args.device, seed=0)
    routing = typical_routing(spec.n_experts, spec.top_k, spec.n_groups, spec.topk_groups)
    step_routing = sample_step_routing(
        routing, spec.n_experts, spec.top_k, args.batch, args.tokens, model.moe_layers, 0
    )
    inputs = model.prepare(args.batch, args.tokens, args.context_len, step_routing)
    for _ in range(3):
        model.step(inputs)
    if args.device == "cuda":
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with profile(activities=activities) as prof:
        model.step(inputs)
        if args.device == "cuda":
            torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=40))
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    print(f"CUDA kernels: {len(kernels)}")
    names: dict[str, int] = {}
    for event in kernels:
        names[event.name[:90]] = names.get(event.name[:90], 0) + 1
    for name, count in sorted(names.items(), key=lambda item: -item[1]):
        print(f"{count:5d}  {name}")


if __name__ == "__main__":
    main()

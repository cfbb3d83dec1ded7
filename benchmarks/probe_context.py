"""Does the drift probe's reading depend on what ran just before it? One process, one machine state.

Usage: python benchmarks/probe_context.py [--rounds 8] [--device cpu] [--threads 1]

The drift correction (issue 24) divides the probe measured beside a validation row by the probe measured
during calibration. Calibration's probes follow its suites; validation's follow torch reference steps. If
the probe's figures move with the work that preceded it, that ratio carries the difference in context into
every corrected row, as a drift the machine never had. This benchmark takes the probe after four kinds of
preceding work, interleaved round by round so slow drift falls on all of them alike:

- `idle`: after 0.5 s of sleep (a probe between two commands);
- `memory`: after streaming 4× the last-level cache ten times (the memory suite's plateau kernel);
- `gemm`: after 60 in-cache 512³ fp32 GEMMs (the GEMM suite's large rows);
- `steps`: after 200 small-M GEMMs over 3 MiB weights cycling through 4× the cache, with element-wise ops
  between them (the regime of a validation row's step).

It prints, per context and per probe part, the median over the rounds relative to the `idle` context and
the rounds' relative IQR (the between-probe scatter, to set beside one probe's own noise). A context whose median differs from `idle` by more than the probe's own noise
distorts any ratio of probes taken after different work.
"""

from __future__ import annotations

import argparse
import statistics
import time

from moesim.calibrate.fits.drift import PART_FIGURES, rel_iqr

CONTEXTS = ("idle", "memory", "gemm", "steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    from moesim.calibrate.suites.probe import Probe
    from moesim.calibrate.suites.timing import Timer, resolve_device

    device = resolve_device(args.device, args.threads if args.device == "cpu" else None)
    timer = Timer(device)
    torch = timer.torch
    probe = Probe(timer, device)
    where = device.torch_device
    llc = device.last_level_cache_bytes or 32 * 2**20
    big = torch.ones(int(4 * llc) // 4, dtype=torch.float32, device=where)
    a = torch.rand((512, 512), device=where)
    b = torch.rand((512, 512), device=where)
    pool = [torch.rand((512, 1536), device=where) for _ in range(max(2, int(4 * llc) // (512 * 1536 * 4)))]
    x = torch.rand((4, 512), device=where)

    def preceding(context: str) -> None:
        with torch.inference_mode():
            if context == "idle":
                time.sleep(0.5)
            elif context == "memory":
                for _ in range(10):
                    torch.sum(big)
            elif context == "gemm":
                for _ in range(60):
                    torch.mm(a, b)
            else:
                for i in range(200):
                    y = torch.mm(x, pool[i % len(pool)])
                    torch.nn.functional.silu(y)
        timer.sync()

    readings: dict[str, list[dict[str, float]]] = {c: [] for c in CONTEXTS}
    noise: dict[str, list[float]] = {p: [] for p in PART_FIGURES}
    started = time.perf_counter()
    for _ in range(args.rounds):
        for context in CONTEXTS:
            preceding(context)
            sample = probe.sample(context)
            readings[context].append({p: float(getattr(sample, f)) for p, f in PART_FIGURES.items()})
            for part in PART_FIGURES:
                noise[part].append(sample.noise(part))
    probe.close()

    print(
        f"{args.rounds} rounds × {len(CONTEXTS)} contexts on {device.name} "
        f"({time.perf_counter() - started:.0f} s); one probe's median noise: "
        + ", ".join(f"{p} {100 * statistics.median(v):.1f}%" for p, v in noise.items())
    )
    print("median speed after each context ÷ after idle (dispatch as a speed), and the rounds' relative IQR")
    print(f"{'context':8s}" + "".join(f"{p:>22s}" for p in PART_FIGURES))
    idle = {p: statistics.median(r[p] for r in readings["idle"]) for p in PART_FIGURES}
    for context in CONTEXTS:
        cells = []
        for part in PART_FIGURES:
            values = [r[part] for r in readings[context]]
            median = statistics.median(values)
            ratio = idle[part] / median if part == "dispatch" else median / idle[part]
            cells.append(f"x{ratio:.3f} ({100 * rel_iqr(values):4.1f}%)")
        print(f"{context:8s}" + "".join(f"{c:>22s}" for c in cells))


if __name__ == "__main__":
    main()

"""The speedup vs batch of Qwen3-30B-A3B on 1×H200 and DeepSeek-V3 on 8×H200 under SGLang's preset, on the
datasheet profile (h200) and on its SGLang silicon profile (silicon/h200_sxm-sglang): a table on stdout and
docs/silicon-speedup-h200.png.

    python scripts/silicon_speedup.py
"""

from __future__ import annotations

from moesim.figures import save_figure
from moesim.simulator.plan.layout import LayoutRequest
from moesim.simulator.simulate import sweep

BATCHES = [1, 2, 4, 8, 16, 32, 64]
DRAFT_LEN = 3
CASES = [("qwen3-30b-a3b", 1), ("deepseek-v3", 8)]
PROFILES = [("h200", "datasheet"), ("silicon/h200_sxm-sglang", "silicon (h200_sxm/sglang)")]
OUT = "docs/silicon-speedup-h200.png"


def main() -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CASES), figsize=(10, 4))
    print(f"speedup vs batch, K = {DRAFT_LEN}, serving engine sglang")
    for ax, (model, gpus) in zip(axes, CASES, strict=True):
        for hardware, label in PROFILES:
            result = sweep(
                [model],
                hardware=hardware,
                serving_engine="sglang",
                layout=LayoutRequest(gpus=gpus),
                batches=BATCHES,
                draft_lens=[DRAFT_LEN],
            )
            speedups = [r.speedup for r in sorted(result.rows, key=lambda r: r.batch)]
            print(f"{model} {gpus}xH200 {label:<28}", " ".join(f"{s:5.2f}" for s in speedups))
            ax.plot(BATCHES, speedups, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_ylabel(f"SD speedup (K = {DRAFT_LEN})")
        ax.set_title(f"{model} on {gpus}×H200, sglang")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    save_figure(fig, OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

"""Regenerate tests/data/ideal_reference.json: sweep and simulate points of moesim before serving engines.

Run against a checkout of main at 97d5c7b (issue 9 landed, before this branch):
    git archive 97d5c7b | tar -x -C /tmp/ref && PYTHONPATH=/tmp/ref python tests/data/generate_ideal_reference.py OUT
Floats are stored as hex so the test compares them bit for bit.
"""

import json
import sys

from moesim.simulator.simulate import simulate, sweep

out = {"sweep": [], "simulate": []}
GRID = [
    ("qwen3-30b-a3b", "h200", "eagle", "graph"),
    ("qwen3-30b-a3b", "h200", "ngram", "eager"),
    ("mixtral-8x7b", "a100-80gb", "eagle", "graph"),
    ("mixtral-8x7b", "h200", "fraction:0.1", "graph"),
    ("deepseek-v3", "h200", "mtp", "graph"),
    ("qwen3-30b-a3b", "h200", "model:qwen3-0.6b", "graph"),
]
for model, hw, drafter, launch in GRID:
    res = sweep(
        [model],
        hardware=hw,
        drafter=drafter,
        launch=launch,
        batches=[1, 3, 16, 64, 256],
        draft_lens=[1, 3, 5],
    )
    for r in res.rows:
        out["sweep"].append(
            {
                "model": model,
                "hardware": hw,
                "drafter": drafter,
                "launch": launch,
                "batch": r.batch,
                "draft_len": r.draft_len,
                "speedup": r.speedup.hex() if isinstance(r.speedup, float) else float(r.speedup).hex(),
                "decode_step_s": r.decode_step_s.hex(),
                "verify_step_s": r.verify_step_s.hex(),
                "draft_s": r.draft_s.hex(),
            }
        )
for model, batch, k, drafter in [
    ("qwen3-30b-a3b", 1, 3, "eagle"),
    ("qwen3-30b-a3b", 16, 2, "eagle"),
    ("mixtral-8x7b", 4, 3, "eagle"),
    ("deepseek-v3", 4, 2, "mtp"),
]:
    r = simulate(model=model, hardware="h200", batch=batch, draft_len=k, drafter=drafter)
    out["simulate"].append(
        {
            "model": model,
            "batch": batch,
            "draft_len": k,
            "drafter": drafter,
            "speedup": float(r.speedup).hex(),
            "decode_step_s": float(r.decode.step_s).hex(),
            "verify_step_s": float(r.verify.step_s).hex(),
        }
    )
with open(sys.argv[1], "w") as file:
    json.dump(out, file, indent=1)
print(len(out["sweep"]), len(out["simulate"]))

"""Rewrite the example `vllm bench serve --save-result` pair in moesim/data/ from `moesim serve` itself.

    python scripts/write_bench_example.py

The pair is a round trip for `moesim validate --bench-result` (not a measurement, as each file says): the
workload and the metric values come from one `moesim serve` run on the bundled H200 profile; run this after
anything changes the step model or the profile, and the validation test sees the same numbers again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "moesim" / "data"
COMMAND = [
    "serve", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--num-prompts", "64",
    "--max-concurrency", "8", "--random-input-len", "1024", "--random-output-len", "256",
]  # fmt: skip


def main() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "moesim", *COMMAND, "--json"], capture_output=True, text=True, check=True
    )
    point = json.loads(out.stdout)["points"][0]
    for arm, name in (("sd", "vllm_bench_example_sd.json"), ("baseline", "vllm_bench_example_baseline.json")):
        path = DATA / name
        record = json.loads(path.read_text())
        for key in record:
            if key in point[arm] and key != "max_concurrency":
                record[key] = point[arm][key]
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

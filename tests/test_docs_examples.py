"""The README's and the docs' examples are true: every `$ moesim ...` in a ```console block prints exactly the
output shown, and every `moesim ...` line of a ```bash block runs and exits 0, in order, in a folder holding
the files the examples take as given (a trace, a calibrated profile, a datasheet file, measurements).

Lines that need a GPU, torch measurements or transformers are listed in NEEDS_A_DEVICE and skipped by name.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from moesim.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS_A_DEVICE = (
    "calibrate --device cuda --output",  # measures a GPU
    "calibrate --device cpu --quick",  # measures this machine for minutes (tests/test_calibrate_runner.py runs it small)
    "--device cuda",  # validation on a GPU
    "validate reference --profile cpu.toml --device cpu",  # torch measurements
    "routing record",  # needs transformers and a model
    "pip install",
    "python -m pytest",
)


@dataclass(frozen=True)
class Example:
    document: str
    line: int
    command: str
    expected: tuple[str, ...] | None  # console output shown, or None for a bash line that must only succeed

    def __str__(self) -> str:
        return f"{self.document}:{self.line}"


def _blocks(text: str) -> list[tuple[str, int, list[str]]]:
    blocks, language, start, body = [], None, 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and language is None:
            language, start, body = fence.group(1) or "text", number, []
        elif fence:
            blocks.append((language, start, body))
            language = None
        elif language is not None:
            body.append(line)
    return blocks


def _joined(lines: list[str]) -> list[tuple[int, str]]:
    """Lines with `\\` continuations joined, each with its offset in the block."""
    joined: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for offset, line in enumerate(lines):
        pending = (offset, line) if pending is None else (pending[0], pending[1] + " " + line.strip())
        if pending[1].rstrip().endswith("\\"):
            pending = (pending[0], pending[1].rstrip()[:-1].rstrip())
            continue
        joined.append(pending)
        pending = None
    return joined


def examples(document: Path) -> list[Example]:
    found = []
    name = str(document.relative_to(ROOT))
    for language, start, body in _blocks(document.read_text(encoding="utf-8")):
        if language == "console":
            lines = _joined(body)
            commands = [i for i, (_, line) in enumerate(lines) if line.startswith("$ ")]
            for position, index in enumerate(commands):
                end = commands[position + 1] if position + 1 < len(commands) else len(lines)
                output = tuple(line.rstrip() for _, line in lines[index + 1 : end])
                offset, command = lines[index]
                found.append(Example(name, start + 1 + offset, command[2:].strip(), output))
        elif language in ("bash", "sh", "shell"):
            for offset, line in _joined(body):
                command = line.split("  #")[0].strip()
                for prefix in ("pip install . && ", "pip install '.[dev]' && "):
                    command = command.removeprefix(prefix)
                if command.startswith("moesim ") and not any(skip in line for skip in NEEDS_A_DEVICE):
                    found.append(
                        Example(name, start + 1 + offset, command.removesuffix(" ...").strip(), None)
                    )
    return found


ALL_EXAMPLES = [example for document in DOCUMENTS for example in examples(document)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the files the examples take as given."""
    from moesim.simulator.hardware.profile import load_profile, render_profile
    from moesim.simulator.routing import save_trace
    from moesim.simulator.routing.synthetic import gating_trace

    folder = tmp_path_factory.mktemp("examples")
    shutil.copytree(
        ROOT / "docs", folder / "docs"
    )  # examples read and write docs/...: a copy, never the repository
    (folder / "moesim").symlink_to(ROOT / "moesim")  # moesim/data/... read only
    measured = ROOT / "moesim" / "hardware_profiles" / "measured"
    shutil.copy(measured / "h200.toml", folder / "my-gpu.toml")
    for csv in measured.glob("h200.*.csv"):
        shutil.copy(csv, folder / csv.name.replace("h200.", "my-gpu.", 1))
    shutil.copy(ROOT / "docs" / "validation" / "cpu" / "cpu.toml", folder / "cpu.toml")
    datasheet = render_profile(load_profile("b200")).split("\n[empirical]")[0]
    (folder / "my-datasheet.toml").write_text(
        datasheet.split("[datasheet]", 1)[1].join(["[datasheet]", "\n"])
    )
    shutil.copy(ROOT / "moesim" / "data" / "validation_example.csv", folder / "my-bench.csv")
    shutil.copy(ROOT / "moesim" / "data" / "validation_example_model.toml", folder)
    save_trace(gating_trace(128, 8, 8, 64, seed=3), folder / "trace.npz")
    return folder


def test_the_documents_have_examples() -> None:
    assert len([e for e in ALL_EXAMPLES if e.expected is not None]) >= 4
    assert len([e for e in ALL_EXAMPLES if e.expected is None]) >= 8


def run_example(command: str, workdir: Path) -> tuple[int, list[str]]:
    """Exit code and output lines of `moesim ...` run in `workdir`."""
    argv = shlex.split(command)
    assert argv[0] == "moesim"
    before = Path.cwd()
    os.chdir(workdir)
    try:
        result = CliRunner().invoke(cli, argv[1:])
    finally:
        os.chdir(before)
    return result.exit_code, [line.rstrip() for line in result.output.strip().splitlines()]


@pytest.mark.parametrize("example", ALL_EXAMPLES, ids=str)
def test_example_is_true(example: Example, workdir: Path) -> None:
    code, output = run_example(example.command, workdir)
    if example.expected is None:
        assert code == 0, f"{example}: {example.command}\n" + "\n".join(output)
    else:
        assert "\n".join(output) == "\n".join(example.expected).strip(), f"{example}: {example.command}"


def update_console_blocks(document: Path) -> None:
    """Rewrite each ```console block of `document` with what its commands print now (run from the root)."""
    out, in_console = [], False
    for line in document.read_text(encoding="utf-8").splitlines():
        if line.startswith("```console"):
            in_console, commands = True, []
            out.append(line)
        elif in_console and line.startswith("```"):
            for command in commands:
                out.append(f"$ {command}")
                out.extend(run_example(command, ROOT)[1])
            out.append(line)
            in_console = False
        elif in_console:
            if line.startswith("$ "):
                commands.append(line[2:].strip())
            elif commands and commands[-1].endswith("\\"):
                commands[-1] = commands[-1][:-1].rstrip() + " " + line.strip()
        else:
            out.append(line)
    document.write_text("\n".join(out) + "\n", encoding="utf-8")


if __name__ == "__main__":  # python -m tests.test_docs_examples README.md docs/x.md: refresh console blocks
    import sys

    for name in sys.argv[1:]:
        update_console_blocks(ROOT / name)

"""The README's prose does not drift from the tool: every figure it states (a decimal, or a number with a unit
such as tok/s, ms, µs or GB) is either printed by one of its ```console blocks, which `test_docs_examples`
runs, or stands in a paragraph that names the command printing it (`moesim ...`, `python benchmarks/...`,
`python scripts/...`, `python -m ...`) or the committed file it is read from (a report or data file under `docs/`, `moesim/` or
`tests/data/`: a record made by a stated command, or the module holding a documented default); a table
counts as part of the paragraph that introduces it."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
FIGURE = re.compile(
    r"(?<![\w.\-/])\d[\d,]*\.\d+(?:\s?(?:×|%|tok/s|ms|µs|s|GB|B))?(?![\w.])"
    r"|(?<![\w.\-/])\d[\d,]*\s?(?:tok/s|ms|µs|GB)(?!\w)"
)
COMMAND = re.compile(r"`(?:moesim |python3?\s+(?:benchmarks/|scripts/|-m )|docs/|moesim/|tests/data/)[^`]*`")


def paragraphs_and_console(text: str) -> tuple[list[str], str]:
    """The prose paragraphs (code blocks left out) and the text of every console block."""
    paragraphs: list[str] = []
    console: list[str] = []
    current: list[str] = []
    language: str | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if language is None:
                language = line[3:].strip() or "text"
                if current:
                    paragraphs.append("\n".join(current))
                    current = []
            else:
                language = None
            continue
        if language is not None:
            if language == "console":
                console.append(line)
        elif line.strip():
            current.append(line)
        elif current:
            paragraphs.append("\n".join(current))
            current = []
    if current:
        paragraphs.append("\n".join(current))
    return paragraphs, "\n".join(console)


def unsourced_figures(text: str) -> list[str]:
    """`figure: paragraph start` for every figure neither printed by a console block nor in a paragraph
    that names its command."""
    paragraphs, console = paragraphs_and_console(text)
    found = []
    for index, paragraph in enumerate(paragraphs):
        introduced = paragraph.startswith("|") and index > 0 and COMMAND.search(paragraphs[index - 1])
        if COMMAND.search(paragraph) or introduced:
            continue
        for match in FIGURE.finditer(paragraph):
            number = re.match(r"[\d,.]+", match.group(0)).group(0)  # type: ignore[union-attr]
            if number not in console:
                found.append(f"{match.group(0)}: {paragraph.splitlines()[0][:80]}")
    return found


def test_every_readme_figure_comes_from_a_console_block_or_names_its_command() -> None:
    assert unsourced_figures(README.read_text(encoding="utf-8")) == []


def test_the_rule_sees_an_unsourced_figure() -> None:
    text = "The speedup is 1.97× here.\n\n```console\n$ moesim sweep\nspeedup 2.50\n```\n"
    assert unsourced_figures(text) == ["1.97×: The speedup is 1.97× here."]
    assert unsourced_figures("`moesim simulate` prints 1.97×.\n") == []
    assert unsourced_figures(text.replace("1.97", "2.50")) == []
    table = "On R4 (`moesim validate bench R4.jsonl`):\n\n| c | tok/s |\n|---|---|\n| 1 | 255.7 |\n"
    assert unsourced_figures(table) == []

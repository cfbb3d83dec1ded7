"""The house rules, read from the imports themselves (ast): which room may import which.

- plan/ describes work: it never imports execution/ or hardware/;
- models/, hardware/ and routing/ import nothing of the simulator outside their own room;
- execution/ times plans: it never imports the speculative room, the scenario or the API above it;
- serving/ (the serving loop) sits above them all but under the API: no room below imports it;
- screening/ builds on speculative/ and the scenario, never on the API or the CLI above it;
- torch is imported only by the calibration suites, the routing recorder and the torch reference
  (calibrate/suites/, calibrate/routing_record.py, validation/reference/);
- no import circles between moesim's modules, lazy imports included;
- the roofline (fixed latency + max(compute, memory)) is written in one module, execution/cost.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import moesim

PACKAGE = Path(moesim.__file__).parent
SIM = "moesim.simulator."
ROOMS = (
    "models",
    "hardware",
    "routing",
    "engines",
    "plan",
    "execution",
    "speculative",
    "serving",
    "screening",
)

# For each room: the simulator modules (prefixes) it must not import, whatever the import's position.
ABOVE = (SIM + "scenario", SIM + "simulate")


def _all_rooms_but(room: str) -> tuple[str, ...]:
    return (*(SIM + r for r in ROOMS if r != room), *ABOVE)


FORBIDDEN: dict[str, tuple[str, ...]] = {
    "models": _all_rooms_but("models"),
    "hardware": _all_rooms_but("hardware"),
    "routing": _all_rooms_but("routing"),
    "engines": _all_rooms_but("engines"),
    "plan": (
        SIM + "execution",
        SIM + "hardware",
        SIM + "speculative",
        SIM + "serving",
        SIM + "scenario",
        SIM + "simulate",
    ),
    "execution": (SIM + "speculative", SIM + "serving", SIM + "scenario", SIM + "simulate"),
    "speculative": (SIM + "serving", SIM + "simulate"),
    "serving": (SIM + "simulate",),
    "screening": (SIM + "serving", SIM + "simulate", "moesim.commands", "moesim.cli"),
}


def runtime_imports(source: str) -> list[ast.Import | ast.ImportFrom]:
    """The absolute import statements of a source file, at the top or inside functions, leaving out
    TYPE_CHECKING blocks (never run) and `if __name__ == "__main__":` blocks (run as another module)."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        test = ast.unparse(node.test) if isinstance(node, ast.If) else ""
        if "TYPE_CHECKING" in test or "__name__ == '__main__'" in test:
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return [
        node
        for node in ast.walk(tree)
        if id(node) not in skipped
        and (
            isinstance(node, ast.Import)
            or (isinstance(node, ast.ImportFrom) and node.module and node.level == 0)
        )
    ]


def imported_modules(source: str) -> set[str]:
    """Every module a source file imports, at the top or inside functions (TYPE_CHECKING blocks excluded)."""
    out: set[str] = set()
    for node in runtime_imports(source):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        else:
            assert node.module is not None
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def room_violations(room: str, files: dict[str, str]) -> list[str]:
    """`file: module` for every import in `files` (path -> source) that `room` may not make."""
    banned = FORBIDDEN[room]
    return [
        f"{path}: {module}"
        for path, source in sorted(files.items())
        for module in sorted(imported_modules(source))
        if any(module == b or module.startswith(b + ".") for b in banned)
    ]


def room_sources(room: str) -> dict[str, str]:
    return {str(p.relative_to(PACKAGE)): p.read_text() for p in (PACKAGE / "simulator" / room).rglob("*.py")}


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_rooms_import_only_what_they_may(room: str) -> None:
    assert room_violations(room, room_sources(room)) == []


@pytest.mark.parametrize(
    ("room", "line"),
    [
        ("plan", "from moesim.simulator.execution.events import run_events"),
        ("plan", "from moesim.simulator.hardware.profile import HardwareProfile"),
        ("plan", "import moesim.simulator.execution.fastpath"),
        ("models", "from moesim.simulator.plan.step import StepPlan"),
        ("hardware", "from moesim.simulator.routing.base import RoutingModel"),
        ("routing", "from moesim.simulator.models.spec import ModelSpec"),
        ("execution", "from moesim.simulator.speculative.point import speculative_point"),
    ],
)
def test_a_forbidden_import_added_to_a_room_is_caught(room: str, line: str) -> None:
    files = room_sources(room)
    victim = sorted(files)[0]
    inside_a_function = f"def helper():\n    {line}\n"
    assert room_violations(room, {**files, victim: files[victim] + "\n" + line + "\n"}) == [
        f"{victim}: {m}" for m in sorted(imported_modules(line)) if m.startswith(SIM)
    ]
    assert room_violations(room, {victim: inside_a_function}) != []


def test_type_checking_imports_are_not_runtime_imports() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from moesim.simulator.hardware.profile import X\n"
    assert room_violations("plan", {"x.py": source}) == []


def test_torch_only_in_the_suites_and_the_reference() -> None:
    allowed = (
        PACKAGE / "calibrate" / "suites",
        PACKAGE / "calibrate" / "routing_record.py",
        PACKAGE / "validation" / "reference",
    )
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if not any(path.is_relative_to(a) for a in allowed)
        and any(m == "torch" or m.startswith("torch.") for m in imported_modules(path.read_text()))
    ]
    assert offenders == []


def test_the_roofline_is_written_once() -> None:
    """Only execution/cost.py writes fixed latency + max(compute, memory) or defines a roofline function."""
    writers = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            named = isinstance(node, ast.FunctionDef) and "roofline" in node.name
            formula = (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Add)
                and isinstance(node.right, ast.Call)
                and ast.unparse(node.right.func) in ("np.maximum", "max")
                and "fixed" in ast.unparse(node.left)
            )
            if named or formula:
                writers.append(str(path.relative_to(PACKAGE)))
    assert sorted(set(writers)) == ["simulator/execution/cost.py"]


def test_every_room_says_what_it_owns_and_may_import() -> None:
    for room in ROOMS:
        doc = ast.get_docstring(ast.parse((PACKAGE / "simulator" / room / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), (
            f"simulator/{room}/__init__.py needs a docstring with its import rule"
        )


def module_name(path: Path) -> str:
    parts = ("moesim", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(files: dict[str, str]) -> dict[str, set[str]]:
    """module -> the moesim modules it imports at run time. `from package import submodule` is an import of
    the submodule (a package's own `__init__` importing its submodules is no circle)."""
    graph: dict[str, set[str]] = {}
    for name, source in files.items():
        edges: set[str] = set()
        for node in runtime_imports(source):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
                continue
            assert node.module is not None
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(files)
            edges.update(submodules)
            if len(submodules) < len(node.names):
                edges.add(node.module)
        graph[name] = {m for m in edges if m in files and m != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted: every import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def package_sources() -> dict[str, str]:
    return {module_name(p): p.read_text() for p in PACKAGE.rglob("*.py")}


def test_no_import_circles_between_modules() -> None:
    assert import_circles(import_graph(package_sources())) == []


def test_an_import_circle_is_caught() -> None:
    files = {
        "moesim.a": "from moesim.b import x\n",
        "moesim.b": "def f():\n    from moesim.c import y\n",
        "moesim.c": "import moesim.a\n",
        "moesim.d": "from moesim.a import z\n",
    }
    assert import_circles(import_graph(files)) == [["moesim.a", "moesim.b", "moesim.c"]]
    typed = {
        **files,
        "moesim.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import moesim.a\n",
    }
    assert import_circles(import_graph(typed)) == []
    package = {
        "moesim.p": "from moesim.p import q\n",
        "moesim.p.q": "from moesim.p import r\n",
        "moesim.p.r": "X = 1\n",
    }
    assert import_circles(import_graph(package)) == []

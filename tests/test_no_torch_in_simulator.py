"""The simulator must run where torch is not installed: importing it must not pull torch in."""

import subprocess
import sys
from pathlib import Path

import moesim.simulator

SIMULATOR_DIR = Path(moesim.simulator.__file__).parent


def test_no_module_under_simulator_imports_torch() -> None:
    modules = sorted(
        "moesim.simulator." + ".".join(path.relative_to(SIMULATOR_DIR).with_suffix("").parts)
        for path in SIMULATOR_DIR.rglob("*.py")
        if path.name != "__init__.py"
    )
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + "print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_cli_starts_without_importing_torch() -> None:
    code = "import sys; import moesim.cli; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"

"""The layers of ARCHITECTURE.md hold: import-linter's contracts pass and match the document, and no
project module is imported inside a function (import-linter counts those imports; this makes them visible).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROJECT = ("core", "cli", "api", "app", "pages", "interface")
SOURCES = ("core", "interface", "cli", "api", "app", "pages")


def _contracts() -> list[dict[str, object]]:
    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"])


def _local_project_imports(path: Path, root: Path = REPO) -> list[str]:
    """``file:line module`` of each import of a project module inside a function of ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                names = [alias.name for alias in inner.names]
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                names = [inner.module]
            elif isinstance(inner, ast.ImportFrom):
                names = ["." * inner.level + (inner.module or "")]  # a relative import is always the project's
            else:
                continue
            for name in names:
                if name.startswith(".") or name.split(".")[0] in PROJECT:
                    found.append(f"{path.relative_to(root)}:{inner.lineno} {name}")
    return found


def test_no_project_module_is_imported_inside_a_function() -> None:
    files = [p for folder in SOURCES for p in sorted((REPO / folder).rglob("*.py")) if "migrations" not in p.parts]
    assert len(files) > 50
    found = [hit for path in files for hit in _local_project_imports(path)]
    assert found == [], "import these at the top of the module (ARCHITECTURE.md):\n" + "\n".join(found)


def test_the_finder_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json\nfrom core import events\n\n\ndef f():\n    from core import errors\n    import pandas\n"
        "    from . import sibling\n    return errors\n"
    )
    assert _local_project_imports(probe, tmp_path) == ["probe.py:6 core", "probe.py:8 ."]


def test_the_import_contracts_hold_without_ignores() -> None:
    assert all("ignore_imports" not in contract for contract in _contracts())
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in done.stdout


def _documented_layers(section: str = "## The layers of `core/`, top to bottom") -> list[tuple[str, set[str]]]:
    """(name, modules) of each row of the layer table under ARCHITECTURE.md's ``section``, top to bottom."""
    text = (REPO / "ARCHITECTURE.md").read_text()
    table = text.split(section, 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:4] for line in table.splitlines() if line.startswith("| ") and "`" in line]
    return [(name.strip(), set(re.findall(r"`(\w+)`", modules))) for name, modules, _what in rows]


def _contract_layers(contract_id: str) -> list[set[str]]:
    [layers] = [c for c in _contracts() if c["id"] == contract_id]
    return [set(re.split(r"\s*[|:]\s*", str(layer).strip())) for layer in layers["layers"]]  # type: ignore[attr-defined]


def test_architecture_md_lists_the_contract_s_layers_in_order() -> None:
    documented = _documented_layers()
    assert [modules for _name, modules in documented] == _contract_layers("core-layers")
    assert len({name for name, _ in documented}) == len(documented)


def test_architecture_md_lists_the_packages_in_the_contract_s_order() -> None:
    documented = _documented_layers("## The packages, top to bottom")
    assert [packages for _name, packages in documented] == _contract_layers("packages")
    root = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    assert set().union(*(packages for _name, packages in documented)) == set(root)


def test_every_module_of_core_has_its_layer() -> None:
    modules = {p.stem for p in (REPO / "core").glob("*.py") if p.stem != "__init__"}
    layered = set().union(*(modules for _name, modules in _documented_layers()))
    assert modules - layered == set(), "add the new module to a layer (ARCHITECTURE.md and pyproject.toml)"
    assert layered - modules == set()

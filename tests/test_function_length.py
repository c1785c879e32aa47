"""No function of core/, interface/, the front ends or pages/ is longer than 80 lines: a long one reads as steps."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("core", "interface", "cli", "api", "app", "pages")
MAX_LINES = 80


def _long_functions(path: Path, root: Path = REPO, limit: int = MAX_LINES) -> list[str]:
    """``file:line name (n lines)`` of each function of ``path`` longer than ``limit`` lines.

    A function's lines run from its ``def`` to its last line, docstring and nested
    functions included (decorators are not counted).
    """
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_80_lines() -> None:
    files = [p for folder in SOURCES for p in sorted((REPO / folder).rglob("*.py"))]
    assert len(files) > 50
    found = [hit for path in files for hit in _long_functions(path)]
    assert found == [], f"split these into named steps of at most {MAX_LINES} lines:\n" + "\n".join(found)


def test_the_finder_counts_from_def_to_the_last_line(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(78))
    probe = tmp_path / "probe.py"
    probe.write_text(
        f'def short():\n    """Eighty lines."""\n{body}\n\n\n'
        f'async def long():\n    """Eighty-one lines."""\n{body}\n    return x0\n'
    )
    assert _long_functions(probe, tmp_path) == ["probe.py:83 long (81 lines)"]

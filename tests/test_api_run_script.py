"""`make run` (scripts/run.sh) starts `oreo api` beside the app and stops it when the app exits."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_run_script_starts_the_api_beside_the_app_and_stops_it_after(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Stand-ins that record their arguments: the API waits forever, the app ends at once.
    (bin_dir / "oreo").write_text(
        f'#!/bin/sh\necho "$@" > {tmp_path}/api.args\necho $$ > {tmp_path}/api.pid\nexec sleep 600\n'
    )
    (bin_dir / "streamlit").write_text(
        f'#!/bin/sh\nwhile [ ! -s {tmp_path}/api.pid ]; do sleep 0.05; done\necho "$@" > {tmp_path}/app.args\n'
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    done = subprocess.run(
        ["scripts/run.sh"], cwd=ROOT, env={**os.environ, "BIN": str(bin_dir)}, timeout=60, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "api.args").read_text().split() == ["api", "--host", "127.0.0.1", "--port", "8600"]
    assert (tmp_path / "app.args").read_text().split()[:2] == ["run", "app/main.py"]
    api_pid = int((tmp_path / "api.pid").read_text())
    assert not Path(f"/proc/{api_pid}").exists() or "zombie" in Path(f"/proc/{api_pid}/status").read_text()

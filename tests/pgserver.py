"""A throwaway PostgreSQL cluster from the Debian server binaries, for catalog tests."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL {name} not found; run scripts/install_postgres.sh (make test does)")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; drop to the package's postgres user when we are root.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def postgres_cluster(base: Path) -> Iterator[str]:
    """Start a cluster under ``base`` on a free port; yield a psycopg SQLAlchemy URL."""
    base.mkdir(parents=True, exist_ok=True)
    data = base / "pgdata"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    port = _free_port()
    subprocess.run(
        _as_postgres([_bin("initdb"), "-D", str(data), "-U", "oreo", "--auth=trust", "-E", "UTF8"]),
        check=True,
        capture_output=True,
    )
    log = base / "server.log"
    subprocess.run(
        _as_postgres(
            [
                _bin("pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {port} -k {base} -c listen_addresses=127.0.0.1",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            ready = subprocess.run([_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(port)], capture_output=True)
            if ready.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not become ready:\n{log.read_text()}")
            time.sleep(0.2)
        subprocess.run([_bin("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "oreo", "oreo"], check=True)
        yield f"postgresql+psycopg://oreo@127.0.0.1:{port}/oreo"
    finally:
        subprocess.run(_as_postgres([_bin("pg_ctl"), "-D", str(data), "-m", "fast", "stop"]), capture_output=True)

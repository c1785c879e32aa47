"""Which compilers the JVMs the suite starts use: C1 alone for the short-lived, both for the long-lived.

Most JVMs the suite starts live for seconds (an ``oreo`` child process, a cluster's master
and workers): for them C2's compilations cost more CPU than they save, and a 2-row ``oreo
dataset create`` took 15 CPU-s with C1 alone against 25 with both (with the class archive,
interleaved runs). A JVM that lives for a module or the whole run (this process's Spark, a
Streamlit or API server, the cluster's Connect server) runs its hot paths long enough for
C2 to pay: with C1 alone in-process tests ran 20-60% longer (tests/test_merge.py 66 -> 87 s,
tests/test_layout.py 29 -> 61 s in one full run). ``tests/conftest.py`` sets ``QUICK_JIT``
for every child; ``long_lived`` takes it out of the environment of one that stays.
"""

from __future__ import annotations

QUICK_JIT = "-XX:TieredStopAtLevel=1"
SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"  # read by spark-submit: drivers and the Connect server


def long_lived(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process whose JVM stays up: the JVM's own default compilers."""
    if env.get(SUBMIT_OPTS) == QUICK_JIT:
        return {k: v for k, v in env.items() if k != SUBMIT_OPTS}
    return env

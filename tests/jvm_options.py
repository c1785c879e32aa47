"""Which compilers the JVMs the suite starts use: C1 alone for the short-lived, both for the long-lived.

Most JVMs the suite starts live for seconds (an ``oreo`` child process, a cluster's master
and workers): for them C2's compilations cost more CPU than they save, and a 2-row ``oreo
dataset create`` took 15 CPU-s with C1 alone against 25 with both (with the class archive,
interleaved runs). A JVM that lives for a module or the whole run (this process's Spark, a
Streamlit or API server, the cluster's Connect server) runs its hot paths long enough for
C2 to pay: with C1 alone in-process tests ran 20-60% longer (tests/test_merge.py 66 -> 87 s,
tests/test_layout.py 29 -> 61 s in one full run). ``tests/conftest.py`` sets ``QUICK_JIT``
for every child; ``long_lived`` takes it out of the environment of one that stays.

Every JVM the suite starts collects its garbage with the serial collector (``SERIAL_GC``),
not G1, the JVM's choice on this 2-core host: the suite's heaps are small and its JVMs
share two cores, so G1's concurrent and parallel threads (marking, refinement, a parallel
pause) cost more CPU than the short pauses they buy. tests/test_merge.py and
tests/test_history.py in one process: 125-136 CPU-s (86-92 s) with it against 156-166
(102-107 s) with G1 (interleaved runs). The product keeps the JVM's default.
"""

from __future__ import annotations

SERIAL_GC = "-XX:+UseSerialGC"
# What a short-lived JVM runs with: the client compiler only, and the serial collector.
QUICK_JIT = f"{SERIAL_GC} -XX:TieredStopAtLevel=1"
# What a long-lived one runs with (spark-submit's SPARK_SUBMIT_OPTS): both compilers, the serial collector.
LONG_LIVED = SERIAL_GC
# Spark's interpreted expression evaluation (its own test mode) for the suite's embedded drivers
# and its local Connect servers: the suite's tables hold a few rows to a few thousand, so
# generating and compiling Java for each new query plan (Janino) costs more CPU than it saves.
# tests/test_merge.py alone: 155-167 CPU-s with code generation, 137 without (interleaved runs).
# The loopback cluster, the benchmark and the product keep Spark's defaults.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
PYSPARK_SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"  # read by pyspark when it starts a driver
SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"  # read by spark-submit: drivers and the Connect server


def interpreted_args() -> list[str]:
    """``--conf`` arguments of spark-submit for ``INTERPRETED``."""
    return [arg for key, value in INTERPRETED.items() for arg in ("--conf", f"{key}={value}")]


def interpreted_submit_args() -> str:
    """``PYSPARK_SUBMIT_ARGS`` for a driver pyspark starts, with ``INTERPRETED``."""
    return " ".join([*interpreted_args(), "pyspark-shell"])


def long_lived(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process whose JVM stays up: the JVM's own default compilers (``LONG_LIVED``)."""
    if env.get(SUBMIT_OPTS) == QUICK_JIT:
        return {**env, SUBMIT_OPTS: LONG_LIVED}
    return env

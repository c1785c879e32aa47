"""Recognising a full disk underneath Spark, DuckDB or Python, wherever the error came from.

Spark reports ``ENOSPC`` as a Java ``IOException`` deep in a Py4J error's text, DuckDB as
an ``IO Error``, Python as an ``OSError``; ``is_out_of_space`` looks through all of them
(and their causes), so callers can turn any of them into one ``OutOfSpace`` line.
"""

from __future__ import annotations

import errno

from core.errors import OutOfSpace
from core.storage import Location

_MARKERS = ("no space left on device", "disk quota exceeded", "disk is full")


def is_out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a full disk or an exceeded quota."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(marker in str(current).lower() for marker in _MARKERS):
            return True
        current = current.__cause__ or current.__context__
    return False


def out_of_space(what: str, path: Location | str) -> OutOfSpace:
    """The error for a write of ``what`` to ``path`` that ran out of space."""
    return OutOfSpace(
        f"no space left on the device holding {path} while writing {what}; nothing was kept",
        path=str(path),
        hint="free some space (or grow the volume) and try again",
    )

"""Reading the row diff's HTML table (``app.diff_views``) back, for page tests."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any


class _Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self._cell: dict[str, Any] | None = None
        self._part: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-kind"):
            self.rows.append({"row_id": a["data-row-id"], "kind": a["data-kind"], "cells": {}})
        elif tag == "td" and a.get("data-column") and self.rows:
            self._cell = {"column": a["data-column"], "class": a.get("class"), "text": "", "old": "", "new": ""}
        elif tag in ("del", "ins") and self._cell is not None:
            self._part = "old" if tag == "del" else "new"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("del", "ins"):
            self._part = None
        elif tag == "td" and self._cell is not None:
            cell, self._cell = self._cell, None
            value: Any = (cell["old"], cell["new"]) if cell["class"] == "oreo-changed" else cell["text"]
            self.rows[-1]["cells"][cell["column"]] = value

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data
            if self._part:
                self._cell[self._part] += data


def diff_rows(markup: str) -> list[dict[str, Any]]:
    """The rows of a row-diff table: ``row_id``, ``kind`` and ``cells`` (column -> text, or (old, new) if changed)."""
    parser = _Rows()
    parser.feed(markup)
    return parser.rows


def html_bodies(at: Any) -> list[str]:
    """The HTML of every ``st.html`` element an ``AppTest`` run drew."""
    return [str(e.proto.body) for e in at.get("html")]

#!/usr/bin/env bash
# `make run`: the Streamlit app on :8501 and, beside it, the HTTP API (`oreo api`) on :8600.
# The API runs in the background and is stopped when the app exits (Ctrl-C included).
set -euo pipefail
BIN="${BIN:-.venv/bin}"

"$BIN/oreo" api --host "${OREO_API_HOST:-127.0.0.1}" --port "${OREO_API_PORT:-8600}" &
api=$!
trap 'kill "$api" 2>/dev/null || true; wait "$api" 2>/dev/null || true' EXIT

"$BIN/streamlit" run app/main.py --server.port 8501 --server.address 0.0.0.0 --server.headless true

"""The HTTP API (``oreo api``): FastAPI over the same core functions as the CLI and the pages."""

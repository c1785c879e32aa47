"""Oreo's benchmark harness: each workload through core beside the bare engines (``python -m bench``)."""

"""Browser tests: real Streamlit servers driven in headless Chromium (a package, so their fixtures end with them)."""

"""What the three front ends (the CLI, the HTTP API and the Streamlit pages) share above ``core``.

The documents their JSON is made of, the one table that says how a core error is shown, and
the views each of them would otherwise assemble from the same core calls. It imports ``core``
and no front end; the front ends import it and not each other.
"""

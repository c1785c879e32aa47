"""The ``oreo`` command families, one module each; ``cli/main.py`` composes them into one app."""

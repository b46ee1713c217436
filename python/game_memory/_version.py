"""The package version: the one place it is written (pyproject.toml reads it from here).

The addon's ``plugin.cfg`` repeats it for Godot, and a test checks the two agree.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"

"""The package version (the root and every writer import it from here)."""

__version__ = "0.1.0"

"""Deprecated: the decode check moved to `virtualize.checks.decode`. This module only
re-exports its names."""

from .checks.decode import DecodeCheck, decode_check

__all__ = ["DecodeCheck", "decode_check"]

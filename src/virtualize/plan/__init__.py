"""Planners: fit many files' block tables into one chunk grid per output array."""

from .concat import ConcatOptions, plan_concat

__all__ = ["ConcatOptions", "plan_concat"]

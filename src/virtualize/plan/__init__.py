"""Planners: fit many files' block tables into one chunk grid per output array."""

from .concat import ConcatOptions, plan_concat
from .mosaic import MosaicOptions, plan_mosaic

__all__ = ["ConcatOptions", "MosaicOptions", "plan_concat", "plan_mosaic"]

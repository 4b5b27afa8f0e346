"""Planners: fit many files' block tables into one chunk grid per output array."""

from ._common import DEFAULT_INLINE_THRESHOLD, is_uncompressed
from ._state import Resume, merge_append, relocate_state, resume_from, still_dropped
from .concat import ConcatOptions, plan_concat
from .mosaic import MosaicOptions, plan_mosaic

__all__ = ["DEFAULT_INLINE_THRESHOLD", "ConcatOptions", "MosaicOptions", "Resume",
           "is_uncompressed", "merge_append", "plan_concat", "plan_mosaic", "relocate_state",
           "resume_from", "still_dropped"]

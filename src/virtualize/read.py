"""Deprecated: reading moved to `virtualize.open` (opening any kind) and
`virtualize.outputs` (each kind's reader). This module only re-exports the old names."""

from .open import open_cube, open_store, plan_store
from .outputs.base import ConsolidatedView, rectilinear_enabled, register_codecs
from .outputs.cube.reader import CubeStore, Manifest
from .outputs.kerchunk.reader import kerchunk_store
from .outputs.record import changed_sources
from .outputs.references import reference_store

__all__ = ["ConsolidatedView", "CubeStore", "Manifest", "changed_sources", "kerchunk_store",
           "open_cube", "open_store", "plan_store", "rectilinear_enabled", "reference_store",
           "register_codecs"]

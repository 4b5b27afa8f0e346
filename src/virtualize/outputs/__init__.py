"""Output kinds, one plug-in each (registry.py holds the list; other packages add theirs by
entry points): a cube directory, a GDAL VRT, a kerchunk reference JSON or parquet set, an
Icechunk repository; each package holds its writer and its reader, and imports no other
kind. What they share lies below them: base.py (the OutputKind base class), references.py,
record.py (the provenance record), staging.py, walk.py, access.py, metadata.py, ..."""

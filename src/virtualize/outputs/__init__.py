"""Output kinds, one plug-in each (registry.py holds the list): a cube directory, a
kerchunk reference JSON, an Icechunk repository; each package holds its writer and its
reader. The provenance record they share is record.py."""

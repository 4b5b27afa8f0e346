"""Deprecated: see `virtualize.formats.netcdf3`."""

from ..formats.netcdf3 import parse_header, read_netcdf3_values, scan_netcdf3

__all__ = ["parse_header", "read_netcdf3_values", "scan_netcdf3"]

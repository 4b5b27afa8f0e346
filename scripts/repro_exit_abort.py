"""The abort at interpreter exit of a process that loaded ecCodes' wheel, then pyproj
(docs/grib.md, "Known issue"). Not run by the tests as is; tests/test_grib.py runs its
`virtualize` mode.

    python scripts/repro_exit_abort.py          # import eccodes, then pyproj: exits 134/139
    python scripts/repro_exit_abort.py virtualize   # ecCodes through virtualize: exits 0

The cause (eccodes 2.50, eccodeslib 2.50.0.33, eckitlib, pyproj 3.8 wheels on Linux):
ecCodes' Python bindings find their library with findlibs, which opens every library of
`eckitlib/lib64` RTLD_GLOBAL; `libeckit_geo.so` needs eckitlib's own copy of PROJ 9.8
(`eckitlib.libs/libproj-e5164a33.so`), so that copy's symbols become global. pyproj's
copy (`pyproj.libs/libproj-bde9a34c.so`, the same PROJ, another file) loaded afterwards
binds its C++ globals (`osgeo::proj::common::UnitOfMeasure::METRE`, `DEGREE`, ... and
~1,900 other symbols: `LD_DEBUG=bindings`) to eckit's copy. Both copies' static
initialisers construct those objects at eckit's address and both register their
destructors with `__cxa_atexit`: at exit the second `~UnitOfMeasure` frees the strings
again ("double free or corruption" / "free(): invalid pointer", SIGABRT or SIGSEGV in
`__run_exit_handlers`). pyproj imported first keeps its copy private (an extension's
libraries are RTLD_LOCAL), eckit's then binds to itself: `virtualize.codecs.load_eccodes`
imports them in that order.
"""

import sys


def main(mode: str) -> None:
    if mode == "virtualize":
        from virtualize.codecs import load_eccodes

        ec = load_eccodes()
    else:
        import eccodes as ec
    import pyproj

    # (any use, or none: the objects are built when the libraries load)
    pyproj.CRS.from_epsg(4326)
    h = ec.codes_grib_new_from_samples("GRIB2")
    ec.codes_release(h)
    print("done; the process now exits", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "eccodes")

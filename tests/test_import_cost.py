"""Import cost (issue #32): `import virtualize` and `virtualize --version` load none of
the heavy libraries; each is imported where it is first needed. Module presence, never
a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = {"zarr", "h5py", "xarray", "dask", "distributed", "eccodes", "gribapi", "astropy",
         "pyhdf", "pyproj", "imagecodecs", "tifffile", "fsspec", "numcodecs", "pyarrow",
         "icechunk", "netCDF4", "cftime", "ujson"}

PROBE = """
import json, sys
{code}
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}})))
"""


def _loaded(code: str) -> set[str]:
    r = subprocess.run([sys.executable, "-c", PROBE.format(code=code)], capture_output=True,
                       text=True, check=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


def test_import_virtualize_loads_no_heavy_library():
    loaded = _loaded("import virtualize\nassert virtualize.__version__")
    assert "virtualize" in loaded
    assert not loaded & HEAVY, sorted(loaded & HEAVY)
    assert "numpy" not in loaded  # (not even numpy: the version needs none)


def test_version_loads_no_heavy_library_and_names_are_found_on_use():
    loaded = _loaded("import sys\nfrom virtualize.cli import main\n"
                     "assert main(['--version']) == 0")
    assert not loaded & (HEAVY | {"numpy"}), sorted(loaded & HEAVY)
    # each public name on first use, the function (not the submodule `virtualize.open`)
    loaded = _loaded("import virtualize, virtualize.xarray_backend\n"
                     "assert callable(virtualize.open) and callable(virtualize.check)\n"
                     "assert virtualize.Report.__name__ == 'Report'\n"
                     "assert set(virtualize.__all__) <= set(dir(virtualize))")
    assert {"zarr", "xarray"} <= loaded


def test_version_on_the_command_line():
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True)
    from virtualize import __version__

    assert r.returncode == 0 and r.stdout.strip() == f"virtualize {__version__}"


DATA = os.path.join(os.path.dirname(__file__), "data")
ONE_FILE = {"eccodes": "cfgrib/regular_ll_sfc.grib", "astropy": "fits/arange.fits",
            "pyhdf": "hdf4/SDSfloat2.hdf"}
CHECK = """
from virtualize.cli import main
from virtualize.run import workers
assert main(["check", "-q"{timeout}, {path!r}]) == 0
assert not workers._idle  # no scan worker was started and kept
"""


def test_one_file_check_imports_no_zarr():
    """`virtualize check FILE` of a GRIB, FITS or HDF4 file scanned in its own process
    (--scan-timeout 0) imports no zarr: its decode check decodes without it
    (checks/decode.py DIRECT); the HDF4 one nothing heavy but pyhdf."""
    import importlib.util

    for library, name in ONE_FILE.items():
        if importlib.util.find_spec(library) is None:
            continue
        loaded = _loaded(CHECK.format(timeout=', "--scan-timeout", "0"',
                                      path=os.path.join(DATA, name)))
        assert library in loaded and "zarr" not in loaded, (name, sorted(loaded & HEAVY))
        if library == "pyhdf":
            assert not loaded & (HEAVY - {"pyhdf"}), sorted(loaded & HEAVY)


def test_one_file_check_is_one_job_in_one_worker():
    """A one-file check within a scan timeout (the default) runs whole (scan, plan, decode
    check) in one process forked for it (run/workers.py `run_alone`): the caller loads no
    format library and starts no scan worker, and the answer is the same."""
    import importlib.util

    for library, name in ONE_FILE.items():
        if importlib.util.find_spec(library) is None:
            continue
        loaded = _loaded(CHECK.format(timeout="", path=os.path.join(DATA, name)))
        assert not loaded & HEAVY, (name, sorted(loaded & HEAVY))


def test_help_loads_no_writer():
    """`virtualize --help` lists the commands: none's options are built, so no output
    kind's writer (zarr) is imported, nor the entry points read before the text is shown."""
    loaded = _loaded("import contextlib, io\nfrom virtualize.cli import main\n"
                     "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
                     "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
                     "assert 'check' in out.getvalue() and 'GRIB' in out.getvalue()")
    assert not loaded & HEAVY, sorted(loaded & HEAVY)


def test_a_public_name_is_never_its_submodule():
    """`virtualize.api.catalog` is the function even when its module was loaded first for
    another name (CATALOG_KINDS, as `virtualize catalog`'s options do): the submodule's
    import binds the module under that name in the package (the CLI called the module)."""
    code = ("import types\n"
            "from virtualize.api import CATALOG_KINDS\n"
            "from virtualize.api import catalog\n"
            "import virtualize, virtualize.api as api\n"
            "assert callable(catalog) and not isinstance(catalog, types.ModuleType), catalog\n"
            "bad = [n for n in api.__all__ if isinstance(getattr(api, n), types.ModuleType)]\n"
            "bad += [n for n in virtualize.__all__\n"
            "        if isinstance(getattr(virtualize, n), types.ModuleType)]\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]

import importlib.util
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

try:  # before anything loads ecCodes (cfgrib imports it directly, through xarray's engine
    import pyproj  # noqa: F401  list): the other order aborts the process at exit
except ImportError:  # (docs/grib.md, "Known issue"; virtualize.codecs.load_eccodes)
    pass

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

import _cases  # noqa: E402
import make_fits  # noqa: E402
import make_fixtures  # noqa: E402
import make_grib  # noqa: E402
import make_mosaic  # noqa: E402
import make_tiff  # noqa: E402

# What a test may need that a machine may lack: the Debian tools some tests and fixture
# cases run (with the package that carries each; .ci/run installs them), and optional
# Python packages (any other name). A test asks with `@pytest.mark.needs("h5repack")` (a
# parametrized case with `pytest.param(..., marks=needs("h5repack"))`), a fixture or test
# body with `require("h5repack")`; where it is missing the test is skipped, saying why.
COMMANDS = {**_cases.PACKAGES, "h5dump": "hdf5-tools", "ncdump": "netcdf-bin",
            "gdalinfo": "gdal-bin", "chromium": "chromium"}


def chromium() -> str | None:
    """The headless browser of the HTML report's test, if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing(name: str) -> str | None:
    """Why `name` (a command of COMMANDS, else a Python package) cannot be used here, or
    None when it can."""
    if name in COMMANDS:
        found = chromium() if name == "chromium" else shutil.which(name)
        return None if found else f"{name} is not installed (Debian: apt-get install {COMMANDS[name]})"
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"the Python package {name} is not installed"


def require(*names: str) -> None:
    """Skip the running test (or fixture) unless every one of `names` is here."""
    for name in names:
        why = missing(name)
        if why:
            pytest.skip(why)


def needs(*names: str):
    """The marker `needs(*names)`: skipped, saying why, unless each of `names` is here."""
    return pytest.mark.needs(*names)


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*names): skip unless these commands (ncgen, "
                                       "h5repack, gdal_translate, tiffcp, chromium, ...) or "
                                       "Python packages are installed (tests/conftest.py)")


def pytest_collection_modifyitems(config, items):
    # (a skip mark, not a skip in setup: the summary names the test, not this file)
    for item in items:
        why = next((w for mark in item.iter_markers("needs") for w in map(missing, mark.args) if w),
                   None)
        if why:
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session")
def fixture_root(tmp_path_factory):
    return tmp_path_factory.mktemp("fixtures")


@pytest.fixture(scope="session")
def case(fixture_root):
    """case(name) -> the files of a fixture case, built once per session."""
    built: dict[str, list[Path]] = {}

    def get(name: str) -> list[Path]:
        if name not in built:
            module = next(m for m in (make_tiff, make_mosaic, make_fixtures, make_fits,
                                           make_grib) if name in m.CASES)
            if not module.available(name):
                tool = module.REQUIRES[name]
                pytest.skip(f"fixture {name} needs {tool}, not installed (Debian: apt-get "
                            f"install {COMMANDS.get(tool, tool)})")
            built[name] = module.make(name, fixture_root)
        return built[name]

    return get


# The mutation suite's outcomes (tests/robustness/conftest.py's OUTCOMES), from this process
# and from every pytest-xdist worker (each sends its own at the end of its session).
_WORKERS_OUTCOMES: list[tuple[str, str]] = []


def _outcomes() -> list[tuple[str, str]]:
    here = sys.modules.get("robustness.conftest")
    return [*(here.OUTCOMES if here else []), *_WORKERS_OUTCOMES]


def pytest_sessionfinish(session):
    out = getattr(session.config, "workeroutput", None)  # (a pytest-xdist worker)
    if out is not None:
        out["robustness"] = _outcomes()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):  # (pytest-xdist, in the controller)
    _WORKERS_OUTCOMES.extend(tuple(o) for o in getattr(node, "workeroutput", {}).get("robustness", []))


def pytest_terminal_summary(terminalreporter):
    outcomes = _outcomes()
    if not outcomes:
        return
    by = Counter(o for _, o in outcomes)
    labels = {label for label, _ in outcomes}
    terminalreporter.write_line(
        f"robustness: {len(outcomes)} mutated files across {len(labels)} source formats/layouts: "
        f"{by['accepted']} accepted (equal to the library's read), {by['refused']} refused, "
        f"{by['unreadable-consistent']} accepted with damaged blocks neither the library nor the "
        "cube can decode (the rest of the array read)")
    if os.environ.get("VIRTUALIZE_MUTATIONS"):
        for label in sorted(labels):
            c = Counter(o for lab, o in outcomes if lab == label)
            terminalreporter.write_line(
                f"  {label}: {sum(c.values())} files, {c['accepted']} accepted, {c['refused']} "
                f"refused, {c['unreadable-consistent']} unreadable-consistent")

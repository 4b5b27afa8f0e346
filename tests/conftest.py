import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

import make_fixtures  # noqa: E402
import make_mosaic  # noqa: E402
import make_tiff  # noqa: E402


@pytest.fixture(scope="session")
def fixture_root(tmp_path_factory):
    return tmp_path_factory.mktemp("fixtures")


@pytest.fixture(scope="session")
def case(fixture_root):
    """case(name) -> the files of a fixture case, built once per session."""
    built: dict[str, list[Path]] = {}

    def get(name: str) -> list[Path]:
        if name not in built:
            module = next(m for m in (make_tiff, make_mosaic, make_fixtures) if name in m.CASES)
            if not module.available(name):
                pytest.skip(f"fixture {name} needs {module.REQUIRES[name]}, not installed")
            built[name] = module.make(name, fixture_root)
        return built[name]

    return get


def needs(tool: str):
    return pytest.mark.skipif(shutil.which(tool) is None, reason=f"{tool} is not installed")

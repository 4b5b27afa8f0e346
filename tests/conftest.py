import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

import make_fixtures  # noqa: E402


@pytest.fixture(scope="session")
def fixture_root(tmp_path_factory):
    return tmp_path_factory.mktemp("fixtures")


@pytest.fixture(scope="session")
def case(fixture_root):
    """case(name) -> the files of a fixture case, built once per session."""
    built: dict[str, list[Path]] = {}

    def get(name: str) -> list[Path]:
        if name not in built:
            built[name] = make_fixtures.make(name, fixture_root)
        return built[name]

    return get


def needs(tool: str):
    return pytest.mark.skipif(shutil.which(tool) is None, reason=f"{tool} is not installed")

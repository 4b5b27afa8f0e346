"""Regenerate docs/report/: the preflight report of the seed cases, as text, HTML and a
screenshot (headless Chromium), for docs/report.md.

    .venv/bin/python scripts/report_gallery.py [--no-screenshots]
"""

import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

import virtualize  # noqa: E402

import make_fixtures  # noqa: E402
import make_mosaic  # noqa: E402

OUT = ROOT / "docs" / "report"
CASES = {  # name: (fixture case, kind, screenshot height: the page down to its pictures)
    "months": ("months2024", "stack", 1300),
    "leap-years": ("years2000_2010", "stack", 1300),
    "ten-day-padded": ("tenday_padded", "stack", 2000),
    "staggered-mosaic": ("mosaic_staggered_misaligned", "mosaic", 1300),
}


def main() -> None:
    shots = "--no-screenshots" not in sys.argv
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for name, (case, kind, height) in CASES.items():
            module = make_mosaic if kind == "mosaic" else make_fixtures
            files = module.make(case, tmp / "data")
            report = (virtualize.check_mosaic(files) if kind == "mosaic"
                      else virtualize.check(files))
            text = report.to_text().replace(str(tmp / "data") + "/", "")
            (OUT / f"{name}.txt").write_text(text + "\n")
            page = OUT / f"{name}.html"
            page.write_text(report.to_html().replace(str(tmp / "data") + "/", ""))
            if shots and shutil.which("chromium"):
                subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                                "--no-first-run", "--disable-background-networking",
                                "--disable-component-update", "--disable-sync",
                                f"--user-data-dir={tmp / 'profile'}", "--hide-scrollbars",
                                f"--window-size=1000,{height}", f"--screenshot={OUT / (name + '.png')}",
                                page.as_uri()], capture_output=True, check=True, timeout=120)
            print(f"{name}: {report.to_text().splitlines()[0]}")


if __name__ == "__main__":
    main()

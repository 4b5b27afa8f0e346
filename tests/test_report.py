"""The preflight report in its three forms: terminal text, JSON (against its schema), and
an HTML page rendered by a real headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources

import imagecodecs
import jsonschema
import numpy as np
import pytest

import virtualize
from virtualize.report import format_text, to_html, verdict

from conftest import chromium
from helpers import read_pty, scaled_month

SCHEMA = json.loads(resources.files("virtualize").joinpath("schemas/report-v1.json").read_text())


def padded_and_string_stack(case, tmp_path):
    import h5py
    files = case("tenday_padded")[:3]
    # the same months with a string variable added: skipped, reported, not fatal
    out = []
    for f in files:
        dst = tmp_path / f.name
        shutil.copy(f, dst)
        with h5py.File(dst, "a") as h:
            # a compound with a string member: skipped
            h["station"] = np.zeros(2, dtype=[("a", "i4"), ("b", "S4")])
        out.append(dst)
    return out


def test_text_names_every_problem_with_its_location(case, tmp_path):
    files = padded_and_string_stack(case, tmp_path)
    report = virtualize.check(files)
    text = format_text(report)
    assert verdict(report) == "yes with remedies"
    assert text.startswith("yes with remedies: 2 problem(s) in 3 file(s)")
    for p in report.problems:
        assert p.kind in text and p.message in text
    assert text.count("padded-block") == 2 and "unsupported-type (skipped)" in text
    assert "\033[" not in text  # no colour unless asked (a TTY)
    assert "\033[31m" in format_text(report, color=True)


def test_json_follows_its_schema(case, tmp_path):
    files = padded_and_string_stack(case, tmp_path)
    for report in (virtualize.check(files), virtualize.check(case("months2024")),
                   virtualize.check_mosaic(case("mosaic_overlap_aligned"))):
        doc = json.loads(report.to_json())
        jsonschema.validate(doc, SCHEMA)
    doc = json.loads(virtualize.check(files).to_json())
    assert doc["verdict"] == "yes with remedies"
    # January keeps 1 valid day of its last 10-day block, February 9: 12 values of 4 bytes each
    assert [{k: r[k] for k in ("kind", "blocks", "bytes", "enabled", "option", "copies")}
            for r in doc["remedies"]] == [{"kind": "materialize", "blocks": 2,
                                           "bytes": (1 + 9) * 12 * 4, "enabled": False,
                                           "option": "--materialize", "copies": True}]
    assert "not enabled" in doc["remedies"][0]["words"]
    # refused and skipped variables are listed with their status
    assert doc["arrays"]["tas"]["status"] == "refused"
    assert doc["arrays"]["station"]["status"] == "skipped"
    assert doc["output"] is None
    assert {(p["kind"], p["loc"]["block"] and tuple(p["loc"]["block"])) for p in doc["problems"]} == {
        ("padded-block", (3,)), ("padded-block", (2,)), ("unsupported-type", None)}
    assert doc["summary"]["unsupported_variables_skipped"] == 1
    ok = json.loads(virtualize.check(case("months2024")).to_json())
    assert ok["verdict"] == "yes" and ok["summary"]["references"] == 12
    assert ok["arrays"]["tas"]["chunk_grid"]["name"] == "rectilinear"
    assert ok["summary"]["bytes_referenced"] == ok["arrays"]["tas"]["bytes_referenced"] > 0


def test_no_when_a_problem_has_no_remedy(case):
    report = virtualize.check(case("tenday_padded") + case("attr_drift"))
    assert verdict(report) == "no" and report.to_text().startswith("no: ")


def test_html_is_self_contained(case, tmp_path):
    page = virtualize.check(padded_and_string_stack(case, tmp_path)).to_html()
    assert page.startswith("<!DOCTYPE html>")
    for needle in ("http://", "https://", "<script", "<link"):
        assert needle not in page


def test_large_grids_are_summarized_not_drawn_chunk_by_chunk():
    from virtualize.model import OK, AxisFigure
    from virtualize.report.as_html import _band

    lengths = np.tile([3, 1], 500_000)  # a million chunks, alternating: the worst case
    axis = AxisFigure("t", int(lengths.sum()), lengths, np.full(len(lengths), OK, dtype=object))
    svg = _band(axis)
    assert len(svg) < 100_000 and "more chunks" in svg


def _rects(svg: str) -> list[dict]:
    import re
    out = []
    for m in re.finditer(r'<rect class="(chunk|padding)" ([^>]*)>', svg):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(2)))
        out.append({"class": m.group(1), "x": float(attrs["x"]), "w": float(attrs["width"]),
                    "steps": int(attrs["data-steps"]), "fill": attrs["fill"]})
    return out


def test_padded_stack_figure_draws_blocks_at_their_lengths_and_the_end_at_the_end(case):
    """Ten-day blocks of 12 monthly files: 366 days in 43 chunks, 8 of them padded (7 inside
    the stack, refused; December's last): drawn at their stored lengths, data then padding,
    the bars filling the band without gaps or overlaps, the end-of-array line where
    December's data ends, and a caption whose numbers add up (366 + 64 = 430)."""
    import re

    from virtualize.report.as_html import BAND_WIDTH, MARK_COLORS, _band

    report = virtualize.check(case("tenday_padded"))
    axis = report.plan.figures["tas"].axes[0]
    svg = _band(axis)
    rects = _rects(svg)
    scale = BAND_WIDTH / 430
    x = 0.0
    for r in rects:  # contiguous, each at its true length
        assert r["x"] == pytest.approx(x, abs=0.02) and r["w"] == pytest.approx(r["steps"] * scale, abs=0.02)
        x = r["x"] + r["w"]
    assert x == pytest.approx(BAND_WIDTH, abs=0.05)
    data = sum(r["steps"] for r in rects if r["class"] == "chunk")
    padding = [r for r in rects if r["class"] == "padding"]
    assert data == 366 and sum(r["steps"] for r in padding) == 64 and len(padding) == 8
    assert [r["steps"] for r in padding] == [9, 1, 9, 9, 9, 9, 9, 9]
    # the refused padded blocks: their data red, followed by their padding
    before = [rects[rects.index(p) - 1] for p in padding]
    assert [b["fill"] for b in before[:7]] == [MARK_COLORS["refused"]] * 7
    assert [b["steps"] for b in before] == [1, 9, 1, 1, 1, 1, 1, 1]
    (end,) = re.findall(r'<line class="end" x1="([\d.]+)"', svg)
    assert float(end) == pytest.approx(366 * scale + 55 * scale, abs=0.02) == padding[-1]["x"]
    caption = re.search(r"<figcaption>(.*)</figcaption>", svg).group(1)
    assert "366 steps in 43 chunk(s); 8 of them padded: 366 steps of data + 64 of padding = " \
        "430 stored" in caption
    # one file: its last block padded past the end; the line at 31 of 40
    axis = virtualize.check(case("tenday_padded")[:1]).plan.figures["tas"].axes[0]
    svg = _band(axis)
    rects = _rects(svg)
    assert [(r["class"], r["steps"]) for r in rects] == [("chunk", 30), ("chunk", 1), ("padding", 9)]
    (end,) = re.findall(r'<line class="end" x1="([\d.]+)"', svg)
    assert float(end) == pytest.approx(31 * BAND_WIDTH / 40, abs=0.02)
    assert "31 steps in 4 chunk(s); 1 of them padded: 31 steps of data + 9 of padding = 40 stored" in svg
    # no padding: no line, no padding rectangles, the caption as before
    svg = _band(virtualize.check(case("months2024")).plan.figures["tas"].axes[0])
    assert 'class="end"' not in svg and 'class="padding"' not in svg
    assert sum(r["steps"] for r in _rects(svg)) == 366 and "366 steps in 12 chunk(s) <code>" in svg


def test_cli_writes_html_and_exit_codes(case, tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    page = tmp_path / "r.html"
    r = subprocess.run([exe, "check", "--html", str(page), *map(str, case("tenday_padded"))],
                       capture_output=True, text=True)
    assert r.returncode == 1 and page.read_text().count('class="problem fatal"') == 7
    r = subprocess.run([exe, "check", "--quiet", *map(str, case("months2024"))],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""


def run_chromium(*args, tmp_path, height: int = 1600):
    """Headless Chromium on a window WIDTH x `height` CSS pixels (scale factor 1)."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
           "--force-device-scale-factor=1", f"--window-size={WIDTH},{height}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


WIDTH = 1100  # the window's width: the page's layout (its height only adds rows below)

# Added to a copy of the page (which has no scripts of its own): the box, as Chromium laid
# it out, of every shape the page draws in the refused colour, filled or outlined, put in
# an attribute of <body> (no layout change) for --dump-dom to show.
GEOMETRY = """<script>
const red = "%s", shapes = [];
for (const el of document.querySelectorAll("svg rect")) {
  const fill = el.getAttribute("fill"), stroke = el.getAttribute("stroke");
  const opaque = (el.getAttribute("fill-opacity") || "1") === "1";
  const how = fill === red && opaque ? "fill" : stroke === red && fill === "none" ? "stroke" : null;
  if (!how) continue;
  const r = el.getBoundingClientRect();
  shapes.push({how, x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height});
}
document.body.setAttribute("data-red-shapes", JSON.stringify(shapes));
document.body.setAttribute("data-page-height", document.documentElement.scrollHeight);
</script>"""


def red_shapes(dom: str) -> tuple[list[dict], int]:
    """The boxes the geometry script found, and the page's height (CSS pixels)."""
    import html as html_module
    import re

    m = re.search(r'data-red-shapes="([^"]*)"', dom)
    height = re.search(r'data-page-height="([0-9]+)"', dom)
    assert m and height, "the geometry script did not run"
    return json.loads(html_module.unescape(m.group(1))), int(height.group(1))


def is_red(pixels: np.ndarray) -> np.ndarray:
    """Pixels of the refused colour (#d62728), within what colour management may shift."""
    return (np.abs(pixels - np.array([0xD6, 0x27, 0x28])) < 48).all(axis=-1)


def check_drawn(img: np.ndarray, shape: dict) -> bool | None:
    """Is `shape` (a box from the page's own layout) drawn in red in the screenshot `img`?
    A filled box: most of its inside (1 px in from each edge: antialiased, and a white
    separating stroke) is red; an outlined one (a 2 px stroke centred on the box's edges):
    the middle of each edge is red within 2 px. None: not inside the screenshot."""
    x, y, w, h = shape["x"], shape["y"], shape["w"], shape["h"]
    if x < 0 or y < 0 or x + w + 3 > img.shape[1] or y + h + 3 > img.shape[0]:
        return None
    if shape["how"] == "fill":
        inside = img[int(np.ceil(y + 1)):int(np.floor(y + h - 1)),
                     int(np.ceil(x + 1)):int(np.floor(x + w - 1))]
        if inside.size == 0:
            return None
        return bool(is_red(inside).mean() > 0.5)  # (a label may be written across it, in white)
    mids = [(y, x + w / 2), (y + h, x + w / 2), (y + h / 2, x), (y + h / 2, x + w)]
    return all(bool(is_red(img[int(r) - 2:int(r) + 3, int(c) - 2:int(c) + 3]).any()) for r, c in mids)


@pytest.mark.needs("chromium")
@pytest.mark.parametrize("which", ["stack", "mosaic"])
def test_html_report_renders_in_chromium(case, tmp_path, which):
    """Chromium renders the page: its elements are in the DOM it builds, and every shape the
    page draws in the refused colour is red in a screenshot where the page's own layout
    puts it (the boxes read from that layout), whatever the browser build's antialiasing."""
    from virtualize.model import REFUSED
    from virtualize.report import MARK_COLORS

    if which == "stack":
        report = virtualize.check(padded_and_string_stack(case, tmp_path))
    else:
        report = virtualize.check_mosaic(case("mosaic_staggered_misaligned"))
    page = tmp_path / "report.html"
    page.write_text(to_html(report))
    dom = run_chromium("--dump-dom", page.as_uri(), tmp_path=tmp_path).stdout
    assert f'id="verdict">{verdict(report)}</div>' in dom
    axes = sum(len(f.axes) for f in report.plan.figures.values())
    assert dom.count('<figure class="band"') == axes > 0
    assert dom.count('<tr class="problem') == len(report.problems)
    if which == "mosaic":
        assert dom.count('class="tile"') == 4 and 'class="mosaic-map"' in dom
    # the same page with the geometry script, laid out and shot at the same size
    probe = tmp_path / "probe.html"
    probe.write_text(to_html(report).replace("</body>", GEOMETRY % MARK_COLORS[REFUSED] + "</body>"))
    shapes, height = red_shapes(run_chromium("--dump-dom", probe.as_uri(), tmp_path=tmp_path).stdout)
    assert shapes, "refused blocks are drawn in the refused colour"
    if which == "mosaic":  # one outline per refused cut block
        assert sum(s["how"] == "stroke" for s in shapes) == len(report.plan.mosaic.refused) > 0
    # the whole page in one shot: a window as tall as the page (capped)
    height = min(max(height, 600), 8000)
    shot = tmp_path / "shot.png"
    run_chromium(f"--screenshot={shot}", probe.as_uri(), tmp_path=tmp_path, height=height)
    img = imagecodecs.png_decode(shot.read_bytes())[..., :3].astype(int)
    assert img.shape[:2] == (height, WIDTH)
    not_white = (img.sum(axis=-1) < 740).mean()
    assert not_white > 0.05, "the screenshot is (nearly) blank"
    drawn = [check_drawn(img, s) for s in shapes]
    seen = [d for d in drawn if d is not None]
    assert seen, f"no red shape inside the screenshot: {shapes}"
    assert all(seen), [s for s, d in zip(shapes, drawn) if d is False]


def test_progress_bar_only_on_a_terminal(case):
    import pty

    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    files = [str(f) for f in case("months2024")]
    master, slave = pty.openpty()
    try:
        r = subprocess.run([exe, "check", *files], stdout=subprocess.PIPE, stderr=slave,
                           text=True, timeout=600)
        os.close(slave)
        seen = read_pty(master)
    finally:
        os.close(master)
    assert r.returncode == 0
    assert b"scanning [" in seen and b"12/12 files" in seen
    quiet = subprocess.run([exe, "check", *files], capture_output=True, text=True)
    assert "scanning" not in quiet.stderr  # stderr is a pipe here: no bar


def test_a_variable_inconsistent_across_files_is_counted_refused_with_drop_named(tmp_path):
    """A variable without the concat dimension whose length differs per file: the summary
    says "1 refused" and names `--drop VAR` (text, Report API, JSON, HTML); with it dropped
    the stack is virtualized."""
    import netCDF4

    files = []
    for i, n in enumerate([3, 4]):
        path = tmp_path / f"s{i}.nc"
        with netCDF4.Dataset(path, "w") as d:
            d.createDimension("time", None)
            d.createDimension("station", n)
            t = d.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [2 * i, 2 * i + 1]
            d.createVariable("v", "f4", ("time",))[:] = [1, 2]
            d.createVariable("stn", "i4", ("station",))[:] = np.arange(n)
        files.append(path)
    report = virtualize.check(files)
    assert verdict(report) == "no"
    assert report.refused_variables == {"stn": ["--drop stn"]}
    text = report.to_text()
    assert "3 variable(s) examined, 1 refused: stn (--drop stn)" in text
    doc = json.loads(report.to_json())
    jsonschema.validate(doc, SCHEMA)
    assert doc["summary"]["variables_refused"] == 1
    assert doc["arrays"]["stn"] == {"status": "refused", "ways_through": ["--drop stn"]}
    assert '<span data-variable="stn">stn (--drop stn)</span>' in report.to_html()
    cli = subprocess.run([os.path.join(os.path.dirname(sys.executable), "virtualize"), "check",
                          *map(str, files)],
                         capture_output=True, text=True)
    assert cli.returncode == 1 and "1 refused: stn (--drop stn)" in cli.stdout
    assert virtualize.check(files, drop=["stn"]).ok


# Found by #20's review: a "no" for a file's problem does not say "0 refused" alone.
def test_no_for_a_file_problem_says_so(tmp_path):
    r = virtualize.check([scaled_month(tmp_path / "m0.nc", 0), tmp_path / "gone.nc"])
    text = r.to_text()
    assert r.verdict == "no" and "the problems below are of files" in text, text


# -- #30: reports somebody reads ----------------------------------------------------------

@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """Two CMIP6-like models' yearly Amon files in one directory (fixtures/make_models.py):
    the same 40 years each, other grids; ta the only data variable."""
    import make_models

    return make_models.models(tmp_path_factory.mktemp("models"), years=range(1850, 1890))


def paths_on_a_line(line: str) -> int:
    return line.count(".nc")


def test_two_models_refused_on_one_screen(two_models):
    """Two models given together printed 208 lines / 41 KB: the same duplicate-coordinate
    block once per file, every path on one line, and `ta (--drop ta)` (dropping the only
    data variable). Now: grouped by kind (count, first, last), within one screen, paths
    counted, no remedy that leaves no data variable; -v and the JSON keep everything."""
    report = virtualize.check(two_models, scan_timeout=None)
    dups = [p for p in report.problems if p.kind == "duplicate-coordinate"]
    assert not report.ok and len(dups) == 40
    text = report.to_text()
    lines = text.splitlines()
    assert len(lines) <= 40, text
    assert max(map(paths_on_a_line, lines)) <= 6, text
    assert text.count("duplicate-coordinate") == 1
    assert "duplicate-coordinate: 40 problem(s) in 40 file(s), variable(s) time" in text
    first, last = (next(line for line in lines if line.startswith(f"    {w}"))
                   for w in ("first", "last"))
    assert dups[0].loc.file in first and dups[-1].loc.file in last
    assert "--coord NEW=attr:source_id" in first  # the useful hint, on the screen
    assert "... 38 more of this kind (-v)" in text
    # the remedies: never `--drop ta`, the only data variable
    assert report.data_variables == ["ta"]
    assert "--drop ta" not in text
    assert "these files are 2 datasets" in lines[1]  # (plan/datasets: how to build them)
    assert "ta (the only data variable" in lines[2]
    assert "--drop ta" not in report.refused_variables["ta"]
    assert "--drop lat" in report.refused_variables["lat"]  # (a coordinate: ta remains)
    note = next(line for line in lines if "out of time order" in line)
    assert "80 files: " in note and paths_on_a_line(note) == 4
    # -v: every problem, every path, one a line at most a few
    verbose = report.to_text(verbose=True).splitlines()
    assert sum("duplicate-coordinate" in line for line in verbose) == 40
    assert max(map(paths_on_a_line, verbose)) <= 6
    assert all(str(f) in "\n".join(verbose) for f in two_models)
    doc = json.loads(report.to_json())
    jsonschema.validate(doc, SCHEMA)
    assert len(doc["problems"]) == len(report.problems) > 40
    assert "--drop ta" not in doc["arrays"]["ta"]["ways_through"]
    page = report.to_html()
    assert "--drop ta" not in page and page.count('data-kind="duplicate-coordinate"') == 40


def test_the_cli_refusal_of_two_models_fits_a_screen(two_models):
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "virtualize"), "check",
                        *map(str, two_models)], capture_output=True, text=True)
    assert r.returncode == 1
    assert len(r.stdout.splitlines()) <= 40 and len(r.stdout) < 8000, r.stdout
    assert "--drop ta" not in r.stdout


def test_a_drop_is_offered_while_another_data_variable_remains(tmp_path):
    """`--drop VAR` stays a way through when a data variable is left: tas refused, pr
    not; both refused, neither is offered it."""
    import netCDF4

    def pile(bad: tuple[str, ...]) -> list:
        out = []
        for i in range(2):
            path = tmp_path / f"{'_'.join(bad)}{i}.nc"
            with netCDF4.Dataset(path, "w") as d:
                d.createDimension("time", None)
                d.createDimension("x", 3)
                d.createDimension("y", 2 + i)  # a length that differs per file
                t = d.createVariable("time", "f8", ("time",))
                t.units = "days since 2000-01-01"
                t[:] = [2 * i, 2 * i + 1]
                for name in ("tas", "pr"):
                    dims = ("time", "y") if name in bad else ("time", "x")
                    d.createVariable(name, "f4", dims)[:] = np.ones((2, 2 + i if name in bad
                                                                     else 3), "f4")
            out.append(path)
        return out

    one = virtualize.check(pile(("tas",)), scan_timeout=None)
    assert one.refused_variables == {"tas": ["--drop tas"]}
    both = virtualize.check(pile(("tas", "pr")), scan_timeout=None)
    assert both.refused_variables == {"tas": [], "pr": []}
    text = both.to_text()
    assert "--drop" not in text
    assert "every data variable is refused: dropping them leaves no data" in text


def test_many_kinds_of_problem_stay_on_one_screen():
    """Past one screen every kind is grouped; kinds past the screen are counted."""
    from virtualize.model import Location, Problem
    from virtualize.report import Report

    problems = [Problem(Location(f"/d/f{i:03d}.nc", f"v{k}"), f"kind-{k}", f"problem {i} of {k}")
                for k in range(30) for i in range(k + 1)]
    text = Report(files=[f"/d/f{i:03d}.nc" for i in range(30)], problems=problems,
                  plan=None).to_text()
    lines = text.splitlines()
    assert len(lines) <= 40 and lines[0].startswith(f"no: {len(problems)} problem(s)")
    assert "kind-0: 1 problem(s)" in text and lines[-1].startswith("  ... and kind-")
    assert lines[-1].endswith("kind-29 (30) (-v)")
    full = Report(files=[], problems=problems, plan=None).to_text(verbose=True)
    assert all(p.message in full for p in problems)


def test_a_large_file_grid_of_a_refusal_is_its_summary_and_missing_cells(tmp_path):
    """12 members x 4 years with 3 member-years missing: the grid alone took more than a
    screen; by default the layout is its summary line and the missing cells (-v: all)."""
    import make_hypercube as mh

    members = [f"r{i}i1p1f1" for i in range(1, 13)]
    gone = [("r3i1p1f1", 2017), ("r7i1p1f1", 2015), ("r11i1p1f1", 2018)]
    paths = mh.cmip(tmp_path / "c", members=members, pr_spans=None, drop=gone)
    report = virtualize.check(paths, concat_dims=["member", "time"], drop=["realization"],
                              coords={"member": "attr:variant_label"}, scan_timeout=None)
    assert not report.ok and report.plan.layout is not None
    text = report.to_text()
    lines = text.splitlines()
    assert len(lines) <= 40, text
    assert "layout (member 12 × time 4 = 48 cell(s), 45 file(s), 3 missing):" in lines
    assert "  (-v shows every axis and the grid)" in lines
    for member, year in gone:
        assert any(f"member={member!r}, time='{year}" in line for line in lines), text
    full = report.to_text(verbose=True)
    assert all(f"    {m} " in full for m in members)  # the grid's rows, one per member

"""The report of a hypercube's file grid (`Plan.layout`, issue 22): in text, JSON and the
HTML page. The layouts are built here by hand (the planner that fills them is
plan/hypercube.py); the end-to-end tests attach one to a real plan."""

from __future__ import annotations

import json
import re
from importlib import resources

import imagecodecs
import jsonschema
import numpy as np
import pytest

import virtualize
from virtualize import cli
from virtualize.model import Layout, LayoutAxis, LayoutCell
from virtualize.report import format_text, to_html, to_json
from virtualize.report import layout as L

SCHEMA = json.loads(resources.files("virtualize").joinpath("schemas/report-v1.json").read_text())
MEMBERS = ["r1i1p1f1", "r2i1p1f1", "r3i1p1f1"]
YEARS = list(range(2015, 2019))


def cmip_layout(missing=((2, 2),)) -> Layout:
    """members × years, tas in yearly files and pr in 2-year files; `missing`: the
    (member, year) cells whose tas file is absent."""
    cells = []
    for m, member in enumerate(MEMBERS):
        for t, y in enumerate(YEARS):
            tas = f"/d/tas_day_M_ssp585_{member}_gn_{y}0101-{y}1231.nc"
            cells.append(LayoutCell((m, t), None if (m, t) in missing else tas, ("tas",)))
            y0 = 2015 + 2 * (t // 2)
            cells.append(LayoutCell((m, t), f"/d/pr_day_M_ssp585_{member}_gn_{y0}0101-"
                                            f"{y0 + 1}1231.nc", ("pr",)))
    return Layout([LayoutAxis("member", MEMBERS, True),
                   LayoutAxis("time", [f"{y}-01-01 .. {y}-12-31" for y in YEARS])], cells)


def grid_layout(rows: int, cols: int, missing=(), dims=("member", "time")) -> Layout:
    return Layout([LayoutAxis(dims[0], [f"m{i}" for i in range(rows)], True),
                   LayoutAxis(dims[1], [f"t{j}" for j in range(cols)])],
                  [LayoutCell((i, j), None if (i, j) in missing else f"/x/f_{i}_{j}.nc")
                   for i in range(rows) for j in range(cols)])


def test_text_shows_each_axis_the_grid_and_the_missing_cell_by_its_coordinates():
    lines = L.text(cmip_layout())
    text = "\n".join(lines)
    assert lines[0] == "layout (member 3 × time 4 = 12 cell(s), 17 file(s), 1 missing):"
    # each axis' positions with the files there
    assert "  axis member (new): 3 position(s)" in lines
    assert ("    [2] r3i1p1f1: 5 files: tas_day_M_ssp585_r3i1p1f1_gn_20150101-20151231.nc ... "
            "tas_day_M_ssp585_r3i1p1f1_gn_20180101-20181231.nc; 1 missing") in lines
    assert "    [0] 2015-01-01 .. 2015-12-31: 6 files: " in text
    # the grid: members are rows, years columns (headed by the span's start)
    grid = lines[lines.index("  grid (member × time; ok: a file, MISSING: no file):") + 1:]
    assert grid[0].split() == ["member\\time", "2015-01-01", "2016-01-01", "2017-01-01",
                               "2018-01-01"]
    assert grid[1].split() == ["r1i1p1f1", "ok", "ok", "ok", "ok"]
    assert grid[3].split() == ["r3i1p1f1", "ok", "ok", "MISSING", "tas", "ok"]
    # the columns line up under their headers
    assert grid[3].index("MISSING") == grid[0].index("2017-01-01")
    assert lines[-2:] == ["  missing cells (1, refused):",
                          "    member='r3i1p1f1', time='2017-01-01 .. 2017-12-31' (tas)"]
    # with join outer the same cell is an absent chunk
    assert "  missing cells (1, absent chunks, read as the fill value):" in L.text(
        cmip_layout(), refused=False)


def test_column_headers_of_date_time_spans_are_their_dates():
    lay = Layout([LayoutAxis("member", ["a"], True),
                  LayoutAxis("time", [f"{y}-01-01T12:00:00 .. {y}-12-31T12:00:00"
                                      for y in YEARS])],
                 [LayoutCell((0, t), f"/d/{t}.nc") for t in range(4)])
    lines = L.text(lay)
    i = lines.index("  grid (member × time; ok: a file, MISSING: no file):")
    assert lines[i + 1].split() == ["member\\time", "2015-01-01", "2016-01-01", "2017-01-01",
                                    "2018-01-01"]
    assert L._short("a label much longer than twelve") == "a label muc…"


def test_a_complete_grid_says_none_missing():
    lines = L.text(grid_layout(2, 3))
    assert lines[0] == "layout (member 2 × time 3 = 6 cell(s), 6 file(s), none missing):"
    assert not any("MISSING " in x or "missing cells" in x for x in lines)


def test_large_grids_are_summarised_runs_of_complete_cells_collapsed():
    lines = L.text(grid_layout(50, 400, missing={(3, 7), (3, 8), (40, 399)}))
    assert len(lines) < 40
    grid = lines[lines.index("  grid (member × time; ok: a file, MISSING: no file):") + 1:]
    assert grid[:5] == [
        "    m0 .. m2    (3 rows) all 400 ok",
        "    m3          time[0..6] ok ×7, time[7..8] MISSING ×2, time[9..399] ok ×391",
        "    m4 .. m39   (36 rows) all 400 ok",
        "    m40         time[0..398] ok ×399, time[399] MISSING",
        "    m41 .. m49  (9 rows) all 400 ok"]
    assert "    ... 390 position(s), none missing" in lines  # the time axis' list
    assert lines[-3:] == ["    member='m3', time='t7'", "    member='m3', time='t8'",
                          "    member='m40', time='t399'"]
    # 200,000 cells: still a few lines, a small page
    huge = grid_layout(200, 1000, missing={(150, 500)})
    assert len(L.text(huge)) < 40
    page = L.to_html(huge)
    assert len(page) < 200_000 and page.count('class="missing"') == 1


def test_many_missing_cells_are_counted_beyond_the_first_ones():
    lines = L.text(grid_layout(2, 30, missing={(1, j) for j in range(30)}))
    assert "  missing cells (30, refused):" in lines and "    ... and 10 more" in lines
    assert "    m1  time[0..29] MISSING ×30" in lines


def test_three_axes_one_table_per_outer_position_complete_ones_collapsed():
    runs = [f"2024-01-0{i}" for i in range(1, 6)]
    lay = Layout([LayoutAxis("run", runs, True), LayoutAxis("member", ["a", "b"], True),
                  LayoutAxis("step", ["0", "6", "12"])],
                 [LayoutCell((r, m, s), None if (r, m, s) == (3, 1, 2) else f"/f/{r}{m}{s}.grib",
                             ("t2m",)) for r in range(5) for m in range(2) for s in range(3)])
    lines = L.text(lay)
    i = lines.index("  grid (member × step; ok: a file, MISSING: no file), one table per run:")
    assert lines[i + 1:] == [
        "    run='2024-01-01':",
        "      member\\step  0  6  12",
        "      a            ok ok ok",
        "      b            ok ok ok",
        "    run='2024-01-02' .. run='2024-01-03' (2): all 6 cell(s) ok",
        "    run='2024-01-04':",
        "      member\\step  0  6  12",
        "      a            ok ok ok",
        "      b            ok ok MISSING",
        "    run='2024-01-05': all 6 cell(s) ok",
        "  missing cells (1, refused):",
        "    run='2024-01-04', member='b', step='12' (t2m)",
    ]
    page = L.to_html(lay)
    assert page.count('<figure class="layout-map"') == 2  # the first, and the one missing
    assert 'data-index="3,1,2"' in page and page.count('class="layout-run"') == 2


def merge_layout() -> Layout:
    """One axis, files holding different variables: pr's last two years have no file."""
    return Layout([LayoutAxis("time", ["2015", "2016", "2017", "2018"])],
                  [LayoutCell((i,), f"/m/tas_{2015 + i}.nc", ("tas",)) for i in range(4)]
                  + [LayoutCell((0,), "/m/pr_2015-2016.nc", ("pr",)),
                     LayoutCell((1,), "/m/pr_2015-2016.nc", ("pr",)),
                     LayoutCell((2,), None, ("pr",)), LayoutCell((3,), None, ("pr",))])


def test_merge_shows_each_variables_positions():
    lines = L.text(merge_layout(), refused=False)
    assert lines[0] == "layout (time 4 = 4 cell(s), 5 file(s), 2 missing):"
    assert "    [0] 2015: 2 file(s): tas_2015.nc, pr_2015-2016.nc" in lines
    assert "    [2] 2017: 1 file(s): tas_2017.nc; 1 missing" in lines
    i = lines.index("  variables along time:")
    assert lines[i + 1:i + 3] == ["    tas  [0..3] ok", "    pr   [0..1] ok, [2..3] MISSING"]
    assert lines[-2:] == ["    time='2017' (pr)", "    time='2018' (pr)"]
    page = L.to_html(merge_layout(), refused=False)
    # a row per variable; pr's missing years grey (absent chunks, not refused)
    missing = re.findall(r'<rect class="missing" ([^>]*)>', page)
    assert [re.search(r'data-index="([^"]*)"', m).group(1) for m in missing] == ["2", "3"]
    assert all('data-variable="pr"' in m and f'fill="{L.COLORS["absent"]}"' in m
               for m in missing)
    assert "variables × time" in page


def test_html_marks_missing_cells_and_splits_cells_by_variable_when_they_differ():
    page = L.to_html(cmip_layout())
    assert page.count('<figure class="layout-map"') == 1
    missing = re.findall(r'<rect class="missing" ([^>]*)><title>([^<]*)</title>', page)
    assert len(missing) == 1
    attrs, title = missing[0]
    assert 'data-index="2,2"' in attrs and 'data-variable="tas"' in attrs
    assert f'fill="{L.COLORS["missing"]}"' in attrs
    assert "member=&#x27;r3i1p1f1&#x27;, time=&#x27;2017-01-01 .. 2017-12-31&#x27;" in title
    assert "each cell split by variable: tas, pr" in page
    # the cells that hold files name them in their tooltips
    assert "pr_day_M_ssp585_r1i1p1f1_gn_20150101-20161231.nc" in page
    assert '<li data-index="2,2">member=' in page
    # the same variables everywhere: no stripes
    plain = L.to_html(grid_layout(2, 3, missing={(1, 1)}))
    assert "split by variable" not in plain and plain.count('class="missing"') == 1


def years_report(case, lay: Layout):
    """A real plan (11 yearly files) with a layout attached by hand."""
    report = virtualize.check(case("years2000_2010"))
    assert report.ok
    report.plan.layout = lay
    return report


def file_layout(files, missing_year=None) -> Layout:
    """The 11 yearly files as a 1 × 11 grid of one new axis (`run`) × time, one cell
    maybe missing."""
    names = [str(f) for f in files]
    return Layout([LayoutAxis("run", ["r0"], True),
                   LayoutAxis("time", [f"{2000 + i}" for i in range(len(names))])],
                  [LayoutCell((0, i), None if i == missing_year else p, ("tas",))
                   for i, p in enumerate(names)])


def test_end_to_end_text_json_and_html_of_a_real_plan(case):
    files = case("years2000_2010")
    report = years_report(case, file_layout(files, missing_year=4))
    line = format_text(report)
    assert "; file grid run 1 × time 11 = 11 cell(s), 10 file(s), 1 missing (-v shows it)" in line
    text = format_text(report, verbose=True)
    assert "layout (run 1 × time 11 = 11 cell(s), 10 file(s), 1 missing):" in text
    assert "    run='r0', time='2004' (tas)" in text
    assert text.index("layout (") < text.index("arrays (")
    doc = json.loads(to_json(report))
    jsonschema.validate(doc, SCHEMA)
    lay = doc["layout"]
    assert lay["axes"] == [{"dim": "run", "labels": ["r0"], "new": True},
                           {"dim": "time", "labels": [str(y) for y in range(2000, 2011)],
                            "new": False}]
    assert lay["shape"] == [1, 11] and lay["missing"] == [[0, 4]]
    assert lay["missing_cells"] == [{"index": [0, 4], "coords": {"run": "r0", "time": "2004"},
                                     "variables": ["tas"]}]
    assert [c["path"] for c in lay["cells"]] == [str(f) if i != 4 else None
                                                 for i, f in enumerate(files)]
    assert json.loads(to_json(report)) == doc  # stable
    page = to_html(report)
    assert "<h2>File grid</h2>" in page and page.count('class="missing"') == 1
    assert page.index("<h2>File grid</h2>") < page.index("<h2>Chunk grids</h2>")
    # without a layout: nothing of it
    report.plan.layout = None
    assert "layout" not in format_text(report, verbose=True).split("arrays (")[0]
    assert json.loads(to_json(report))["layout"] is None and "File grid" not in to_html(report)


def test_cli_check_json_and_html_print_the_layout(case, tmp_path, monkeypatch, capsys):
    import virtualize.api as api

    files = case("years2000_2010")
    real = api.check  # (what `virtualize check` calls: cli imports it when the command runs)

    def check_with_layout(*args, **kwargs):
        report = real(*args, **kwargs)
        report.plan.layout = file_layout(files, missing_year=10)
        return report

    monkeypatch.setattr(api, "check", check_with_layout)
    page = tmp_path / "r.html"
    assert cli.main(["check", "--json", "--html", str(page), *map(str, files)]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, SCHEMA)
    assert doc["layout"]["missing"] == [[0, 10]]
    assert doc["layout"]["missing_cells"][0]["coords"] == {"run": "r0", "time": "2010"}
    assert 'data-index="0,10"' in page.read_text()
    assert cli.main(["check", "-v", *map(str, files)]) == 0
    assert "    run='r0', time='2010' (tas)" in capsys.readouterr().out


@pytest.mark.needs("chromium")
def test_layout_picture_renders_in_chromium(case, tmp_path):
    """Chromium lays the page out and draws it: the missing cells (red) are where the
    page's own layout puts them, and red in a screenshot."""
    from test_report import GEOMETRY, WIDTH, check_drawn, red_shapes, run_chromium

    report = years_report(case, cmip_layout(missing={(0, 1), (2, 2)}))
    report.plan.recipe["join"] = "exact"
    page = tmp_path / "report.html"
    page.write_text(to_html(report))
    dom = run_chromium("--dump-dom", page.as_uri(), tmp_path=tmp_path).stdout
    assert dom.count('<figure class="layout-map"') == 1 and dom.count('class="missing"') == 2
    probe = tmp_path / "probe.html"
    probe.write_text(to_html(report).replace("</body>", GEOMETRY % L.COLORS["missing"]
                                             + "</body>"))
    shapes, height = red_shapes(run_chromium("--dump-dom", probe.as_uri(), tmp_path=tmp_path).stdout)
    assert len(shapes) == 2
    height = min(max(height, 600), 8000)
    shot = tmp_path / "shot.png"
    run_chromium(f"--screenshot={shot}", probe.as_uri(), tmp_path=tmp_path, height=height)
    img = imagecodecs.png_decode(shot.read_bytes())[..., :3].astype(int)
    assert img.shape[:2] == (height, WIDTH)
    assert all(check_drawn(img, s) for s in shapes), shapes
    # the two are in different rows and columns of the grid, the r3 one lower
    a, b = sorted(shapes, key=lambda s: s["y"])
    assert b["y"] > a["y"] and b["x"] > a["x"]


def test_a_refused_mosaic_over_time_shows_its_missing_tiles_as_absent(tmp_path):
    # A missing tile of a mosaic over time is never refused (it reads as the fill value);
    # when the mosaic is refused for another reason, the layout called its missing cells
    # "refused", sending the user after the wrong problem.
    import tifffile

    from virtualize.report import format_text, to_html

    import make_tiff

    def tile(name, col, dtype):
        data = np.arange(64 * 64, dtype=dtype).reshape(64, 64)
        tags = make_tiff.geotags(32633, (500000.0 + col * 10, 4000000.0), 10.0)
        tifffile.imwrite(tmp_path / name, data, tile=(32, 32), compression="zlib",
                         extratags=tags)
        return tmp_path / name

    files = [tile("a_20240101.tif", 0, "u2"), tile("b_20240101.tif", 64, "u2"),
             tile("a_20240102.tif", 0, "u1")]  # (another dtype: refused)
    report = virtualize.check_mosaic(files, concat_dim="time")
    assert not report.ok
    assert any(c.path is None for c in report.plan.layout.cells)
    text = format_text(report, verbose=True)
    assert "missing cells (1, absent chunks, read as the fill value)" in text
    assert "missing cells (1, refused)" not in text
    assert "; refused" not in to_html(report)

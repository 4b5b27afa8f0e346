"""`virtualize catalog` (issue 30): an archive tree (fixtures/make_archive.py, written by
netCDF4-python in the CMIP6 DRS) into one cube per dataset and an intake-esm catalog,
every dataset read back through intake-esm equal to `xarray.open_mfdataset` of its files;
re-runs that append, rebuild and skip; trees on S3 (moto) and HTTP; the grouping (DRS
templates, content, the "N datasets" hint of check)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import virtualize
from virtualize.model import UsageError, VirtualizeError
from virtualize.plan import datasets as groups

import make_archive as ma

intake = pytest.importorskip("intake")
pytest.importorskip("intake_esm")

SMALL = ma.specs()  # the small tree's datasets (latest versions)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("esgf")
    ma.archive(root)
    return root


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory):
    """The small tree's catalog (cube directories), and its report."""
    out = tmp_path_factory.mktemp("cat") / "catalog"
    return out, virtualize.catalog([tree], out, drs="cmip6")


def _files(root, spec: ma.Spec, version: str = ma.VERSION) -> list[str]:
    return sorted(str(p) for p in spec.directory(root, version).glob("*.nc"))


def _reference(files: list[str]) -> xr.Dataset:
    """What xarray reads of the files: open_mfdataset, combined by coordinates."""
    if len(files) == 1:
        return xr.open_dataset(files[0])
    return xr.open_mfdataset(files, combine="by_coords", data_vars="minimal",
                             coords="minimal", compat="override", join="exact")


def _same(ds: xr.Dataset, ref: xr.Dataset, what: str, names=None) -> None:
    """Every variable and coordinate xarray reads of the files (or those `names`), equal
    in the cube (values as decoded, dims)."""
    for name in names or ref.variables:
        assert name in ds.variables, f"{what}: {name} missing"
        a, b = ds[name], ref[name]
        assert a.dims == b.dims, f"{what}: {name} dims {a.dims} != {b.dims}"
        av, bv = a.values, b.values
        if av.dtype.kind == "f":
            assert av.dtype == bv.dtype, f"{what}: {name} dtype"
            assert np.array_equal(av, bv, equal_nan=True), f"{what}: {name} differs"
        else:
            assert np.array_equal(av, bv), f"{what}: {name} differs"


def _opened(out) -> dict[str, xr.Dataset]:
    cat = intake.open_esm_datastore(str(out / "catalog.json"))
    return cat.to_dataset_dict(progressbar=False)


# -- the small tree --------------------------------------------------------------------------

def test_catalog_opens_with_intake_esm_every_dataset_as_open_mfdataset(tree, built):
    out, report = built
    opened = _opened(out)
    want = {s.dataset_id for s in SMALL} - {ma.ODD_GRID.dataset_id}
    assert set(opened) == want
    for spec in SMALL:
        if spec == ma.ODD_GRID:
            continue
        ds = opened[spec.dataset_id]
        _same(ds, _reference(_files(tree, spec)), spec.dataset_id)
        # the latest version's values, not the older one's (they differ)
    old = ma.TWO_VERSIONS[0]
    stale = _reference(_files(tree, old, ma.OLD_VERSION))
    assert not np.array_equal(opened[old.dataset_id].tas.values[: stale.sizes["time"]],
                              stale.tas.values)
    counts = report.counts
    assert counts == {"built": len(want), "refused": 1}
    assert report.files == len(list(tree.rglob("*.nc")))
    assert report.scanned == report.files - len(report.left_out)


def test_refused_dataset_and_left_out_files_are_rows_of_the_report(tree, built):
    out, report = built
    [refused] = report.by("refused")
    assert refused.name == ma.ODD_GRID.dataset_id
    assert refused.problems[0].kind == "shape-differs"
    odd = _files(tree, ma.ODD_GRID)[-1]
    assert any(p.loc.file == odd for p in refused.problems)
    superseded = {p for s in ma.TWO_VERSIONS for p in _files(tree, s, ma.OLD_VERSION)}
    assert set(report.left_out) == superseded
    assert all("superseded by " + ma.VERSION in why for why in report.left_out.values())
    text = report.to_text()
    assert "refused:" in text and "shape-differs: 1 dataset(s)" in text
    assert f"a version superseded by a later one: {len(superseded)} file(s)" in text
    assert len(text.splitlines()) < 25  # one screen
    d = json.loads(report.to_json())
    assert d["refused_by_kind"] == {"shape-differs": [ma.ODD_GRID.dataset_id]}
    assert d["counts"]["built"] == len(SMALL) - 1
    html = report.to_html()
    assert html.count("<tr") == len(report.datasets) + 1 and "shape-differs" in html
    # the catalog's rows: one per cube, its facets as columns, opened by intake-esm as zarr
    cat = intake.open_esm_datastore(str(out / "catalog.json"))
    df = cat.df
    assert len(df) == len(SMALL) - 1
    assert {"source_id", "experiment_id", "member_id", "table_id", "variable_id", "grid_label",
            "version", "path", "format"} <= set(df.columns)
    assert set(df["format"]) == {"zarr"}
    assert all(p.startswith("virtualize:///") for p in df["path"])
    assert set(df["version"]) == {ma.VERSION}


def test_a_cube_row_opens_with_plain_xarray_zarr_through_its_url(tree, built):
    out, _ = built
    spec = SMALL[0]
    row = intake.open_esm_datastore(str(out / "catalog.json")).df.set_index("dataset")
    url = row.loc[spec.dataset_id, "path"]
    ds = xr.open_dataset(url, engine="zarr", consolidated=False)
    _same(ds, _reference(_files(tree, spec)), url)


def test_rerun_skips_what_is_unchanged_and_scans_nothing(tree, built, tmp_path):
    out, _ = built
    again = virtualize.catalog([tree], out, drs="cmip6")
    assert again.scanned == 0
    assert again.counts == {"unchanged": len(SMALL) - 1, "refused": 1}
    assert again.by("refused")[0].problems[0].kind == "shape-differs"  # (as recorded)


def test_rerun_over_a_grown_tree_appends_rebuilds_and_builds(tree, tmp_path):
    root = tmp_path / "esgf"
    shutil.copytree(tree, root)  # (copy2: the times as they were)
    out = tmp_path / "cat"
    virtualize.catalog([root], out, drs="cmip6")
    grown = ma.Spec("CESM2", "historical", "r1i1p1f1", "day", "tas")
    ma.write(root, grown, [2004])  # a new year: appended
    versioned = ma.Spec("IPSL-CM6A-LR", "historical", "r2i1p1f1", "Amon", "tas")
    for years in ma.years_of(versioned, 2003):  # a new version: rebuilt
        ma.write(root, versioned, years, version="v20200101")
    new = ma.Spec("CESM2", "historical", "r1i1p1f1", "Amon", "pr")
    for years in ma.years_of(new, 2003):  # a new dataset: built
        ma.write(root, new, years)
    report = virtualize.catalog([root], out, drs="cmip6")
    status = {d.name: d.status for d in report.datasets}
    assert status[grown.dataset_id] == "appended"
    assert status[versioned.dataset_id] == "rebuilt"
    assert status[new.dataset_id] == "built"
    assert sum(s == "unchanged" for s in status.values()) == len(SMALL) - 3
    why = {d.name: d.why for d in report.datasets}
    assert why[versioned.dataset_id] == "version v20200101 supersedes v20190308"
    assert why[grown.dataset_id] == "1 new file(s)"
    assert report.scanned == 1 + 2 + 2  # the new year; the new version's files; the new dataset
    # appended in place (a new manifest segment), not written anew
    cube = out / f"{grown.dataset_id}.zarr"
    assert (cube / "tas" / "manifest.1.npy").is_file()
    opened = _opened(out)
    _same(opened[grown.dataset_id], _reference(_files(root, grown)), "appended")
    _same(opened[versioned.dataset_id], _reference(_files(root, versioned, "v20200101")),
          "rebuilt")
    _same(opened[new.dataset_id], _reference(_files(root, new)), "built")
    text = report.to_text()
    assert "changed:" in text and f"built     {new.dataset_id}: 2 file(s)" in text
    assert f"appended  {grown.dataset_id}: 5 file(s); 1 new file(s)" in text


def test_a_file_appended_in_the_middle_rebuilds(tree, tmp_path):
    root = tmp_path / "esgf"
    shutil.copytree(tree, root)
    spec = ma.Spec("CESM2", "historical", "r2i1p1f1", "day", "tas")
    first = _files(root, spec)[0]
    os.remove(first)
    out = tmp_path / "cat"
    virtualize.catalog([root], out, drs="cmip6")
    ma.write(root, spec, [ma.START])  # the first year again: before the cube's start
    report = virtualize.catalog([root], out, drs="cmip6")
    [d] = [d for d in report.datasets if d.name == spec.dataset_id]
    assert d.status == "rebuilt" and "not an append" in d.why
    _same(_opened(out)[spec.dataset_id], _reference(_files(root, spec)), "rebuilt")


def test_members_stacked_along_a_new_axis(tree, tmp_path):
    out = tmp_path / "cat"
    report = virtualize.catalog([tree], out, drs="cmip6", concat_dims=["member"])
    opened = _opened(out)
    by_member = {}
    for spec in SMALL:
        by_member.setdefault(spec.dataset_id.replace(f".{spec.member}.", "."), []).append(spec)
    refused = ma.ODD_GRID.dataset_id.replace(f".{ma.ODD_GRID.member}.", ".")
    assert set(opened) == set(by_member) - {refused}
    assert [d.name for d in report.by("refused")] == [refused]
    for key, specs in by_member.items():
        if key == refused:
            continue
        ds = opened[key]
        assert list(ds["member"].values) == [s.member for s in specs]
        var = specs[0].variable
        assert ds[var].dims[0] == "member"
        for i, spec in enumerate(specs):
            ref = _reference(_files(tree, spec))
            assert np.array_equal(ds[var].isel(member=i).values, ref[var].values), key
            if "time" in ref.dims:
                assert np.array_equal(ds["time"].values, ref["time"].values)
    row = intake.open_esm_datastore(str(out / "catalog.json")).df.set_index("dataset")
    key = next(iter(set(by_member) - {refused}))
    assert row.loc[key, "member_id"] == " ".join(s.member for s in by_member[key])


def test_kerchunk_catalog_rows_are_references_where_plain_zarr_reads_them(tree, tmp_path):
    out = tmp_path / "cat"
    virtualize.catalog([tree], out, drs="cmip6", format="kerchunk")
    df = intake.open_esm_datastore(str(out / "catalog.json")).df.set_index("dataset")
    # the standard calendar's daily files (365 / 366 days a chunk): a rectilinear grid
    rect = ma.Spec("IPSL-CM6A-LR", "historical", "r1i1p1f1", "day", "tas").dataset_id
    assert df.loc[rect, "format"] == "zarr" and df.loc[rect, "path"].startswith("virtualize://")
    regular = df[df["format"] == "reference"]
    assert len(regular) == len(df) - 2  # (both IPSL members' daily tas)
    for key, row in regular.iterrows():  # read by fsspec's references, without virtualize
        assert row["path"].endswith(".json") and os.path.isfile(row["path"])
    spec = next(s for s in SMALL if s.dataset_id in regular.index and s.table == "Amon")
    code = ("import xarray as xr, numpy as np\n"
            "ds = xr.open_dataset('reference://', engine='zarr', consolidated=False, "
            f"storage_options={{'fo': {regular.loc[spec.dataset_id, 'path']!r}}})\n"
            f"ref = xr.open_mfdataset({_files(tree, spec)!r}, combine='by_coords', "
            "data_vars='minimal', coords='minimal', compat='override')\n"
            "assert np.array_equal(ds.tas.values, ref.tas.values)\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    opened = _opened(out)
    assert len(opened) == len(df)
    _same(opened[rect], _reference(_files(tree, ma.Spec("IPSL-CM6A-LR", "historical",
                                                        "r1i1p1f1", "day", "tas"))), rect)


@pytest.mark.parametrize("kind", ["parquet", "icechunk"])
def test_other_kinds_open_through_intake(tree, tmp_path, kind):
    pytest.importorskip("pyarrow" if kind == "parquet" else "icechunk")
    out = tmp_path / "cat"
    report = virtualize.catalog([tree], out, drs="cmip6", format=kind)
    assert report.counts["built"] == len(SMALL) - 1
    opened = _opened(out)
    for spec in SMALL[:3]:
        _same(opened[spec.dataset_id], _reference(_files(tree, spec)), spec.dataset_id)


def test_grouping_by_content_without_a_template(tmp_path):
    root = tmp_path / "flat"
    specs = [ma.Spec("CESM2", "historical", m, "Amon", "tas") for m in ("r1i1p1f1", "r2i1p1f1")]
    specs.append(ma.Spec("IPSL-CM6A-LR", "historical", "r1i1p1f1", "Amon", "tas"))
    files = {}
    for spec in specs:
        files[spec] = [str(ma.write(tmp_path / "drs", spec, y)) for y in ma.years_of(spec, 2003)]
    root.mkdir()
    for spec in specs:  # one directory, no DRS: the files say which dataset they are
        for f in files[spec]:
            shutil.copy2(f, root / os.path.basename(f))
    out = tmp_path / "cat"
    report = virtualize.catalog([root], out)
    assert report.counts == {"built": 3}
    opened = _opened(out)
    assert set(opened) == {s.dataset_id for s in specs}
    for spec in specs:
        flat = sorted(str(root / os.path.basename(f)) for f in files[spec])
        _same(opened[spec.dataset_id], _reference(flat), spec.dataset_id)
    again = virtualize.catalog([root], out)
    assert again.scanned == 0 and again.counts == {"unchanged": 3}
    stacked = virtualize.catalog([root], tmp_path / "m", concat_dims=["member"])
    assert stacked.counts == {"built": 2}
    cesm = _opened(tmp_path / "m")["CMIP6.CMIP.NCAR.CESM2.historical.Amon.tas.gn"]
    assert list(cesm["member"].values) == ["r1i1p1f1", "r2i1p1f1"]


def test_a_user_template_and_a_tree_found_at_depth(tree, tmp_path):
    deep = tmp_path / "mirror" / "data" / "esgf"
    deep.mkdir(parents=True)
    shutil.copytree(tree / "CMIP6", deep / "CMIP6")
    report = virtualize.catalog([tmp_path / "mirror"], tmp_path / "a", drs="cmip6")
    assert report.counts["built"] == len(SMALL) - 1
    tpl = ("{mip_era}/{activity_id}/{institution_id}/{source_id}/{experiment_id}/{member_id}/"
           "{table_id}/{variable_id}/{grid_label}/{version}/*.nc")
    again = virtualize.catalog([tmp_path / "mirror"], tmp_path / "b", path_template=tpl)
    assert {d.name: d.status for d in again.datasets} == \
        {d.name: d.status for d in report.datasets}
    narrow = virtualize.catalog([tmp_path / "mirror"], tmp_path / "c",
                                path_template="{source_id}/{experiment_id}/{member_id}/"
                                              "{table_id}/{variable_id}/{grid_label}/{version}/"
                                              "tas_*.nc")
    assert {d.name.split(".")[-3] for d in narrow.datasets} == {"Amon", "day"}
    assert all("does not match" in w for w in narrow.left_out.values()
               if "superseded" not in w)


def test_usage_errors_before_anything_is_written(tree, built, tmp_path):
    out, _ = built
    with pytest.raises(UsageError, match="--overwrite to build it again"):
        virtualize.catalog([tree], out, drs="cmip5")
    with pytest.raises(UsageError, match="one of cmip6, cmip5, cordex"):
        virtualize.catalog([tree], tmp_path / "x", drs="cmip7")
    with pytest.raises(UsageError, match="not both"):
        virtualize.catalog([tree], tmp_path / "x", drs="cmip6", path_template="{a}/*.nc")
    with pytest.raises(UsageError, match="format"):
        virtualize.catalog([tree], tmp_path / "x", drs="cmip6", format="vrt")
    with pytest.raises(UsageError):
        virtualize.catalog([tree], tmp_path / "x", drs="cmip6", join="inner")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(VirtualizeError, match="holds no catalog"):
        virtualize.catalog([tree], busy, drs="cmip6")
    assert sorted(os.listdir(busy)) == ["notes.txt"]
    assert not (tmp_path / "x").exists()


def test_cli_catalog_exit_codes_and_json(tree, tmp_path):
    one = tmp_path / "one"
    spec = ma.Spec("CESM2", "historical", "r1i1p1f1", "Amon", "tas")
    shutil.copytree(spec.directory(tree), spec.directory(one))
    run = [sys.executable, "-m", "virtualize.cli", "catalog"]
    done = subprocess.run(run + [str(one), "-o", str(tmp_path / "c1"), "--drs", "cmip6"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "1 dataset(s) (1 built)" in done.stdout
    refused = subprocess.run(run + [str(tree), "-o", str(tmp_path / "c2"), "--drs", "cmip6",
                                    "--json", "--html", str(tmp_path / "r.html")],
                             capture_output=True, text=True)
    assert refused.returncode == 1, refused.stderr
    d = json.loads(refused.stdout)
    assert d["counts"]["refused"] == 1 and not d["ok"]
    assert "shape-differs" in (tmp_path / "r.html").read_text()
    usage = subprocess.run(run + [str(tree), "-o", str(tmp_path / "c3"), "--drs", "cmip9"],
                           capture_output=True, text=True)
    assert usage.returncode == 2
    guides = subprocess.run([sys.executable, "-m", "virtualize.cli", "docs"],
                            capture_output=True, text=True, check=True).stdout
    assert "catalog       An archive into a catalog" in guides


# -- check: files that are several datasets --------------------------------------------------

def test_check_says_the_files_are_several_datasets(tree):
    a = ma.Spec("CESM2", "historical", "r1i1p1f1", "day", "tas")
    b = ma.Spec("IPSL-CM6A-LR", "historical", "r1i1p1f1", "day", "tas")
    report = virtualize.check(_files(tree, a) + _files(tree, b))
    assert not report.ok
    assert report.datasets is not None and report.datasets.by == ["source_id", "grid"]
    text = report.to_text() if hasattr(report, "to_text") else virtualize.report.format_text(report)
    lines = text.splitlines()
    assert lines[1] == ("these files are 2 datasets (by source_id / grid): build each on its "
                        "own (virtualize catalog DIR -o OUT builds them all)")
    note = next(n for n in report.notes if n.startswith("these files are 2 datasets"))
    assert f"source_id=CESM2, grid lat=3,lon=4: {len(_files(tree, a))} file(s)" in note
    assert "virtualize catalog ROOT -o OUT" in note
    assert json.loads(report.to_json())["notes"][0] == note
    # members and variables are no reason: one dataset, no such line
    members = [ma.Spec("CESM2", "historical", m, "day", "tas") for m in ("r1i1p1f1", "r2i1p1f1")]
    same = virtualize.check([f for s in members for f in _files(tree, s)])
    assert same.datasets is None


def test_split_by_table_and_by_grid_alone(tree):
    day = ma.Spec("CESM2", "historical", "r1i1p1f1", "day", "tas")
    mon = ma.Spec("CESM2", "historical", "r1i1p1f1", "Amon", "tas")
    invs = [virtualize.inventory(f) for f in _files(tree, day)[:1] + _files(tree, mon)[:1]]
    assert groups.split(invs).by == ["table_id", "frequency"]
    odd = [virtualize.inventory(f) for f in _files(tree, ma.ODD_GRID)]
    assert groups.split(odd).by == ["grid"]
    assert groups.split(invs[:1]) is None


# -- templates (pure) -------------------------------------------------------------------------

def test_drs_templates_match_real_paths_at_any_depth():
    cmip5 = groups.template("cmip5")
    got = cmip5.match("/data/cmip5/output1/MOHC/HadGEM2-ES/rcp45/mon/atmos/Amon/r1i1p1/"
                      "v20111128/tas/tas_Amon_HadGEM2-ES_rcp45_r1i1p1_200512-203011.nc")
    assert got == ("/data", {"project": "cmip5", "product": "output1", "institute": "MOHC",
                             "model": "HadGEM2-ES", "experiment": "rcp45",
                             "time_frequency": "mon", "realm": "atmos", "cmor_table": "Amon",
                             "ensemble": "r1i1p1", "version": "v20111128", "variable": "tas"})
    cordex = groups.template("cordex")
    got = cordex.match("s3://b/CORDEX/output/EUR-11/CLMcom/MPI-M-MPI-ESM-LR/historical/r1i1p1/"
                       "CLMcom-CCLM4-8-17/v1/day/tas/v20140515/tas_EUR-11_MPI-M-MPI-ESM-LR_"
                       "historical_r1i1p1_CLMcom-CCLM4-8-17_v1_day_19700101-19701231.nc")
    assert got[1]["domain"] == "EUR-11" and got[1]["rcm_model"] == "CLMcom-CCLM4-8-17"
    assert got[1]["version"] == "v20140515" and got[1]["ensemble"] == "r1i1p1"
    cmip6 = groups.template("cmip6")
    assert cmip6.member == "member_id" and cmip6.version == "version"
    path = ("x/CMIP6/DCPP/NCAR/CESM1-1-CAM5-CMIP5/dcppA-hindcast/s1960-r1i1p1f1/Amon/tas/gn/"
            "v20190307/tas_Amon_CESM1-1-CAM5-CMIP5_dcppA-hindcast_s1960-r1i1p1f1_gn_196011-197012.nc")
    assert cmip6.match(path)[1]["member_id"] == "s1960-r1i1p1f1"
    # constrained facets keep a shifted tree from matching: a version that is none
    assert cmip6.match(path.replace("v20190307", "latest")) is None
    assert cmip6.match(path.replace(".nc", ".nc.md5")) is None


def test_latest_version_in_natural_order_and_all_versions():
    tpl = groups.PathTemplate.parse("{model}/{version}/*.nc")
    paths = ["r/A/v9/a.nc", "r/A/v10/a.nc", "r/A/v10/b.nc", "r/B/v1/a.nc", "r/x.txt"]
    g = groups.group_paths(paths, tpl)
    assert [(d.name, d.files, d.version) for d in g.datasets] == \
        [("A", ["r/A/v10/a.nc", "r/A/v10/b.nc"], "v10"), ("B", ["r/B/v1/a.nc"], "v1")]
    assert g.left_out == {"r/A/v9/a.nc": "version v9 superseded by v10",
                          "r/x.txt": f"does not match the path template {tpl.text}"}
    every = groups.group_paths(paths, tpl, all_versions=True)
    assert [d.name for d in every.datasets] == ["A.v10", "A.v9", "B.v1"]
    with pytest.raises(ValueError, match="twice"):
        groups.PathTemplate.parse("{a}/{a}/*.nc")
    with pytest.raises(ValueError, match="at least one"):
        groups.PathTemplate.parse("data/*.nc")


# -- remote trees, executors, the whole tree -------------------------------------------------

def _check_remote(report, out, tree, specs) -> None:
    assert report.counts == {"built": len(specs) - 1, "refused": 1}
    opened = _opened(out)
    for spec in specs[:4]:
        if spec != ma.ODD_GRID:
            _same(opened[spec.dataset_id], _reference(_files(tree, spec)), spec.dataset_id)
    assert all(p.startswith(("s3://", "http://")) for p in report.left_out)


def test_a_tree_on_s3(tree, tmp_path):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from servers import s3_bucket, start_moto

    server, endpoint = start_moto()
    try:
        with pytest.MonkeyPatch.context() as mp:
            client = s3_bucket(mp, endpoint, "esgf")
            for f in sorted(tree.rglob("*.nc")):  # (one model's: moto is slow)
                if "/CESM2/" in str(f):
                    client.upload_file(str(f), "esgf", f"mirror/{f.relative_to(tree)}")
            out = tmp_path / "cat"
            report = virtualize.catalog(["s3://esgf/mirror"], out, drs="cmip6")
            cesm = [s for s in SMALL if s.source == "CESM2"]
            _check_remote(report, out, tree, cesm)
            again = virtualize.catalog(["s3://esgf/mirror"], out, drs="cmip6")
            assert again.scanned == 0 and again.counts["unchanged"] == len(cesm) - 1
    finally:
        server.stop()


def test_a_tree_behind_http_index_pages(tree, tmp_path):
    pytest.importorskip("aiohttp")
    from servers import RangeHTTPServer

    srv = RangeHTTPServer(tree)
    srv.listing = True
    try:
        out = tmp_path / "cat"
        report = virtualize.catalog([srv.url + "/"], out, drs="cmip6")
        _check_remote(report, out, tree, SMALL)
    finally:
        srv.stop()


def test_each_file_is_scanned_once_on_an_executor(tree, tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from virtualize.run import executors

    scanned: list[str] = []
    task = executors.scan_task

    def counting(paths, settings, timeout):
        scanned.extend(paths)
        return task(paths, settings, timeout)

    monkeypatch.setattr(executors, "scan_task", counting)
    with ThreadPoolExecutor(2) as pool:
        report = virtualize.catalog([tree], tmp_path / "cat", drs="cmip6", executor=pool,
                                    concat_dims=["member"])
    taken = report.files - len(report.left_out)
    assert sorted(scanned) == sorted(set(scanned)) and len(scanned) == taken
    assert report.counts["built"] >= 6


def test_dask_distributed(tree, tmp_path):
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        report = virtualize.catalog([tree], tmp_path / "cat", drs="cmip6", executor=client)
    assert report.counts == {"built": len(SMALL) - 1, "refused": 1}
    spec = SMALL[1]
    _same(_opened(tmp_path / "cat")[spec.dataset_id], _reference(_files(tree, spec)), "dask")


def test_the_whole_tree_of_300_files(tmp_path):
    root = tmp_path / "esgf"
    files = ma.archive(root, full=True)
    specs = ma.specs(full=True)
    assert len(files) >= 300 and len(specs) >= 40
    out = tmp_path / "cat"
    report = virtualize.catalog([root], out, drs="cmip6", jobs=2)
    assert report.counts == {"built": len(specs) - 1, "refused": 1}
    opened = _opened(out)
    assert len(opened) == len(specs) - 1
    tables = set()
    for spec in specs:
        if spec == ma.ODD_GRID:
            continue
        ref = _reference(_files(root, spec))  # (the small tree's tests compare every variable)
        _same(opened[spec.dataset_id], ref, spec.dataset_id,
              [spec.variable, "lat", "lon", *(["time"] if "time" in ref.dims else [])])
        tables.add(spec.table)
    assert tables == {"Amon", "day", "fx"}
    assert len({s.source for s in specs}) == 4 and len({s.grid for s in specs}) == 2

"""Remote archives (issue 11): sources on HTTP and S3 (moto), read back; located errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import fsspec
import numpy as np
import pytest
import xarray as xr
import zarr
from servers import RangeHTTPServer, s3_bucket, start_moto
from zarr.storage import FsspecStore

import virtualize
from virtualize import storage
from virtualize.model import OutputExistsError, UnsafeOutputError, VirtualizeError

from helpers import assert_same
from make_fixtures import daily_netcdf4

pytest.importorskip("s3fs")
pytest.importorskip("moto")

CASES = {"months2024": ".nc", "nc3_months_classic": ".nc", "strips_short_last": ".tif",
         "tiles_padded": ".tif", "cog": ".tif"}
BUCKET = "archive"


class _Cases(dict):
    """The served cases by name; a case whose writer is not installed skips the test that
    asks for it (with the case fixture's reason), not every test of the module."""

    def __init__(self) -> None:
        super().__init__()
        self.missing: dict[str, str] = {}

    def __missing__(self, name: str):
        pytest.skip(self.missing.get(name, f"no case {name}"))


@pytest.fixture(scope="module")
def served(case, tmp_path_factory):
    """Every case's files copied under one directory, served over HTTP."""
    root = tmp_path_factory.mktemp("served")
    local = _Cases()
    for name in CASES:
        try:
            files = case(name)
        except pytest.skip.Exception as e:  # (its writer, a Debian tool, is not installed)
            local.missing[name] = str(e)
            continue
        d = root / name
        d.mkdir()
        local[name] = []
        for f in files:
            shutil.copy2(f, d / f.name)
            local[name].append(d / f.name)
    srv = RangeHTTPServer(root)
    yield srv, local
    srv.stop()


@pytest.fixture(scope="module")
def s3(served):
    """moto's S3 server with the cases uploaded to s3://archive/<case>/; AWS_* set."""
    _srv, local = served
    server, endpoint = start_moto()
    with pytest.MonkeyPatch.context() as mp:
        client = s3_bucket(mp, endpoint, BUCKET)
        for name, files in local.items():
            for f in files:
                client.upload_file(str(f), BUCKET, f"{name}/{f.name}")
        yield client, endpoint
    server.stop()


def _manifests(cube) -> dict:
    out = {}
    for d in sorted(os.listdir(cube)):
        m = cube / d / "manifest.npy"
        if m.is_file():
            out[d] = np.load(m)
    return out


def _same_cube(remote, local) -> None:
    """Identical manifests (up to source paths), identical values."""
    rm, lm = _manifests(remote), _manifests(local)
    assert rm.keys() == lm.keys() and rm
    for k in rm:
        assert np.array_equal(rm[k], lm[k]), k
    ri = json.loads((remote / "virtualize.json").read_text())
    li = json.loads((local / "virtualize.json").read_text())
    assert [s["size"] for s in ri["sources"]] == [s["size"] for s in li["sources"]]
    assert [os.path.basename(s["path"]) for s in ri["sources"]] == \
        [os.path.basename(s["path"]) for s in li["sources"]]
    g, gl = virtualize.open(remote), virtualize.open(local)
    names = sorted(n for n, _ in gl.arrays())
    assert names == sorted(n for n, _ in g.arrays())
    for n in names:
        assert_same(g[n][...], gl[n][...], n)


@pytest.mark.parametrize("name", list(CASES))
def test_http_stack_equals_local(served, name, tmp_path):
    srv, local = served
    urls = [f"{srv.url}/{name}/{f.name}" for f in local[name]]
    srv.reset()
    report = virtualize.virtualize(urls, tmp_path / "remote")
    assert srv.requests > 0
    assert sum(report.requests.values()) > 0
    assert all(p.startswith("http://127.0.0.1") for p in report.files)
    virtualize.virtualize(local[name], tmp_path / "local")
    _same_cube(tmp_path / "remote", tmp_path / "local")
    info = json.loads((tmp_path / "remote" / "virtualize.json").read_text())
    assert all(s.get("etag") for s in info["sources"])  # the staleness key of an object
    assert info["roots"] == [f"{srv.url}/{name}/"]


@pytest.mark.parametrize("name", list(CASES))
def test_s3_glob_stack_equals_local(served, s3, name, tmp_path):
    _srv, local = served
    ext = CASES[name]
    local[name]  # (skipped when its writer is not installed)
    report = virtualize.virtualize(f"s3://{BUCKET}/{name}/*{ext}", tmp_path / "remote")
    assert report.files == [f"s3://{BUCKET}/{name}/{f.name}" for f in sorted(local[name])]
    virtualize.virtualize(local[name], tmp_path / "local")
    _same_cube(tmp_path / "remote", tmp_path / "local")


def test_kerchunk_json_of_remote_sources_reads_with_fsspec_and_xarray(served, s3, tmp_path):
    import xarray as xr

    _srv, local = served
    out = tmp_path / "refs.json"
    virtualize.virtualize(f"s3://{BUCKET}/months2024/*.nc", out)
    refs = json.loads(out.read_text())["refs"]
    assert any(isinstance(v, list) and v[0].startswith(f"s3://{BUCKET}/") for v in refs.values())
    virtualize.virtualize(local["months2024"], tmp_path / "local")
    gl = virtualize.open(tmp_path / "local")
    # plain fsspec + zarr, as a user opens a reference set of S3 objects
    fs = fsspec.filesystem("reference", fo=str(out), remote_protocol="s3",
                           remote_options={"asynchronous": True}, asynchronous=True)
    with zarr.config.set({"array.rectilinear_chunks": True}):
        g = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
        assert_same(g["tas"][...], gl["tas"][...], "tas via fsspec+zarr")
    assert_same(virtualize.open(out)["tas"][...], gl["tas"][...], "tas via virtualize.open")
    ds = xr.open_dataset(tmp_path / "local", engine="virtualize")
    virtualize.virtualize(f"s3://{BUCKET}/months2024/*.nc", tmp_path / "cube")
    dr = xr.open_dataset(tmp_path / "cube", engine="virtualize")
    assert_same(dr["tas"].values, ds["tas"].values, "tas via xarray")


def test_missing_and_forbidden_objects_are_located_problems(served, s3):
    srv, local = served
    srv.status["months2024/forbidden.nc"] = 403
    good = f"{srv.url}/months2024/{local['months2024'][0].name}"
    missing = f"{srv.url}/months2024/nope.nc"
    forbidden = f"{srv.url}/months2024/forbidden.nc"
    report = virtualize.check([good, missing, forbidden])
    kinds = {p.loc.file: p.kind for p in report.problems if p.fatal}
    assert kinds[missing] == "source-missing"
    assert kinds[forbidden] == "source-forbidden"
    report = virtualize.check([f"s3://{BUCKET}/months2024/nope.nc"])
    assert [p.kind for p in report.problems] == ["source-missing"]
    pattern = f"s3://{BUCKET}/months2024/*.nope"  # a glob that matches nothing
    (p,) = virtualize.check([pattern]).problems
    assert (p.kind, p.loc.file, p.message) == ("no-files", pattern, f"no file matches {pattern!r}")


def test_changed_object_is_detected_on_open(served, s3, tmp_path):
    client, _ = s3
    _srv, local = served
    key = "changing/a.nc"
    f = local["months2024"][0]
    client.upload_file(str(f), BUCKET, key)
    virtualize.virtualize(f"s3://{BUCKET}/{key}", tmp_path / "cube")
    virtualize.open(tmp_path / "cube")
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF  # same size, new ETag
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(data))
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(tmp_path / "cube")
    assert [p.kind for p in e.value.problems] == ["source-changed"]


def test_unknown_scheme_is_refused_clearly(tmp_path):
    with pytest.raises(VirtualizeError) as e:
        virtualize.check(["foo://host/a.nc"])
    assert e.value.problems[0].kind == "unsupported-scheme"
    r = subprocess.run([sys.executable, "-m", "virtualize.cli", "foo://host/a.nc", "-o",
                        str(tmp_path / "c")], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0 and "foo://" in r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "foo:").exists()


def test_recorded_url_roots_are_honoured_but_not_metadata_addresses():
    from virtualize.outputs.access import Access

    a = Access("cube", ["s3://bucket/tas/", "http://169.254.169.254/latest/",
                        "http://metadata.google.internal/x/"])
    assert a.refusal("s3://bucket/tas/a.nc") is None
    assert a.refusal("s3://bucket/other/a.nc") is not None
    assert a.refusal("s3://bucket/tas/../secret") is not None
    assert a.refusal("http://169.254.169.254/latest/meta-data") is not None
    assert a.refusal("http://metadata.google.internal/x/y") is not None
    allowed = Access("cube", [], allow=["http://169.254.169.254/latest/"])
    assert allowed.refusal("http://169.254.169.254/latest/meta-data") is None


def test_several_mb_netcdf4_scan_and_write_fetch_under_10_percent(served, tmp_path):
    import netCDF4

    srv, _ = served
    path = srv.root / "big" / "big.nc"
    path.parent.mkdir(exist_ok=True)
    daily_netcdf4(path, 60)
    size = path.stat().st_size
    assert size > 3_000_000
    srv.reset()
    report = virtualize.virtualize(f"{srv.url}/big/big.nc", tmp_path / "cube")
    fetched = srv.bytes_sent
    assert fetched <= 0.10 * size, (fetched, size, srv.requests)
    assert sum(report.bytes_read.values()) <= fetched
    with netCDF4.Dataset(path) as nc:
        expected = nc["tas"][7].data
    assert_same(virtualize.open(tmp_path / "cube")["tas"][7], expected, "tas[7]")


@pytest.mark.parametrize("out", ["cube.zarr", "refs.json", "refs.parq", "repo.icechunk"])
def test_output_to_s3_reads_back_and_is_guarded(served, s3, out, tmp_path):
    client, _ = s3
    _srv, local = served
    url = f"s3://{BUCKET}/out/{out}"
    virtualize.virtualize(f"s3://{BUCKET}/months2024/*.nc", url)
    virtualize.virtualize(local["months2024"], tmp_path / "local")
    gl = virtualize.open(tmp_path / "local")
    g = virtualize.open(url)
    assert_same(g["tas"][...], gl["tas"][...], f"tas via {out} on S3")
    if out == "cube.zarr":  # the root documents were uploaded last
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="out/cube.zarr/")
                ["Contents"]]
        assert "out/cube.zarr/virtualize.json" in keys
    if out == "refs.parq":  # the set and its sources on S3, read by fsspec alone too
        from fsspec.implementations.reference import LazyReferenceMapper

        s3fs = fsspec.filesystem("s3", skip_instance_cache=True)
        refs = LazyReferenceMapper(f"{BUCKET}/out/{out}", fs=s3fs, engine="pyarrow")
        fs = fsspec.filesystem("reference", fo=refs, remote_protocol="s3",
                               remote_options={"asynchronous": True}, asynchronous=True)
        with zarr.config.set({"array.rectilinear_chunks": True}):
            gp = zarr.open_group(FsspecStore(fs, read_only=True), mode="r")
            assert_same(gp["tas"][...], gl["tas"][...], "tas via fsspec of the parquet set")
    with pytest.raises(OutputExistsError):
        virtualize.virtualize(f"s3://{BUCKET}/months2024/*.nc", url)
    virtualize.virtualize(f"s3://{BUCKET}/months2024/*.nc", url, overwrite=True)
    # something virtualize did not write is never replaced
    client.put_object(Bucket=BUCKET, Key=f"foreign/{out}", Body=b"not ours")
    with pytest.raises(UnsafeOutputError):
        virtualize.virtualize(f"s3://{BUCKET}/months2024/*.nc", f"s3://{BUCKET}/foreign/{out}",
                              overwrite=True)


@pytest.mark.parametrize("out", ["cube.zarr", "refs.json",
                                 pytest.param("repo.icechunk", marks=pytest.mark.needs("icechunk"))])
def test_grouped_output_on_s3_opens_as_a_datatree(case, s3, out, tmp_path):
    """A grouped cube of S3 sources, written to S3, opened where it is by
    xr.open_datatree / xr.open_groups: the local cube's tree, bit for bit."""
    client, _ = s3
    files = case("groups")
    for f in files:
        client.upload_file(str(f), BUCKET, f"groups/{f.name}")
    url = f"s3://{BUCKET}/grouped/{out}"
    virtualize.virtualize(f"s3://{BUCKET}/groups/*.nc", url)
    virtualize.virtualize(files, tmp_path / "local.zarr")
    raw = dict(mask_and_scale=False, decode_times=False)
    tree = xr.open_datatree(url, engine="virtualize", **raw)
    expected = xr.open_datatree(tmp_path / "local.zarr", engine="virtualize", **raw)
    assert sorted(tree.groups) == sorted(expected.groups) == ["/", "/surface", "/surface/stats"]
    xr.testing.assert_identical(tree, expected)
    for node in tree.subtree:
        for name, var in node.to_dataset(inherit=False).variables.items():
            assert_same(var.values, expected[node.path][name].values, f"{node.path}/{name}")
    groups = xr.open_groups(url, engine="virtualize", **raw)
    assert sorted(groups) == sorted(expected.groups)


@pytest.mark.parametrize("name", ["x.nc", "x.tif", "x.h5", "x.grib2"])
def test_foreign_output_names_on_s3_are_usage_errors(served, s3, name):
    client, _ = s3
    with pytest.raises(virtualize.UsageError, match=f"does not write .{name.split('.')[-1]} "):
        virtualize.virtualize(f"s3://{BUCKET}/months2024/*.nc", f"s3://{BUCKET}/foreign-names/{name}")
    assert "Contents" not in client.list_objects_v2(Bucket=BUCKET, Prefix="foreign-names/")


def test_cli_s3_glob_to_s3_cube(served, s3, tmp_path):
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "virtualize"),
                        f"s3://{BUCKET}/nc3_months_classic/*.nc", "-o",
                        f"s3://{BUCKET}/cli/cube.zarr", "-v"],
                       capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "requests" in r.stdout
    assert not (tmp_path / "s3:").exists() and not os.path.exists("s3:")
    g = virtualize.open(f"s3://{BUCKET}/cli/cube.zarr")
    assert g["tas"].shape[0] == 91


def _no_credentials(monkeypatch, tmp_path) -> None:
    """No AWS credentials anywhere botocore looks (environment, files, instance metadata)."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.parametrize("out", ["cube.zarr", "refs.json"])
def test_s3_output_without_credentials_is_a_located_error(served, s3, out, tmp_path, monkeypatch,
                                                          capsys):
    """-o s3://... with no credentials: exit 3 (an I/O error), one located problem naming
    the output and where credentials are set; no traceback, nothing written."""
    from virtualize.cli import main

    client, _ = s3
    _srv, local = served
    _no_credentials(monkeypatch, tmp_path)
    url = f"s3://{BUCKET}/nocreds/{out}"
    files = [str(f) for f in local["months2024"]]
    assert main([*files, "-o", url]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and "NoCredentialsError" not in err.split("\n")[0]
    assert f"{url}: output-unreachable: cannot be reached: no credentials were found" in err, err
    assert "AWS_ACCESS_KEY_ID" in err and "--storage-option s3.key=" in err
    with pytest.raises(VirtualizeError) as ei:
        virtualize.virtualize(files, url)
    [p] = ei.value.problems
    assert p.kind == "output-unreachable" and p.loc.file == url
    assert "Contents" not in client.list_objects_v2(Bucket=BUCKET, Prefix="nocreds/")
    # reading one back, and a source, say the same
    with pytest.raises(VirtualizeError) as ei:
        virtualize.open(url)
    assert [p.kind for p in ei.value.problems] == ["output-unreachable"]
    assert "no credentials were found" in str(ei.value)
    report = virtualize.check([f"s3://{BUCKET}/months2024/{local['months2024'][0].name}"])
    [p] = report.problems
    assert p.kind == "source-forbidden" and "no credentials were found" in p.message
    assert "AWS_ACCESS_KEY_ID" in p.message


def test_s3_output_refused_on_upload_publishes_nothing(served, s3, tmp_path, monkeypatch):
    """Access denied while uploading (after the output was checked): a located problem, and
    no root document was uploaded (a reader finds no output)."""
    from virtualize.outputs import remote

    client, _ = s3
    _srv, local = served
    real = remote._fs

    class Denying:
        def __init__(self, fs):
            self.fs = fs

        def __getattr__(self, name):
            return getattr(self.fs, name)

        def put_file(self, *a, **kw):
            raise PermissionError("Access Denied")

    monkeypatch.setattr(remote, "_fs", lambda url: (Denying(real(url)[0]), real(url)[1]))
    url = f"s3://{BUCKET}/denied/cube.zarr"
    with pytest.raises(VirtualizeError) as ei:
        virtualize.virtualize(local["months2024"], url)
    [p] = ei.value.problems
    assert p.kind == "output-unreachable" and p.loc.file == url
    assert "access is forbidden (PermissionError: Access Denied)" in p.message
    assert "Contents" not in client.list_objects_v2(Bucket=BUCKET, Prefix="denied/")


@pytest.mark.parametrize("where", ["http", "s3"])
def test_icechunk_of_remote_sources_reads_back(served, s3, where, tmp_path):
    pytest.importorskip("icechunk")
    srv, local = served
    src = ([f"{srv.url}/months2024/{f.name}" for f in local["months2024"]] if where == "http"
           else f"s3://{BUCKET}/months2024/*.nc")
    virtualize.virtualize(src, tmp_path / "repo.icechunk")
    virtualize.virtualize(local["months2024"], tmp_path / "local")
    g, gl = virtualize.open(tmp_path / "repo.icechunk"), virtualize.open(tmp_path / "local")
    assert_same(g["tas"][...], gl["tas"][...], f"tas via Icechunk ({where} containers)")


def test_transient_errors_are_retried(served):
    srv, local = served
    f = local["nc3_months_classic"][0]
    srv.flaky[f"nc3_months_classic/{f.name}"] = 2  # two 503s, then the file
    report = virtualize.check([f"{srv.url}/nc3_months_classic/{f.name}"], scan_timeout=None)
    assert report.ok, report.problems
    assert srv.flaky[f"nc3_months_classic/{f.name}"] == 0


def _netcdf4_tas(files) -> np.ndarray:
    import netCDF4

    parts = []
    for f in sorted(files):
        with netCDF4.Dataset(f) as nc:
            nc.set_auto_maskandscale(False)
            parts.append(nc["tas"][...])
    return np.concatenate(parts)


def _plain_read(out, kind: str, moved_data: str, storage_options=None) -> np.ndarray:
    """tas of a relocated output read without virtualize: fsspec + zarr for kerchunk JSON
    (its template re-pointed), Icechunk with its `relative` container re-pointed."""
    if kind == "kerchunk":
        fs = fsspec.filesystem("reference", fo=str(out), asynchronous=True,
                               target_options=storage_options or {},
                               template_overrides={"u": moved_data.rstrip("/")},
                               remote_options={**(storage_options or {}), "asynchronous": True},
                               remote_protocol=fsspec.utils.get_protocol(moved_data))
        with zarr.config.set({"array.rectilinear_chunks": True}):
            g = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
            return g["tas"][...]
    import icechunk as ic

    storage = ic.local_filesystem_storage(str(out))
    config = ic.Repository.fetch_config(storage)
    prefix = moved_data.rstrip("/") + "/"
    prefix = prefix if "://" in prefix else "file://" + prefix
    store = ic.local_filesystem_store(prefix[7:]) if prefix.startswith("file://") else None
    config.set_virtual_chunk_container(ic.VirtualChunkContainer(prefix, store, name="relative"))
    repo = ic.Repository.open(storage, config=config, authorize_virtual_chunk_access=(
        ic.containers_credentials({prefix: ic.Credentials.LocalFileSystemAccess()})))
    with zarr.config.set({"array.rectilinear_chunks": True}):
        return zarr.open_group(repo.readonly_session("main").store, mode="r")["tas"][...]


@pytest.mark.parametrize("out", ["cube.zarr", "refs.json", "repo.icechunk"])
def test_relative_output_moves_with_its_files(case, out, tmp_path):
    """A directory holding the output and its files (in a subdirectory), moved: read back
    through virtualize.open, xarray and (kerchunk, Icechunk) without virtualize; sources
    checked for changes and references confined at the new place."""
    import xarray as xr

    if out.endswith(".icechunk"):
        pytest.importorskip("icechunk")
    base = tmp_path / "archive"
    (base / "data" / "2024").mkdir(parents=True)
    files = []
    for f in case("months2024")[:3]:
        shutil.copy2(f, base / "data" / "2024" / f.name)
        files.append(base / "data" / "2024" / f.name)
    expected = _netcdf4_tas(files)
    report = virtualize.virtualize(base / "data" / "2024", base / out, relative=True)
    kind = report.output["kind"]
    if kind == "cube":
        info = json.loads((base / out / "virtualize.json").read_text())
    elif kind == "kerchunk":
        doc = json.loads((base / out).read_text())
        info = doc["virtualize"]
        assert doc["templates"] == {"u": str(base / "data" / "2024")}
        assert {v[0] for v in doc["refs"].values() if isinstance(v, list)} == \
            {"{{u}}/" + f.name for f in files}
    else:
        import icechunk as ic

        from virtualize.outputs.icechunk.writer import recorded
        repo = ic.Repository.open(ic.local_filesystem_storage(str(base / out)))
        info = next(iter(repo.ancestry(branch="main"))).metadata["virtualize"]
        assert info["containers"] == {"relative": "../data/2024"}
        assert recorded(base / out)["sources"][0]["path"] == str(files[0])
    rel = "data/2024/" if kind == "kerchunk" else "../data/2024/"
    assert [s["path"] for s in info["sources"]] == [rel + f.name for f in files]
    assert info["roots"] == [rel.rstrip("/")]

    moved = tmp_path / "elsewhere" / "mirror"
    moved.parent.mkdir()
    shutil.move(base, moved)  # the output and its files together (mtimes kept)
    assert not base.exists()
    assert_same(virtualize.open(moved / out)["tas"][...], expected, f"moved {out}")
    ds = xr.open_dataset(moved / out, engine="virtualize", mask_and_scale=False)
    assert_same(ds["tas"].values, expected, f"moved {out} via xarray")
    if kind != "cube":
        assert_same(_plain_read(moved / out, kind, str(moved / "data" / "2024")), expected,
                    f"moved {out} without virtualize")

    # staleness, against the files at their new place
    first = moved / "data" / "2024" / files[0].name
    st = first.stat()
    os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(VirtualizeError) as e:  # touched (re-scanned there): strict refuses
        virtualize.open(moved / out, strict=True)
    assert [(p.kind, p.loc.file) for p in e.value.problems] == [("source-touched", str(first))]
    os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns))
    virtualize.open(moved / out)
    # confinement: the relative roots are the new place's, nothing beside it
    if kind == "kerchunk":
        outside = tmp_path / "elsewhere" / "secret.nc"
        shutil.copy2(first, outside)
        doc = json.loads((moved / out).read_text())
        key = next(k for k, v in doc["refs"].items() if isinstance(v, list))
        doc["refs"][key][0] = "{{u}}/../../../secret.nc"
        (moved / out).write_text(json.dumps(doc))
        with pytest.raises(VirtualizeError) as e:
            virtualize.open(moved / out)
        assert e.value.problems[0].kind == "reference-not-allowed"
    elif kind == "cube":
        info_path = moved / out / "virtualize.json"
        info = json.loads(info_path.read_text())
        info["roots"] = ["../.."]  # widened by an edit: the system-wide refusal still holds
        info["sources"][0]["path"] = "../../../../../../../../etc/passwd"
        info_path.write_text(json.dumps(info))
        with pytest.raises(VirtualizeError) as e:
            virtualize.open(moved / out)
        assert e.value.problems[0].kind == "reference-not-allowed", e.value.problems


def test_relative_cli_and_export(case, tmp_path):
    base = tmp_path / "a"
    base.mkdir()
    files = []
    for f in case("months2024")[:2]:
        shutil.copy2(f, base / f.name)
        files.append(base / f.name)
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "virtualize"),
                        *map(str, files), "-o", str(base / "cube.zarr"), "--relative"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    virtualize.export(base / "cube.zarr", base / "refs.json", relative=True)
    virtualize.virtualize(files[0], base / "one.json", relative=True)  # a regular grid
    shutil.move(base, tmp_path / "b")
    expected = _netcdf4_tas(files and [tmp_path / "b" / f.name for f in files])
    for out in ("cube.zarr", "refs.json"):
        assert_same(virtualize.open(tmp_path / "b" / out)["tas"][...], expected, out)
    # the moved reference set as a source: its template is resolved where it is now
    shutil.copytree(tmp_path / "b", tmp_path / "c")
    for f in files:
        (tmp_path / "b" / f.name).write_bytes(b"\0" * 16)  # the old place is not read
    virtualize.virtualize(tmp_path / "c" / "one.json", tmp_path / "again.zarr")
    assert_same(virtualize.open(tmp_path / "again.zarr")["tas"][...],
                _netcdf4_tas([tmp_path / "c" / files[0].name]), "moved refs as a source")


@pytest.mark.parametrize("out", ["cube.zarr", "refs.json", "repo.icechunk"])
def test_relative_output_on_s3_copied_to_another_bucket(served, s3, out):
    """Output and files on S3 under one prefix, copied object by object to another bucket
    and prefix: the copy reads back from its own objects (the originals deleted)."""
    if out.endswith(".icechunk"):
        pytest.importorskip("icechunk")
    client, endpoint = s3
    _srv, local = served
    files = sorted(local["months2024"])[:3]
    src, dst = f"reloc-{out}/", "deep/copy/"
    for f in files:
        client.upload_file(str(f), BUCKET, f"{src}data/{f.name}")
    virtualize.virtualize(f"s3://{BUCKET}/{src}data/*.nc", f"s3://{BUCKET}/{src}{out}",
                          relative=True)
    client.create_bucket(Bucket="mirror")
    for o in client.list_objects_v2(Bucket=BUCKET, Prefix=src)["Contents"]:
        client.copy_object(Bucket="mirror", Key=dst + o["Key"][len(src):],
                           CopySource={"Bucket": BUCKET, "Key": o["Key"]})
        client.delete_object(Bucket=BUCKET, Key=o["Key"])
    expected = _netcdf4_tas(files)
    url = f"s3://mirror/{dst}{out}"
    assert_same(virtualize.open(url)["tas"][...], expected, f"copied {out}")
    if out == "refs.json":
        assert_same(_plain_read(_download(client, "mirror", dst + out), "kerchunk",
                                f"s3://mirror/{dst}data",
                                {"endpoint_url": endpoint}), expected, "copied refs.json, fsspec")
    # a changed object of the copy is detected
    client.put_object(Bucket="mirror", Key=f"{dst}data/{files[0].name}",
                      Body=files[1].read_bytes())
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(url)
    assert {p.loc.file for p in e.value.problems} == {f"s3://mirror/{dst}data/{files[0].name}"}


def _download(client, bucket: str, key: str):
    import tempfile

    d = tempfile.mkdtemp()
    path = os.path.join(d, os.path.basename(key))
    client.download_file(bucket, key, path)
    return path


def test_relative_cube_on_s3_resolves_against_its_url(served, s3):
    virtualize.virtualize(f"s3://{BUCKET}/nc3_months_classic/*.nc",
                          f"s3://{BUCKET}/nc3_months_classic/cube.zarr", relative=True)
    client, _ = s3
    info = json.loads(client.get_object(Bucket=BUCKET,
                                        Key="nc3_months_classic/cube.zarr/virtualize.json")
                      ["Body"].read())
    assert all(s["path"].startswith("../tas_day_") for s in info["sources"])
    g = virtualize.open(f"s3://{BUCKET}/nc3_months_classic/cube.zarr")
    assert g["tas"].shape[0] == 91


@pytest.mark.parametrize("json_where", ["local", "http"])
def test_kerchunk_reference_sets_of_remote_files_as_sources(served, json_where, tmp_path):
    pytest.importorskip("kerchunk")
    from kerchunk.hdf import SingleHdf5ToZarr

    srv, local = served
    refs = []
    for f in local["months2024"][:3]:
        url = f"{srv.url}/months2024/{f.name}"
        doc = SingleHdf5ToZarr(url, inline_threshold=0).translate()
        out = srv.root / "refs" / f"{f.stem}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(doc))
        refs.append(str(out) if json_where == "local" else f"{srv.url}/refs/{out.name}")
    virtualize.virtualize(refs, tmp_path / "cube")
    virtualize.virtualize(local["months2024"][:3], tmp_path / "local")
    info = json.loads((tmp_path / "cube" / "virtualize.json").read_text())
    assert any(s["path"].startswith(srv.url) and s.get("referenced_by") for s in info["sources"])
    assert_same(virtualize.open(tmp_path / "cube")["tas"][...],
                virtualize.open(tmp_path / "local")["tas"][...], "tas via remote references")


# -- storage options per protocol -------------------------------------------------------

@pytest.fixture
def options_reset():
    from virtualize import storage
    yield storage
    storage.set_options(None)


def test_storage_options_forms_and_typed_cli_values(options_reset):
    storage = options_reset
    opts = storage.options_from_pairs(["s3.endpoint_url=http://127.0.0.1:9", "anon=false",
                                       "S3.client_kwargs.region_name=eu-west-1",
                                       "https.headers={\"X-Token\": \"t\"}", "block_size=1024",
                                       "use_listings_cache=True", "tag.name=x"])
    assert opts == {"s3": {"endpoint_url": "http://127.0.0.1:9",
                           "client_kwargs": {"region_name": "eu-west-1"}},
                    "anon": False, "https": {"headers": {"X-Token": "t"}}, "block_size": 1024,
                    "use_listings_cache": True, "tag": {"name": "x"}}
    storage.set_options(opts)
    s3 = storage.options_for("s3")
    assert s3["endpoint_url"] == "http://127.0.0.1:9" and s3["anon"] is False
    assert s3["client_kwargs"]["region_name"] == "eu-west-1"  # not AWS_REGION's
    assert "headers" not in s3
    # a section of https is http's too (one filesystem); flat keys apply to every protocol
    assert storage.options_for("http") == {"anon": False, "block_size": 1024,
                                           "use_listings_cache": True, "tag": {"name": "x"},
                                           "headers": {"X-Token": "t"}}
    assert "endpoint_url" not in storage.options_for("gs")
    with pytest.raises(ValueError, match="PROTOCOL.KEY=VALUE"):
        storage.options_from_pairs(["s3."])
    storage.set_options({"S3": {"anon": True}, "https": {"headers": {}}})  # any case
    assert storage.options_for("s3a")["anon"] is True
    assert "headers" not in storage.options_for("s3a") and "anon" not in storage.options_for("http")


def test_one_run_mixes_s3_and_https_sources_with_their_own_options(served, s3, options_reset,
                                                                     monkeypatch, tmp_path):
    """The endpoint of S3 and a token header of the HTTP server, each given for its own
    protocol only (the endpoint not from the environment): neither filesystem could take
    the other's options."""
    srv, local = served
    _client, endpoint = s3
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    files = sorted(local["months2024"])[:3]
    sources = [f"s3://{BUCKET}/months2024/{f.name}" for f in files[:2]] + \
        [f"{srv.url}/months2024/{files[2].name}"]
    options = {"s3": {"endpoint_url": endpoint}, "http": {"headers": {"X-Token": "secret"}}}
    srv.required_headers = {"X-Token": "secret"}
    try:
        with pytest.raises(VirtualizeError) as e:  # without the token: forbidden, located
            virtualize.virtualize(sources, tmp_path / "none.json",
                                  storage_options={"s3": {"endpoint_url": endpoint}})
        assert {p.loc.file: p.kind for p in e.value.problems}[sources[2]] == "source-forbidden"
        virtualize.virtualize(sources, tmp_path / "mixed.json", storage_options=options)
        virtualize.virtualize(sources, tmp_path / "mixed.zarr", storage_options=options)
        virtualize.virtualize(files, tmp_path / "local")
        expected = virtualize.open(tmp_path / "local")["tas"][...]
        for out in ("mixed.json", "mixed.zarr"):
            g = virtualize.open(tmp_path / out, storage_options=options)
            assert_same(g["tas"][...], expected, f"tas via {out}")
        storage.set_options(None)  # the xarray engine takes them too
        ds = xr.open_dataset(tmp_path / "mixed.zarr", engine="virtualize", storage_options=options,
                             mask_and_scale=False, decode_times=False)
        assert_same(ds["tas"].values, expected, "tas via xarray with storage_options")
        # plain fsspec + zarr: one filesystem per protocol, each with its options
        fs = fsspec.filesystem(
            "reference", fo=str(tmp_path / "mixed.json"), asynchronous=True,
            fs={"s3": {"endpoint_url": endpoint, "asynchronous": True},
                "http": {"headers": {"X-Token": "secret"}, "asynchronous": True}})
        with zarr.config.set({"array.rectilinear_chunks": True}):
            g = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
            assert_same(g["tas"][...], expected, "tas via fsspec+zarr, two protocols")
        # the command line: PROTOCOL.KEY=VALUE, a JSON value
        r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "virtualize"),
                            *sources, "-o", str(tmp_path / "cli.zarr"),
                            "--storage-option", f"s3.endpoint_url={endpoint}",
                            "--storage-option", 'https.headers={"X-Token": "secret"}'],
                           capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"})
        assert r.returncode == 0, r.stdout + r.stderr
        g = virtualize.open(tmp_path / "cli.zarr", storage_options=options)
        assert_same(g["tas"][...], expected, "tas via the CLI's cube")
    finally:
        srv.required_headers = {}


def test_flat_storage_options_still_apply_to_every_protocol(served, options_reset, tmp_path):
    srv, local = served
    f = sorted(local["nc3_months_classic"])[0]
    srv.required_headers = {"X-Token": "flat"}
    try:
        report = virtualize.check([f"{srv.url}/nc3_months_classic/{f.name}"],
                                  storage_options={"headers": {"X-Token": "flat"}})
        assert report.ok, report.problems
    finally:
        srv.required_headers = {}


def test_uninstalled_backend_names_its_package(tmp_path):
    """gs:// and az:// are passed to gcsfs / adlfs (untested here: no emulator); without
    the package, a located problem naming it, never a traceback or a local path."""
    import importlib.util

    pairs = [(s, p) for s, p in [("gs", "gcsfs"), ("gcs", "gcsfs"), ("az", "adlfs"),
                                 ("abfs", "adlfs")] if importlib.util.find_spec(p) is None]
    if not pairs:
        pytest.skip("gcsfs and adlfs are installed")
    for scheme, package in pairs:
        report = virtualize.check([f"{scheme}://bucket/a.nc"], scan_timeout=None)
        [p] = report.problems
        assert p.kind == "unsupported-scheme" and f"pip install {package}" in p.message
        assert p.loc.file == f"{scheme}://bucket/a.nc"
        with pytest.raises(VirtualizeError, match=f"pip install {package}"):
            virtualize.open(f"{scheme}://bucket/cube.zarr")
    (scheme, package), (scheme2, package2) = pairs[0], pairs[-1]
    for argv, wanted in (([f"{scheme}://bucket/a.nc", "-o", str(tmp_path / "c")], package),
                         ([str(tmp_path / "nothing.nc"), "-o", f"{scheme2}://b/cube.zarr"],
                          package2)):
        r = subprocess.run([sys.executable, "-m", "virtualize.cli", *argv], capture_output=True,
                           text=True, cwd=tmp_path)
        assert r.returncode != 0 and f"pip install {wanted}" in r.stdout + r.stderr, argv
        assert "Traceback" not in r.stderr
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(":")]


def test_aws_environment_fills_what_the_options_do_not(options_reset, monkeypatch):
    storage = options_reset
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://generic:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-only:2")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_REGION", "eu-north-1")
    storage.set_options(None)
    s3 = storage.options_for("s3")
    assert s3["endpoint_url"] == "http://s3-only:2" and s3["use_ssl"] is False
    assert s3["client_kwargs"] == {"region_name": "eu-north-1"}
    assert "endpoint_url" not in storage.options_for("https")  # S3's, not HTTP's
    storage.set_options({"s3": {"endpoint_url": "http://given:3",
                                "client_kwargs": {"region_name": "us-west-2"}}})
    s3 = storage.options_for("s3")  # what is given wins over the environment
    assert s3["endpoint_url"] == "http://given:3"
    assert s3["client_kwargs"] == {"region_name": "us-west-2"}


def test_reading_remote_references_leaves_no_session_open(case, tmp_path, monkeypatch):
    """A kerchunk JSON whose references are http:// or s3:// URLs is read through
    asynchronous file systems; their client sessions are closed when the store goes (or
    at exit): no aiohttp "Unclosed client session" warning (scripts/remote_demo.sh)."""
    files = case("months2024")[:2]
    root = tmp_path / "served"
    root.mkdir()
    for f in files:
        shutil.copy2(f, root / f.name)
    srv = RangeHTTPServer(root)
    server, endpoint = start_moto()
    try:
        client = s3_bucket(monkeypatch, endpoint, "bucket")
        for f in files:
            client.upload_file(str(f), "bucket", f"path/{f.name}")
        over_http = tmp_path / "http.json"
        virtualize.virtualize([f"{srv.url}/{f.name}" for f in files], over_http)
        over_s3 = tmp_path / "s3.json"
        virtualize.virtualize("s3://bucket/path/*.nc", over_s3)
        want = np.concatenate([virtualize.check([f]).to_zarr()["tas"][...] for f in files])
        np.save(tmp_path / "want.npy", want)
        code = ("import gc, sys, numpy as np, virtualize\n"
                "want = np.load(sys.argv[1])\n"
                "for cube in sys.argv[2:]:\n"
                "    g = virtualize.open(cube)\n"
                "    assert np.array_equal(g['tas'][...], want), cube\n"
                "g = virtualize.open(sys.argv[2]); g['tas'][0]; del g; gc.collect()\n"  # dropped
                "print('read')\n")
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "want.npy"),
                            str(over_http), str(over_s3)], capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0 and r.stdout == "read\n", r.stderr
        assert "Unclosed" not in r.stderr and r.stderr == "", r.stderr
    finally:
        srv.stop()
        server.stop()

"""Opening cubes at scale (issues 11 and 13): a cube directory on HTTP or S3 is read in
place, its manifest fetched one block of rows at a time (the request count of an open and
one chunk read does not grow with the chunk count); locally the manifest is memory-mapped;
each fetched block is checked; Icechunk repositories are opened without listing chunks."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest
import xarray as xr
from servers import RangeHTTPServer, s3_bucket, start_moto
from zarr.storage import WrapperStore

import virtualize
from virtualize.model import REF_DTYPE, VirtualizeError
from virtualize.outputs.cube import reader as read

SIZES = (100, 30000)  # chunks: a manifest smaller than the header read, and several blocks
BUCKET = "cubes"


def _h5(path, n: int) -> None:
    """`v` of shape (n, 4) in n chunks of one row (uncompressed), and a coordinate."""
    with h5py.File(path, "w") as f:
        d = f.create_dataset("v", shape=(n, 4), chunks=(1, 4), dtype="<i2")
        d[...] = (np.arange(n * 4) % 30000).astype("<i2").reshape(n, 4)
        f.create_dataset("x", data=np.arange(4, dtype="<f8"))


def _expected(n: int, row: int) -> np.ndarray:
    return (np.arange(row * 4, row * 4 + 4) % 30000).astype("<i2")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """For each size: data/big<n>.h5 and cubes/big<n>.zarr (its source the file's HTTP URL),
    all served over HTTP."""
    root = tmp_path_factory.mktemp("scale")
    (root / "data").mkdir()
    srv = RangeHTTPServer(root)
    for n in SIZES:
        _h5(root / "data" / f"big{n}.h5", n)
        virtualize.virtualize([f"{srv.url}/data/big{n}.h5"], root / "cubes" / f"big{n}.zarr")
    yield srv, root
    srv.stop()


def _open_and_read_one(url: str, n: int) -> None:
    g = virtualize.open(url)
    assert g["v"].shape == (n, 4)
    np.testing.assert_array_equal(g["v"][n - 1], _expected(n, n - 1))


def test_http_cube_open_and_one_chunk_cost_does_not_grow_with_chunks(served):
    srv, root = served
    costs = {}
    for n in SIZES:
        srv.reset()
        _open_and_read_one(f"{srv.url}/cubes/big{n}.zarr", n)
        manifest = f"/cubes/big{n}.zarr/v/manifest.npy"
        costs[n] = (srv.requests, srv.requests_per_path.get(manifest), srv.per_path[manifest],
                    dict(srv.requests_per_path))
        assert srv.per_path[manifest] <= 4096 + read.MANIFEST_BLOCK_ROWS * REF_DTYPE.itemsize
    small, large = (costs[n] for n in SIZES)
    assert small[:2] == large[:2], costs  # the same requests, whatever the chunk count
    # virtualize.json, zarr.json x3, the source's HEAD, manifest header and block, the chunk
    assert large[0] <= 10 and large[1] == 2, costs
    # the whole manifest would be 600 KB: never fetched
    assert large[2] < 30000 * REF_DTYPE.itemsize / 5


def test_http_cube_reads_every_value_like_the_local_cube(served):
    srv, root = served
    n = SIZES[0]
    local = virtualize.open(root / "cubes" / f"big{n}.zarr")
    remote = virtualize.open(f"{srv.url}/cubes/big{n}.zarr")
    np.testing.assert_array_equal(remote["v"][...], local["v"][...])
    ds = xr.open_dataset(f"{srv.url}/cubes/big{n}.zarr", engine="virtualize")
    np.testing.assert_array_equal(ds["v"].values, local["v"][...])


@pytest.fixture(scope="module")
def s3(served, tmp_path_factory):
    """The cubes uploaded to s3://cubes/ (moto); the S3 client's requests counted."""
    srv, root = served
    server, endpoint = start_moto()
    with pytest.MonkeyPatch.context() as mp:
        client = s3_bucket(mp, endpoint, BUCKET)
        for f in (root / "cubes").rglob("*"):
            if f.is_file():
                client.upload_file(str(f), BUCKET, f.relative_to(root / "cubes").as_posix())
        yield client
    server.stop()


class _Counted:
    """Every S3 request the reader's filesystem sends (botocore's before-send event)."""

    def __init__(self):
        from virtualize import storage

        fs = storage.filesystem(f"s3://{BUCKET}/x")
        fs.connect()
        self.calls: list[tuple[str, int]] = []
        fs.s3.meta.events.register("before-send.s3", self._seen)

    def _seen(self, request, **_kw):
        rng = request.headers.get("Range", b"")
        self.calls.append((request.url, len(rng)))


def test_s3_cube_open_and_one_chunk_cost_does_not_grow_with_chunks(served, s3):
    srv, _root = served
    counted = _Counted()
    costs = {}
    for n in SIZES:
        counted.calls.clear()
        srv.reset()
        _open_and_read_one(f"s3://{BUCKET}/big{n}.zarr", n)
        manifest = [u for u, _ in counted.calls if u.endswith("/v/manifest.npy")]
        costs[n] = (len(counted.calls), len(manifest), srv.requests)
    small, large = (costs[n] for n in SIZES)
    assert small == large, costs
    # S3: virtualize.json, zarr.json x3, manifest header + block; HTTP: HEAD + the chunk
    assert large[0] <= 8 and large[1] == 2 and large[2] <= 3, costs


def test_local_manifest_is_memory_mapped_and_checked_by_block(served, monkeypatch):
    _srv, root = served
    n = SIZES[1]
    checked = []
    real = read.check_rows
    monkeypatch.setattr(read, "check_rows", lambda *a, **k: (checked.append(len(a[2])),
                                                             real(*a, **k))[1])
    g = virtualize.open(root / "cubes" / f"big{n}.zarr")
    np.testing.assert_array_equal(g["v"][n - 1], _expected(n, n - 1))
    store = g.store._store  # ConsolidatedView over the CubeStore
    [m] = store._manifests["v"].parts  # one segment (no append)
    assert isinstance(m._mm, np.memmap)
    assert checked == [n % read.MANIFEST_BLOCK_ROWS or read.MANIFEST_BLOCK_ROWS]  # one block


@pytest.fixture
def edited(served, tmp_path):
    """A copy of the large cube whose manifest rows can be edited."""
    _srv, root = served
    n = SIZES[1]
    cube = tmp_path / "edited.zarr"
    shutil.copytree(root / "cubes" / f"big{n}.zarr", cube)
    return cube, n


@pytest.mark.parametrize("edit", ["source-index", "past-end", "length"])
@pytest.mark.parametrize("where", ["local", "http"])
def test_a_bad_row_in_a_fetched_block_is_refused(served, edited, edit, where):
    srv, root = served
    cube, n = edited
    m = np.load(cube / "v" / "manifest.npy")
    bad = n - 2  # in the last block; the first block stays good
    if edit == "source-index":
        m[bad, 0]["path"] = 7
    elif edit == "past-end":
        m[bad, 0]["offset"] = m[bad, 0]["offset"] + 10**9
    else:
        m[bad, 0]["length"] = 3
    np.save(cube / "v" / "manifest.npy", m)
    if where == "http":
        dest = root / "cubes" / f"edited-{edit}.zarr"
        shutil.copytree(cube, dest, dirs_exist_ok=True)
        cube = f"{srv.url}/cubes/edited-{edit}.zarr"
    g = virtualize.open(cube)
    np.testing.assert_array_equal(g["v"][0], _expected(n, 0))  # another block: read
    with pytest.raises(VirtualizeError) as e:
        g["v"][n - 1]  # the same block as the bad row: refused, the row named
    assert e.value.problems[0].kind == "invalid-reference"
    assert e.value.problems[0].loc.block == (bad, 0)


def test_a_truncated_remote_manifest_is_an_invalid_cube(served, edited):
    srv, root = served
    cube, n = edited
    dest = root / "cubes" / "truncated.zarr"
    shutil.copytree(cube, dest)
    data = (dest / "v" / "manifest.npy").read_bytes()
    (dest / "v" / "manifest.npy").write_bytes(data[:-100])
    g = virtualize.open(f"{srv.url}/cubes/truncated.zarr")
    np.testing.assert_array_equal(g["v"][0], _expected(n, 0))
    with pytest.raises(VirtualizeError, match="truncated") as e:
        g["v"][n - 1]
    assert e.value.problems[0].kind == "invalid-cube"


def test_a_remote_cube_naming_a_node_outside_it_is_refused(served, edited):
    srv, root = served
    cube, _n = edited
    info = json.loads((cube / "virtualize.json").read_text())
    info["arrays"]["../../data/big100.h5"] = "inline"
    dest = root / "cubes" / "escape.zarr"
    shutil.copytree(cube, dest)
    (dest / "virtualize.json").write_text(json.dumps(info))
    with pytest.raises(VirtualizeError, match="not a plain") as e:
        virtualize.open(f"{srv.url}/cubes/escape.zarr")
    assert e.value.problems[0].kind == "invalid-cube"


class _ListCounting(WrapperStore):
    """Records every listing call made on the wrapped store."""

    calls: list[tuple[str, str]] = []

    async def list(self):
        self.calls.append(("list", ""))
        async for k in self._store.list():
            yield k

    async def list_prefix(self, prefix):
        self.calls.append(("list_prefix", prefix))
        async for k in self._store.list_prefix(prefix):
            yield k

    async def list_dir(self, prefix):
        self.calls.append(("list_dir", prefix))
        async for k in self._store.list_dir(prefix):
            yield k


def test_icechunk_open_lists_no_chunk_keys(served, tmp_path, monkeypatch):
    pytest.importorskip("icechunk")
    _srv, root = served
    n = SIZES[1]
    virtualize.virtualize([root / "data" / f"big{n}.h5"], tmp_path / "repo.icechunk")
    from virtualize.outputs import icechunk as emit_icechunk

    real = emit_icechunk.open_icechunk
    monkeypatch.setattr(emit_icechunk, "open_icechunk",
                        lambda *a, **k: _ListCounting(real(*a, **k)))
    _ListCounting.calls = []
    g = virtualize.open(tmp_path / "repo.icechunk")
    np.testing.assert_array_equal(g["v"][n - 1], _expected(n, n - 1))
    ds = xr.open_dataset(tmp_path / "repo.icechunk", engine="virtualize")
    np.testing.assert_array_equal(ds["v"][n - 1].values, _expected(n, n - 1))
    # the references are split into manifests of MANIFEST_SPLIT chunks along each axis:
    # reading a chunk loads one of them, not all
    import icechunk as ic

    repo = ic.Repository.open(ic.local_filesystem_storage(str(tmp_path / "repo.icechunk")))
    snap = next(iter(repo.ancestry(branch="main"))).id
    refs = [m.num_chunk_refs for m in repo.list_manifest_files(snap)]
    assert sum(refs) == n + 1 and max(refs) <= emit_icechunk.MANIFEST_SPLIT < n, refs  # + x
    # the hierarchy is walked group by group; no key listing, no array's directory listed
    assert _ListCounting.calls, "the counting store was not used"
    assert {c for c, _ in _ListCounting.calls} == {"list_dir"}, _ListCounting.calls
    assert all(p.rstrip("/") in ("",) for _, p in _ListCounting.calls), _ListCounting.calls

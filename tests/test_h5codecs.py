"""HDF5's lzf (32000) and bitshuffle (32008: plain, LZ4, zstd) filters decode through
virtualize's own zarr codecs (`virtualize.codecs`): files written by h5py + hdf5plugin
(1- to 8-byte types, both byte orders, padded edge chunks, random and compressible data)
read back exactly through virtualize.open, xarray engine="virtualize", and the kerchunk
export opened by zarr + fsspec in a process that never imports virtualize (the codecs
found by their `zarr.codecs` entry points)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import virtualize
from virtualize import codecs as vcodecs

from helpers import assert_same

ROOT = Path(__file__).resolve().parents[1]
FILTERS = {
    "lzf": 'dict(compression="lzf")',
    "bitshuffle": "dict(**hdf5plugin.Bitshuffle(cname='none'))",
    "bitshuffle-lz4": "dict(**hdf5plugin.Bitshuffle(cname='lz4'))",
    "bitshuffle-zstd": "dict(**hdf5plugin.Bitshuffle(cname='zstd'))",
    "bitshuffle-lz4-blocks": "dict(**hdf5plugin.Bitshuffle(nelems=24, cname='lz4'))",
    "bitshuffle-blocks": "dict(**hdf5plugin.Bitshuffle(nelems=16, cname='none'))",
}

# Written (and read back by h5py + hdf5plugin) in a fresh interpreter: netCDF4-python,
# imported by other tests, points HDF5_PLUGIN_PATH at its own plugin builds.
WRITE = textwrap.dedent("""
    import sys, math
    import h5py, hdf5plugin, numpy as np
    path, flt, kinds = sys.argv[1], eval(sys.argv[2]), sys.argv[3].split(",")
    rng = np.random.default_rng(23)
    out = {}
    with h5py.File(path, "w") as f:
        for dt in ["u1", "i1", "<i2", ">u2", "<f4", ">i4", "<f8", ">f8", "<u8"]:
            for shape, chunks in [((37, 23), (10, 7)), ((1001,), (250,)), ((5,), (5,))]:
                for kind in kinds:
                    n = math.prod(shape)
                    if kind == "random":
                        a = rng.integers(0, 256, n * np.dtype(dt).itemsize, dtype="u1")
                        a = a.view(dt).reshape(shape)
                        if a.dtype.kind == "f":
                            a = np.where(np.isfinite(a), a, 0).astype(dt)
                    else:
                        a = (np.arange(n) // 7 % 100).astype(dt).reshape(shape)
                    code = np.dtype(dt).str.translate({60: "le", 62: "be", 124: ""})
                    name = f"{kind}_{code}_{len(shape)}d_{n}"
                    f.create_dataset(name, data=a, chunks=chunks, **flt)
    with h5py.File(path) as f:
        np.savez(path + ".npz", **{k: f[k][()] for k in f})
""")


def write(path: Path, flt: str, kinds=("random", "compressible")) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    subprocess.run([sys.executable, "-c", WRITE, str(path), FILTERS[flt], ",".join(kinds)],
                   check=True, env=env)
    with np.load(str(path) + ".npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("flt", list(FILTERS))
@pytest.mark.parametrize("kinds", [("compressible",), ("random",)])
def test_filter_reads_exactly(tmp_path, flt, kinds):
    p = tmp_path / "a.h5"
    expected = write(p, flt, kinds)
    cube = tmp_path / "c.zarr"
    # random data: lzf chunks that did not shrink are stored unfiltered (filter mask
    # bit set) beside padded edge chunks that did; --materialize copies the odd ones
    report = virtualize.virtualize([p], cube, inline_threshold=0, materialize=True)
    assert not [q for q in report.problems if q.fatal], report.problems
    g = virtualize.open(cube)
    ds = xr.open_dataset(cube, engine="virtualize", mask_and_scale=False, decode_times=False)
    names = set()
    for name, want in expected.items():
        assert_same(g[name][...], want, f"{flt} {name}")
        assert_same(ds[name].values, want, f"{flt} {name} via xarray")
        doc = json.loads((cube / name / "zarr.json").read_text())
        names |= {c["name"] for c in doc["codecs"]}
    # the decode check (h5py + hdf5plugin's read of a sample of chunks) agrees
    assert virtualize.verify_cube(cube, decode=True) == []
    # referenced through the codec (random data skips lzf: the chunks are stored as they are)
    if flt.startswith("bitshuffle"):
        assert vcodecs.BITSHUFFLE in names
    elif kinds == ("compressible",):
        assert vcodecs.LZF in names


def test_lzf_chunks_that_did_not_shrink_are_materialized(tmp_path):
    """An lzf chunk that does not shrink is stored unfiltered (its filter mask bit set);
    in a dataset whose other chunks are compressed it is refused as filter-mask, and
    --materialize copies it: the cube reads exactly."""
    p = tmp_path / "m.h5"
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys, h5py, numpy as np
        a = np.zeros((40, 10), "<f4")
        a[30:] = np.random.default_rng(1).random((10, 10))
        with h5py.File(sys.argv[1], "w") as f:
            f.create_dataset("x", data=a, chunks=(10, 10), compression="lzf")
    """), str(p)], check=True, env=env)
    import h5py
    with h5py.File(p) as f:
        masks = [f["x"].id.get_chunk_info(i).filter_mask for i in range(4)]
        want = f["x"][()]
    assert masks == [0, 0, 0, 1]
    report = virtualize.check([p], inline_threshold=0)
    assert {(q.kind, q.loc.block) for q in report.problems if q.fatal} == {("filter-mask", (3, 0))}
    virtualize.virtualize([p], tmp_path / "c.zarr", materialize=True, inline_threshold=0)
    assert_same(virtualize.open(tmp_path / "c.zarr")["x"][...], want, "lzf + raw chunk")


def test_a_stack_joins_and_the_kerchunk_export_reads_without_importing_virtualize(tmp_path):
    """Two files per filter, stacked along a new axis, exported as kerchunk JSON; a fresh
    interpreter that never imports virtualize opens it with zarr + fsspec: zarr finds the
    codecs by the entry points pyproject.toml declares (given to it as a dist-info, so
    this venv's install is not touched)."""
    expected, refs = {}, {}
    for flt in ("lzf", "bitshuffle", "bitshuffle-lz4", "bitshuffle-zstd"):
        files = [tmp_path / f"{flt}{i}.h5" for i in range(2)]
        parts = [write(f, flt, ("compressible",)) for f in files]
        out = tmp_path / f"{flt}.json"
        virtualize.virtualize(files, out, concat_dim="file", inline_threshold=0)
        refs[flt] = str(out)
        for name in parts[0]:
            expected[f"{flt}/{name}"] = np.stack([p[name] for p in parts])
    np.savez(tmp_path / "want.npz", **{k.replace("/", "__"): v for k, v in expected.items()})
    dist = tmp_path / "site" / "virtualize_codecs_probe-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: virtualize-codecs-probe\n"
                                   "Version: 0\n")
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    (dist / "entry_points.txt").write_text(
        "[zarr.codecs]\n" + "".join(f"{k} = {v}\n" for k, v in eps["zarr.codecs"].items()))
    script = textwrap.dedent("""
        import json, sys
        import fsspec, numpy as np, zarr
        from zarr.storage import FsspecStore
        refs = json.loads(sys.argv[1])
        want = np.load(sys.argv[2])
        zarr.config.set({"array.rectilinear_chunks": True})
        assert "virtualize" not in sys.modules
        n = 0
        for flt, path in refs.items():
            fs = fsspec.filesystem("reference", fo=path, asynchronous=True)
            g = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r",
                                zarr_format=3)
            for name in want.files:
                if name.startswith(flt + "__"):
                    got, exp = g[name.split("__", 1)[1]][...], want[name]
                    assert got.dtype == exp.dtype and np.array_equal(got, exp), name
                    n += 1
        print(n, sorted(m for m in sys.modules if m.startswith("virtualize")))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(dist.parent)]))
    got = subprocess.run([sys.executable, "-c", script, json.dumps(refs),
                          str(tmp_path / "want.npz")], env=env, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-3000:]
    count, _sep, loaded = got.stdout.partition(" ")
    assert int(count) == len(expected) and "virtualize.codecs" in loaded


def test_entry_points_name_the_codecs():
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    declared = eps["zarr.codecs"]
    ours = {n: t for n, t in declared.items() if not n.startswith("imagecodecs_")}
    assert set(ours) == set(vcodecs.CODECS)
    # imagecodecs' own classes under the names it registers them by, for every
    # imagecodecs codec a cube can name (the source's codec names)
    import imagecodecs.zarr

    named = {m for p in (ROOT / "src" / "virtualize").rglob("*.py")
             for m in re.findall(r'"(imagecodecs_[a-z0-9]+)"', p.read_text())}
    theirs = {n: t for n, t in declared.items() if n.startswith("imagecodecs_")}
    assert named <= set(theirs), named - set(theirs)
    for name, target in theirs.items():
        module, _colon, attr = target.partition(":")
        assert module == "imagecodecs.zarr"
        assert imagecodecs.zarr._CODEC_CLASSES[name.removeprefix("imagecodecs_")] is \
            getattr(imagecodecs.zarr, attr)
    for name, target in ours.items():
        module, _colon, attr = target.partition(":")
        assert module == "virtualize.codecs" and getattr(vcodecs, attr) is vcodecs.CODECS[name]
        config = {vcodecs.BITSHUFFLE: {"elementsize": 4},
                  vcodecs.FITSSCALE: {"dtype": "<f4", "astype": "<i2"},
                  vcodecs.FITSGZIP: {"bitpix": 16}}.get(name)
        assert vcodecs.CODECS[name].from_dict(
            {"name": name, "configuration": config} if config else {"name": name}
        ).to_dict()["name"] == name


def test_damaged_chunks_raise_never_pad():
    import imagecodecs

    data = np.arange(64, dtype="<i4").tobytes()
    lzf = imagecodecs.lzf_encode(data, header=False)
    assert vcodecs.lzf_decode(lzf, len(data)) == data
    with pytest.raises(ValueError):
        vcodecs.lzf_decode(lzf, len(data) + 4)  # decodes to fewer bytes than a chunk
    with pytest.raises(ValueError):
        vcodecs.lzf_decode(lzf[:-3], len(data))
    with pytest.raises(ValueError):  # the header's size is not the chunk's
        vcodecs.bitshuffle_decode(b"\0" * 7 + b"\x10" + b"\0\0\0\x20", len(data), 4, 0, "lz4")
    with pytest.raises(ValueError):
        vcodecs.bitshuffle_decode(data[:-4], len(data), 4)


@pytest.mark.parametrize("compression", vcodecs.BITSHUFFLE_COMPRESSION)
@pytest.mark.parametrize("items,itemsize,block", [(1000, 4, 0), (77, 8, 16), (3, 2, 0),
                                                  (4096, 1, 24), (5000, 4, 0)])
def test_encoders_round_trip(compression, items, itemsize, block):
    """What --materialize stores through the codecs decodes back (random bytes)."""
    data = np.random.default_rng(items).integers(0, 256, items * itemsize, "u1").tobytes()
    got = vcodecs.bitshuffle_encode(data, itemsize, block, compression)
    assert vcodecs.bitshuffle_decode(got, len(data), itemsize, block, compression) == data
    assert vcodecs.lzf_decode(vcodecs.lzf_encode(data), len(data)) == data


def test_unknown_bitshuffle_variants_stay_refused(tmp_path):
    from virtualize.formats.hdf5.codecs import hdf5_filter_codec

    assert hdf5_filter_codec(32008, (0, 4, 4, 0, 2), np.dtype("f4"))["configuration"] == {
        "elementsize": 4, "blocksize": 0, "compression": "lz4"}
    assert hdf5_filter_codec(32008, (0, 4, 4, 0, 9), np.dtype("f4")) is None  # compressor 9
    assert hdf5_filter_codec(32008, (0, 4, 2, 0, 0), np.dtype("f4")) is None  # item size
    assert hdf5_filter_codec(32000, (4, 261, 400), np.dtype("f4")) == {"name": vcodecs.LZF}


def _liblzf(data: bytes) -> bytes:
    """liblzf's lzf_decompress (lzf_d.c, the copy h5py's and hdf5plugin's lzf filter
    build), with an output buffer as large as the stream needs: the bytes a raw stream
    decodes to; ValueError where liblzf says EINVAL (h5py's filter fails)."""
    out, ip, n = bytearray(), 0, len(data)
    while ip < n:
        ctrl = data[ip]
        ip += 1
        if ctrl < 32:  # a literal run of ctrl + 1 bytes
            if ip + ctrl + 1 > n:
                raise ValueError("EINVAL: a literal run past the end")
            out += data[ip:ip + ctrl + 1]
            ip += ctrl + 1
            continue
        length, back = ctrl >> 5, (ctrl & 0x1F) << 8
        if ip >= n:
            raise ValueError("EINVAL: a back reference past the end")
        if length == 7:
            length += data[ip]
            ip += 1
            if ip >= n:
                raise ValueError("EINVAL: a back reference past the end")
        ref = len(out) - back - 1 - data[ip]
        ip += 1
        if ref < 0:
            raise ValueError("EINVAL: a back reference before the start")
        for k in range(length + 2):  # (overlapping copies repeat what they copy)
            out.append(out[ref + k])
    return bytes(out)


def test_damaged_lzf_chunks_decode_as_hdf5s_filter_or_raise(tmp_path):
    """Hundreds of damaged LZF chunks (bytes flipped, 8 bytes zeroed, cut short, bytes
    added) written with h5py's write_direct_chunk and read by h5py: where liblzf finds the
    stream invalid both h5py and `virtualize.lzf` fail; where it decodes to at least a
    chunk, virtualize.lzf reads exactly h5py's values (the first chunk's bytes of a longer
    stream); where it decodes to fewer, h5py's chunk holds uninitialised memory after them
    and virtualize.lzf raises (round 4: 8 zeroed bytes read 0 where h5py read 21911)."""
    import random

    import h5py
    import imagecodecs

    shape, dtype = (16, 16), np.dtype("<i4")
    nbytes = math.prod(shape) * dtype.itemsize
    values = (np.arange(256).reshape(shape) // 7 * 3 + np.arange(16) % 5).astype(dtype)
    good = bytes(imagecodecs.lzf_encode(values.tobytes(), header=False))
    assert _liblzf(good) == values.tobytes()
    pick = random.Random(28)
    damaged = []
    for k in range(400):
        b = bytearray(good)
        how = k % 4
        at = pick.randrange(len(b))
        if how == 0:
            b[at] ^= 1 << pick.randrange(8)
        elif how == 1:
            b[at:at + 8] = bytes(len(b[at:at + 8]))
        elif how == 2:
            del b[at:]
        else:
            b[at:at] = bytes(pick.randrange(256) for _ in range(pick.randrange(1, 6)))
        if b:
            damaged.append(bytes(b))
    path = tmp_path / "damaged.h5"
    with h5py.File(path, "w") as f:
        for k, b in enumerate(damaged):
            d = f.create_dataset(f"d{k}", shape=shape, chunks=shape, dtype=dtype,
                                 compression="lzf")
            d.id.write_direct_chunk((0, 0), b, 0)
    seen = {"invalid": 0, "exact": 0, "longer": 0, "short": 0}
    with h5py.File(path, "r") as f:
        for k, b in enumerate(damaged):
            try:
                want = _liblzf(b)
            except ValueError:
                with pytest.raises(OSError):
                    f[f"d{k}"][()]
                with pytest.raises(ValueError):
                    vcodecs.lzf_decode(b, nbytes)
                seen["invalid"] += 1
                continue
            if len(want) < nbytes:
                with pytest.raises(ValueError, match="uninitialised"):
                    vcodecs.lzf_decode(b, nbytes)
                # (h5py's first bytes are the stream's; the rest is whatever memory held)
                got = f[f"d{k}"][()].tobytes()
                assert got[:len(want)] == want, k
                seen["short"] += 1
                continue
            got = f[f"d{k}"][()].tobytes()
            assert got == want[:nbytes], k
            assert vcodecs.lzf_decode(b, nbytes) == got, k
            seen["longer" if len(want) > nbytes else "exact"] += 1
    assert all(seen.values()), seen  # every case met

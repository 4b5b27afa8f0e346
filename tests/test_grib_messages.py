"""GRIB messages that are not one field stored row by row (docs/grib.md): messages of
several fields (NCEP's u / v), points along columns or in alternating rows (NDFD),
leading bytes before the first message, satellite templates without a step, messages
written twice. Every case read through the cube (virtualize.open, xarray, the kerchunk
export) equals ecCodes' values (its multi-field support on, as cfgrib reads) and, where
cfgrib reads the file, cfgrib's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import virtualize
from virtualize.codecs import load_eccodes

from helpers import assert_same

try:
    ec = load_eccodes()  # (after pyproj: docs/grib.md, "Known issue")
except ImportError:
    pytest.skip("the Python package eccodes is not installed", allow_module_level=True)
xr = pytest.importorskip("xarray")

from test_grib import CFGRIB, OLD, _multi_support, eccodes_messages, expected, roundtrip  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The three fixture cases, built once (fixtures/make_grib.py)."""
    import make_grib

    d = tmp_path_factory.mktemp("gribmsg")
    return {p.name: p for case in ("grib_multi", "grib_scanning", "grib_odd")
            for p in make_grib.make(case, d)}


def read_everywhere(path, tmp_path, **kw):
    """The cube's arrays by virtualize.open, xarray and the kerchunk export, each equal to
    ecCodes' fields placed at their cells (`test_grib.expected`); the xarray dataset."""
    report, g, k = roundtrip([path], tmp_path, **kw)
    assert report.ok, report.problems
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    want = expected(ds, path)
    assert want
    for var, w in want.items():
        assert_same(g[var][...], w, f"{path.name} {var}: virtualize.open")
        assert_same(ds[var].values, w, f"{path.name} {var}: xarray")
        assert_same(k[var][...], w, f"{path.name} {var}: kerchunk export")
    return report, ds, want


def cfgrib_equal(path, ds, coords=("latitude", "longitude", "step", "isobaricInhPa")):
    """cfgrib's arrays (float32) equal the cube's, once squeezed; the `coords` both give
    equal. Returns how many arrays were compared."""
    cfgrib = pytest.importorskip("cfgrib")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = cfgrib.open_datasets(str(path), backend_kwargs={"indexpath": ""})
    n = 0
    for t in theirs:
        for var in t.data_vars:
            a = t[var]
            [b] = [v for v in ds.data_vars.values()
                   if all(v.attrs[f"GRIB_{k}"] == a.attrs[f"GRIB_{k}"]
                          for k in ("shortName", "typeOfLevel", "stepType"))
                   and v.squeeze().shape == a.squeeze().shape]
            assert_same(b.values.squeeze().astype(np.float32), a.values.squeeze(),
                        f"{path.name} {var}: cfgrib")
            for c in coords:
                if c in a.coords and c in b.coords:
                    assert_same(b[c].values.reshape(-1), a[c].values.reshape(-1), f"{var} {c}")
            n += 1
    return n


# -- messages of several fields -------------------------------------------------------------

def test_each_field_of_a_message_is_a_chunk_equal_to_ecCodes_multi_field_reading(files,
                                                                                 tmp_path):
    path = files["uv.grib2"]
    report, ds, want = read_everywhere(path, tmp_path)
    assert {"u", "v", "10u", "10v", "2t"} <= set(want)
    assert ds["v"].dims == ("time", "step", "isobaricInhPa", "latitude", "longitude")
    # the t message holds two grids (sections 3-7 repeated): two arrays, one per grid
    assert sorted(ds[v].shape[-2:] for v in want if v.startswith("t")) == [(16, 16), (31, 16)]
    # 10u / 10v carry bit-maps: their missing points are NaN, as ecCodes says
    assert np.isnan(ds["10v"].values).sum() == 3
    # the codec names the field: v is field 1 of its messages, u (field 0) needs nothing
    g = virtualize.open(tmp_path / "cube.zarr")
    codecs = {v: g[v].metadata.codecs[-1].to_dict() for v in ("u", "v", "2t")}
    assert codecs == {"u": {"name": "virtualize.grib"},
                      "v": {"name": "virtualize.grib", "configuration": {"field": 1}},
                      "2t": {"name": "virtualize.grib"}}
    assert cfgrib_equal(path, ds) >= 5


def test_a_field_message_is_the_one_ecCodes_builds_byte_for_byte(files):
    """`grib_field_message` (what the codec decodes) is ecCodes' own field message
    (`codes_get_message` of its multi-field handle) for every field of every message,
    bit-map reuse (indicator 254) included."""
    from virtualize.codecs import grib2_fields, grib_field_message

    for name in ("uv.grib2", "reuse.grib2"):
        data = files[name].read_bytes()
        theirs = [m["message"] for m in eccodes_messages(files[name])]
        mine, at = [], 0
        while at < len(data):
            n = int.from_bytes(data[at + 8:at + 16], "big")
            msg = data[at:at + n]
            mine += [grib_field_message(msg, k) for k in range(len(grib2_fields(msg)))]
            at += n
        assert mine == theirs, name
    with pytest.raises(ValueError, match="2 field"):
        grib_field_message(files["reuse.grib2"].read_bytes(), 2)


def test_a_bit_map_reused_within_a_message_reads_like_ecCodes(files, tmp_path):
    _, ds, want = read_everywhere(files["reuse.grib2"], tmp_path)
    assert np.isnan(want["10v"]).sum() == 4 and np.isnan(ds["10v"].values).sum() == 4


def test_a_bit_map_reuse_with_none_defined_before_is_refused_naming_the_field(files, tmp_path):
    """A field saying "the bit-map defined previously" (254) after a field with none
    (255): ecCodes would read it as having no bit-map; it is refused, named."""
    import make_grib

    u, v = (make_grib.message("regular_ll_sfc_grib2", shortName=n, level=10,
                              typeOfLevel="heightAboveGround") for n in ("10u", "10v"))
    body = b"".join(b for _, b in make_grib.sections(u))
    body += b"".join(b if n != 6 else (6).to_bytes(4, "big") + bytes([6, 254])
                     for n, b in make_grib.sections(v) if n >= 4)
    path = tmp_path / "bad.grib2"
    path.write_bytes(u[:8] + (16 + len(body) + 4).to_bytes(8, "big") + body + b"7777")
    report = virtualize.check([path], **OLD)
    [p] = [p for p in report.problems if p.fatal]
    assert (p.kind, p.loc.variable) == ("unsupported-grib", "10v")
    assert "message 0, field 1 (at byte offset 0)" in p.message and "254" in p.message


def test_fields_an_array_cannot_hold_are_all_named_and_the_rest_reads(files, tmp_path):
    """v is field 1 of one message and a message of its own at another level: one codec
    cannot read both, so v is refused naming both fields; u reads; `--drop v` is the
    way through and leaves out exactly the fields named."""
    path = files["mixed.grib2"]
    report = virtualize.check([path], **OLD)
    [p] = [p for p in report.problems if p.fatal]
    assert (p.kind, p.loc.variable) == ("unsupported-grib", "v")
    assert "message 0, field 1 (at byte offset 0)" in p.message
    assert "message 1 (at byte offset" in p.message and "2 field(s) of v" in p.message
    report = virtualize.virtualize([path], tmp_path / "c.zarr", drop=["v"], **OLD)
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    assert list(ds.data_vars) == ["u"]
    assert_same(ds["u"].values, expected(ds, path)["u"], "u")


def test_multi_field_messages_over_http_read_like_the_local_file(served, tmp_path):
    """No sidecar: the length walk by ranged reads; each field's keys from its headers."""
    path, _, url, _ = served
    virtualize.virtualize([url], tmp_path / "c.zarr", **OLD)
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    for var, w in expected(ds, path).items():
        assert_same(ds[var].values, w, f"{var} over HTTP")


def test_the_codec_configuration_is_checked():
    from virtualize.codecs import GribCodec

    assert GribCodec.from_dict({"name": "virtualize.grib"}).to_dict() == {"name": "virtualize.grib"}
    c = {"name": "virtualize.grib", "configuration": {"field": 2, "alternativeRowScanning": True}}
    assert GribCodec.from_dict(c).to_dict() == c
    for bad in ({"field": -1}, {"field": True}, {"fields": 1}, {"jPointsAreConsecutive": 1}):
        with pytest.raises(ValueError):
            GribCodec.from_dict({"name": "virtualize.grib", "configuration": bad})


# -- scanning orders ------------------------------------------------------------------------

SCANNED = ["columns.grib2", "alternate.grib2", "both.grib2", "west.grib2", "north.grib2",
           "columns.grib1", "ndfd.grib2", "ndfd_columns.grib2"]


@pytest.mark.parametrize("name", SCANNED)
def test_points_in_any_scanning_order_read_in_y_x_order(files, tmp_path, name):
    """Each value at the (y, x) cell ecCodes' own latitudes and longitudes put it
    (columns-first transposed; alternating rows reversed, as cfgrib does), coordinates
    equal to ecCodes' there."""
    path = files[name]
    _, ds, want = read_everywhere(path, tmp_path)
    [m] = eccodes_messages(path)[:1]
    var = next(iter(want))
    if "latitude" in ds.dims:
        nj, ni = ds[var].shape[-2:]
        lat, lon = m["latitudes"].reshape(nj, ni), m["longitudes"].reshape(nj, ni)
        # (the arrangement is a grid: one latitude per row, one longitude per column)
        assert (lat == lat[:, :1]).all() and (lon == lon[:1]).all(), name
        assert_same(ds["latitude"].values, lat[:, 0], f"{name} latitude")
        assert_same(ds["longitude"].values, lon[0], f"{name} longitude")
    config = virtualize.open(tmp_path / "cube.zarr")[var].metadata.codecs[-1].to_dict()
    assert config.get("configuration"), config  # (the order is the codec's to undo)


def test_cfgribs_alternate_scanning_file_equals_cfgrib(tmp_path):
    """cfgrib's own alternate-scanning.grib (it was refused: `no (y, x) reading`)."""
    path = CFGRIB / "alternate-scanning.grib"
    _, ds, _ = read_everywhere(path, tmp_path)
    assert cfgrib_equal(path, ds) == 1


def test_alternating_rows_equal_cfgrib(files, tmp_path):
    _, ds, _ = read_everywhere(files["alternate.grib2"], tmp_path / "a")
    assert cfgrib_equal(files["alternate.grib2"], ds) == 1
    # rows running west: cfgrib's values, but its longitudes are ecCodes' distinct ones
    # sorted (0 .. 30) where its values run 30 .. 0; the cube's are ecCodes' own order
    # (30 .. 0, `test_points_in_any_scanning_order_read_in_y_x_order`)
    _, ds, _ = read_everywhere(files["west.grib2"], tmp_path / "w")
    assert cfgrib_equal(files["west.grib2"], ds, coords=("latitude", "step")) == 1
    assert ds["longitude"].values[0] == 30.0


# -- odd files ------------------------------------------------------------------------------

def test_a_grib1_file_behind_binary_leading_bytes_reads_like_ecCodes_and_cfgrib(files, tmp_path):
    path = files["lead.grib1"]
    assert virtualize.formats.detect_format(str(path)) == "grib"
    report, ds, _ = read_everywhere(path, tmp_path)
    assert [p.kind for p in report.problems] == ["trailing-bytes"]
    assert cfgrib_equal(path, ds) == 1


def test_leading_bytes_claim_only_a_whole_message(tmp_path):
    """"GRIB" and an edition byte behind binary bytes, with no message after it, is no
    GRIB file (another format's bytes)."""
    import make_grib

    m = make_grib.message("GRIB2")
    path = tmp_path / "x.bin"
    path.write_bytes(b"\x89\x00\xff" * 10 + m[:-1] + b"8")  # (no 7777 where it ends)
    assert virtualize.formats.detect_format(str(path)) is None
    path.write_bytes(b"\x89\x00\xff" * 10 + m)
    assert virtualize.formats.detect_format(str(path)) == "grib"


def test_a_satellite_channel_without_step_keys_reads_like_ecCodes(files, tmp_path):
    """Product template 4.31 (satellite) has no step, level or member keys: absent, not
    corrupt (it was `corrupt KeyValueNotFoundError`)."""
    path = files["satellite.grib2"]
    report, g, _ = roundtrip([path], tmp_path)
    assert report.ok, report.problems
    with open(path, "rb") as f:
        h = ec.codes_grib_new_from_file(f)
        want = ec.codes_get_values(h).reshape(1, ec.codes_get(h, "Nj"), ec.codes_get(h, "Ni"))
        ec.codes_release(h)
    [var] = [v for v in g.array_keys() if g[v].ndim == 3]
    assert_same(g[var][...], want, "satellite channel: ecCodes'")


def test_a_message_written_twice_is_held_once_and_differing_ones_are_refused(files, tmp_path):
    report, ds, want = read_everywhere(files["twice.grib2"], tmp_path)
    [note] = [p for p in report.problems if p.kind == "duplicate-held-once"]
    assert not note.fatal and "message 2 (at byte offset 2342) is message 0 (at byte " \
        "offset 0)" in note.message
    assert ds["2t"].shape == (1, 2, 31, 16)
    report = virtualize.check([files["differ.grib2"]], **OLD)
    [p] = [p for p in report.problems if p.fatal]
    assert p.kind == "duplicate-message" and "messages 1 and 2" in p.message


def test_multi_support_is_left_off(files):
    """The oracle's multi-field switch is scoped (ecCodes' state is global): a plain read
    after it sees one handle per message again."""
    path = files["uv.grib2"]
    with open(path, "rb") as f, _multi_support(f):
        pass
    with open(path, "rb") as f:
        n = 0
        while (h := ec.codes_grib_new_from_file(f)) is not None:
            n += 1
            ec.codes_release(h)
    assert n == 9  # (6 u / v messages, 10u / 10v, t on two grids, 2t)


# -- remote files with an inventory sidecar (.idx) ------------------------------------------

def _inventory(path) -> list[str]:
    """wgrib2's inventory of `path` (`n[.k]:offset:d=...:VAR:level:forecast:`), written
    from ecCodes' multi-field reading (each field's message offset)."""
    lines, numbers = [], {}
    with open(path, "rb") as f, _multi_support(f):
        while (h := ec.codes_grib_new_from_file(f)) is not None:
            at = int(ec.codes_get(h, "offset"))
            numbers.setdefault(at, []).append(ec.codes_get(h, "shortName"))
            ec.codes_release(h)
    for n, (at, names) in enumerate(numbers.items(), 1):
        for k, name in enumerate(names, 1):
            lines.append(f"{n}{f'.{k}' if len(names) > 1 else ''}:{at}:d=2007032312:"
                         f"{name.upper()}:500 mb:anl:")
    return lines


@pytest.fixture
def served(files, tmp_path):
    import shutil

    from servers import RangeHTTPServer

    pytest.importorskip("aiohttp")
    root = tmp_path / "served"
    root.mkdir()
    path = files["uv.grib2"]
    shutil.copy2(path, root / path.name)
    srv = RangeHTTPServer(root)
    yield path, root, f"{srv.url}/{path.name}", srv
    srv.stop()


def test_an_idx_sidecar_finds_the_messages_without_the_walk(served, tmp_path, monkeypatch):
    from virtualize.formats import scan
    from virtualize.formats.grib import messages

    path, root, url, srv = served
    lines = _inventory(path)
    assert any(".2:" in ln for ln in lines)  # (the u / v messages: n.1, n.2 at one offset)
    (root / (path.name + ".idx")).write_text("\n".join(lines) + "\n")
    walked = scan(url)  # (its messages cached: the next scan is a fresh one)
    monkeypatch.setattr(messages, "walk", lambda *a: pytest.fail("walked despite the sidecar"))
    got = scan(url)
    assert not [p for p in got.problems if p.kind == "grib-index-ignored"]
    for name, v in walked.variables.items():
        if v.blocks is not None:
            assert np.array_equal(got.variables[name].blocks.refs, v.blocks.refs), name
    virtualize.virtualize([url], tmp_path / "c.zarr", **OLD)
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    for var, w in expected(ds, path).items():
        assert_same(ds[var].values, w, f"{var} through the sidecar")


@pytest.mark.parametrize("edit", ["an entry dropped", "an offset inside a message",
                                  "an offset past the end", "not an inventory", "shifted"])
def test_a_sidecar_that_disagrees_is_ignored_with_a_note(served, tmp_path, edit):
    path, root, url, srv = served
    lines = _inventory(path)
    n, at = lines[3].split(":")[:2]
    if edit == "an entry dropped":
        lines = [ln for ln in lines if not ln.startswith(n.split(".")[0] + ":")
                 and not ln.startswith(n.split(".")[0] + ".")]
    elif edit == "an offset inside a message":
        lines[3] = lines[3].replace(f":{at}:", f":{int(at) + 100}:", 1)
    elif edit == "an offset past the end":
        lines.append(f"99:{path.stat().st_size + 10}:d=2007032312:T:500 mb:anl:")
    elif edit == "not an inventory":
        lines = ["<html>not found</html>"]
    else:  # (the file grew at its start: every offset stale)
        lines = [ln.replace(f":{a}:", f":{int(a) + 1171}:", 1)
                 for ln in lines for a in [ln.split(":")[1]]]
    (root / (path.name + ".idx")).write_text("\n".join(lines) + "\n")
    report = virtualize.virtualize([url], tmp_path / "c.zarr", **OLD)
    [note] = [p for p in report.problems if p.kind == "grib-index-ignored"]
    assert not note.fatal and path.name + ".idx" in note.message
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    for var, w in expected(ds, path).items():
        assert_same(ds[var].values, w, f"{var} with a sidecar that disagrees ({edit})")


def test_a_first_message_with_a_damaged_start_is_no_leading_bytes(tmp_path):
    """"FRIB" for "GRIB": the rest of that message (its 7777) before the next one's start
    is not a header ecCodes may skip; the file is not read as one without it."""
    import make_grib

    data = make_grib.message("GRIB2") + make_grib.message("GRIB2", shortName="2t")
    path = tmp_path / "x.grib2"
    path.write_bytes(b"F" + data[1:])
    assert virtualize.formats.detect_format(str(path)) is None


def test_a_scanning_mode_with_offset_rows_is_refused_naming_its_bits(tmp_path):
    """Code table 3.4's bits 5-8 (rows offset, or Nj x Ni rows) have no (y, x) reading
    here: refused, not read as a plain grid."""
    import make_grib

    path = tmp_path / "offset.grib2"
    path.write_bytes(make_grib.message("regular_ll_sfc_grib2", scanningMode=0x48))
    report = virtualize.check([path], **OLD)
    [p] = [p for p in report.problems if p.fatal]
    assert p.kind == "unsupported-grib" and "scanningMode5" in p.message

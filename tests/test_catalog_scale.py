"""`virtualize catalog` holds an archive as columns, not as objects per file (issue 30:
flat memory at 10^5 files, measured in benchmarks/bench_catalog.py): the main process's
traced peak for a tree of 4N files exceeds that of N files by less than a few hundred
bytes a file (a listing of Entry objects, a dict by path, the grouping's facets per
file and the record's lists per file cost about 2 KB a file). The files are real
netCDF-4 files (netCDF4-python), a few written and hard-linked into a CMIP6 DRS tree."""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import virtualize
from virtualize.outputs.staging import STAGING_MARK

netCDF4 = pytest.importorskip("netCDF4")

PER = 40  # files a dataset
BOUND = 600  # bytes a file the peak may grow by
DATASETS = 10  # datasets of the smaller tree of the per-dataset bound (4 times as many after)
BOUND_DATASET = 3000  # bytes a dataset the peak may grow by (was about 12 KB)


def _templates(d, n: int) -> list:
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = d / f"year{2000 + i}.nc"
        with netCDF4.Dataset(p, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("lat", 2)
            t = ds.createVariable("time", "f8", ("time",))
            t.units, t.calendar = "days since 2000-01-01", "noleap"
            t[:] = [365 * i + 15, 365 * i + 45]
            ds.createVariable("lat", "f8", ("lat",))[:] = [-30, 30]
            ds.createVariable("tas", "f4", ("time", "lat"))[:] = \
                np.arange(4, dtype="f4").reshape(2, 2) + 10 * i
        out.append(p)
    return out


def _grow(root, templates, datasets: int) -> None:
    """`datasets` CMIP6 datasets under `root` (those missing), a hard link to each of
    `templates` each."""
    for k in range(datasets):
        d = (root / "CMIP6" / "CMIP" / "INST" / f"MODEL{k}" / "historical" / "r1i1p1f1" /
             "Amon" / "tas" / "gn" / "v20190308")
        if d.is_dir():
            continue
        d.mkdir(parents=True)
        for i, t in enumerate(templates):
            os.link(t, d / f"tas_Amon_MODEL{k}_historical_r1i1p1f1_gn_{2000 + i}01-{2000 + i}12.nc")


def _peak(root, out) -> tuple:
    """The traced peak of a catalog run, with cyclic garbage collected as it is made (else
    a dataset's plan, left for a later full collection, counts as if it were held: the
    objects alive before are frozen, so that a full collection comes soon)."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.collect()  # (what a full collection weighs against: nothing but the run's own)
    gc.set_threshold(100, 1, 1)
    tracemalloc.start()
    try:
        report = virtualize.catalog([root], out, drs="cmip6", jobs=1)
        return tracemalloc.get_traced_memory()[1], report
    finally:
        tracemalloc.stop()
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def test_the_catalogs_memory_grows_by_little_a_file(tmp_path):
    templates = _templates(tmp_path / "templates", PER)
    small = tmp_path / "warm"
    _grow(small, templates[:2], 1)
    virtualize.catalog([small], tmp_path / "warm-cat", drs="cmip6", jobs=1)  # (imports)
    root = tmp_path / "tree"
    _grow(root, templates, 2)
    few, report = _peak(root, tmp_path / "cat-n")
    assert report.counts == {"built": 2}
    _grow(root, templates, 8)
    many, report = _peak(root, tmp_path / "cat-4n")
    assert report.counts == {"built": 8} and report.files == 8 * PER
    per_file = (many - few) / (6 * PER)
    print(f"{per_file:.0f} bytes a file")
    assert per_file < BOUND, f"{per_file:.0f} bytes a file ({few} -> {many} bytes traced)"
    # the record (version 2: each dataset's files packed) read back by a re-run: nothing
    # scanned, every dataset unchanged
    record = json.loads((tmp_path / "cat-4n" / "virtualize-catalog.json").read_text())
    assert record["virtualize_catalog"] == 2
    files = next(iter(record["datasets"].values()))["files"]
    assert files["table"].count("\n") == PER and files["base"].endswith("/v20190308/")
    again = virtualize.catalog([root], tmp_path / "cat-4n", drs="cmip6", jobs=1)
    assert again.scanned == 0 and again.counts == {"unchanged": 8}
    # a record of version 1 (a list per file, as virtualize wrote it before) is read alike:
    # unchanged datasets skipped, a changed file found (never a wrong skip)
    rec = tmp_path / "cat-4n" / "virtualize-catalog.json"
    record = json.loads(rec.read_text())
    record["virtualize_catalog"] = 1
    for d in record["datasets"].values():
        f = d["files"]
        d["files"] = [[f["base"] + name, int(size), int(mtime), etag or None]
                      for name, size, mtime, etag in
                      (line.split("\t") for line in f["table"].splitlines())]
    rec.write_text(json.dumps(record))
    changed = sorted((root / "CMIP6").rglob("*MODEL3_*.nc"))[0]
    os.remove(changed)
    changed.write_bytes(templates[0].read_bytes())  # (its own copy: a new time)
    later = virtualize.catalog([root], tmp_path / "cat-4n", drs="cmip6", jobs=1)
    assert later.counts == {"rebuilt": 1, "unchanged": 7}
    assert [d.why for d in later.datasets if d.status == "rebuilt"] == ["1 file(s) changed"]
    assert json.loads(rec.read_text())["virtualize_catalog"] == 2
    # a killed run's leftover in OUT is cleaned up once per run (not listed per cube), one
    # of a run still going is left alone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = next(iter(record["datasets"].values()))["path"]
    left = tmp_path / "cat-4n" / f".{name}.staging-{dead.pid}-abc_123"
    left.mkdir()
    (left / STAGING_MARK).write_text(json.dumps({"host": socket.gethostname(),
                                                 "pid": dead.pid}))
    alive = tmp_path / "cat-4n" / f".{name}.staging-{os.getppid()}-running"
    alive.mkdir()
    virtualize.catalog([root], tmp_path / "cat-4n", drs="cmip6", jobs=1)
    assert not left.exists() and alive.is_dir()


def test_the_catalogs_memory_grows_by_little_a_dataset(tmp_path, monkeypatch):
    """What a dataset leaves in the main process once it is written is not held for the
    rest of the run (its outcome and record are kept on disk until the report and record
    are written, catalog.csv is written a row at a time, the walk holds no directory of no
    file): 4N datasets of one file each peak within a few KB a dataset of N datasets."""
    templates = _templates(tmp_path / "templates", 1)
    _grow(tmp_path / "warm", templates, 2)
    virtualize.catalog([tmp_path / "warm"], tmp_path / "warm-cat", drs="cmip6", jobs=1)
    # (the catalog collects a dataset's cyclic garbage every GC_EVERY datasets: here after
    # each, else what is not yet collected of 4N datasets would count as if it were held)
    monkeypatch.setattr(sys.modules["virtualize.api.catalog"], "GC_EVERY", 1)
    root = tmp_path / "tree"
    _grow(root, templates, DATASETS)
    few, report = _peak(root, tmp_path / "cat-n")
    assert report.counts == {"built": DATASETS}
    _grow(root, templates, 4 * DATASETS)
    many, report = _peak(root, tmp_path / "cat-4n")
    assert report.counts == {"built": 4 * DATASETS} and len(report.datasets) == 4 * DATASETS
    per_dataset = (many - few) / (3 * DATASETS)
    print(f"{per_dataset:.0f} bytes a dataset")
    assert per_dataset < BOUND_DATASET, \
        f"{per_dataset:.0f} bytes a dataset ({few} -> {many} bytes traced)"
    # what was kept on disk is what the report, the record and catalog.csv say
    names = sorted(d.name for d in report.datasets)
    assert names == [d.name for d in report.by("built")] and len(set(names)) == len(names)
    assert names[0] == "CMIP6.CMIP.INST.MODEL0.historical.r1i1p1f1.Amon.tas.gn"
    record = json.loads((tmp_path / "cat-4n" / "virtualize-catalog.json").read_text())
    assert list(record["datasets"]) == names
    rows = (tmp_path / "cat-4n" / "catalog.csv").read_text().splitlines()
    assert len(rows) == 4 * DATASETS + 1 and [r.split(",")[0] for r in rows[1:]] == names
    assert report.to_text().startswith(f"catalog {report.catalog}: {4 * DATASETS} dataset(s)")

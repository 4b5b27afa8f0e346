#!/usr/bin/env bash
# The main job end to end on bundled sample data: set up, make three monthly netCDF-4
# files, virtualize them into one cube, open it with xarray and compare with netCDF4.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
rm -rf sample/data
$PY fixtures/make_fixtures.py sample/data --only sample >/dev/null
echo "== virtualize sample/data/sample/*.nc -o sample/cube.zarr"
.venv/bin/virtualize sample/data/sample/*.nc -o sample/cube.zarr --overwrite
echo
echo "== the cube, opened with xarray (engine=\"virtualize\")"
$PY scripts/demo_read.py sample/cube.zarr sample/data/sample/*.nc

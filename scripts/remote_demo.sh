#!/usr/bin/env bash
# Remote archives end to end against local servers: a range-capable HTTP server and moto's
# S3 server on 127.0.0.1 (no network). Makes three monthly netCDF-4 files, serves them over
# HTTP and uploads them to s3://bucket/path/, then runs the README's commands:
#   virtualize 's3://bucket/path/*.nc' -o s3://bucket/cube.zarr
#   virtualize http://127.0.0.1:PORT/a.nc http://127.0.0.1:PORT/b.nc -o cube.json
# and reads both back, comparing with netCDF4 reads of the local files.
# Needs s3fs and moto[server] (pip install -e '.[test]').
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null  # .venv with the test extras (s3fs, moto[server])
PY=.venv/bin/python
VIRTUALIZE="$(dirname "$PY")/virtualize"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
$PY fixtures/make_fixtures.py "$work/data" --only sample >/dev/null
data="$work/data/sample"

# the servers, in the background; their addresses in $work/env
PYTHONPATH="tests:${PYTHONPATH:-}" $PY - "$data" "$work/env" <<'EOF' &
import os, sys, time
from servers import RangeHTTPServer, start_moto
data, env = sys.argv[1:]
http = RangeHTTPServer(data)
s3, endpoint = start_moto()
import boto3
c = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                 aws_access_key_id="demo", aws_secret_access_key="demo")
c.create_bucket(Bucket="bucket")
for f in sorted(os.listdir(data)):
    c.upload_file(os.path.join(data, f), "bucket", f"path/{f}")
with open(env + ".tmp", "w") as f:
    f.write(f"HTTP={http.url}\nAWS_ENDPOINT_URL={endpoint}\n")
os.rename(env + ".tmp", env)
while True:
    time.sleep(60)
EOF
while [ ! -f "$work/env" ]; do sleep 0.2; done
set -a; . "$work/env"; set +a
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_REGION=us-east-1
files=($(ls "$data"))

echo "== virtualize 's3://bucket/path/*.nc' -o s3://bucket/cube.zarr -v   (S3 at $AWS_ENDPOINT_URL)"
"$VIRTUALIZE" 's3://bucket/path/*.nc' -o s3://bucket/cube.zarr -v | sed -n '/bytes read/,$p'
echo
echo "== virtualize $HTTP/${files[0]} $HTTP/${files[1]} -o cube.json"
"$VIRTUALIZE" "$HTTP/${files[0]}" "$HTTP/${files[1]}" -o "$work/cube.json" -q
echo
echo "== read back, compared with netCDF4 on the local files"
$PY - "$data" "$work/cube.json" <<'EOF'
import os, sys
import netCDF4, numpy as np
import virtualize
data, refs = sys.argv[1:]
files = sorted(os.path.join(data, f) for f in os.listdir(data))
def local(paths):
    parts = []
    for p in paths:
        with netCDF4.Dataset(p) as nc:
            nc.set_auto_maskandscale(False)
            parts.append(nc["tas"][...])
    return np.concatenate(parts)
s3 = virtualize.open("s3://bucket/cube.zarr")["tas"][...]
assert np.array_equal(s3, local(files)), "S3 cube differs"
print(f"s3://bucket/cube.zarr  tas {s3.shape}: equal to the netCDF4 reads")
js = virtualize.open(refs)["tas"][...]
assert np.array_equal(js, local(files[:2])), "cube.json differs"
print(f"cube.json (HTTP refs)  tas {js.shape}: equal to the netCDF4 reads")
EOF

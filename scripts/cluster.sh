#!/usr/bin/env bash
# A loopback Spark cluster for Oreo (see scripts/cluster.py and docs/scale-out.md, "Running on a cluster").
#   eval "$(scripts/cluster.sh up)"   master + 2 workers + Spark Connect + PostgreSQL; prints `export NAME=value`
#   eval "$(scripts/cluster.sh up --s3)"  the same + an S3 store (moto_server) with a bucket; adds
#                                     DELTA_DATA_ROOT=s3://... and the AWS_* variables
#   scripts/cluster.sh status         what runs
#   scripts/cluster.sh down           stops everything `up` started
# State, pids and logs: ${OREO_CLUSTER_DIR:-data/cluster}.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${OREO_PYTHON:-$here/../.venv/bin/python}"
exec "$python" "$here/cluster.py" "$@"

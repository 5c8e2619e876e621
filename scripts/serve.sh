#!/usr/bin/env bash
# Sets everything up from a fresh clone and runs the caching proxy on 127.0.0.1:3128,
# its disk store in ./var/cache. Extra arguments go to harvest-cache.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
exec .venv/bin/harvest-cache "$@"

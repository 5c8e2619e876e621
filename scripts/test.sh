#!/usr/bin/env bash
# Sets everything up from a fresh clone and runs every quality gate and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
# Real servers some tests run against (Debian's packages): Squid, for the comparison of
# caching behaviour and, later, ICP peering.
if ! command -v squid >/dev/null && [ -x /usr/sbin/squid ]; then export PATH="$PATH:/usr/sbin"; fi
if ! command -v squid >/dev/null; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    # The package would start its own Squid service; the tests start theirs.
    NO_START=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
        $SUDO chmod +x /usr/sbin/policy-rc.d
        NO_START=1
    fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends squid
    if [ -n "$NO_START" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"

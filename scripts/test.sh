#!/usr/bin/env bash
# Sets everything up from a fresh clone and runs every quality gate and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
# Real servers and tools some tests run (Debian's packages): Squid, to compare caching
# behaviour and to peer with over ICP; promtool (in the prometheus package), to check metrics;
# Chromium, headless, to drive the broker's search page.
if ! command -v squid >/dev/null && [ -x /usr/sbin/squid ]; then export PATH="$PATH:/usr/sbin"; fi
MISSING=""
command -v squid >/dev/null || MISSING="$MISSING squid"
command -v promtool >/dev/null || MISSING="$MISSING prometheus"
command -v chromium >/dev/null || MISSING="$MISSING chromium"
if [ -n "$MISSING" ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    # The packages would start their own services; the tests start what they need.
    NO_START=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
        $SUDO chmod +x /usr/sbin/policy-rc.d
        NO_START=1
    fi
    $SUDO apt-get update -q
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $MISSING
    if [ -n "$NO_START" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"

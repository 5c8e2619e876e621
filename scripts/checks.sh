#!/usr/bin/env bash
# The quality gates and the whole test suite, run by scripts/test.sh inside a network namespace
# of their own: loopback is brought up here and is the only interface (the suite refuses to
# start otherwise). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v ip >/dev/null && [ -x /usr/sbin/ip ]; then export PATH="$PATH:/usr/sbin"; fi
if ! command -v squid >/dev/null && [ -x /usr/sbin/squid ]; then export PATH="$PATH:/usr/sbin"; fi
ip link set lo up
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"

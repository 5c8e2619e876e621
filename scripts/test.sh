#!/usr/bin/env bash
# Sets everything up from a fresh clone, then runs every quality gate and the whole test suite
# in a private network namespace that holds only loopback (scripts/checks.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
# Real servers and tools some tests run (Debian's packages): Squid, to compare caching
# behaviour and to peer with over ICP; promtool (in the prometheus package), to check metrics;
# Chromium, headless, to drive the broker's search page and to browse through the cache;
# iproute2, to bring up loopback in the namespace; curl, a client of the cache's HTTPS
# interception; certutil (libnss3-tools), to make Chromium trust the cache's CA.
if ! command -v squid >/dev/null && [ -x /usr/sbin/squid ]; then export PATH="$PATH:/usr/sbin"; fi
if ! command -v ip >/dev/null && [ -x /usr/sbin/ip ]; then export PATH="$PATH:/usr/sbin"; fi
MISSING=""
# Squid built with OpenSSL (squid-openssl replaces squid and does all it does): the HTTPS
# benchmark and comparisons need its ssl_bump.
if ! command -v squid >/dev/null || ! squid -v | grep -q -- --with-openssl; then
    MISSING="$MISSING squid-openssl"
fi
command -v promtool >/dev/null || MISSING="$MISSING prometheus"
command -v chromium >/dev/null || MISSING="$MISSING chromium"
command -v ip >/dev/null || MISSING="$MISSING iproute2"
command -v curl >/dev/null || MISSING="$MISSING curl"
command -v certutil >/dev/null || MISSING="$MISSING libnss3-tools"
command -v unshare >/dev/null || MISSING="$MISSING util-linux"
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
if [ -n "$MISSING" ]; then
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
# Nothing the tests do may leave loopback: from here on every packet to another address fails
# at once (network unreachable). As root the namespace is the kernel's plain network
# namespace; otherwise it sits in a user namespace of its own, where the caller is root.
if [ "$(id -u)" = 0 ]; then
    NETNS=(unshare --net)
else
    NETNS=(unshare --user --map-root-user --net)
fi
if ! "${NETNS[@]}" ip link set lo up; then
    echo "scripts/test.sh: cannot make a network namespace holding only loopback" \
        "('${NETNS[*]}' failed). Run it as root, or allow unprivileged user namespaces" \
        "(sysctl kernel.unprivileged_userns_clone=1)." >&2
    exit 1
fi
exec "${NETNS[@]}" ./scripts/checks.sh "$@"

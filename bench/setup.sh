#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Prerequisites of `make bench`: wrk and gnuplot (Debian packages, installed
# when missing) and the peers' npm packages in bench/node (npm ci from the
# committed package-lock.json).

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v gnuplot >/dev/null 2>&1 || missing+=(gnuplot-nox)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
    echo "bench: installing ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "bench: run as root, or install: ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm ci when node_modules is missing or older than the lock file
NODE_DIR=$ROOT/bench/node
stamp=$NODE_DIR/node_modules/.bench-installed
if [ ! -f "$stamp" ] || [ "$NODE_DIR/package-lock.json" -nt "$stamp" ]; then
    echo "bench: npm ci in bench/node"
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
    touch "$stamp"
fi

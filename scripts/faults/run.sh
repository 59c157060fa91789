#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# make test-faults, make test-faults-short, make galera-durability:
# scripts/faults/faults.py (or galera_durability.py with --durability)
# under a trap that removes what they start (the namespace idemf-db, the
# qdiscs, nginx, MariaDB, Redis, the backend, the Galera cluster under
# build/faults/), whatever ends them.  Needs root.
#
#   scripts/faults/run.sh [--short] [--only NAME,...] [--no-galera]
#   scripts/faults/run.sh --durability [--configs NAME,...] [--patterns two,all]

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}

if [ "$(id -u)" -ne 0 ]; then
    echo "faults: needs root (network namespaces, tc)" >&2
    exit 2
fi

cleanup() {
    timeout -k 5 240 "$PY" "$HERE/faults.py" --cleanup >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "${1:-}" = --durability ]; then
    shift
    "$PY" "$HERE/galera_durability.py" "$@"
else
    "$PY" "$HERE/faults.py" "$@"
fi

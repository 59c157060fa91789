#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# `make bench`: the benchmark driver (see docs/benchmarks.md).
#
#   bench/run.sh            all rounds, the burst and RSS runs, then
#                           docs/benchmarks.md and docs/benchmarks.png
#   bench/run.sh report     regenerate the docs from build/bench/results/
#   bench/run.sh serve      start upstream, peers, plain express and nginx,
#                           wait for ^C
#
# Environment (defaults in brackets): BENCH_ROUNDS [3], BENCH_DURATION [10]
# seconds per measurement, BENCH_CONNECTIONS [64], BENCH_THREADS [2],
# BENCH_RSS_REQUESTS [1000000], BENCH_KEYS [1000] replayed keys,
# BENCH_BURST [50] concurrent duplicates, BENCH_BURST_DELAY_MS [200],
# BENCH_WARMUP [1] seconds, BENCH_WORKERS [2] nginx workers,
# IDEM_MYSQL_PORT [3307], IDEM_REDIS_PORT [6380], NGINX_BIN [/usr/sbin/nginx],
# BENCH_PORT_BASE [18080] (nginx on BASE..BASE+4, the upstream on BASE+10,
# the peers and plain express on BASE+11..BASE+13).
# Needs the services (scripts/services.sh start) and bench/setup.sh first;
# `make bench` does both.

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec python3 "$ROOT/bench/run.py" "$@"

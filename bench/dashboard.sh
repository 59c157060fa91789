#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# `make dashboard`: runs the long race (make stress) while
# bench/dashboard.pl scrapes both nginx's /metrics, then plots
# docs/operations.png.  Needs gnuplot (bench/setup.sh installs it).

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/build/dashboard

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "dashboard: installing gnuplot-nox"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends gnuplot-nox >/dev/null
fi

mkdir -p "$OUT"
perl "$ROOT/bench/dashboard.pl" scrape "$OUT/samples.tsv" &
scraper=$!
trap 'kill $scraper 2>/dev/null || true' EXIT

IDEM_STRESS=long PROVE_FLAGS=-v "$ROOT/scripts/run-tests.sh" t/100-races.t

kill $scraper 2>/dev/null || true
wait $scraper 2>/dev/null || true
trap - EXIT

perl "$ROOT/bench/dashboard.pl" series "$OUT/samples.tsv" "$OUT/series.dat"
gnuplot -e "datafile='$OUT/series.dat'; outfile='$ROOT/docs/operations.png'" \
    "$ROOT/bench/dashboard.gp"
echo "dashboard: docs/operations.png ($(wc -l < "$OUT/series.dat") seconds)"

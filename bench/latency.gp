# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# docs/benchmarks-latency.png: the latency distribution of every system,
# the first-request ("unique") and the retry-mix workloads, each line the
# median over the rounds of wrk's percentiles.  bench/report.py writes the
# data files and calls:
#   gnuplot -e "unique='...'; mix='...'; ucolours='...'; mcolours='...';
#               outfile='...'" bench/latency.gp
#
# data: one block per system (two blank lines between blocks), its first
# line the title, then "x latency_ms" per percentile, x being
# 1 / (1 - percentile/100) (50 % -> 2, 99 % -> 100, ...) and 1e5 for the
# maximum

if (!exists("unique")) unique = 'build/bench/results/latency-unique.dat'
if (!exists("mix")) mix = 'build/bench/results/latency-mix.dat'
if (!exists("ucolours")) ucolours = ''
if (!exists("mcolours")) mcolours = ''
if (!exists("outfile")) outfile = 'docs/benchmarks-latency.png'

set terminal pngcairo size 1400,620 font "sans,10"
set output outfile

set multiplot layout 1,2 \
    title "make bench: latency by percentile (median of the rounds; log scales)"

set logscale x
set logscale y
set xrange [1:1e5]
set yrange [0.02:1000]
set xtics ("0" 1, "50" 2, "90" 10, "99" 100, "99.9" 1000, "99.99" 1e4, \
           "max" 1e5)
set ytics ("0.1" 0.1, "1" 1, "10" 10, "100" 100, "1000" 1000)
set mytics 10
set grid xtics ytics mytics
set xlabel "percentile"
set ylabel "latency, ms"
set key top left noenhanced font "sans,9"

set title "first requests (unique: a fresh key per request)"
plot for [i=0:words(ucolours) - 1] unique index i using 1:2 \
     with linespoints lw 2 pt 7 ps 0.6 \
     lc rgb word(ucolours, i + 1) title columnheader(1)

set title "retry mix (10 % fresh keys); nginx return for reference"
plot for [i=0:words(mcolours) - 1] mix index i using 1:2 \
     with linespoints lw 2 pt 7 ps 0.6 \
     lc rgb word(mcolours, i + 1) title columnheader(1)

unset multiplot

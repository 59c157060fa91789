# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# docs/operations.png from bench/dashboard.pl's series: four panels of
# what a dashboard shows during `make stress`.
#   gnuplot -e "datafile='...'; outfile='...'" bench/dashboard.gp

if (!exists("datafile")) datafile = 'build/dashboard/series.dat'
if (!exists("outfile")) outfile = 'docs/operations.png'

set terminal pngcairo size 1200,800 font "sans,10" noenhanced
set output outfile
set multiplot layout 2,2 title "make stress (30 000 racing duplicates, two nginx, one MariaDB): the module's metrics, per second"
set grid
set xlabel "seconds"
set key top left

set title "requests by $idempotency_status (rate)"
set ylabel "requests/s"
plot datafile using 1:2 with lines lw 2 title "new", \
     ''       using 1:3 with lines lw 2 title "replay", \
     ''       using 1:4 with lines lw 2 title "conflict (409)"

set title "claims (rate) and their mean time"
set ylabel "claims/s"
set y2label "ms"
set y2tics
plot datafile using 1:5 with lines lw 2 title "claims/s", \
     ''       using 1:6 axes x1y2 with lines lw 2 title "mean claim time (ms)"
unset y2tics
unset y2label

set title "MySQL connections and wait queue (both nginx)"
set ylabel "count"
plot datafile using 1:7 with lines lw 2 title "busy connections", \
     ''       using 1:8 with lines lw 2 title "queued operations"

set title "keys in progress and held duplicates"
set ylabel "count"
plot datafile using 1:9 with lines lw 2 title "keys in progress", \
     ''       using 1:10 with lines lw 2 title "held duplicates (idempotency_wait)"

unset multiplot

# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# make bench-scale's chart: the cost of a first request and of a cold
# replay against the live keys in the table.  bench/scale_report.py
# writes the data file and calls:
#   gnuplot -e "datafile='...'; outfile='...'" bench/scale.gp
#
# data columns: 1 live keys (millions), 2 first requests/s, 3 replays/s,
# 4 MariaDB CPU us per first request, 5 per replay, 6 buffer pool reads
# per first request, 7 per replay

if (!exists("datafile")) datafile = 'build/bench-scale/results/scale.dat'
if (!exists("outfile")) outfile = 'build/bench-scale/results/scale.png'

set terminal pngcairo size 1500,460 font "sans,10"
set output outfile
set multiplot layout 1,3 title "make bench-scale: cost against live keys (buffer pool far smaller than the table)"
set xlabel "live keys (millions)"
set grid
set key top right
set style data linespoints

set title "requests/s"
set yrange [0:*]
plot datafile using 1:2 title "first requests" lw 2 pt 7, \
     ''       using 1:3 title "cold replays" lw 2 pt 5

set title "MariaDB CPU µs per request"
plot datafile using 1:4 title "first request" lw 2 pt 7, \
     ''       using 1:5 title "cold replay" lw 2 pt 5

set title "buffer pool reads (from disk) per request"
set key bottom right
plot datafile using 1:6 title "first request" lw 2 pt 7, \
     ''       using 1:7 title "cold replay" lw 2 pt 5

unset multiplot

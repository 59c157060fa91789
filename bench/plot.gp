# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# docs/benchmarks.png: median requests/s per system and workload, with the
# lowest and highest round as error bars.  bench/report.py writes the data
# file and calls:  gnuplot -e "datafile='...'; outfile='...'" bench/plot.gp
#
# data columns: 1 label, 2 median req/s, 3 min, 4 max, 5 colour group
# (0 the limits: nginx, plain express; 1 the module, 2 the peers)

if (!exists("datafile")) datafile = 'build/bench/results/plot.dat'
if (!exists("outfile")) outfile = 'docs/benchmarks.png'

set terminal pngcairo size 1200,620 font "sans,10"
set output outfile

set title "make bench: requests/s (median of the rounds; bars: lowest and highest round)"
set ylabel "requests/s (log scale)"
set logscale y
set yrange [100:200000]
set grid ytics
set key off
set style fill solid 0.85 border -1
set boxwidth 0.7
set xtics rotate by -40 left noenhanced
set bmargin 9
set rmargin 14

colour(g) = g == 0 ? 0x888888 : (g == 1 ? 0x2a7ab9 : 0xd9822b)

plot datafile using 0:2:(colour($5)):xtic(1) with boxes lc rgb variable, \
     ''       using 0:2:3:4 with yerrorbars lc rgb "black" pt 0, \
     ''       using 0:($4*1.3):(sprintf("%.0f", $2)) with labels font "sans,8"

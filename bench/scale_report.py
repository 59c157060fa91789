# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""build/bench-scale/results/scale.md and scale.png from the size-N.json
records of bench/scale.py (`bench/scale.sh report` alone).  The tables
go into docs/benchmarks.md by hand, with the run's conditions."""

import glob
import json
import os
import subprocess

BENCH = os.path.dirname(os.path.abspath(__file__))


def load(results):
    recs = []
    for path in glob.glob(os.path.join(results, 'size-*.json')):
        with open(path) as f:
            recs.append(json.load(f))
    with open(os.path.join(results, 'meta.json')) as f:
        meta = json.load(f)
    return sorted(recs, key=lambda r: r['size']), meta


def mib(b):
    return '{:,.0f} MiB'.format(b / 2 ** 20)


def ratio(v, base):
    return '%.2f×' % (v / base) if base else '—'


def first_table(recs):
    base = recs[0]['phases']['unique'] if recs[0]['size'] == 0 else None
    L = ['| live keys | table on disk | first req/s | of empty | p50 ms '
         '| p99 ms | MariaDB µs / first | of empty | pool reads / first '
         '| disk KiB read / first | KiB written / first | nginx µs / first '
         '| other CPUs |',
         '|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|']
    for r in recs:
        u = r['phases']['unique']
        L.append('| {:,} | {} | {:,.0f} | {} | {:.2f} | {:.2f} | {:.0f} | {} '
                 '| {:.3f} | {:.2f} | {:.2f} | {:.0f} | {:.2f} |'.format(
                     r['rows'], mib(r['table_bytes']), u['rps'],
                     ratio(u['rps'], base and base['rps']), u['p50_ms'],
                     u['p99_ms'], u['mariadb_cpu_us'],
                     ratio(u['mariadb_cpu_us'],
                           base and base['mariadb_cpu_us']),
                     u['pool_reads'], u['disk_read_kib'], u['written_kib'],
                     u['nginx_cpu_us'], u['other_cpus']))
    return L


def replay_table(recs):
    L = ['| live keys | cold replay req/s | p99 ms | MariaDB µs / replay '
         '| pool reads / replay | disk KiB read / replay | mix req/s '
         '| mix p99 ms | MariaDB µs / mix request | pool reads / mix request |',
         '|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|']
    for r in recs:
        c, m = r['phases']['cold'], r['phases']['mix']
        L.append('| {:,} | {:,.0f} | {:.2f} | {:.0f} | {:.3f} | {:.2f} '
                 '| {:,.0f} | {:.2f} | {:.0f} | {:.3f} |'.format(
                     r['rows'], c['rps'], c['p99_ms'], c['mariadb_cpu_us'],
                     c['pool_reads'], c['disk_read_kib'], m['rps'],
                     m['p99_ms'], m['mariadb_cpu_us'], m['pool_reads']))
    return L


def purge_table(recs):
    L = ['| live keys | expiring / s | backlog before → after '
         '| removed / s | first p99 ms, purge off → on | change '
         '| first req/s, purge on | listing in_progress ms '
         '| listing unknown ms |',
         '|--:|--:|--:|--:|--:|--:|--:|--:|--:|']
    for r in recs:
        p, u, ls = r['phases']['purge'], r['phases']['unique'], r['listing']
        L.append('| {:,} | {:.1f} | {:,} → {:,} | {:,.0f} | {:.2f} → {:.2f} '
                 '| {:+.0f} % | {:,.0f} | {:.1f} (HTTP {}) '
                 '| {:.1f} (HTTP {}) |'.format(
                     r['rows'], p['expiring_per_s'], p['backlog_before'],
                     p['backlog_after'], p['removed_per_s'], u['p99_ms'],
                     p['p99_ms'], (p['p99_ms'] / u['p99_ms'] - 1) * 100,
                     p['rps'], ls['in_progress']['median_ms'],
                     ls['in_progress']['status'], ls['unknown']['median_ms'],
                     ls['unknown']['status']))
    return L


def chart(recs, results):
    dat = os.path.join(results, 'scale.dat')
    with open(dat, 'w') as f:
        for r in recs:
            u, c = r['phases']['unique'], r['phases']['cold']
            f.write('%g %g %g %g %g %g %g\n' % (
                r['rows'] / 1e6, u['rps'], c['rps'], u['mariadb_cpu_us'],
                c['mariadb_cpu_us'], u['pool_reads'], c['pool_reads']))
    png = os.path.join(results, 'scale.png')
    subprocess.run(['gnuplot', '-e', "datafile='%s'; outfile='%s'" % (
        dat, png), os.path.join(BENCH, 'scale.gp')], check=True)
    return png


def generate(results):
    recs, meta = load(results)
    if not recs:
        return
    L = ['make bench-scale, %s: buffer pool %s, response record %d bytes, '
         '%d s per measurement, %d connections, nice %d, load average %s '
         'at the start, %s at the end.' % (
             meta['date'], mib(meta['buffer_pool_bytes']),
             meta['response_bytes'], meta['duration'], meta['connections'],
             meta['nice'], meta['loadavg_start'].split()[0],
             meta.get('loadavg_end', '?').split()[0]),
         '', 'First requests (a fresh key each):', '']
    L += first_table(recs)
    L += ['', 'Replays of random filled keys, and the mix (%d %% fresh '
          'keys):' % meta['mix_new_pct'], '']
    L += replay_table(recs)
    L += ['', 'The purge (every second, first requests going on) and the '
          'operator listing (limit=100, median of %d):' % meta['listings'],
          '']
    L += purge_table(recs)
    with open(os.path.join(results, 'scale.md'), 'w') as f:
        f.write('\n'.join(L) + '\n')
    chart(recs, results)
    print('\n'.join(L))

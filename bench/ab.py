#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""A/B of two builds of the module on the bench's module workloads.

    bench/ab.py A.so B.so [LABEL_A LABEL_B]

Each round starts the bench's nginx (bench/nginx.conf.in) once per build,
with the same upstream, MariaDB and Redis, and measures the module's
workloads on it (as bench/run.py does, with its wrk scripts and its
BENCH_* settings); the build measured first alternates from round to
round, because the first of a round tends to lose (a warmer machine, a
table that grew).  AB_ROUNDS [4] rounds, AB_WORKLOADS [mysql:unique
mysql:replay mysql:mix redis:mix shm:mix].  The stores are emptied
before each build's turn.  AB_SCHEMAS="A.sql B.sql" makes the key table
anew from A.sql for A's turns and from B.sql for B's (the same .so twice
measures a schema change).  Prints, per workload and build, the median
req/s and p99 and the lowest and highest round, and the change of the
medians from A to B; the raw records go to build/bench/ab/.
"""

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R                                     # noqa: E402

OUT = os.path.join(R.OUT, 'ab')


def one_build(so, rnd, pairs, schema):
    R.MODULE_SO = so
    # the webhook servers need idempotency_key, which an older build lacks
    R.render_nginx(webhooks=False)
    if schema:
        R.mysql_prepare_table(schema)
    R.reset_stores()
    R.nginx('start')
    try:
        for s in ('mysql', 'redis', 'shm'):
            R.wait_port(R.PORTS[s], 'nginx')
        return [R.measure(rnd, s, w) for s, w in pairs]
    finally:
        R.nginx('stop')


def summary(recs, labels, pairs):
    print()
    print('| workload | build | req/s median | lowest–highest | p99 ms '
          'median | lowest–highest | measured first: req/s median |')
    print('|---|---|--:|--:|--:|--:|--:|')
    for s, w in pairs:
        med = {}
        for b in labels:
            rs = [r for r in recs if r['build'] == b and r['system'] == s
                  and r['workload'] == w]
            rps = [r['wrk']['rps'] for r in rs]
            p99 = [r['wrk']['p99_us'] / 1000 for r in rs]
            first = [r['wrk']['rps'] for r in rs if r['first']]
            med[b] = statistics.median(rps)
            print('| %s %s | %s | %s | %s–%s | %.2f | %.2f–%.2f | %s |' % (
                s, w, b, '{:,.0f}'.format(med[b]),
                '{:,.0f}'.format(min(rps)), '{:,.0f}'.format(max(rps)),
                statistics.median(p99), min(p99), max(p99),
                '{:,.0f}'.format(statistics.median(first))
                if first else '—'))
        a, b = labels
        print('| %s %s | %s vs %s | %+.1f %% | | | | |' % (
            s, w, b, a, (med[b] - med[a]) / med[a] * 100))


def main():
    if len(sys.argv) < 3:
        R.die('usage: bench/ab.py A.so B.so [LABEL_A LABEL_B]')
    sos = [os.path.abspath(p) for p in sys.argv[1:3]]
    labels = sys.argv[3:5] if len(sys.argv) >= 5 else ['A', 'B']
    for so in sos:
        if not os.path.exists(so):
            R.die('%s missing' % so)
    schemas = [os.path.abspath(p) for p in
               os.environ.get('AB_SCHEMAS', '').split()] or [None, None]
    if len(schemas) != 2 or not all(p is None or os.path.exists(p)
                                    for p in schemas):
        R.die('AB_SCHEMAS must name two SQL files')
    rounds = int(os.environ.get('AB_ROUNDS', 4))
    pairs = [tuple(x.split(':')) for x in os.environ.get(
        'AB_WORKLOADS',
        'mysql:unique mysql:replay mysql:mix redis:mix shm:mix').split()]
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(R.OUT, exist_ok=True)
    R.mysql_prepare_table()
    R.flush_log(R.FLUSH_DEFAULT)
    R.start_node('upstream', ['upstream.js', str(R.PORTS['upstream'])],
                 R.PORTS['upstream'])
    recs = []
    try:
        for rnd in range(1, rounds + 1):
            order = [0, 1] if rnd % 2 else [1, 0]
            for pos, i in enumerate(order):
                R.log('round %d of %d: %s (%s)' % (rnd, rounds, labels[i],
                                                   sos[i]))
                for r in one_build(sos[i], rnd, pairs, schemas[i]):
                    r['build'], r['first'] = labels[i], pos == 0
                    recs.append(r)
            with open(os.path.join(OUT, 'records.json'), 'w') as f:
                json.dump({'labels': labels, 'modules': sos,
                           'schemas': schemas,
                           'config': R.CFG, 'records': recs}, f, indent=1)
    finally:
        R.stop_all()
    summary(recs, labels, pairs)


if __name__ == '__main__':
    main()

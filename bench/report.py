# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""docs/benchmarks.md and docs/benchmarks.png from build/bench/results/.

Called by bench/run.py at the end of a run, or alone with
`bench/run.sh report`.  Every figure, ratio and verdict is computed here
from the raw per-round files, the instruction counts of bench/profile.py
(build/bench/profile/ir.json, or the last committed ones in
bench/profile-ir.json) and make bench-scale's records of the current
verdict (bench/scale-results/*/); the prose around them is fixed.  The
last section, "Measured apart", is kept from the existing
docs/benchmarks.md (it is written by hand); the dated A/B history is in
bench/NOTES.md."""

import glob
import json
import os
import statistics
import subprocess

import scale_report

ORDER = [
    ('return', 'return'), ('proxy', 'unique'), ('proxy', 'unique-c1'),
    ('mysql', 'unique'), ('mysql', 'unique-c1'), ('mysql', 'replay'),
    ('mysql', 'mix'), ('mysql-flush1', 'unique'),
    ('redis', 'replay'), ('redis', 'mix'),
    ('shm', 'replay'), ('shm', 'mix'),
    ('express-idempotency', 'unique'), ('express-idempotency', 'unique-c1'),
    ('express-idempotency', 'replay'),
    ('node-idempotency', 'unique'), ('node-idempotency', 'unique-c1'),
    ('node-idempotency', 'replay'),
    ('plain-express', 'unique'), ('plain-express', 'unique-c1'),
    ('proxy', 'hook2k'), ('mysql', 'hook2k'), ('webhook', 'hook2k'),
    ('webhook-sig', 'hook2k'),
    ('proxy', 'hook64k'), ('mysql', 'hook64k'), ('webhook', 'hook64k'),
    ('webhook-sig', 'hook64k'),
]
NAME = {
    'return': 'nginx `return`',
    'proxy': 'nginx `proxy_pass`, no module',
    'mysql': 'module, MySQL only',
    'mysql-flush1': 'module, MySQL only, flush=1',
    'redis': 'module + Redis',
    'shm': 'module + shm cache',
    'express-idempotency': 'express-idempotency (Redis)',
    'node-idempotency': '@node-idempotency/core (Redis)',
    'plain-express': 'plain express, no middleware',
    'webhook': 'module, key json=data.object.id',
    'webhook-sig': 'module, key json=, Stripe signature',
}
SHORT = {
    'return': 'nginx return', 'proxy': 'nginx proxy_pass',
    'mysql': 'module mysql', 'mysql-flush1': 'module mysql flush=1',
    'redis': 'module +redis', 'shm': 'module +shm',
    'express-idempotency': 'express-idempotency',
    'node-idempotency': 'node-idempotency',
    'plain-express': 'plain express',
    'webhook': 'module json key', 'webhook-sig': 'module json key +sig',
}
MODULE = ('mysql', 'mysql-flush1', 'redis', 'shm', 'webhook', 'webhook-sig')
PEERS = ('express-idempotency', 'node-idempotency')
# the limits: nothing but the request path the module or the peers sit in
LIMITS = ('return', 'proxy', 'plain-express')
KEPT_MARK = '## Measured apart'
# lines of the latency chart: (system, workload) -> colour
LAT_UNIQUE = [
    (('proxy', 'unique'), '#444444'), (('mysql', 'unique'), '#2a7ab9'),
    (('mysql-flush1', 'unique'), '#6fb1e4'),
    (('express-idempotency', 'unique'), '#d9822b'),
    (('node-idempotency', 'unique'), '#b5472b'),
    (('plain-express', 'unique'), '#999999'),
]
LAT_MIX = [
    (('return', 'return'), '#444444'), (('mysql', 'mix'), '#2a7ab9'),
    (('redis', 'mix'), '#3a9a4a'), (('shm', 'mix'), '#8e44ad'),
]
CPU_PARTS = ('nginx', 'node', 'mariadb', 'redis', 'wrk')
# MariaDB CPU per request (µs) that the issue measured before setting its
# targets: a first request (MySQL only, unique) and a replay (MySQL only)
MARIADB_US_FIRST_BEFORE = 250
MARIADB_US_REPLAY_BEFORE = 186


def load(results):
    def j(name, default=None):
        p = os.path.join(results, name)
        if not os.path.exists(p):
            return default
        with open(p) as f:
            return json.load(f)

    rounds, i = [], 1
    while os.path.exists(os.path.join(results, 'round-%d.json' % i)):
        rounds.append(j('round-%d.json' % i))
        i += 1
    return {
        'rounds': rounds, 'machine': j('machine.json', {}),
        'config': j('config.json', {}), 'burst': j('burst.json', []),
        'rss': j('rss.json'), 'elapsed': j('elapsed.json'),
        'nginx_errors': j('nginx-errors.json', []),
    }


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def dist_median(rs):
    ds = [r['wrk'].get('dist') for r in rs]
    ds = [x for x in ds if x]
    if not ds:
        return None
    return [[p, med(x[i][1] / 1000 for x in ds if len(x) > i)]
            for i, (p, _) in enumerate(ds[0])]


def aggregate(rounds):
    """(system, workload) -> medians over the rounds"""
    by = {}
    for rnd in rounds:
        for r in rnd:
            by.setdefault((r['system'], r['workload']), []).append(r)
    out = {}
    for key, rs in by.items():
        n = [max(r['wrk']['requests'], 1) for r in rs]
        m = [r['mysql'] for r in rs]
        a = {
            'n_rounds': len(rs),
            'rps': med(r['wrk']['rps'] for r in rs),
            'rps_min': min(r['wrk']['rps'] for r in rs),
            'rps_max': max(r['wrk']['rps'] for r in rs),
            'p50': med(r['wrk']['p50_us'] / 1000 for r in rs),
            'p99': med(r['wrk']['p99_us'] / 1000 for r in rs),
            'requests': sum(r['wrk']['requests'] for r in rs),
            'non2xx': sum(r['wrk']['err_status'] for r in rs),
            'sockerr': sum(r['wrk']['socket_errors'] for r in rs),
            'exec_per_req': med(
                None if r['upstream_executions'] is None
                else r['upstream_executions'] / k for r, k in zip(rs, n)),
            # each statement the module sends is its own round trip (a
            # prepared statement's execution, or its preparation); the
            # purge lease, one multi-statement query a purge interval, is
            # the only exception
            'mysql_rt': med(x['Questions'] / k for x, k in zip(m, n)),
            'mysql_q': med(x['Questions'] / k for x, k in zip(m, n)),
            'com_select': med(x['Com_select'] / k for x, k in zip(m, n)),
            'com_insert': med(x['Com_insert'] / k for x, k in zip(m, n)),
            'com_update': med(x['Com_update'] / k for x, k in zip(m, n)),
            'com_delete': med(x['Com_delete'] / k for x, k in zip(m, n)),
            # results of runs before these were collected have none
            'com_stmt_execute': med(
                x['Com_stmt_execute'] / k if 'Com_stmt_execute' in x
                else None for x, k in zip(m, n)),
            'com_stmt_prepare': med(
                x['Com_stmt_prepare'] / k if 'Com_stmt_prepare' in x
                else None for x, k in zip(m, n)),
            # innodb_flush_log_at_trx_commit during the measurements
            'flush': sorted({r.get('innodb_flush_log_at_trx_commit')
                             for r in rs} - {None}),
            'redis_cmd': med(r['redis_per_req'] for r in rs),
            'redis_detail': {},
            'rss': [(r['rss_before_kib'], r['rss_after_kib']) for r in rs
                    if r['rss_before_kib']],
            'cpu': {c: med(r.get('cpu_us_per_req', {}).get(c) for r in rs)
                    for c in CPU_PARTS},
            # [[percentile, ms], ...]: each percentile's median over
            # the rounds (results from before it was collected: None)
            'dist': dist_median(rs),
            'other': med(r.get('other_cpus') for r in rs),
            'busy': med(sum(r['cpu_seconds'].values()) /
                        (r['wrk']['duration_us'] / 1e6)
                        for r in rs if 'cpu_seconds' in r),
        }
        cmds = set()
        for r in rs:
            cmds |= set(r['redis'])
        for c in sorted(cmds - {'info', 'flushdb'}):
            a['redis_detail'][c] = med(r['redis'].get(c, 0) / k
                                       for r, k in zip(rs, n))
        out[key] = a
    return out


def webhook_section(w, agg):
    """the webhook rows: what the key's parser and the signature cost"""
    if ('webhook', 'hook2k') not in agg:
        return
    w('## Webhook deliveries (issue 44)')
    w('')
    w('`bench/lua/webhook.lua` sends a Stripe-like event of 2 KB or 64 KB '
      'whose key is a nested member (`data.object.id`, fresh each time), '
      'signed (`Stripe-Signature`) and with the same id as '
      '`Idempotency-Key`, to plain `proxy_pass`, the header-keyed module, '
      'the key from the body (`idempotency_key json=data.object.id`), and '
      'the same with `idempotency_signature stripe`. Every server reads '
      'the body in memory (`client_body_buffer_size 128k`); the module\'s '
      'fingerprint hashes it in all three. The nginx workers\' CPU per '
      'request, and the differences: the JSON scan (json key − header '
      'key) and the HMAC (+ signature − json key):')
    w('')
    w('| body | proxy_pass req/s | header key req/s | json key req/s | '
      '+ signature req/s | nginx µs/req: proxy_pass | header key | json '
      'key | + signature | JSON scan µs | HMAC µs |')
    w('|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|')
    for wl, label in (('hook2k', '2 KB'), ('hook64k', '64 KB')):
        a = [agg.get((s, wl), {}) for s in ('proxy', 'mysql', 'webhook',
                                              'webhook-sig')]
        c = [x.get('cpu', {}).get('nginx') for x in a]
        d = [None if None in (c[i], c[j]) else c[i] - c[j]
             for i, j in ((2, 1), (3, 2))]
        w('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
            label, *[f0(x.get('rps')) for x in a], *[f0(x) for x in c],
            *[f0(x) for x in d]))
    w('')
    w('`make bench-keycost` measures the same two components alone, '
      'without the noise of a loaded machine ("Webhook keys" under '
      '"Measured apart").')
    w('')


def f0(x):
    return '—' if x is None else '{:,.0f}'.format(x)


def f2(x):
    return '—' if x is None else '%.2f' % x


def pct(x):
    return '—' if x is None else '%.0f %%' % (x * 100)


def times(x):
    return '—' if x is None else '%.1f×' % x


def rss_cell(a):
    if not a['rss']:
        return '—'
    # the last round's per-worker figures, MiB
    before, after = a['rss'][-1]
    parts = []
    for pid in sorted(before):
        b, e = before[pid], (after or {}).get(pid)
        parts.append('%.1f→%s' % (b / 1024, '?' if e is None
                                   else '%.1f' % (e / 1024)))
    return ', '.join(parts)


def best_peer(agg, workload):
    cands = [(agg[(p, workload)]['rps'], p) for p in PEERS
             if (p, workload) in agg]
    return max(cands) if cands else (None, None)


def cpu_nowrk(a):
    """CPU µs per request of all processes but wrk (nginx workers, node,
    MariaDB, Redis)"""
    if not a or a.get('busy') is None:
        return None
    return sum(v for k, v in a['cpu'].items() if k != 'wrk' and v is not None)


def flush_of(s, a):
    """innodb_flush_log_at_trx_commit a module system ran with (results
    from before it was recorded: what the system sets)"""
    if a and a['flush']:
        return a['flush'][-1]
    return 1 if s == 'mysql-flush1' else 2


def durability(s, a):
    """what a committed key survives, for the durability column"""
    if s in PEERS:
        return 'no Redis restart (Redis without persistence)'
    f = flush_of(s, a)
    if f == 1:
        return 'a mariadbd crash and an OS crash (`=1`)'
    if f == 2:
        return ('a mariadbd crash; an OS crash may lose the last ~1 s '
                '(`=2`)')
    return 'no OS crash, maybe no mariadbd crash (`=%s`)' % f


def verdict(ok):
    return '**met**' if ok else '**missed**'


# targets retired on the shared 2-CPU machine (issue 34): MariaDB, the
# upstream, wrk and the kernel need the CPU they ask for, whatever the
# module costs; still measured and shown, with no verdict
REPORTED = 'reported, not judged on this machine (bench/NOTES.md)'


def ratio(a, b):
    return None if a is None or not b else a / b


def round_ratios(rounds, key, base, field):
    """[key's field / base's field in the same round] over the rounds
    that measured both: a round's own conditions move both"""
    out = []
    for rnd in rounds:
        a = [r for r in rnd if (r['system'], r['workload']) == key]
        b = [r for r in rnd if (r['system'], r['workload']) == base]
        if a and b and field(b[0]):
            out.append(field(a[0]) / field(b[0]))
    return out


def p99_of(r):
    return r['wrk']['p99_us'] / 1000


# ------------------------------------------------------ instruction counts

IR_PATHS = [
    # bench/profile.py's name of a path, and the page's
    ('first request (mysql)', 'first request, store over loopback TCP'),
    ('first request (unix socket)', 'first request, store over the unix '
     'socket'),
    ('mysql replay', 'replay from MySQL'),
    ('shm replay', 'replay from the shm zone'),
    ('proxy_pass, no module', 'plain `proxy_pass` (module loaded)'),
]
IR_BASE = 'proxy_pass, no module'
IR_FIRST = 'first request (mysql)'


def load_ir(results, bench_dir):
    """bench/profile.py's instruction counts: this checkout's last run
    (build/bench/profile/ir.json) or the last committed figures
    (bench/profile-ir.json); {name: (low, high)}, and the record"""
    for p in (os.path.join(os.path.dirname(results), 'profile', 'ir.json'),
              os.path.join(bench_dir, 'profile-ir.json')):
        if os.path.exists(p):
            with open(p) as f:
                rec = json.load(f)
            paths = {}
            for e in rec['paths']:
                v = e['ir']
                paths[e['name']] = (v[0], v[-1]) if isinstance(v, list) \
                    else (v, v)
            return paths, rec, p
    return None, None, None


def span(lo, hi, fmt=f0):
    return fmt(lo) if fmt(lo) == fmt(hi) else '%s–%s' % (fmt(lo), fmt(hi))


def ir_ratio(paths, name):
    """(low, high) of a path's Ir over plain proxy_pass's"""
    a, b = paths.get(name), paths.get(IR_BASE)
    if not a or not b:
        return None
    return a[0] / b[1], a[1] / b[0]


def times2(x):
    return '%.2f×' % x


def ir_section(w, paths, rec, path, bench_dir):
    w('## Instructions per request (callgrind)')
    w('')
    w('`python3 bench/profile.py [N]` runs one nginx process of the '
      'bench\'s configuration under callgrind and sends N requests of each '
      'path on one keep-alive connection, after a warm-up: a first request '
      '(the store over loopback TCP, and over MariaDB\'s unix socket), a '
      'replay from MySQL, a replay from the shm zone, and plain '
      '`proxy_pass` with the module loaded. The figure is the instructions '
      '(Ir) of the whole nginx process, user space, per request. Unlike the '
      'CPU time above they do not move with the machine\'s load, so they '
      'judge what the worker spends on a first request, module against '
      'plain `proxy_pass`. On one connection nothing is batched: a first '
      'request sends its claim and its completion as two statements of '
      'their own. The kernel\'s part (the socket calls, more than half of a '
      'worker\'s CPU time here) is not counted, which is why the ratio in '
      'instructions is higher than the one in CPU time.')
    w('')
    if not paths:
        w('(no instruction counts: run `python3 bench/profile.py`)')
        w('')
        return
    where = os.path.relpath(path, os.path.dirname(bench_dir))
    w('From `%s`: %s.' % (where, rec.get('source', '?')))
    w('')
    w('| path | Ir per request | of plain `proxy_pass` |')
    w('|---|--:|--:|')
    for name, label in IR_PATHS:
        if name not in paths:
            continue
        r = (1, 1) if name == IR_BASE else ir_ratio(paths, name)
        w('| %s | %s | %s |' % (label, span(*paths[name]),
                                '—' if r is None else span(*r, fmt=times2)))
    w('')


# ------------------------------------------------------------------ scale

def load_scale(bench_dir):
    """the records of make bench-scale's current verdict: the folder of
    bench/scale-results/ with the newest run (meta.json's date)"""
    best = None
    for d in glob.glob(os.path.join(bench_dir, 'scale-results', '*')):
        if os.path.exists(os.path.join(d, 'meta.json')):
            recs, meta = scale_report.load(d)
            if recs and (best is None or meta['date'] > best[1]['date']):
                best = (recs, meta, d)
    return best


def scale_section(w, scale, bench_dir):
    w('## The store at scale')
    w('')
    w('`make bench-scale` (`bench/scale.sh`, `bench/scale.py`) measures '
      'what a first request, a cold replay, the purge and the operator '
      'listing cost the store as the live keys grow, on a MariaDB of its '
      'own whose buffer pool is far smaller than the table at its largest '
      'size (reads from disk are `O_DIRECT`). Each size is filled in one '
      'statement, warmed up as a running server would be, then measured '
      'through nginx with wrk; the purge is measured off and on in '
      'alternated rounds and judged on the median of the rounds. It writes '
      '`build/bench-scale/results/`: a JSON record per size, `scale.md` '
      '(these tables and more) and `scale.png`. The current verdict\'s '
      'records are kept in `bench/scale-results/`, which this page reads; '
      'the method in full and the earlier runs are in '
      '[bench/NOTES.md](../bench/NOTES.md#the-store-at-scale-issue-34).')
    w('')
    if not scale:
        w('(no records in bench/scale-results/)')
        w('')
        return
    recs, meta, d = scale
    w('The run of %s (`%s/`): buffer pool %s, a stored record of %d bytes, '
      '%d s per measurement, %d connections, load average %s at the start; '
      'first requests and cold replays at each size:' % (
          meta['date'], os.path.relpath(d, os.path.dirname(bench_dir)),
          scale_report.mib(meta['buffer_pool_bytes']),
          meta['response_bytes'], meta['duration'], meta['connections'],
          meta['loadavg_start'].split()[0]))
    w('')
    w('| live keys | table on disk | first req/s | p99 ms | MariaDB µs / '
      'first | pool reads / first | cold replay req/s | pool reads / '
      'replay | listing ms |')
    w('|--:|--:|--:|--:|--:|--:|--:|--:|--:|')
    for r in recs:
        u, c, ls = r['phases']['unique'], r['phases']['cold'], r['listing']
        w('| {:,} | {} | {:,.0f} | {:.2f} | {:.0f} | {:.3f} | {:,.0f} | '
          '{:.3f} | {:.1f} |'.format(
              r['rows'], scale_report.mib(r['table_bytes']), u['rps'],
              u['p99_ms'], u['mariadb_cpu_us'], u['pool_reads'], c['rps'],
              c['pool_reads'], max(ls[k]['median_ms']
                                   for k in ('in_progress', 'unknown'))))
    w('')
    w('The targets (issue 34), each size against the smallest table of the '
      'same run:')
    w('')
    for line in scale_report.targets_table(recs):
        w(line)
    w('')
    w('![cost against live keys](benchmarks-scale.png)')
    w('')


# -------------------------------------------------------------- generate

def generate(results, doc, png, bench_dir):
    d = load(results)
    if not d['rounds']:
        raise SystemExit('bench: no results in %s' % results)
    agg = aggregate(d['rounds'])
    ir, ir_rec, ir_path = load_ir(results, bench_dir)
    L = []
    w = L.append
    method_section(w, d, ir_path, bench_dir)
    results_section(w, d, agg)
    webhook_section(w, agg)
    targets_section(w, d, agg, ir)
    ir_section(w, ir, ir_rec, ir_path, bench_dir)
    cost_section(w, agg)
    burst_section(w, d)
    rss_section(w, d)
    scale_section(w, load_scale(bench_dir), bench_dir)
    machine_section(w, d)
    reproduce_section(w, d)

    # the hand-written section, kept
    kept = None
    if os.path.exists(doc):
        with open(doc) as f:
            old = f.read()
        i = old.find('\n' + KEPT_MARK)
        if i >= 0:
            kept = old[i + 1:].rstrip('\n')
    L.append(kept or KEPT_MARK + '\n\n(not written yet)')
    with open(doc, 'w') as f:
        f.write('\n'.join(L) + '\n')

    # -------------------------------------------------------------- chart
    dat = os.path.join(results, 'plot.dat')
    with open(dat, 'w') as f:
        for key in ORDER:
            if key not in agg or key[1] == 'unique-c1':
                continue
            a = agg[key]
            grp = 0 if key[0] in LIMITS else (
                1 if key[0] in MODULE else 2)
            label = SHORT[key[0]] + ('' if key[1] == 'return'
                                     else ' ' + key[1])
            f.write('"%s" %.1f %.1f %.1f %d\n' % (
                label, a['rps'], a['rps_min'], a['rps_max'], grp))
    subprocess.run(['gnuplot', '-e', "datafile='%s'; outfile='%s'" % (
        dat, png), os.path.join(bench_dir, 'plot.gp')], check=True)
    latency_chart(results, agg, png, bench_dir)


def method_section(w, d, ir_path, bench_dir):
    cfg, mach = d['config'], d['machine']
    w('# Benchmarks')
    w('')
    w('Generated by `%s` on %s (`bench/run.py`, `bench/report.py`) from '
      '`build/bench/results/`, with the instruction counts of '
      '`bench/profile.py` (`%s`) and the records of `make bench-scale`\'s '
      'current verdict (`bench/scale-results/`). Do not edit by hand except '
      'the last section, "Measured apart". Earlier runs, the A/B '
      'comparisons of changes and the investigations behind the figures '
      'are in [bench/NOTES.md](../bench/NOTES.md), dated.' % (
          cfg.get('command', 'make bench'), mach.get('date', '?'),
          os.path.relpath(ir_path, os.path.dirname(bench_dir))
          if ir_path else 'none'))
    w('')
    w('## Method')
    w('')
    w('`make bench` runs one nginx (%d workers, `access_log off`) with a '
      'server per system, in front of one tiny upstream (`bench/upstream.js`, '
      'a Node `http` server answering 201 with a fixed 67-byte JSON body and '
      'counting executions per key): nginx `return` and plain `proxy_pass` '
      '(the limits), the module with MySQL only, + Redis and + the shm '
      'cache, and two Node.js peers that run the *same* `execute()` inside '
      'express behind their middleware, with Redis as their store ("plain '
      'express, no middleware", `bench/node/plain-express.js`, is their '
      'route without it). "module, MySQL only, flush=1" is the MySQL-only '
      'server measured with MariaDB\'s `innodb_flush_log_at_trx_commit` at '
      '1 instead of 2. wrk (%d threads, %d connections, %d s per '
      'measurement after a %d s warm-up) POSTs a 52-byte JSON body with an '
      '`Idempotency-Key`:' % (
          cfg.get('workers', 2), cfg.get('threads', 2),
          cfg.get('connections', 64), cfg.get('duration', 10),
          cfg.get('warmup', 1)))
    w('')
    w('- **unique**: a fresh key per request (`bench/lua/unique.lua`): '
      'every request is a first request;')
    w('- **replay**: %d keys sent once beforehand, then repeated '
      '(`bench/lua/replay.lua`): every request is a duplicate;' %
      cfg.get('keys', 1000))
    w('- **unique-c1**: the same on a single connection (`wrk -t1 -c1`): '
      'the latency of an unloaded system, without the queueing that '
      'dominates p50 at %d connections;' % cfg.get('connections', 64))
    w('- **mix**: %d %% fresh keys, the rest repeats of those %d keys '
      '(`bench/lua/mix.lua`): a retry-heavy client population.' % (
          cfg.get('mix_new_pct', 10), cfg.get('keys', 1000)))
    w('')
    w('A round measures every system once, in an order that rotates from '
      'round to round, so that slow phases of the machine hit all systems '
      'alike. Each figure is the median of the %d rounds; error counts are '
      'totals. wrk, nginx, the upstream, the peers, MariaDB and Redis share '
      'one %s-CPU machine, which other work shares too, so a single round '
      'can move any figure by a third: every target is judged on the median '
      'of the rounds, a target that sets a system against another in the '
      'same round (the tail\'s p99) on the median of the rounds\' ratios, '
      'each round listed. The worker\'s cost per first request is judged '
      'also in instructions per request (callgrind), which do not move with '
      'the machine. After the rounds: a burst of identical requests, and '
      'a long replay run for the workers\' memory.' % (
          len(d['rounds']), mach.get('nproc', '?')))
    w('')


def results_section(w, d, agg):
    mach = d['machine']
    w('## Results')
    w('')
    w('| system | workload | req/s | p50 ms | p99 ms | non-2xx | socket '
      'errors | upstream executions / req | MySQL round trips / req | '
      'Redis commands / req | worker RSS MiB before→after (last round) |')
    w('|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|')
    for key in ORDER:
        if key not in agg:
            continue
        a = agg[key]
        s = key[0]
        w('| %s | %s | %s | %s | %s | %d | %d | %s | %s | %s | %s |' % (
            NAME[s], key[1], f0(a['rps']), f2(a['p50']), f2(a['p99']),
            a['non2xx'], a['sockerr'], f2(a['exec_per_req']),
            f2(a['mysql_rt']) if s in MODULE else '—',
            f2(a['redis_cmd']) if s in MODULE + PEERS else '—',
            rss_cell(a) if s in MODULE else '—'))
    w('')
    w('![requests/s](benchmarks.png)')
    w('')
    w('![latency by percentile](benchmarks-latency.png)')
    w('')
    w('The latency chart shows every percentile wrk reports (0, 1, 5, '
      '10, 25, 50, 75, 90, 95, 98, 99, 99.5, 99.8, 99.9, 99.95, 99.99 and '
      'the maximum), each the median over the rounds, on log scales: the '
      'further right, the rarer the request.')
    w('')
    w('"non-2xx" is wrk\'s count of responses with a status of 400 or more '
      '(no 3xx occur). "upstream executions / req" is how often the '
      'operation ran per request, from the upstream\'s counters: 1 for a '
      'first request, 0 for a replay. The store columns are measured from '
      'outside: the deltas of MariaDB\'s `SHOW GLOBAL STATUS` and of '
      'Redis\'s `INFO commandstats` over the measurement, divided by the '
      'requests. They are server-wide, so whatever else used the private '
      'MariaDB and Redis at the same time (the test suite, when it runs '
      'alongside) is counted too.')
    w('')
    w('MySQL round trips are `Questions`: every statement the module sends '
      'is its own round trip, a prepared statement\'s execution (or, once '
      'per connection, its preparation); several requests\' claims or '
      'completions may share one statement (docs/design.md, "Batches"), '
      'so a first request can cost less than two. The raw per-request '
      'statement counts (`Com_insert` and `Com_update` count statements, '
      'not rows):')
    w('')
    w('| system | workload | Questions | Com_insert (claims) | '
      'Com_select (reads) | Com_update (completions) | Com_delete | '
      'Com_stmt_execute | Redis commands |')
    w('|---|---|--:|--:|--:|--:|--:|--:|---|')
    for key in ORDER:
        if key not in agg or key[0] not in MODULE:
            continue
        a = agg[key]
        rd = ', '.join('%s %.2f' % (c, v) for c, v in
                       a['redis_detail'].items() if v >= 0.005) or '—'
        w('| %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
            NAME[key[0]], key[1], f2(a['mysql_q']), f2(a['com_insert']),
            f2(a['com_select']), f2(a['com_update']),
            f2(a['com_delete']), f2(a['com_stmt_execute']), rd))
    w('')

    # --------------------------------------------------------------- cpu
    if any(a['busy'] for a in agg.values()):
        w('Where the CPU goes: CPU time per request (µs) of each process, '
          'from `/proc/PID/stat` (wrk: its rusage) over the measurement. '
          '"node" is the upstream for the nginx rows and the own process '
          'of the peers and of plain express. "busy" is the CPU time of '
          'all of them per second of wall time: the machine has %s CPUs. '
          '"other CPUs" is what the rest of the machine kept busy '
          'meanwhile (`/proc/stat` less the processes of the row): other '
          'work on a shared machine, and the kernel\'s softirq time of '
          'the bench\'s own loopback traffic.' % mach.get('nproc', '?'))
        w('')
        w('| system | workload | nginx workers | node | MariaDB | Redis | '
          'wrk | total | busy CPUs | other CPUs |')
        w('|---|---|--:|--:|--:|--:|--:|--:|--:|--:|')
        for key in ORDER:
            if key not in agg or agg[key]['busy'] is None:
                continue
            a = agg[key]
            c = a['cpu']
            tot = sum(v for v in c.values() if v is not None)
            w('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
                NAME[key[0]], key[1], f0(c['nginx']), f0(c['node']),
                f0(c['mariadb']), f0(c['redis']), f0(c['wrk']), f0(tot),
                f2(a['busy']), f2(a['other'])))
        w('')



def cost_section(w, agg):
    cost = []       # (system, its baseline, store CPU part)
    for s in ('mysql', 'mysql-flush1'):
        cost.append((s, 'proxy', 'mariadb'))
    for s in PEERS:
        cost.append((s, 'plain-express', 'redis'))
    cost = [c for c in cost if cpu_nowrk(agg.get((c[0], 'unique')))
            is not None]
    if cost:
        w('## Cost of idempotency per first request')
        w('')
        w('"added" is the CPU that making a first request (`unique`) '
          'idempotent costs the machine: the CPU µs per request of all '
          'processes but wrk (the "where the CPU goes" table without its '
          'wrk column) minus the same for the same request path without '
          'idempotency, plain `proxy_pass` for the module and plain '
          'express for the peers; "of which the store" is the part of the '
          'system\'s own figure that its store server spends.')
        w('')
        w('| system | over | CPU µs / req | the baseline\'s | added µs / '
          'req | of which the store, µs / req | a committed key survives |')
        w('|---|---|--:|--:|--:|--:|---|')
        for s, base, store in cost:
            a = agg[(s, 'unique')]
            b = agg.get((base, 'unique'))
            mine, theirs = cpu_nowrk(a), cpu_nowrk(b)
            w('| %s | %s | %s | %s | %s | %s (%s) | %s |' % (
                NAME[s], NAME[base], f0(mine), f0(theirs),
                f0(mine - theirs if theirs is not None else None),
                f0(a['cpu'][store]),
                'MariaDB' if store == 'mariadb' else 'Redis',
                durability(s, a)))
        w('')
        w('Durability: the private MariaDB runs with '
          '`innodb_flush_log_at_trx_commit=2`, so a claim committed by the '
          'module survives a crash of mariadbd, but an OS crash or power '
          'loss can lose the claims of about the last second; the flush=1 '
          'row sets it to 1 for its measurement only (every commit is '
          'flushed to disk: it survives both), so what it adds over the '
          'MySQL-only row is the price of that. The peers\' Redis runs '
          'without persistence (no RDB, no AOF, no fsync): their keys are '
          'lost when Redis restarts.')
        w('')



def targets_section(w, d, agg, ir):
    cfg = d['config']
    ret = agg.get(('return', 'return'), {}).get('rps')
    prox = agg.get(('proxy', 'unique'), {})
    peer_replay, _name = best_peer(agg, 'replay')
    peer_unique, peer_unique_name = best_peer(agg, 'unique')
    w('## Targets')
    w('')
    w('| target | measured | verdict |')
    w('|---|---|---|')
    for s in MODULE:
        a = agg.get((s, 'replay'))
        if not a:
            continue
        r1 = ratio(a['rps'], ret)
        r2 = ratio(a['rps'], peer_replay)
        w('| replay ≥ 50 %% of nginx `return` (%s) | %s | %s |' % (
            NAME[s], pct(r1), REPORTED if s == 'mysql'
            else verdict(r1 is not None and r1 >= 0.5)))
        w('| replay ≥ 5× the faster peer\'s replay (%s) | %s | %s |' % (
            NAME[s], times(r2), verdict(r2 is not None and r2 >= 5)))
    a = agg.get(('mysql', 'unique'))
    if a:
        r1 = ratio(a['rps'], prox.get('rps'))
        r2 = ratio(a['rps'], peer_unique)
        add = a['p50'] - prox['p50'] if prox.get('p50') is not None else None
        w('| first request ≥ 40 %% of plain `proxy_pass` | %s | %s |' % (
            pct(r1), verdict(r1 is not None and r1 >= 0.4)))
        w('| first request ≥ 60 %% of plain `proxy_pass` | %s | %s |' % (
            pct(r1), REPORTED))
        w('| first request ≥ 2× the faster peer\'s | %s | %s |' % (
            times(r2), verdict(r2 is not None and r2 >= 2)))
        w('| first request ≥ 1.5× the faster peer\'s | %s | %s |' % (
            times(r2), verdict(r2 is not None and r2 >= 1.5)))
        w('| added p50 of a first request ≤ 1.5 ms over `proxy_pass`, '
          'at %d connections | %s ms | %s |' % (
              cfg.get('connections', 64), f2(add),
              verdict(add is not None and add <= 1.5)))
        # the tail: p99 of every first-request and mix row of the module
        # against twice plain proxy_pass's p99 on unique in the same round
        # (a round's own conditions move both), judged on the median of
        # the rounds' ratios, every round listed
        for key in ORDER:
            if (key[0] not in MODULE or key[1] not in ('unique', 'mix')
                    or key not in agg):
                continue
            rr = round_ratios(d['rounds'], key, ('proxy', 'unique'), p99_of)
            m = med(rr)
            w('| p99 ≤ 2× plain `proxy_pass`\'s p99 on unique, median of the '
              'rounds (each round): %s, %s | %s (%s) | %s |' % (
                  NAME[key[0]], key[1], '—' if m is None else times2(m),
                  ', '.join(times2(x) for x in rr),
                  verdict(m is not None and m <= 2)))
        a1 = agg.get(('mysql', 'unique-c1'))
        p1 = agg.get(('proxy', 'unique-c1'))
        if a1 and p1:
            add1 = a1['p50'] - p1['p50']
            w('| added p50 of a first request ≤ 1 ms over `proxy_pass`, '
              'on 1 connection | %s ms | %s |' % (
                  f2(add1), verdict(add1 <= 1)))
        # CPU per first request (µs), each process from the "where the CPU
        # goes" table; "faster peer" as above: more unique req/s
        mine = cpu_nowrk(a)
        theirs = cpu_nowrk(agg.get((peer_unique_name, 'unique')))
        r3 = ratio(mine, theirs)
        w('| CPU per first request, all processes but wrk, ≤ 0.7× the '
          'faster peer\'s | %s µs vs %s µs: %s | %s |' % (
              f0(mine), f0(theirs), '—' if r3 is None else '%.2f×' % r3,
              verdict(r3 is not None and r3 <= 0.7)))
        my = a['cpu']['mariadb']
        w('| MariaDB CPU per first request ≤ 50 µs (⅕ of %d µs) | %s µs '
          '| %s |' % (MARIADB_US_FIRST_BEFORE, f0(my),
                      verdict(my is not None and my <= 50)))
        ng, ng0 = a['cpu']['nginx'], prox.get('cpu', {}).get('nginx')
        r4 = ratio(ng, ng0)
        w('| nginx worker CPU per first request ≤ 2× plain `proxy_pass`\'s '
          '| %s µs vs %s µs: %s | %s |' % (
              f0(ng), f0(ng0), '—' if r4 is None else '%.2f×' % r4,
              verdict(r4 is not None and r4 <= 2)))
        w('| nginx worker CPU per first request ≤ 1.5× plain '
          '`proxy_pass`\'s | %s | %s |' % (
              '—' if r4 is None else '%.2f×' % r4,
              verdict(r4 is not None and r4 <= 1.5)))
    # the same two, in instructions per request (callgrind, user space):
    # the worker's cost without the machine's noise
    r = ir_ratio(ir, IR_FIRST) if ir else None
    for lim in (2, 1.5):
        w('| nginx worker instructions per first request ≤ %g× plain '
          '`proxy_pass`\'s (callgrind) | %s vs %s Ir: %s | %s |' % (
              lim, span(*ir[IR_FIRST]) if r else '—',
              span(*ir[IR_BASE]) if r else '—',
              span(*r, fmt=times2) if r else '—',
              '—' if r is None else verdict(r[1] <= lim)))
    a = agg.get(('mysql', 'replay'))
    if a:
        r7 = ratio(a['rps'], ret)
        w('| replay ≥ 60 %% of nginx `return` (module, MySQL only) | %s '
          '| %s |' % (pct(r7), REPORTED))
        r5 = ratio(a['rps'], peer_replay)
        w('| replay ≥ 3× the faster peer\'s replay (module, MySQL only) '
          '| %s | %s |' % (times(r5), verdict(r5 is not None and r5 >= 3)))
        lim = MARIADB_US_REPLAY_BEFORE / 6
        my = a['cpu']['mariadb']
        w('| MariaDB CPU per replay ≤ %s µs (⅙ of %d µs; module, MySQL '
          'only) | %s µs | %s |' % (
              '%g' % lim, MARIADB_US_REPLAY_BEFORE, f0(my),
              verdict(my is not None and my <= lim)))
    a = agg.get(('shm', 'mix'))
    if a:
        r6 = ratio(a['rps'], ret)
        w('| mix (%d %% new keys) ≥ 50 %% of nginx `return` (module + shm '
          'cache) | %s | %s |' % (cfg.get('mix_new_pct', 10), pct(r6),
                                  REPORTED))
    rss = d['rss']
    if rss:
        worst = max(abs(v) for v in rss['change_pct'].values()) \
            if rss['change_pct'] else None
        w('| worker RSS flat (±5 %%) over a %s-request replay run (shm '
          'cache) | %s | %s |' % (
              f0(rss['requests']),
              ', '.join('%+.1f %%' % v for _, v in
                        sorted(rss['change_pct'].items())),
              verdict(worst is not None and worst <= 5)))
    for b in d['burst']:
        if b['system'] in MODULE:
            w('| burst of %d identical requests: exactly one execution '
              '(%s) | %d | %s |' % (b['requests'], NAME[b['system']],
                                   b['executions'], verdict(
                                       b['executions'] == 1)))
    w('')



def burst_section(w, d):
    if d['burst']:
        b0 = d['burst'][0]
        w('## Correctness under a burst')
        w('')
        w('%d requests with the same key and the same body, released at '
          'once (each on its own connection, after a barrier), while the '
          'operation takes %d ms (`X-Bench-Delay`). Executions are counted '
          'by the upstream for that key.' % (b0['requests'],
                                              b0['delay_ms']))
        w('')
        w('| system | upstream executions | responses |')
        w('|---|--:|---|')
        for b in d['burst']:
            w('| %s | %d | %s |' % (
                NAME[b['system']], b['executions'],
                ', '.join('%s× %s' % (n, st) for st, n in
                          sorted(b['statuses'].items()))))
        w('')
        w('Plain `proxy_pass` shows what happens without any protection. '
          'express-idempotency looks the key up (`GET`) and then writes it '
          '(`SET`) in two separate Redis commands, so concurrent '
          'duplicates that all miss the `GET` all run; '
          '@node-idempotency/core claims with `SET NX`, and the module '
          'with the UNIQUE key of its table.')
        w('')



def rss_section(w, d):
    cfg, rss = d['config'], d['rss']
    if rss:
        w('## Worker memory over a long replay run')
        w('')
        w('The shm-cache configuration, replaying %d keys with wrk in '
          'chunks of a few seconds until %s requests were answered (%s in '
          '%.0f s). RSS (`VmRSS`) of each worker, after a warm-up:' % (
              cfg.get('keys', 1000), f0(cfg.get('rss_requests')),
              f0(rss['requests']), rss['seconds']))
        w('')
        w('| worker pid | before KiB | after KiB | change |')
        w('|---|--:|--:|--:|')
        for pid in sorted(rss['before_kib']):
            b = rss['before_kib'][pid]
            e = rss['after_kib'].get(pid)
            w('| %s | %s | %s | %s |' % (
                pid, f0(b), f0(e), '%+.1f %%' % rss['change_pct'][pid]
                if pid in rss['change_pct'] else '—'))
        samples = rss['samples']
        w('')
        w('Samples (requests so far: KiB per worker): ' + '; '.join(
            '%s: %s' % (f0(s['requests']), '/'.join(
                str(s['rss_kib'][p]) for p in sorted(s['rss_kib'])))
            for s in samples) + '.')
        errs = sum(s.get('non2xx', 0) + s.get('socket_errors', 0)
                   for s in samples)
        w('Errors during the run: %d.' % errs)
        w('')
        w('`VmRSS` also counts the pages of the shared 64 MB zone that a '
          'worker has touched, so in the results table it grows while the '
          'zone fills (the shm "mix" rows add 10 % new keys). This run '
          'replays a fixed set of keys, so growth here would be the '
          'workers\' own memory.')
        w('')



def machine_section(w, d):
    mach = d['machine']
    w('## Machine')
    w('')
    lc = mach.get('lscpu', {})
    w('- CPU: %s, %s CPU(s) (`nproc` %s), %s thread(s) per core%s' % (
        lc.get('Model name', '?'), lc.get('CPU(s)', '?'),
        mach.get('nproc', '?'), lc.get('Thread(s) per core', '?'),
        ', hypervisor %s' % lc['Hypervisor vendor']
        if 'Hypervisor vendor' in lc else ''))
    w('- memory: %s; kernel: %s; OS: %s' % (
        mach.get('memory', '?'), mach.get('kernel', '?'),
        mach.get('os', '?')))
    w('- %s; MariaDB %s; Redis %s; node %s; %s; %s; %s' % (
        mach.get('nginx', '?'), mach.get('mariadb', '?'),
        mach.get('redis', '?'), mach.get('node', '?'), mach.get('wrk', '?'),
        mach.get('gnuplot', '?'), mach.get('python', '?')))
    w('- npm packages (exact versions, `bench/node/package-lock.json`): ' +
      ', '.join('%s %s' % kv for kv in
                sorted(mach.get('npm_packages', {}).items())))
    w('- load average when the run started: %s (`/proc/loadavg`; the '
      'averages also count the minutes before the run)'
      % mach.get('loadavg_start', '?'))
    other = [(r['other_cpus'], r['system'], r['workload'], r['round'])
             for rnd in d['rounds'] for r in rnd if 'other_cpus' in r]
    if other:
        hi = max(other)
        w('- CPUs busy with anything else during the measurements ("other '
          'CPUs" above): median %.2f, highest %.2f (%s, %s, round %d)' % (
              med(o[0] for o in other), hi[0], NAME[hi[1]], hi[2], hi[3]))
    if d['elapsed']:
        w('- the run took %.0f s' % d['elapsed']['seconds'])
    w('')
    w('MariaDB and Redis are the private instances of '
      '`scripts/services.sh` (MariaDB with `innodb_flush_log_at_trx_commit=2`, '
      'the thread pool, `innodb_spin_wait_delay=0`, '
      'binary log off, a 512 MB buffer pool that holds a round\'s bench '
      'table, a 1 GB redo log, `innodb_io_capacity` 2000 (max 4000) '
      'and `innodb_max_dirty_pages_pct_lwm=10`, so that the page '
      'cleaner flushes in the background and no checkpoint has to '
      'flush pages synchronously during a round: bench/NOTES.md, '
      '"The tail"; '
      'the flush=1 row runs '
      '`SET GLOBAL innodb_flush_log_at_trx_commit=1` before its '
      'measurement and sets it back to 2 right after; Redis without '
      'persistence). The '
      'module uses its own table `%s` (the schema of `mysql/schema.sql`) '
      'and Redis database %s; the peers use database %s. All three are '
      'emptied before each round. The module stores use their defaults '
      '(pool 16 per worker, fingerprint on); the peers and plain express '
      'run in one node process each, as express applications usually '
      'do.' % (
          'bench_keys', 7, 8))
    w('')



def reproduce_section(w, d):
    w('## Reproduce')
    w('')
    w('    make bench                       # the defaults, as above')
    w('    make bench BENCH_ROUNDS=1 BENCH_DURATION=3 BENCH_RSS_REQUESTS=100000')
    w('    bench/run.sh report              # rewrite this page from '
      'build/bench/results/')
    w('    bench/run.sh serve               # only start the systems '
      '(ports 18080-18093, or from BENCH_PORT_BASE)')
    w('    python3 bench/profile.py 1000    # the instruction counts: '
      'build/bench/profile/ir.json')
    w('    make bench-scale                 # the store at scale: '
      'build/bench-scale/results/')
    w('    make bench-keycost               # the webhook key\'s scan and '
      'HMAC alone')
    w('')
    w('`make bench` runs `deps`, `build` and `services` first, then '
      '`bench/setup.sh` (installs `wrk` and `gnuplot-nox` when missing, '
      '`npm ci` in `bench/node`), then `bench/run.sh`. Variables: '
      '`BENCH_ROUNDS` (3), `BENCH_DURATION` (10 s), `BENCH_CONNECTIONS` '
      '(64), `BENCH_THREADS` (2), `BENCH_RSS_REQUESTS` (1000000), '
      '`BENCH_KEYS` (1000), `BENCH_BURST` (50), `BENCH_BURST_DELAY_MS` '
      '(200), `BENCH_WARMUP` (1 s), `BENCH_WORKERS` (2), '
      '`BENCH_ONLY` (`"proxy:hook2k webhook:hook2k ..."`: only these '
      'measurements, a table printed instead of this page), '
      '`BENCH_PORT_BASE` (18080: the ports below are offsets from it; '
      'the services\' ports come from `IDEM_MYSQL_PORT` and '
      '`IDEM_REDIS_PORT`, or make\'s `MYSQL_PORT`, `MYSQL2_PORT` and '
      '`REDIS_PORT`). Ports: nginx '
      '`return` 18080, `proxy_pass` 18081, the module 18082 (MySQL), '
      '18083 (+ Redis), 18084 (+ shm; flush=1 uses 18082 too), 18086 '
      '(the key from the JSON body), 18087 (+ the Stripe signature); '
      'upstream '
      '18090; peers 18091 and 18092; plain express 18093. `make bench` is '
      'not part of `make test`.')
    w('')
    w('New instruction counts are committed by copying '
      '`build/bench/profile/ir.json` to `bench/profile-ir.json`; a new '
      'verdict of `make bench-scale` by putting its `meta.json`, '
      '`size-*.json` and `scale.md` in a folder of `bench/scale-results/` '
      'in place of the old one, and its `scale.png` in '
      '`docs/benchmarks-scale.png`. Then `bench/run.sh report`.')
    w('')
    if d['nginx_errors']:
        w('nginx logged %d error lines during the run (last: `%s`).' % (
            len(d['nginx_errors']), d['nginx_errors'][-1][:200]))
        w('')



def latency_chart(results, agg, png, bench_dir):
    """docs/benchmarks-latency.png beside docs/benchmarks.png"""
    files, colours = {}, {}
    for name, lines in (('unique', LAT_UNIQUE), ('mix', LAT_MIX)):
        path = os.path.join(results, 'latency-%s.dat' % name)
        cs = []
        with open(path, 'w') as f:
            for key, colour in lines:
                dist = agg.get(key, {}).get('dist')
                if not dist:
                    continue
                label = SHORT[key[0]] + ('' if key[1] in ('return', name)
                                         else ' ' + key[1])
                f.write('"%s" "ms"\n' % label)
                for p, ms in dist:
                    x = 1e5 if p >= 100 else 100.0 / (100.0 - p)
                    f.write('%g %.4f\n' % (x, max(ms, 0.001)))
                f.write('\n\n')
                cs.append(colour)
        files[name], colours[name] = path, cs
    if not colours['unique'] or not colours['mix']:
        return          # results from before the distribution was kept
    out = png[:-len('.png')] + '-latency.png'
    subprocess.run(['gnuplot', '-e',
                    "unique='%s'; mix='%s'; ucolours='%s'; mcolours='%s'; "
                    "outfile='%s'" % (files['unique'], files['mix'],
                                      ' '.join(colours['unique']),
                                      ' '.join(colours['mix']), out),
                    os.path.join(bench_dir, 'latency.gp')], check=True)

#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""Driver of `make bench-scale` (python3 stdlib only): the store's cost
against the number of live keys.  bench/scale.sh starts the MariaDB it
runs on and lists the environment; docs/benchmarks.md ("The store at
scale") says what is measured and how."""

import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import run as bench     # noqa: E402  bench/run.py: wrk, /proc, processes

ROOT = bench.ROOT
OUT = os.path.join(ROOT, 'build', 'bench-scale')
RESULTS = os.path.join(OUT, 'results')
MYSQL_DIR = os.path.join(OUT, 'mysql')
MYSQL_SOCK = os.path.join(MYSQL_DIR, 'mysql.sock')
TABLE = 'idempotency_keys'

# run.py's helpers work in build/bench-scale, not in make bench's
# directory: its nginx prefix, the upstream's pid and log files
bench.OUT = OUT
bench.PREFIX = os.path.join(OUT, 'nginx')

CFG = {
    'sizes': [int(s) for s in
              os.environ.get('SCALE_SIZES',
                             '0 1000000 5000000 20000000').split()],
    'duration': bench.env_int('SCALE_DURATION', 10),
    'warmup': bench.env_int('SCALE_WARMUP', 1),
    'cold_keys': bench.env_int('SCALE_COLD_KEYS', 20000),
    'backlog': bench.env_int('SCALE_BACKLOG', 600),
    'mix_new_pct': 10,
    'listings': 3,
    'connections': bench.CFG['connections'],
    'threads': bench.CFG['threads'],
    'workers': bench.CFG['workers'],
}
MYSQL_PORT = bench.env_int('SCALE_MYSQL_PORT', 3317)
PORT = bench.env_int('SCALE_PORT_BASE', 18280)
UPSTREAM_PORT = PORT + 10
STATUS = ('Innodb_buffer_pool_reads', 'Innodb_buffer_pool_read_requests',
          'Handler_delete', 'Handler_write',
          'Handler_update', 'Innodb_data_written', 'Questions')
# the states of the rows filled in, per 100 (schema.sql's numbers):
# completed with a response, in progress (a lease long dead), unknown
# outcome, released
STATES = ((1, 90), (0, 4), (3, 3), (4, 3))
DAY = 86400


def log(msg):
    print('bench-scale: ' + msg, flush=True)


def sql(text, db='idempotency'):
    return bench.run(['mariadb', '--no-defaults', '--protocol=socket',
                      '--socket=' + MYSQL_SOCK, '-uroot', '-N', '-B', db,
                      '-e', text])


def status():
    out = sql("SHOW GLOBAL STATUS WHERE Variable_name IN (%s)" %
              ','.join("'%s'" % v for v in STATUS))
    return {k: int(v) for k, v in (ln.split('\t') for ln in out.splitlines())}


def mariadbd_pid():
    with open(os.path.join(MYSQL_DIR, 'mysql.pid')) as f:
        return int(f.read().strip())


def read_bytes(pid):
    """bytes mariadbd read from the block device (its buffer pool reads
    bypass the page cache: innodb_flush_method O_DIRECT)"""
    with open('/proc/%d/io' % pid) as f:
        for line in f:
            if line.startswith('read_bytes:'):
                return int(line.split()[1])
    return 0


def count(where):
    return int(sql('SELECT COUNT(*) FROM %s WHERE %s' % (TABLE, where)))


def table_bytes():
    return os.path.getsize(os.path.join(MYSQL_DIR, 'data', 'idempotency',
                                        TABLE + '.ibd'))


# ------------------------------------------------------------- nginx

def start_nginx(purge):
    bench.nginx('stop')
    os.makedirs(bench.PREFIX, exist_ok=True)
    subst = {
        'PREFIX': bench.PREFIX, 'MODULE': bench.MODULE_SO,
        'WORKERS': str(CFG['workers']), 'UPSTREAM_PORT': str(UPSTREAM_PORT),
        'MYSQL_PORT': str(MYSQL_PORT), 'PORT': str(PORT), 'PURGE': purge,
    }
    with open(os.path.join(BENCH, 'scale-nginx.conf.in')) as f:
        conf = f.read()
    for k, v in subst.items():
        conf = conf.replace('@%s@' % k, v)
    with open(os.path.join(bench.PREFIX, 'nginx.conf'), 'w') as f:
        f.write(conf)
    bench.nginx('start')
    bench.wait_port(PORT, 'nginx')


def get(path):
    c = http.client.HTTPConnection('127.0.0.1', PORT, timeout=120)
    c.request('GET', path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def template():
    """The row a real first request leaves: the fill copies its
    fingerprint, status and stored response, so that replays of the
    filled keys are served like any other"""
    c = http.client.HTTPConnection('127.0.0.1', PORT, timeout=10)
    key = 'scale-template-%d' % os.getpid()
    if bench.post(c, key) != 201:
        bench.die('the template request was not answered 201')
    c.close()
    h = hashlib.sha256(b'idempotency-key/1' + b'\0\0\0\0' +
                       key.encode()).hexdigest()
    for _ in range(100):
        row = sql("SELECT state, status, HEX(fingerprint), HEX(response) "
                  "FROM %s WHERE key_hash = X'%s'" % (TABLE, h)).split()
        if row and row[0] == '1':
            return {'status': int(row[1]), 'fingerprint': row[2],
                    'response': row[3]}
        time.sleep(0.1)
    bench.die('the template request left no completed row %s' % h)


# -------------------------------------------------------------- fill

def state_case(column):
    """the state of filled row number `column`, from STATES"""
    parts, edge = [], 0
    for state, pct in STATES[:-1]:
        edge += pct
        parts.append('WHEN %s %% 100 < %d THEN %d' % (column, edge, state))
    return 'CASE %s ELSE %d END' % (' '.join(parts), STATES[-1][0])


def secondary_indexes():
    """the table's indexes but the primary key, as ALTER TABLE clauses"""
    out = sql("SELECT INDEX_NAME, NON_UNIQUE, GROUP_CONCAT(COLUMN_NAME "
              "ORDER BY SEQ_IN_INDEX) FROM information_schema.STATISTICS "
              "WHERE TABLE_SCHEMA = 'idempotency' AND TABLE_NAME = '%s' "
              "AND INDEX_NAME <> 'PRIMARY' GROUP BY INDEX_NAME, NON_UNIQUE"
              % TABLE)
    return [('DROP INDEX %s' % name,
             'ADD %sINDEX %s (%s)' % ('' if int(nu) else 'UNIQUE ', name, cols))
            for name, nu, cols in (ln.split('\t') for ln in out.splitlines())]


def clustered_by_expiry():
    """whether the table's primary key begins with expires_at (a
    candidate of bench/scale-schemas/ applied by SCALE_TABLE_SQL)"""
    return sql("SELECT COLUMN_NAME FROM information_schema.STATISTICS "
               "WHERE TABLE_SCHEMA = 'idempotency' AND TABLE_NAME = '%s' "
               "AND INDEX_NAME = 'PRIMARY' AND SEQ_IN_INDEX = 1"
               % TABLE).strip() == 'expires_at'


def fill(n, tpl):
    """n live keys: first the cold keys (real keys cold-1 .. cold-K,
    completed, expiring in 1 to 24 h), then n - K rows in the primary
    key's order, their expiry spread over 24 h of which the first
    SCALE_BACKLOG seconds are already past: in key order, with hashes
    spread evenly over the key space (seq * stride in the first 8 bytes)
    and expiry not in that order; or, in a table clustered by expiry, in
    expiry order with hashes in none.  The secondary indexes are built
    afterwards, sorted, as a bulk load does: filled one row at a time,
    each would be a random write"""
    k = min(CFG['cold_keys'], n) if n else CFG['cold_keys']
    sql('TRUNCATE TABLE %s' % TABLE)
    t0 = time.time()
    idx = secondary_indexes()
    if idx:
        sql('ALTER TABLE %s %s' % (TABLE, ', '.join(i[0] for i in idx)))
    sql("SET @fp = X'%s', @resp = X'%s'; "
        "INSERT INTO %s (key_hash, state, owner, epoch, fingerprint, "
        "created_at, lease_until, expires_at, status, response) "
        "SELECT UNHEX(SHA2(CONCAT('idempotency-key/1', X'00000000', "
        "'cold-', seq), 256)), 1, LEFT(UNHEX(MD5(seq)), 16), 1, @fp, "
        "UTC_TIMESTAMP(3) - INTERVAL 1 HOUR, UTC_TIMESTAMP(3), "
        "UTC_TIMESTAMP(3) + INTERVAL 3600 + seq * 7919 %% 82800 SECOND, "
        "%d, @resp FROM seq_1_to_%d" % (tpl['fingerprint'], tpl['response'],
                                        TABLE, tpl['status'], k))
    rest = n - k if n else 0
    by_expiry = clustered_by_expiry()
    if by_expiry:
        key, expiry = 'UNHEX(SHA2(seq, 256))', 'seq * 86400000 DIV %d' % rest
    else:
        key = ("CONCAT(UNHEX(LPAD(HEX(seq * %d), 16, '0')), "
               "LEFT(UNHEX(SHA2(seq, 256)), 24))" % ((2 ** 64 - 1)
                                                    // (rest + 1)))
        expiry = 'seq * 7919 % 86400000'
    if rest > 0:
        sql("SET @fp = X'%s', @resp = X'%s', @now = UTC_TIMESTAMP(3); "
            "INSERT INTO %s (key_hash, state, owner, epoch, fingerprint, "
            "created_at, lease_until, expires_at, status, response) "
            "SELECT %s, s.st, LEFT(UNHEX(MD5(seq)), 16), "
            "IF(s.st = 4, 2, 1), @fp, s.ex - INTERVAL 1 DAY, "
            "s.ex - INTERVAL 1 DAY + INTERVAL 30 SECOND, s.ex, "
            "IF(s.st = 1, %d, NULL), IF(s.st = 1, @resp, NULL) "
            "FROM (SELECT seq, %s AS st, @now - INTERVAL %d SECOND "
            "+ INTERVAL %s * 1000 MICROSECOND AS ex "
            "FROM seq_1_to_%d) s"
            % (tpl['fingerprint'], tpl['response'], TABLE, key,
               tpl['status'], state_case('seq'), CFG['backlog'], expiry,
               rest))
    if idx:
        sql('ALTER TABLE %s %s' % (TABLE, ', '.join(i[1] for i in idx)))
    return {'cold_keys': k, 'seconds': time.time() - t0,
            'order': 'expiry' if by_expiry else 'key'}


def settle(secs=300):
    """wait until the fill's dirty pages are written, so that the
    measurements do not pay for the fill's writes"""
    sql('SET GLOBAL innodb_max_dirty_pages_pct = 0')
    try:
        t = time.time() + secs
        while time.time() < t:
            d = int(sql("SHOW GLOBAL STATUS LIKE "
                        "'Innodb_buffer_pool_pages_dirty'").split()[1])
            if d < 100:
                break
            time.sleep(1)
    finally:
        sql('SET GLOBAL innodb_max_dirty_pages_pct = 90')
    return d


# ----------------------------------------------------------- measure

def snapshot(pid):
    return {'status': status(), 'read_bytes': read_bytes(pid),
            'mariadb': bench.cpu_seconds(pid),
            'nginx': sum(bench.cpu_seconds(p) for p in bench.nginx_workers()),
            'busy': bench.machine_busy()}


def phase(name, script, args, pid):
    if CFG['warmup'] > 0:
        bench.wrk(PORT, script, args, CFG['warmup'])
    time.sleep(0.3)
    s0 = snapshot(pid)
    res = bench.wrk(PORT, script, args, CFG['duration'])
    s1 = snapshot(pid)
    n = max(res['requests'], 1)
    secs = res['duration_us'] / 1e6
    d = {k: s1['status'][k] - s0['status'][k] for k in STATUS}
    rec = {
        'phase': name, 'rps': res['rps'], 'p50_ms': res['p50_us'] / 1000,
        'p99_ms': res['p99_us'] / 1000, 'requests': res['requests'],
        'non2xx': res['err_status'], 'socket_errors': res['socket_errors'],
        'mariadb_cpu_us': (s1['mariadb'] - s0['mariadb']) * 1e6 / n,
        'nginx_cpu_us': (s1['nginx'] - s0['nginx']) * 1e6 / n,
        'pool_reads': d['Innodb_buffer_pool_reads'] / n,
        'pool_read_requests': d['Innodb_buffer_pool_read_requests'] / n,
        'disk_read_kib': (s1['read_bytes'] - s0['read_bytes']) / 1024 / n,
        'written_kib': d['Innodb_data_written'] / 1024 / n,
        'rows_deleted': d['Handler_delete'],
        'other_cpus': max(0.0, (s1['busy'] - s0['busy'])
                          - (s1['mariadb'] - s0['mariadb'])
                          - (s1['nginx'] - s0['nginx'])) / secs,
        'seconds': secs,
    }
    log('%-12s %8.0f req/s  p99 %7.2f ms  MariaDB %5.0f us/req  '
        'reads %.3f/req  non2xx %d' % (name, rec['rps'], rec['p99_ms'],
                                       rec['mariadb_cpu_us'],
                                       rec['pool_reads'], rec['non2xx']))
    return rec


def listing():
    out = {}
    for state in ('in_progress', 'unknown'):
        ms, st = [], None
        for _ in range(CFG['listings']):
            t = time.time()
            st, _body = get('/admin?list=%s&limit=100' % state)
            ms.append((time.time() - t) * 1000)
        out[state] = {'status': st, 'median_ms': statistics.median(ms),
                      'max_ms': max(ms)}
    log('listing: %s' % ', '.join('%s %.1f ms (HTTP %d)' % (
        k, v['median_ms'], v['status']) for k, v in out.items()))
    return out


def purge_phase(n, pid):
    """the purge every second against the backlog and the steady stream
    of expirations, while first requests go on"""
    expired0 = count('expires_at <= UTC_TIMESTAMP(3)')
    deleted0, t0 = status()['Handler_delete'], time.time()
    start_nginx('1s')
    rec = phase('unique-purge', 'unique', [], pid)
    # from the purge's start: it may drain the backlog in the warm-up
    secs = time.time() - t0
    deleted = status()['Handler_delete'] - deleted0
    expired1 = count('expires_at <= UTC_TIMESTAMP(3)')
    rec.update({
        'backlog_before': expired0, 'backlog_after': expired1,
        'expiring_per_s': n / DAY, 'purge_seconds': secs,
        'removed': deleted, 'removed_per_s': deleted / secs,
    })
    log('purge: backlog %d -> %d, removed %.0f/s, expiring %.1f/s' % (
        expired0, expired1, rec['removed_per_s'], rec['expiring_per_s']))
    start_nginx('off')
    return rec


def measure(n, tpl, pid):
    log('size %d: filling' % n)
    f = fill(n, tpl)
    dirty = settle()
    rec = {'size': n, 'rows': n or f['cold_keys'], 'fill': f, 'dirty_after_settle': dirty,
           'table_bytes': table_bytes(), 'phases': {}}
    log('size %d: %d rows, %.0f MiB on disk, filled in %.0f s' % (
        n, rec['rows'], rec['table_bytes'] / 2**20, f['seconds']))
    start_nginx('off')
    ph = rec['phases']
    ph['unique'] = phase('unique', 'unique', [], pid)
    ph['cold'] = phase('cold-replay', 'cold', ['cold', f['cold_keys']], pid)
    ph['mix'] = phase('mix', 'cold', ['cold', f['cold_keys'],
                                      CFG['mix_new_pct']], pid)
    rec['listing'] = listing()
    ph['purge'] = purge_phase(n, pid)
    rec['errors'] = nginx_errors()
    return rec


def nginx_errors():
    try:
        with open(os.path.join(bench.PREFIX, 'error.log')) as f:
            return [ln for ln in f.read().splitlines()
                    if '[error]' in ln or '[crit]' in ln
                    or '[alert]' in ln][-20:]
    except OSError:
        return []


# ------------------------------------------------------------ report

def report():
    sys.path.insert(0, BENCH)
    import scale_report         # bench/scale_report.py
    scale_report.generate(RESULTS)


def main():
    os.makedirs(RESULTS, exist_ok=True)
    for f in os.listdir(RESULTS):
        os.unlink(os.path.join(RESULTS, f))
    pid = mariadbd_pid()
    pool = int(sql('SELECT @@innodb_buffer_pool_size'))
    meta = dict(CFG, buffer_pool_bytes=pool, mysql_port=MYSQL_PORT,
                port=PORT, loadavg_start=open('/proc/loadavg').read().strip(),
                date=time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()),
                mariadb=sql('SELECT VERSION()').strip(),
                flush_method=sql('SELECT @@innodb_flush_method').strip(),
                nice=os.nice(0))
    if os.environ.get('SCALE_TABLE_SQL'):
        # a candidate of bench/scale-schemas/ instead of today's table
        with open(os.path.join(ROOT, os.environ['SCALE_TABLE_SQL'])) as f:
            sql(f.read())
        meta['table_sql'] = os.environ['SCALE_TABLE_SQL']
    meta['table'] = sql('SHOW CREATE TABLE %s' % TABLE).split('\t', 1)[1]
    bench.start_node('upstream', ['upstream.js', str(UPSTREAM_PORT)],
                     UPSTREAM_PORT)
    try:
        start_nginx('off')
        sql('TRUNCATE TABLE %s' % TABLE)
        tpl = template()
        meta['response_bytes'] = len(tpl['response']) // 2
        for n in CFG['sizes']:
            rec = measure(n, tpl, pid)
            rec['loadavg'] = open('/proc/loadavg').read().strip()
            with open(os.path.join(RESULTS, 'size-%d.json' % n), 'w') as f:
                json.dump(rec, f, indent=1, sort_keys=True)
    finally:
        bench.stop_all()
        # the big table goes; bench/scale.sh removes the data directory
        sql('TRUNCATE TABLE %s' % TABLE)
        meta['loadavg_end'] = open('/proc/loadavg').read().strip()
        with open(os.path.join(RESULTS, 'meta.json'), 'w') as f:
            json.dump(meta, f, indent=1, sort_keys=True)
    report()


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == 'report':
        report()
    else:
        main()

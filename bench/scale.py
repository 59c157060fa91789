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
import random
import statistics
import subprocess
import sys
import threading
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
    # seconds of first requests after the warm-up's scans, not measured
    'warm_traffic': bench.env_int('SCALE_WARM_TRAFFIC', 20),
    # 0: max(20,000, one per 32 live keys), about one a leaf page
    'cold_keys': bench.env_int('SCALE_COLD_KEYS', 0),
    'backlog': bench.env_int('SCALE_BACKLOG', 600),
    'schema': os.environ.get('SCALE_SCHEMA', 'today'),
    'migrate': bench.env_int('SCALE_MIGRATE', 0),
    'migrate_clients': 4,
    'purge_rounds': bench.env_int('SCALE_PURGE_ROUNDS', 3),
    'mix_new_pct': 10,
    'listings': 3,
    'connections': bench.CFG['connections'],
    'threads': bench.CFG['threads'],
    'workers': bench.CFG['workers'],
}
MYSQL_PORT = bench.env_int('SCALE_MYSQL_PORT', 3317)
PORT = bench.env_int('SCALE_PORT_BASE', 18280)
UPSTREAM_PORT = PORT + 10
SCHEMAS = os.path.join(BENCH, 'scale-schemas')
UPGRADE_SQL = os.path.join(ROOT, 'mysql', 'upgrade-expiry-order.sql')
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


def sql_file(path):
    with open(path) as f:
        sql(f.read())


def use_schema():
    """the table the run measures: mysql/schema.sql as scale.sh's
    MariaDB made it (today), or bench/scale-schemas/previous.sql (the
    previous schema: SCALE_SCHEMA=previous, and what SCALE_MIGRATE=1
    fills before it upgrades it); then SCALE_TABLE_SQL, if set"""
    if CFG['schema'] == 'previous' or CFG['migrate']:
        sql('DROP TABLE %s' % TABLE)
        sql_file(os.path.join(ROOT, 'mysql', 'schema.sql'))
        sql_file(os.path.join(SCHEMAS, 'previous.sql'))
    elif CFG['schema'] != 'today':
        bench.die('SCALE_SCHEMA is "today" or "previous", not "%s"'
                  % CFG['schema'])
    if os.environ.get('SCALE_TABLE_SQL'):
        sql_file(os.path.join(ROOT, os.environ['SCALE_TABLE_SQL']))


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


def dir_bytes(path=MYSQL_DIR):
    """the disk MariaDB's directory takes (data, redo log, undo)"""
    total = 0
    for d, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_blocks * 512
            except OSError:
                pass
    return total


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
    """the table's indexes but the primary key, as ALTER TABLE clauses
    (drop, add, whether it begins with key_hash)"""
    out = sql("SELECT INDEX_NAME, NON_UNIQUE, GROUP_CONCAT(COLUMN_NAME "
              "ORDER BY SEQ_IN_INDEX) FROM information_schema.STATISTICS "
              "WHERE TABLE_SCHEMA = 'idempotency' AND TABLE_NAME = '%s' "
              "AND INDEX_NAME <> 'PRIMARY' GROUP BY INDEX_NAME, NON_UNIQUE"
              % TABLE)
    return [('DROP INDEX %s' % name,
             'ADD %sINDEX %s (%s)' % ('' if int(nu) else 'UNIQUE ', name, cols),
             cols.startswith('key_hash'))
            for name, nu, cols in (ln.split('\t') for ln in out.splitlines())]


# how full a sorted index build leaves the leaves of an index by the key
# hash: grown by random inserts, as in production, a B-tree's pages are
# about 70 % full; built full, nearly every leaf would split at its
# first new key while first requests are measured, doubling the index
RANDOM_FILL_FACTOR = 70


def build_indexes(idx):
    """the secondary indexes, sorted, one ALTER each: those by key_hash
    (uk_key_hash) as full as grown at random, the others (appended to
    in production: expiry, creation order) full"""
    for _drop, add, by_hash in idx:
        sql('SET GLOBAL innodb_fill_factor = %d; ALTER TABLE %s %s; '
            'SET GLOBAL innodb_fill_factor = 100'
            % (RANDOM_FILL_FACTOR if by_hash else 100, TABLE, add))


def index_mib():
    """each index's size, from InnoDB's persistent statistics"""
    sql('ANALYZE TABLE %s' % TABLE)
    out = sql("SELECT index_name, stat_value * @@innodb_page_size / 1048576 "
              "FROM mysql.innodb_index_stats WHERE database_name = "
              "'idempotency' AND table_name = '%s' AND stat_name = 'size'"
              % TABLE)
    return {n: round(float(v)) for n, v in
            (ln.split('\t') for ln in out.splitlines())}


def clustered_by_expiry():
    """whether the table's primary key begins with expires_at (a
    candidate of bench/scale-schemas/ applied by SCALE_TABLE_SQL)"""
    return sql("SELECT COLUMN_NAME FROM information_schema.STATISTICS "
               "WHERE TABLE_SCHEMA = 'idempotency' AND TABLE_NAME = '%s' "
               "AND INDEX_NAME = 'PRIMARY' AND SEQ_IN_INDEX = 1"
               % TABLE).strip() == 'expires_at'


def cold_count(n):
    """SCALE_COLD_KEYS, or by default about one replayed key a leaf page
    (32 rows of about 450 bytes), at least 20,000: the replayed rows'
    pages are then the whole table, several times the buffer pool at
    the sizes that matter, and a replay seldom finds its page there"""
    return CFG['cold_keys'] or max(20000, n // 32)


# the hash of real key cold-I (bench/lua/cold.lua replays them)
COLD_HASH = ("UNHEX(SHA2(CONCAT('idempotency-key/1', X'00000000', "
             "'cold-', %s), 256))")
FILL_INSERT = ("SET @fp = X'%s', @resp = X'%s', @now = UTC_TIMESTAMP(3); "
               "INSERT INTO " + TABLE + " (key_hash, state, owner, epoch, "
               "fingerprint, created_at, lease_until, expires_at, status, "
               "response) ")


def fill_by_key(n, k, tpl):
    """the previous schema, clustered by key_hash: first the cold keys
    (completed, expiring in 1 to 24 h), then n - k rows in key order
    (hashes spread evenly over the key space: seq * stride in the first
    8 bytes), their expiry spread over 24 h of which the first
    SCALE_BACKLOG seconds are already past, in no order"""
    sql(FILL_INSERT % (tpl['fingerprint'], tpl['response']) +
        "SELECT %s, 1, LEFT(UNHEX(MD5(seq)), 16), 1, @fp, "
        "@now - INTERVAL 1 HOUR, @now, "
        "@now + INTERVAL 3600 + seq * 7919 %% 82800 SECOND, "
        "%d, @resp FROM seq_1_to_%d" % (COLD_HASH % 'seq', tpl['status'], k))
    rest = n - k
    if rest <= 0:
        return k
    key = ("CONCAT(UNHEX(LPAD(HEX(seq * %d), 16, '0')), "
           "LEFT(UNHEX(SHA2(seq, 256)), 24))" % ((2 ** 64 - 1) // (rest + 1)))
    sql(FILL_INSERT % (tpl['fingerprint'], tpl['response']) +
        "SELECT %s, s.st, LEFT(UNHEX(MD5(seq)), 16), "
        "IF(s.st = 4, 2, 1), @fp, s.ex - INTERVAL 1 DAY, "
        "s.ex - INTERVAL 1 DAY + INTERVAL 30 SECOND, s.ex, "
        "IF(s.st = 1, %d, NULL), IF(s.st = 1, @resp, NULL) "
        "FROM (SELECT seq, %s AS st, @now - INTERVAL %d SECOND "
        "+ INTERVAL seq * 7919 %% 86400000 * 1000 MICROSECOND AS ex "
        "FROM seq_1_to_%d) s"
        % (key, tpl['status'], state_case('seq'), CFG['backlog'], rest))
    return k


def fill_by_expiry(n, k, tpl):
    """a table clustered by (expires_at, key_hash), today's: one
    INSERT in that order, row seq expiring seq/n of 24 h after
    SCALE_BACKLOG seconds ago (size 0: k rows expiring in 1 to 24 h).
    Every stride-th row from the first that expires in an hour or more
    is cold key I (completed), so that the replayed rows are spread over
    the table; the others have hashes in no order"""
    rows = n or k
    start, span = (-CFG['backlog'], DAY) if n else (3600, DAY - 3600)
    lo = -(-(3600 - start) * rows // span) if start < 3600 else 0
    stride = max(1, (rows - lo) // k)
    k = min(k, (rows - lo) // stride)
    cold = ('seq > %d AND (seq - %d) %% %d = 0 AND (seq - %d) DIV %d <= %d'
            % (lo, lo, stride, lo, stride, k))
    sql(FILL_INSERT % (tpl['fingerprint'], tpl['response']) +
        "SELECT IF(s.c, %s, UNHEX(SHA2(seq, 256))), s.st, "
        "LEFT(UNHEX(MD5(seq)), 16), IF(s.st = 4, 2, 1), @fp, "
        "s.ex - INTERVAL 1 DAY, s.ex - INTERVAL 1 DAY + INTERVAL 30 SECOND, "
        "s.ex, IF(s.st = 1, %d, NULL), IF(s.st = 1, @resp, NULL) "
        "FROM (SELECT seq, %s AS c, IF(%s, 1, %s) AS st, "
        "@now + INTERVAL %d SECOND "
        "+ INTERVAL seq * %d DIV %d * 1000 MICROSECOND AS ex "
        "FROM seq_1_to_%d) s"
        % (COLD_HASH % ('(seq - %d) DIV %d' % (lo, stride)), tpl['status'],
           cold, cold, state_case('seq'), start, span * 1000, rows, rows))
    return k


def fill(n, tpl):
    """n live keys (size 0: the cold keys alone), in the clustered
    index's order; per 100 rows STATES; among them the cold keys, real
    keys cold-1 .. cold-K that bench/lua/cold.lua replays.  The
    secondary indexes are dropped first and built afterwards, sorted, as
    a bulk load does: filled one row at a time, each would be a random
    write"""
    sql('TRUNCATE TABLE %s' % TABLE)
    t0 = time.time()
    idx = secondary_indexes()
    if idx:
        sql('ALTER TABLE %s %s' % (TABLE, ', '.join(i[0] for i in idx)))
    by_expiry = clustered_by_expiry()
    k = cold_count(n)
    k = (fill_by_expiry if by_expiry else fill_by_key)(n, k, tpl)
    t1 = time.time()
    build_indexes(idx)
    return {'cold_keys': k, 'seconds': time.time() - t0,
            'rows_seconds': t1 - t0, 'index_seconds': time.time() - t1,
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
        # a replay writes none: its key was found
        'rows_written': d['Handler_write'],
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


def purge_round(name, n, pid):
    """the purge every second against the backlog and the steady stream
    of expirations, while first requests go on"""
    expired0 = count('expires_at <= UTC_TIMESTAMP(3)')
    deleted0, t0 = status()['Handler_delete'], time.time()
    start_nginx('1s')
    rec = phase(name, 'unique', [], pid)
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
    return rec


def purge_rounds(n, pid, ph):
    """first requests with the purge off and on, back to back, the same
    duration, alternated SCALE purge_rounds times (off, on, off, on):
    the p99 with the purge against the p99 just before it.  The first
    round with the purge drains the backlog (SCALE_BACKLOG seconds of
    expirations), the later ones keep up with the expirations alone"""
    for i in range(1, CFG['purge_rounds'] + 1):
        # each from written-out pages: the first off round otherwise
        # pays for the flushing of the mix and the replays before it
        # (a p99 of 290-514 ms where the rounds after gave 30-50)
        settle(60)
        start_nginx('off')
        ph['purge_off_%d' % i] = phase('purge-off-%d' % i, 'unique', [], pid)
        settle(60)
        ph['purge_on_%d' % i] = purge_round('purge-on-%d' % i, n, pid)
    start_nginx('off')


def warm_up():
    """what a server that has run for a while holds in its buffer pool:
    the index that decides every claim (uk_key_hash, read whole, if the
    table has it; the previous schema's is the table itself, which is
    left as the fill left it) and the tails where claims, completions
    and the listing's index grow.  A scan's pages stay in the old end of
    InnoDB's LRU list (innodb_old_blocks_time), the first evicted; every
    claim reads uk_key_hash, which a running server keeps in the young
    end: so the index is read twice with innodb_old_blocks_time 0, the
    second read making its pages young, and the pages the fill's index
    builds left behind are evicted first"""
    s0, t0 = status(), time.time()
    has_uk = sql("SELECT COUNT(*) FROM information_schema.STATISTICS "
                 "WHERE TABLE_SCHEMA = 'idempotency' AND TABLE_NAME = '%s' "
                 "AND INDEX_NAME = 'uk_key_hash'" % TABLE).strip() != '0'
    old = sql('SELECT @@innodb_old_blocks_time').strip()
    sql('SET GLOBAL innodb_old_blocks_time = 0')
    try:
        for _ in range(2 if has_uk else 0):
            sql('SELECT COUNT(*) FROM %s FORCE INDEX (uk_key_hash)' % TABLE)
        for _ in range(2):
            sql('SELECT MAX(expires_at), MAX(created_at) FROM %s' % TABLE)
            sql('SELECT state, MAX(created_at) FROM %s GROUP BY state'
                % TABLE)
    finally:
        sql('SET GLOBAL innodb_old_blocks_time = %s' % old)
    pages = int(sql("SHOW GLOBAL STATUS LIKE "
                    "'Innodb_buffer_pool_pages_data'").split()[1])
    rec = {'seconds': time.time() - t0, 'uk_key_hash': has_uk,
           'pool_reads': status()['Innodb_buffer_pool_reads']
           - s0['Innodb_buffer_pool_reads'],
           'pool_pages_data': pages}
    log('warm-up: %.1f s, %d pages read, %d pages in the pool' % (
        rec['seconds'], rec['pool_reads'], pages))
    return rec


class Clients:
    """first requests through nginx from a few threads until stopped,
    counting the answers (the migration's: every one must be 2xx)"""

    def __init__(self, n):
        self.stop, self.lock = threading.Event(), threading.Lock()
        self.codes, self.ms = {}, []
        self.threads = [threading.Thread(target=self.run, args=(i,))
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def run(self, idx):
        c, i = None, 0
        while not self.stop.is_set():
            i += 1
            t = time.time()
            try:
                c = c or http.client.HTTPConnection('127.0.0.1', PORT,
                                                    timeout=30)
                code = bench.post(c, 'migrate-%d-%d-%d' % (os.getpid(),
                                                           idx, i))
            except (OSError, http.client.HTTPException) as e:
                code, c = type(e).__name__, None
            with self.lock:
                self.codes[code] = self.codes.get(code, 0) + 1
                self.ms.append((time.time() - t) * 1000)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        ms = sorted(self.ms) or [0]
        ok = sum(v for k, v in self.codes.items()
                 if isinstance(k, int) and 200 <= k < 300)
        return {'requests': len(self.ms), 'ok': ok,
                'failed': len(self.ms) - ok,
                'codes': {str(k): v for k, v in self.codes.items()},
                'p99_ms': ms[int(len(ms) * 0.99)], 'max_ms': ms[-1]}


def migrate():
    """mysql/upgrade-expiry-order.sql on the filled previous table, timed,
    with first requests going through nginx meanwhile; the disk MariaDB's
    directory took at most, sampled every second"""
    start_nginx('off')
    peak, before = [dir_bytes()], dir_bytes()
    clients = Clients(CFG['migrate_clients'])
    t0 = time.time()
    done = threading.Event()

    def sample():
        while not done.wait(1):
            peak.append(dir_bytes())
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        sql_file(UPGRADE_SQL)
    finally:
        secs = time.time() - t0
        done.set()
        sampler.join()
        req = clients.finish()
    rec = dict(req, seconds=secs, disk_before=before,
               disk_peak=max(peak + [dir_bytes()]))
    log('migration: %.1f s, %d first requests during it, %d failed '
        '(%s), p99 %.0f ms, max %.0f ms' % (
            secs, req['requests'], req['failed'], req['codes'],
            req['p99_ms'], req['max_ms']))
    return rec


def measure(n, tpl, pid):
    log('size %d: filling' % n)
    times = {}
    t = time.time()
    if CFG['migrate']:
        use_schema()
    f = fill(n, tpl)
    times['fill'] = time.time() - t
    t = time.time()
    dirty = settle()
    times['settle'] = time.time() - t
    rec = {'size': n, 'rows': n or f['cold_keys'], 'fill': f,
           'dirty_after_settle': dirty, 'phases': {}, 'times': times}
    log('size %d: %d rows (%d cold), %.0f MiB on disk, filled in %.0f s '
        '(indexes %.0f s)' % (n, rec['rows'], f['cold_keys'],
                              table_bytes() / 2**20, f['seconds'],
                              f['index_seconds']))
    if CFG['migrate']:
        rec['table_bytes_before_migration'] = table_bytes()
        rec['migration'] = migrate()
        times['migration'] = rec['migration']['seconds']
        t = time.time()
        rec['dirty_after_migration'] = settle()
        times['settle_migration'] = time.time() - t
    rec['table_bytes'] = table_bytes()
    rec['disk_bytes'] = dir_bytes()
    rec['index_mib'] = index_mib()
    log('size %d: indexes (MiB) %s' % (n, rec['index_mib']))
    t = time.time()
    rec['warm_up'] = warm_up()
    start_nginx('off')
    if CFG['warm_traffic'] > 0:
        # the pages the fill's index builds left go the way a running
        # server's would: evicted by the pages first requests use
        r0 = status()['Innodb_buffer_pool_reads']
        bench.wrk(PORT, 'unique', [], CFG['warm_traffic'])
        rec['warm_up']['traffic_pool_reads'] = \
            status()['Innodb_buffer_pool_reads'] - r0
    times['warm_up'] = time.time() - t
    ph = rec['phases']
    t = time.time()
    ph['unique'] = phase('unique', 'unique', [], pid)
    # the threads spaced evenly along the walk, from a random start
    walk = [CFG['threads'], random.randrange(f['cold_keys'])]
    ph['cold'] = phase('cold-replay', 'cold',
                       ['cold', f['cold_keys'], 0] + walk, pid)
    walk[1] = random.randrange(f['cold_keys'])
    ph['mix'] = phase('mix', 'cold', ['cold', f['cold_keys'],
                                      CFG['mix_new_pct']] + walk, pid)
    times['requests'] = time.time() - t
    t = time.time()
    rec['listing'] = listing()
    times['listing'] = time.time() - t
    t = time.time()
    purge_rounds(n, pid, ph)
    times['purge_rounds'] = time.time() - t
    rec['errors'] = nginx_errors()
    log('size %d: times %s' % (n, ', '.join('%s %.0f s' % kv
                                            for kv in times.items())))
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
    t_run = time.time()
    pid = mariadbd_pid()
    pool = int(sql('SELECT @@innodb_buffer_pool_size'))
    meta = dict(CFG, buffer_pool_bytes=pool, mysql_port=MYSQL_PORT,
                port=PORT, loadavg_start=open('/proc/loadavg').read().strip(),
                date=time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()),
                mariadb=sql('SELECT VERSION()').strip(),
                flush_method=sql('SELECT @@innodb_flush_method').strip(),
                nice=os.nice(0))
    use_schema()
    meta['table_sql'] = os.environ.get('SCALE_TABLE_SQL')
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
        meta['seconds'] = time.time() - t_run
        with open(os.path.join(RESULTS, 'meta.json'), 'w') as f:
            json.dump(meta, f, indent=1, sort_keys=True)
    report()


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == 'report':
        report()
    else:
        main()

# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""`bench/scale.sh schemas`: the previous schema and the candidates of
bench/scale-schemas/ measured inside MariaDB, without nginx or the
network (stored procedures, bench/scale-schemas/common.sql), at each of
SCALE_SCHEMA_SIZES live keys: claim + completion pairs, replays of
random filled keys, the purge of a backlog, the operator listing, and
on the previous table the online ALTER to candidate (b) and the copy to a
16-byte-hash table.  build/bench-scale/results/schemas.json and
schemas.md."""

import json
import os
import statistics
import subprocess
import time

import scale            # bench/scale.py: its MariaDB, status, settle

SCHEMA_DIR = os.path.join(scale.BENCH, 'scale-schemas')
SIZES = [int(s) for s in
         os.environ.get('SCALE_SCHEMA_SIZES', '0 1000000').split()]
PAIRS = scale.bench.env_int('SCALE_PAIRS', 20000)
MIGRATION = scale.bench.env_int('SCALE_MIGRATION', 1)
BACKLOG = scale.bench.env_int('SCALE_SCHEMA_BACKLOG', 3600)
RESPONSE_BYTES = 300
# name -> (files after common.sql, hash bytes, their text changed how);
# "schema.sql" is mysql/schema.sql, made into the previous table by
# previous.sql; its table named sk_keys
SCHEMAS = {
    'previous': (('schema.sql', 'previous.sql', 'previous-fill.sql'), 32,
                 (('idempotency_keys', 'sk_keys'),)),
    'narrow': (('narrow.sql',), 16, ()),
    'timed': (('timed.sql',), 16, ()),
    'timed32': (('timed.sql',), 32, (
        ('key_hash     BINARY(16)', 'key_hash     BINARY(32)'),
        ('fingerprint  BINARY(16)', 'fingerprint  BINARY(32)'))),
}
# the previous table made into candidate (b), online (to-timed.sql), and
# copied into a table of 16-byte hashes (what (a) and (b) with a shorter
# hash need)
with open(os.path.join(SCHEMA_DIR, 'to-timed.sql')) as _f:
    ALTER_TIMED = _f.read().replace('idempotency_keys', 'sk_keys')
COPY_16 = ('CREATE TABLE sk_copy LIKE sk_keys; '
           'ALTER TABLE sk_copy MODIFY key_hash BINARY(16) NOT NULL, '
           'MODIFY fingerprint BINARY(16) NOT NULL; '
           'INSERT INTO sk_copy SELECT LEFT(key_hash, 16), state, owner, '
           'epoch, LEFT(fingerprint, 16), created_at, lease_until, '
           'expires_at, status, response FROM sk_keys ORDER BY key_hash; '
           'DROP TABLE sk_copy')


def session(hash_bytes, text):
    """text in one client session, with the variables the schema reads"""
    return scale.sql('SET @sk_hash_bytes = %d, @sk_response_bytes = %d; %s'
                     % (hash_bytes, RESPONSE_BYTES, text))


def load(name):
    files, _hb, subst = SCHEMAS[name]
    text, found = '', set()
    for f in ('common.sql',) + files:
        path = os.path.join(scale.ROOT, 'mysql', f) if f == 'schema.sql' \
            else os.path.join(SCHEMA_DIR, f)
        with open(path) as fh:
            part = fh.read()
        for a, b in subst:
            if a in part:
                found.add(a)
                part = part.replace(a, b)
        text += part + '\n'
    for a, _b in subst:
        if a not in found:
            scale.bench.die('%s: "%s" not found in %s' % (name, a, files))
    subprocess.run(['mariadb', '--no-defaults', '--protocol=socket',
                    '--socket=' + scale.MYSQL_SOCK, '-uroot', 'idempotency'],
                   input=text, text=True, check=True)


def disk_bytes():
    d = os.path.join(scale.MYSQL_DIR, 'data', 'idempotency')
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if f.startswith('sk_') and f.endswith('.ibd'))


def index_mib(hash_bytes):
    """each index's size (pages of 16 KiB), what the buffer pool must
    hold of it for a claim not to read from disk"""
    out = session(hash_bytes, "ANALYZE TABLE sk_keys; SELECT CONCAT("
                  "table_name, '.', index_name), stat_value * 16 / 1024 "
                  "FROM mysql.innodb_index_stats WHERE database_name = "
                  "'idempotency' AND table_name IN ('sk_keys', "
                  "'sk_responses') AND stat_name = 'size'")
    return {ln.split('\t')[0]: float(ln.split('\t')[1])
            for ln in out.splitlines() if ln.startswith('sk_')}


def timed(pid, hash_bytes, text, n):
    """text run once; per each of its n operations: wall µs, MariaDB CPU
    µs, buffer pool reads and bytes read from disk"""
    st0, cpu0, rb0 = scale.status(), scale.bench.cpu_seconds(pid), \
        scale.read_bytes(pid)
    t = time.time()
    out = session(hash_bytes, text)
    wall = time.time() - t
    st1, cpu1, rb1 = scale.status(), scale.bench.cpu_seconds(pid), \
        scale.read_bytes(pid)
    n = max(n, 1)
    return {'us': wall * 1e6 / n, 'seconds': wall,
            'mariadb_cpu_us': (cpu1 - cpu0) * 1e6 / n,
            'pool_reads': (st1['Innodb_buffer_pool_reads']
                           - st0['Innodb_buffer_pool_reads']) / n,
            'disk_read_kib': (rb1 - rb0) / 1024 / n, 'out': out.strip()}


def measure(name, n, pid):
    hb = SCHEMAS[name][1]
    load(name)
    t = time.time()
    session(hb, 'CALL sk_fill(%d, %d)' % (n, BACKLOG))
    rec = {'schema': name, 'size': n, 'hash_bytes': hb,
           'fill_seconds': time.time() - t, 'dirty': scale.settle(),
           'disk_bytes': disk_bytes(), 'index_mib': index_mib(hb)}
    rec['pairs'] = timed(pid, hb, 'CALL sk_pairs(%d)' % PAIRS, PAIRS)
    if n:
        rec['replays'] = timed(pid, hb, 'CALL sk_replays(%d, %d)'
                               % (PAIRS, n), PAIRS)
    backlog = int(session(hb, 'SELECT COUNT(*) FROM sk_keys '
                              'WHERE expires_at <= UTC_TIMESTAMP(3)'))
    p = timed(pid, hb, 'CALL sk_purge_all(1000); SELECT @sk_purged',
              1)
    rec['purge'] = {'backlog': backlog, 'removed': int(p['out'] or 0),
                    'seconds': p['seconds'],
                    'rows_per_s': int(p['out'] or 0) / max(p['seconds'],
                                                           1e-6)}
    # timed by the server: a client's start would count otherwise
    rec['listing_ms'] = statistics.median(float(session(
        hb, 'SET @t = SYSDATE(6); CALL sk_list(); '
            'SELECT TIMESTAMPDIFF(MICROSECOND, @t, SYSDATE(6)) / 1000'))
        for _ in range(3))
    if name == 'previous' and n and MIGRATION:
        rec['migration'] = {
            'copy_16_seconds': timed(pid, hb, COPY_16, 1)['seconds'],
            'alter_timed_seconds': timed(pid, hb, ALTER_TIMED, 1)['seconds'],
        }
    scale.log('schema %-8s %9d keys: %6.0f us/pair (CPU %4.0f, reads %.2f)'
              '%s  purge %6.0f rows/s  listing %7.1f ms  %4.0f MiB' % (
                  name, n, rec['pairs']['us'],
                  rec['pairs']['mariadb_cpu_us'], rec['pairs']['pool_reads'],
                  '  replay %4.0f us (reads %.2f)' % (
                      rec['replays']['us'], rec['replays']['pool_reads'])
                  if n else '', rec['purge']['rows_per_s'],
                  rec['listing_ms'], rec['disk_bytes'] / 2 ** 20))
    session(hb, 'DROP TABLE IF EXISTS sk_keys, sk_responses')
    return rec


def table(recs):
    empty = {r['schema']: r for r in recs if r['size'] == 0}
    L = ['| schema | live keys | on disk | µs / pair | of its empty '
         '| MariaDB CPU µs / pair | pool reads / pair | µs / replay '
         '| pool reads / replay | purge rows/s | listing ms |',
         '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|']
    for r in recs:
        e = empty.get(r['schema'])
        rp = r.get('replays')
        L.append('| %s | {:,} | {:,.0f} MiB | {:.0f} | %s | {:.0f} | {:.2f} '
                 '| %s | %s | {:,.0f} | {:.1f} |'.format(
                     r['size'], r['disk_bytes'] / 2 ** 20, r['pairs']['us'],
                     r['pairs']['mariadb_cpu_us'], r['pairs']['pool_reads'],
                     r['purge']['rows_per_s'], r['listing_ms'])
                 % (r['schema'],
                    '%.1f×' % (r['pairs']['us'] / e['pairs']['us'])
                    if e else '—',
                    '%.0f' % rp['us'] if rp else '—',
                    '%.2f' % rp['pool_reads'] if rp else '—'))
    for r in recs:
        if 'migration' in r:
            L.append('')
            L.append('Today\'s table of {:,} keys: the online ALTER to (b) '
                     'took {:.1f} s, the copy into 16-byte hashes {:.1f} s.'
                     .format(r['size'], r['migration']['alter_timed_seconds'],
                             r['migration']['copy_16_seconds']))
    return L


def main():
    os.makedirs(scale.RESULTS, exist_ok=True)
    pid = scale.mariadbd_pid()
    meta = {'buffer_pool_bytes': int(scale.sql(
        'SELECT @@innodb_buffer_pool_size')), 'pairs': PAIRS,
        'backlog_seconds': BACKLOG, 'response_bytes': RESPONSE_BYTES,
        'loadavg_start': open('/proc/loadavg').read().strip(),
        'date': time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()),
        'nice': os.nice(0)}
    recs = []
    names = os.environ.get('SCALE_SCHEMAS', ' '.join(SCHEMAS)).split()
    for n in SIZES:
        for name in names:
            recs.append(measure(name, n, pid))
            with open(os.path.join(scale.RESULTS, 'schemas.json'), 'w') as f:
                json.dump({'meta': meta, 'records': recs}, f, indent=1)
    meta['loadavg_end'] = open('/proc/loadavg').read().strip()
    with open(os.path.join(scale.RESULTS, 'schemas.json'), 'w') as f:
        json.dump({'meta': meta, 'records': recs}, f, indent=1)
    L = ['Schema prototypes, %s: buffer pool %.0f MiB, %d pairs, '
         '%d-byte records, nice %d, load average %s at the start, %s at '
         'the end.' % (meta['date'], meta['buffer_pool_bytes'] / 2 ** 20,
                       PAIRS, RESPONSE_BYTES, meta['nice'],
                       meta['loadavg_start'].split()[0],
                       meta['loadavg_end'].split()[0]), '']
    L += table(recs)
    with open(os.path.join(scale.RESULTS, 'schemas.md'), 'w') as f:
        f.write('\n'.join(L) + '\n')
    print('\n'.join(L))


if __name__ == '__main__':
    main()

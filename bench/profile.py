#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""Instruction counts per request of the module's hot paths, under
callgrind (deterministic, so before/after comparisons survive a noisy
machine), and what a first request costs the nginx workers under the
bench's load (`worker`).  Used for docs/benchmarks.md
("Instructions per request") and bench/NOTES.md.

    python3 bench/profile.py [REQUESTS]
    python3 bench/profile.py worker [SECONDS] [ROUNDS]

Runs nginx with one process (`master_process off; daemon off;`) under
valgrind --tool=callgrind with bench/nginx.conf.in, and the upstream of
bench/upstream.js.  For each path (a replay answered by the shm cache, a
replay answered by MySQL, a first request) it sends REQUESTS requests on
one keep-alive connection after a warm-up, with the counters zeroed before
and dumped after, and prints Ir per request: all of nginx, and inclusive
in the module's phase handler, its filters, OpenSSL (RAND, EVP) and
libmariadb.  Output files: build/bench/profile/callgrind.out.*, and
build/bench/profile/ir.json (the Ir per request of each path), which
bench/report.py puts in docs/benchmarks.md ("Instructions per request");
copy it to bench/profile-ir.json to commit the figures.
The callgrind counts are split by ELF object too (exclusive Ir: the
module, nginx, libmariadb, libcrypto, libc, the rest).

`worker` (bench/profile_worker.py): 2 workers of the bench's nginx,
first requests (bench/lua/unique.lua at the bench's wrk load) on plain
proxy_pass and on "module, MySQL only" with the store reached over
loopback TCP and over MariaDB's unix socket, in turn, ROUNDS [3] times
SECONDS [8] each; per request: the workers' task-clock and syscalls
(`perf stat`), the split of their samples by object and symbol (`perf
record -g`), and the CPU of MariaDB, the upstream and wrk.
Needs the services (scripts/services.sh start); uses ports
BENCH_PORT_BASE [18080] to +10.  The callgrind paths' first request
goes both ways too (the unix socket's server on BENCH_PORT_BASE + 5).
"""

import http.client
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (bench/run.py: paths, config rendering, clients)
import profile_worker  # noqa: E402

P = os.path.join(run.OUT, 'profile')
N = int(sys.argv[1]) if sys.argv[1:2] and sys.argv[1].isdigit() else 2000

PATHS = [
    # name, port, prefix of keys, replay (keys sent before)?
    ('shm replay', run.PORTS['shm'], 'pshm', True),
    ('mysql replay', run.PORTS['mysql'], 'pmy', True),
    ('first request (mysql)', run.PORTS['mysql'], 'pnew', False),
    ('first request (unix socket)', profile_worker.PORT_UNIX, 'punix', False),
    ('proxy_pass, no module', run.PORTS['proxy'], 'pprox', False),
]
KEYS = 200


def send(port, prefix, n, start=0, cycle=None):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    for i in range(n):
        k = (i % cycle) + 1 if cycle else start + i + 1
        st = run.post(c, '%s-%d' % (prefix, k))
        if st != 201:
            raise SystemExit('profile: status %d on port %d' % (st, port))
    c.close()


def inclusive(out_file, patterns):
    """inclusive Ir of the functions whose names match, from
    callgrind_annotate --inclusive=yes"""
    txt = subprocess.run(['callgrind_annotate', '--inclusive=yes',
                          '--threshold=100', out_file],
                         stdout=subprocess.PIPE, text=True).stdout
    total, found = 0, {p: 0 for p in patterns}
    for line in txt.splitlines():
        line = line.strip()
        if line.endswith('PROGRAM TOTALS'):
            total = int(line.split()[0].replace(',', ''))
            continue
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].replace(',', '').isdigit():
            continue
        ir = int(parts[0].replace(',', ''))
        fn = line.split(None, 2)[-1]
        for p in patterns:
            # the biggest matching entry (callers include callees)
            if (':' + p + ' ') in fn or fn.endswith(':' + p) \
                    or (':' + p + "'") in fn:
                found[p] = max(found[p], ir)
    return total, found


FUNCS = ['ngx_http_idempotency_handler', 'ngx_http_idempotency_body_filter',
         'ngx_http_idempotency_header_filter', 'RAND_bytes_ex',
         'EVP_DigestInit_ex', 'EVP_MD_CTX_free', 'EVP_MD_CTX_new',
         'ngx_http_idempotency_key_hash', 'ngx_http_idempotency_fingerprint',
         'ngx_http_idempotency_cache_get', 'mysql_real_query',
         'ngx_http_idempotency_mysql_process']


def objects(out_file):
    """exclusive Ir per ELF object, from the raw callgrind file (ob=
    lines name the object of the fn= lines that follow; cost lines
    after calls= belong to the callee's inclusive cost and are skipped)"""
    names, cur, tot, skip = {}, '?', {}, False
    def name(v):
        # "(N) name" defines N, "(N)" refers to it; ob= and cob= share them
        v = v.strip()
        if v.startswith('('):
            i = v.index(')')
            if v[i + 1:].strip():
                names[v[:i + 1]] = v[i + 1:].strip()
            v = names.get(v[:i + 1], v)
        return v

    for line in open(out_file):
        if line.startswith('cob='):
            name(line[4:])
        elif line.startswith('ob='):
            cur = name(line[3:])
        elif line.startswith('calls='):
            skip = True
        elif line[:1].isdigit() or line[:1] in '+-*':
            if skip:
                skip = False
                continue
            parts = line.split()
            if len(parts) >= 2:
                tot[cur] = tot.get(cur, 0) + int(parts[1])
    return tot


def object_group(path):
    b = os.path.basename(path)
    for key, g in (('idempotency', 'module'), ('nginx', 'nginx'),
                   ('mariadb', 'libmariadb'), ('crypto', 'libcrypto'),
                   ('ssl', 'libcrypto'), ('libc.', 'libc'),
                   ('hiredis', 'hiredis')):
        if key in b:
            return g
    return 'other'


def save_ir(results):
    """build/bench/profile/ir.json, for bench/report.py"""
    rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                         cwd=run.ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout.strip()
    rec = {'source': '`bench/profile.py %d` at %s, %s' % (
               N, rev or '?', time.strftime('%Y-%m-%d %H:%M UTC',
                                             time.gmtime())),
           'requests': N,
           'paths': [{'name': name, 'ir': round(total / N),
                      'objects': {g: round(v / N) for g, v in byob.items()}}
                     for name, total, _found, byob in results]}
    with open(os.path.join(P, 'ir.json'), 'w') as f:
        json.dump(rec, f, indent=1)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == 'worker':
        return profile_worker.main(sys.argv[2:])
    os.makedirs(P, exist_ok=True)
    run.PREFIX = P
    run.CFG['workers'] = 1
    run.render_nginx('master_process off; daemon off;')
    profile_worker.add_unix_server(P)
    run.mysql_prepare_table()
    run.reset_stores()
    up = subprocess.Popen(['node', 'upstream.js', str(run.PORTS['upstream'])],
                          cwd=run.BENCH, stdout=subprocess.DEVNULL)
    run.wait_port(run.PORTS['upstream'], 'upstream')
    vg = subprocess.Popen(
        ['valgrind', '--tool=callgrind', '--dump-instr=no',
         '--callgrind-out-file=' + os.path.join(P, 'callgrind.out.%p'),
         run.NGINX_BIN, '-p', P + '/', '-c', 'nginx.conf'],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(P, 'vg.log'),
                                               'w'))
    try:
        run.wait_port(run.PORTS['shm'], 'nginx under valgrind', 120)
        results = []
        for name, port, prefix, replay in PATHS:
            if replay:
                send(port, prefix, KEYS)
                send(port, prefix, KEYS, cycle=KEYS)     # warm
            else:
                send(port, prefix + 'w', KEYS)            # warm
            time.sleep(0.5)
            subprocess.run(['callgrind_control', '-z', str(vg.pid)],
                           stdout=subprocess.DEVNULL, check=True)
            if replay:
                send(port, prefix, N, cycle=KEYS)
            else:
                send(port, prefix, N)
            time.sleep(1)          # completions of the last requests
            tag = name.split()[0] + ('-' + name.split()[1]
                                     if len(name.split()) > 1 else '')
            subprocess.run(['callgrind_control', '-d', tag, str(vg.pid)],
                           stdout=subprocess.DEVNULL, check=True)
            time.sleep(0.5)
            dumps = sorted((f for f in os.listdir(P)
                            if f.startswith('callgrind.out.%d.' % vg.pid)),
                           key=lambda f: os.path.getmtime(
                               os.path.join(P, f)))
            total, found = inclusive(os.path.join(P, dumps[-1]), FUNCS)
            byob = {}
            for ob, ir in objects(os.path.join(P, dumps[-1])).items():
                g = object_group(ob)
                byob[g] = byob.get(g, 0) + ir
            results.append((name, total, found, byob))
        print('Ir per request (N=%d, callgrind, 1 nginx process)' % N)
        for name, total, found, byob in results:
            print('%-24s all nginx %8.0f' % (name, total / N))
            for f in FUNCS:
                if found[f]:
                    print('    %-40s %8.0f' % (f, found[f] / N))
            print('    exclusive, by object: ' + ', '.join(
                '%s %.0f' % (g, v / N) for g, v in
                sorted(byob.items(), key=lambda kv: -kv[1])))
        save_ir(results)
    finally:
        vg.terminate()
        try:
            vg.wait(30)
        except subprocess.TimeoutExpired:
            vg.kill()
        up.terminate()


if __name__ == '__main__':
    main()

# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""`python3 bench/profile.py worker [SECONDS] [ROUNDS]`: what a first
request costs the nginx workers, per component, against plain proxy_pass
(bench/NOTES.md, "What a first request costs the worker").

The bench's nginx (bench/nginx.conf.in, BENCH_WORKERS workers) and
upstream, the bench's wrk load of fresh keys (bench/lua/unique.lua,
BENCH_THREADS x BENCH_CONNECTIONS).  Each round measures plain
proxy_pass, "module, MySQL only" over loopback TCP (the bench's server)
and the same store reached by MariaDB's unix socket (a server added to
the rendered config, see add_unix_server; the order rotates), twice
each:

  1. `perf stat` on the workers: task-clock and syscalls by name (the
     syscalls tracepoints), while /proc gives the CPU of MariaDB, the
     upstream and wrk over the same SECONDS;
  2. `perf record -g` (cpu-clock) on the workers, for the share of their
     samples by object (the module, nginx, libmariadb, libcrypto, libc,
     the kernel) and by symbol.

Per request = over wrk's requests of that measurement.  Prints the
medians over the rounds and every round's worker figures; raw records
in build/bench/profile/worker.json,
perf's reports in build/bench/profile/worker-*.txt.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import time

import run

P = os.path.join(run.OUT, 'profile')
SYSTEMS = ('proxy', 'mysql', 'unix')
LABEL = {'proxy': 'plain proxy_pass', 'mysql': 'module, MySQL over TCP',
         'unix': 'module, MySQL over unix socket'}
# the unix-socket server: the first free offset after the bench's five
PORT_UNIX = run.PORT_BASE + 5
UNIX_CONF = """
    idempotency_store bench_mysql_unix mysql=unix:%s
                      user=idem password=idem-secret database=idempotency
                      table=%s;

    server {
        listen 127.0.0.1:%d;
        location / {
            idempotency bench_mysql_unix;
            proxy_pass http://bench_upstream;
        }
    }
}
"""
SYSCALLS = ('read', 'recvfrom', 'readv', 'write', 'writev', 'sendto',
            'sendmsg', 'recvmsg', 'epoll_wait', 'epoll_ctl', 'accept4',
            'close', 'getpid', 'futex', 'poll', 'ioctl', 'setsockopt',
            'socket', 'connect', 'getsockopt', 'gettimeofday',
            'clock_gettime')
GROUPS = (('[kernel', 'kernel'), ('idempotency', 'module'),
          ('nginx', 'nginx'), ('mariadb', 'libmariadb'),
          ('crypto', 'libcrypto'), ('libc', 'libc'))


def add_unix_server(prefix):
    """Adds to PREFIX/nginx.conf (rendered by run.render_nginx) a store
    that reaches the services' MariaDB by its unix socket, as a MariaDB
    on the same host normally is, and a server on PORT_UNIX that uses it
    in front of the same upstream."""
    conf = os.path.join(prefix, 'nginx.conf')
    with open(conf) as f:
        text = f.read().rstrip()
    assert text.endswith('}'), conf
    with open(conf, 'w') as f:
        f.write(text[:-1] + UNIX_CONF % (run.MYSQL_SOCK, run.TABLE,
                                         PORT_UNIX))


def port_of(system):
    return PORT_UNIX if system == 'unix' else run.PORTS[system]


def loadavg():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def perf_bg(args, pids, out):
    return subprocess.Popen(['perf'] + args + ['-p', ','.join(map(str, pids))],
                            stdout=subprocess.DEVNULL,
                            stderr=open(out, 'w'))


def perf_end(p):
    p.send_signal(signal.SIGINT)
    p.wait(60)


def others():
    return {'mariadb': run.cpu_seconds(run.service_pid('mysql.pid') or 0),
            'upstream': run.cpu_seconds(run.node_pids['upstream']),
            'wrk': sum(run.resource.getrusage(
                run.resource.RUSAGE_CHILDREN)[:2]),
            'busy': run.machine_busy()}


def stat_pass(system, secs, tag):
    pids = run.nginx_workers()
    out = os.path.join(P, 'worker-stat-%s.txt' % tag)
    p = perf_bg(['stat', '-x', ',', '-e', 'task-clock'], pids, out)
    time.sleep(0.3)
    o0 = others()
    res = run.wrk(port_of(system), 'unique', [], secs)
    o1 = others()
    perf_end(p)
    n = max(res['requests'], 1)
    rec = {'rps': res['rps'], 'requests': n, 'p99_ms': res['p99_us'] / 1e3,
           'cpu_us': {k: (o1[k] - o0[k]) * 1e6 / n for k in o0}}
    rec['busy_cpus'] = (o1['busy'] - o0['busy']) / (res['duration_us'] / 1e6)
    rec['task_clock_us'] = perf_counts(out)['task-clock'] * 1e3 / n
    return rec


def perf_counts(out):
    """perf stat -x , output: {event: value}"""
    c = {}
    for line in open(out):
        f = line.strip().split(',')
        if len(f) >= 3 and f[0].replace('.', '').isdigit():
            c[f[2]] = float(f[0])
    return c


def record_pass(system, secs, tag):
    pids = run.nginx_workers()
    data = os.path.join(P, 'worker-%s.data' % tag)
    p = perf_bg(['record', '-e', 'cpu-clock', '-F', '999', '-g', '-o', data],
                pids, os.path.join(P, 'worker-record-%s.log' % tag))
    cnt = os.path.join(P, 'worker-syscalls-%s.txt' % tag)
    ev = ['raw_syscalls:sys_enter'] + [
        'syscalls:sys_enter_' + s for s in SYSCALLS]
    q = perf_bg(['stat', '-x', ',', '-e', ','.join(ev)], pids, cnt)
    time.sleep(0.3)
    res = run.wrk(port_of(system), 'unique', [], secs)
    perf_end(q)
    perf_end(p)
    n = max(res['requests'], 1)
    calls = {k.split('sys_enter_')[-1].replace('raw_syscalls:', 'all '):
             v / n for k, v in perf_counts(cnt).items() if v}
    rep = {}
    for sort, children in (('dso', False), ('dso,sym', False),
                           ('sym', True)):
        rep[sort] = subprocess.run(
            ['perf', 'report', '-i', data, '--stdio',
             '--children' if children else '--no-children',
             '--sort', sort, '--percent-limit', '0.3', '-g', 'none'],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True).stdout
        with open(os.path.join(P, 'worker-%s-%s.txt' % (
                tag, sort.replace(',', '-'))), 'w') as f:
            f.write(rep[sort])
    share = {}
    for line in rep['dso'].splitlines():
        f = line.split()
        if len(f) >= 2 and f[0].endswith('%'):
            g = next((g for k, g in GROUPS if k in f[1]), 'other')
            share[g] = share.get(g, 0) + float(f[0][:-1])
    # the kernel's samples by the syscall (or softirq) they ran under:
    # inclusive shares of the entry points (a VM puts most of the kernel's
    # self samples on pvm_irq_enable, which says nothing by itself)
    kern = {}
    for line in rep['sym'].splitlines():
        f = line.split()
        if len(f) >= 4 and f[0].endswith('%') and f[2] == '[k]' and (
                f[3].startswith('__x64_sys_') or f[3] in (
                    'do_writev', 'net_rx_action', 'do_softirq', 'schedule',
                    'asm_sysvec_apic_timer_interrupt')):
            kern[f[3].replace('__x64_sys_', '').replace(
                'do_writev', 'writev')] = float(f[0][:-1])
    os.unlink(data)
    return {'rps': res['rps'], 'requests': n, 'share': share,
            'kernel_incl': kern, 'syscalls': calls}


def median_of(recs, path):
    vals = []
    for r in recs:
        v = r
        for k in path:
            v = v.get(k, 0) if isinstance(v, dict) else 0
        vals.append(v)
    return statistics.median(vals)


def main(argv):
    secs = int(argv[0]) if argv else 8
    rounds = int(argv[1]) if len(argv) > 1 else 3
    os.makedirs(P, exist_ok=True)
    run.PREFIX = os.path.join(P, 'nginx')
    run.render_nginx()
    add_unix_server(run.PREFIX)
    run.mysql_prepare_table()
    run.reset_stores()
    run.start_node('upstream', ['upstream.js', str(run.PORTS['upstream'])],
                   run.PORTS['upstream'])
    run.nginx('start')
    recs = []
    try:
        run.wait_port(PORT_UNIX, 'nginx')
        for r in range(rounds):
            order = SYSTEMS[r % 3:] + SYSTEMS[:r % 3]
            if r // 3 % 2:
                order = order[::-1]
            for s in order:
                run.wrk(port_of(s), 'unique', [], 1)            # warm-up
                tag = '%s-%d' % (s, r + 1)
                la = loadavg()
                st = stat_pass(s, secs, tag)
                rc = record_pass(s, secs, tag)
                recs.append({'round': r + 1, 'system': s, 'loadavg': la,
                             'stat': st, 'record': rc})
                run.log('round %d %-5s %7.0f req/s  worker %.1f us/req  '
                        'syscalls %.2f/req  load %s' % (
                            r + 1, s, st['rps'], st['task_clock_us'],
                            rc['syscalls'].get('all sys_enter', 0), la))
    finally:
        run.nginx('stop')
        for p in run.procs:
            p.terminate()
    with open(os.path.join(P, 'worker.json'), 'w') as f:
        json.dump(recs, f, indent=1)
    report(recs)


def report(recs):
    by = {s: [r for r in recs if r['system'] == s] for s in SYSTEMS}
    tc = {s: median_of([x['stat'] for x in by[s]], ['task_clock_us'])
          for s in SYSTEMS}
    print('\nmedians of %d rounds; load average at the start of each: %s' % (
        len(by['mysql']), '; '.join(r['loadavg'] for r in recs)))
    print('| per first request | %s |' % ' | '.join(LABEL[s]
                                                   for s in SYSTEMS))
    print('|---|' + '--:|' * len(SYSTEMS))

    def row(label, vals):
        print('| %s | %s |' % (label, ' | '.join(vals)))

    def med(kind, path, fmt):
        return [fmt % median_of([x[kind] for x in by[s]], path)
                for s in SYSTEMS]
    row('req/s', ['{:,.0f}'.format(median_of([x['stat'] for x in by[s]],
                                             ['rps'])) for s in SYSTEMS])
    row('worker task-clock µs', med('stat', ['task_clock_us'], '%.1f'))
    row('× plain proxy_pass', ['%.2f×' % (tc[s] / tc['proxy'])
                               for s in SYSTEMS])
    for k in ('mariadb', 'upstream', 'wrk'):
        row(k + ' CPU µs (/proc)', med('stat', ['cpu_us', k], '%.1f'))
    row('busy CPUs', med('stat', ['busy_cpus'], '%.2f'))
    names = sorted({k for r in recs for k in r['record']['syscalls']},
                   key=lambda k: (k != 'all sys_enter', k))
    for k in names:
        row('syscalls: ' + k, med('record', ['syscalls', k], '%.2f'))
    names = sorted({k for r in recs for k in r['record']['kernel_incl']})
    for k in names:
        row('kernel, under ' + k + ': % of samples',
            med('record', ['kernel_incl', k], '%.1f'))
    for g in ('module', 'nginx', 'libmariadb', 'libcrypto', 'libc',
              'kernel', 'other'):
        sh = {s: median_of([x['record'] for x in by[s]], ['share', g])
              for s in SYSTEMS}
        row(g + ': % of samples (µs)', ['%.1f %% (%.1f)' % (
            sh[s], sh[s] * tc[s] / 100) for s in SYSTEMS])
    print('\nevery round: worker task-clock µs per first request '
          '(× that round\'s plain proxy_pass), load average at its start')
    for r in sorted({x['round'] for x in recs}):
        rr = {x['system']: x for x in recs if x['round'] == r}
        base = rr['proxy']['stat']['task_clock_us']
        print('round %d: %s' % (r, '; '.join(
            '%s %.1f (%.2f×, load %s)' % (
                s, rr[s]['stat']['task_clock_us'],
                rr[s]['stat']['task_clock_us'] / base,
                rr[s]['loadavg'].split()[0]) for s in SYSTEMS)))
    print('median of the rounds\' ratios: %s' % '; '.join(
        '%s %.2f×' % (s, statistics.median(
            x['stat']['task_clock_us'] / next(
                y['stat']['task_clock_us'] for y in recs
                if y['round'] == x['round'] and y['system'] == 'proxy')
            for x in by[s])) for s in SYSTEMS if s != 'proxy'))


if __name__ == '__main__':
    # `python3 bench/profile_worker.py report`: the report again, from
    # build/bench/profile/worker.json
    with open(os.path.join(P, 'worker.json')) as f:
        report(json.load(f))

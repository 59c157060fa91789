#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""Driver of `make bench` (python3 stdlib only).  See bench/run.sh for
the environment variables and docs/benchmarks.md for what is measured."""

import http.client
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, 'bench')
OUT = os.path.join(ROOT, 'build', 'bench')
RESULTS = os.path.join(OUT, 'results')
PREFIX = os.path.join(OUT, 'nginx')
DOC = os.path.join(ROOT, 'docs', 'benchmarks.md')
PNG = os.path.join(ROOT, 'docs', 'benchmarks.png')


def env_int(name, default):
    return int(os.environ.get(name, default))


CFG = {
    'rounds': env_int('BENCH_ROUNDS', 3),
    'duration': env_int('BENCH_DURATION', 10),
    'connections': env_int('BENCH_CONNECTIONS', 64),
    'threads': env_int('BENCH_THREADS', 2),
    'rss_requests': env_int('BENCH_RSS_REQUESTS', 1000000),
    'keys': env_int('BENCH_KEYS', 1000),
    'burst': env_int('BENCH_BURST', 50),
    'burst_delay_ms': env_int('BENCH_BURST_DELAY_MS', 200),
    'warmup': env_int('BENCH_WARMUP', 1),
    'workers': env_int('BENCH_WORKERS', 2),
    'mix_new_pct': 10,
}

MYSQL_PORT = env_int('IDEM_MYSQL_PORT', 3307)
REDIS_PORT = env_int('IDEM_REDIS_PORT', 6380)
MYSQL_SOCK = os.path.join(ROOT, 'build', 'services', 'mysql.sock')
NGINX_BIN = os.environ.get('NGINX_BIN', '/usr/sbin/nginx')
MODULE_SO = os.path.join(ROOT, 'build', 'ngx_http_idempotency_module.so')
REDIS_DB_MODULE = 7
REDIS_DB_PEERS = 8
TABLE = 'bench_keys'

# BENCH_PORT_BASE [18080]: every port below is that plus an offset, so
# that two checkouts on one machine can bench side by side
PORT_BASE = env_int('BENCH_PORT_BASE', 18080)
PORTS = {k: PORT_BASE + v for k, v in {
    'return': 0, 'proxy': 1, 'mysql': 2, 'redis': 3, 'shm': 4,
    'webhook': 6, 'webhook-sig': 7, 'upstream': 10, 'express-idempotency': 11, 'node-idempotency': 12,
    'plain-express': 13,
}.items()}

# system id -> (label, port, workloads, where executions are counted)
SYSTEMS = [
    ('return', 'nginx `return` (replay limit)', ['return'], None),
    ('proxy', 'nginx `proxy_pass`, no module (first-request limit)',
     ['unique', 'unique-c1', 'hook2k', 'hook64k'], 'upstream'),
    ('mysql', 'module, MySQL only', ['unique', 'unique-c1', 'replay', 'mix',
                                     'hook2k', 'hook64k'], 'upstream'),
    # webhook deliveries (bench/lua/webhook.lua): the key a nested member
    # of a 2 KB or 64 KB JSON body, without and with the Stripe signature
    # check; proxy and mysql above take the same requests (the key as a
    # header there)
    ('webhook', 'module, key json=data.object.id', ['hook2k', 'hook64k'],
     'upstream'),
    ('webhook-sig', 'module, key json=data.object.id, '
     'idempotency_signature stripe', ['hook2k', 'hook64k'], 'upstream'),
    # the same nginx server as 'mysql', measured with
    # innodb_flush_log_at_trx_commit=1 (see flush_log())
    ('mysql-flush1', 'module, MySQL only, flush=1', ['unique'], 'upstream'),
    ('redis', 'module + Redis', ['replay', 'mix'], 'upstream'),
    ('shm', 'module + shared-memory cache', ['replay', 'mix'], 'upstream'),
    ('express-idempotency',
     'express + express-idempotency + Redis adapter',
     ['unique', 'unique-c1', 'replay'], 'self'),
    ('node-idempotency', 'express + @node-idempotency/core + Redis adapter',
     ['unique', 'unique-c1', 'replay'], 'self'),
    # the peers' baseline: their route without the middleware
    ('plain-express', 'plain express, no middleware (the peers\' limit)',
     ['unique', 'unique-c1'], 'self'),
]
LABEL = {s[0]: s[1] for s in SYSTEMS}
MODULE_SYSTEMS = ('mysql', 'mysql-flush1', 'redis', 'shm', 'webhook',
                  'webhook-sig')
# the webhook workloads' body sizes
HOOK_SIZE = {'hook2k': 2048, 'hook64k': 65536}
# BENCH_ONLY="proxy:hook2k webhook:hook2k ...": only these measurements,
# no burst, RSS run or docs (a summary is printed instead)
ONLY = os.environ.get('BENCH_ONLY', '').split()
PEERS = ('express-idempotency', 'node-idempotency')
# systems served by their own node process (the rest: nginx in front of
# the upstream)
NODE_SYSTEMS = PEERS + ('plain-express',)
# a system measured on another system's server
SERVER = {'mysql-flush1': 'mysql'}
MYSQL_VARS = ('Questions', 'Com_select', 'Com_insert', 'Com_update',
              'Com_delete', 'Com_stmt_execute', 'Com_stmt_prepare')
# innodb_flush_log_at_trx_commit as scripts/services.sh starts MariaDB;
# 'mysql-flush1' runs with 1 and puts this back after its measurement
FLUSH_DEFAULT = 2

BODY = b'{"amount":4200,"currency":"EUR","customer":"cus_42"}'

procs = []
node_pids = {}
flush_changed = False
CLK_TCK = os.sysconf('SC_CLK_TCK')


def log(msg):
    print('bench: ' + msg, flush=True)


def die(msg):
    print('bench: error: ' + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def run(cmd, check=True, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, **kw)
    if check and r.returncode != 0:
        die('%s failed (%d): %s' % (' '.join(cmd), r.returncode,
                                     r.stderr.strip()[-2000:]))
    return r.stdout


# ------------------------------------------------------------ services

def mysql_root(sql, db='idempotency'):
    return run(['mariadb', '--no-defaults', '--protocol=socket',
                '--socket=' + MYSQL_SOCK, '-uroot', '-N', '-B', db,
                '-e', sql])


def mysql_prepare_table(schema=None):
    with open(schema or os.path.join(ROOT, 'mysql', 'schema.sql')) as f:
        ddl = f.read().replace('idempotency_keys', TABLE)
    mysql_root('DROP TABLE IF EXISTS %s; %s' % (TABLE, ddl))


def mysql_status():
    out = mysql_root("SHOW GLOBAL STATUS WHERE Variable_name IN (%s)" %
                     ','.join("'%s'" % v for v in MYSQL_VARS))
    st = {}
    for line in out.splitlines():
        k, v = line.split('\t')
        st[k] = int(v)
    return st


def redis_cli(*args, db=None):
    cmd = ['redis-cli', '-h', '127.0.0.1', '-p', str(REDIS_PORT)]
    if db is not None:
        cmd += ['-n', str(db)]
    return run(cmd + list(args))


def redis_commandstats():
    st = {}
    for line in redis_cli('INFO', 'commandstats').splitlines():
        m = re.match(r'cmdstat_([^:]+):calls=(\d+)', line)
        if m:
            st[m.group(1)] = int(m.group(2))
    return st


def flush_log_at_trx_commit():
    return int(mysql_root(
        'SELECT @@global.innodb_flush_log_at_trx_commit').strip())


def flush_log(value):
    """SET GLOBAL innodb_flush_log_at_trx_commit; stop_all() puts back
    FLUSH_DEFAULT if a run ends while it is changed."""
    global flush_changed
    if value != FLUSH_DEFAULT:
        flush_changed = True
    mysql_root('SET GLOBAL innodb_flush_log_at_trx_commit=%d' % value)
    if value == FLUSH_DEFAULT:
        flush_changed = False


def port_of(system):
    return PORTS[SERVER.get(system, system)]


def reset_stores():
    mysql_root('TRUNCATE TABLE %s' % TABLE)
    redis_cli('FLUSHDB', db=REDIS_DB_MODULE)
    redis_cli('FLUSHDB', db=REDIS_DB_PEERS)


# ----------------------------------------------------------- processes

def port_open(port):
    s = socket.socket()
    s.settimeout(0.2)
    try:
        s.connect(('127.0.0.1', port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def wait_port(port, what, secs=20):
    t = time.time() + secs
    while time.time() < t:
        if port_open(port):
            return
        time.sleep(0.1)
    die('%s does not listen on 127.0.0.1:%d' % (what, port))


def kill_pidfile(path):
    try:
        with open(path) as f:
            pid = int(f.read().strip())
        cmdline = open('/proc/%d/cmdline' % pid, 'rb').read()
        if b'bench' in cmdline:
            os.kill(pid, signal.SIGTERM)
            time.sleep(0.3)
    except (OSError, ValueError):
        pass
    try:
        os.unlink(path)
    except OSError:
        pass


def start_node(name, args, port):
    pidfile = os.path.join(OUT, name + '.pid')
    kill_pidfile(pidfile)
    if port_open(port):
        die('port %d (for %s) is already in use' % (port, name))
    logf = open(os.path.join(OUT, name + '.log'), 'w')
    p = subprocess.Popen(['node'] + args, stdout=logf, stderr=logf,
                         stdin=subprocess.DEVNULL, cwd=BENCH)
    procs.append(p)
    node_pids[name] = p.pid
    with open(pidfile, 'w') as f:
        f.write(str(p.pid))
    wait_port(port, name)
    return p


def render_nginx(extra_main='', webhooks=True):
    os.makedirs(PREFIX, exist_ok=True)
    subst = {
        'PREFIX': PREFIX, 'MODULE': MODULE_SO,
        'WORKERS': str(CFG['workers']), 'EXTRA_MAIN': extra_main,
        'UPSTREAM_PORT': str(PORTS['upstream']),
        'MYSQL_PORT': str(MYSQL_PORT), 'REDIS_PORT': str(REDIS_PORT),
        'REDIS_DB': str(REDIS_DB_MODULE),
        'PORT_RETURN': str(PORTS['return']), 'PORT_PROXY': str(PORTS['proxy']),
        'PORT_MYSQL': str(PORTS['mysql']), 'PORT_REDIS': str(PORTS['redis']),
        'PORT_SHM': str(PORTS['shm']),
        'PORT_WEBHOOK': str(PORTS['webhook']),
        'PORT_WEBHOOK_SIG': str(PORTS['webhook-sig']),
    }
    # the Stripe signing secret bench/lua/webhook.lua signs with
    with open(os.path.join(PREFIX, 'stripe.secret'), 'w') as f:
        f.write('whsec_bench_0123456789abcdef0123456789\n')
    with open(os.path.join(BENCH, 'nginx.conf.in')) as f:
        conf = f.read()
    if not webhooks:
        conf = re.sub(r'\n *# @WEBHOOKS_BEGIN@\n.*# @WEBHOOKS_END@\n', '\n',
                      conf, flags=re.S)
    for k, v in subst.items():
        conf = conf.replace('@%s@' % k, v)
    with open(os.path.join(PREFIX, 'nginx.conf'), 'w') as f:
        f.write(conf)


def nginx(cmd):
    env = dict(os.environ, NGINX_BIN=NGINX_BIN)
    r = subprocess.run([os.path.join(ROOT, 'scripts', 'nginx.sh'), cmd, PREFIX],
                       env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        die('nginx %s failed: %s' % (cmd, r.stdout))


def nginx_workers():
    try:
        master = int(open(os.path.join(PREFIX, 'nginx.pid')).read().strip())
    except (OSError, ValueError):
        return []
    pids = []
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            stat = open('/proc/%s/stat' % d).read()
            cmd = open('/proc/%s/cmdline' % d, 'rb').read()
        except OSError:
            continue
        ppid = int(stat.rsplit(')', 1)[1].split()[1])
        if ppid == master and b'worker process' in cmd:
            pids.append(int(d))
    return sorted(pids)


def rss_kib(pid):
    try:
        for line in open('/proc/%d/status' % pid):
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def workers_rss():
    return {str(p): rss_kib(p) for p in nginx_workers()}


def cpu_seconds(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, ValueError, IndexError):
        return 0.0


def service_pid(name):
    try:
        with open(os.path.join(ROOT, 'build', 'services', name)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def cpu_snapshot(system):
    """CPU seconds used so far by each component a system involves"""
    node = node_pids.get(system if system in NODE_SYSTEMS else 'upstream')
    snap = {
        'nginx': sum(cpu_seconds(p) for p in nginx_workers()),
        'node': cpu_seconds(node) if node else 0.0,
        'mariadb': cpu_seconds(service_pid('mysql.pid') or 0),
        'redis': cpu_seconds(service_pid('redis.pid') or 0),
    }
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    snap['wrk'] = ru.ru_utime + ru.ru_stime
    return snap


def machine_busy():
    """CPU seconds the whole machine has been busy so far, all CPUs and
    every process, exited ones too (/proc/stat: user, nice, system, irq,
    softirq, steal)"""
    with open('/proc/stat') as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / CLK_TCK


def start_all():
    os.makedirs(OUT, exist_ok=True)
    if not os.path.exists(MODULE_SO):
        die('%s missing (make build)' % MODULE_SO)
    if not os.path.isdir(os.path.join(BENCH, 'node', 'node_modules')):
        die('bench/node/node_modules missing (bench/setup.sh)')
    for tool in ('wrk', 'node', 'mariadb', 'redis-cli'):
        if not shutil.which(tool):
            die('%s not found (bench/setup.sh, make deps)' % tool)
    mysql_prepare_table()
    # in case a killed run left the flush=1 setting behind
    flush_log(FLUSH_DEFAULT)
    reset_stores()
    redis_url = 'redis://127.0.0.1:%d/%d' % (REDIS_PORT, REDIS_DB_PEERS)
    start_node('upstream', ['upstream.js', str(PORTS['upstream'])],
               PORTS['upstream'])
    for peer in PEERS:
        start_node(peer, ['node/peer-%s.js' % peer, str(PORTS[peer]),
                          redis_url], PORTS[peer])
    start_node('plain-express', ['node/plain-express.js',
                                 str(PORTS['plain-express'])],
               PORTS['plain-express'])
    render_nginx()
    nginx('start')
    for s in ('return', 'proxy', 'mysql', 'redis', 'shm', 'webhook',
              'webhook-sig'):
        wait_port(PORTS[s], 'nginx')


def stop_all():
    if flush_changed:
        try:
            flush_log(FLUSH_DEFAULT)
            log('innodb_flush_log_at_trx_commit set back to %d' %
                FLUSH_DEFAULT)
        except SystemExit:
            pass
    try:
        nginx('stop')
    except SystemExit:
        pass
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
    for name in ('upstream',) + NODE_SYSTEMS:
        try:
            os.unlink(os.path.join(OUT, name + '.pid'))
        except OSError:
            pass


# ------------------------------------------------------------- clients

def post(conn, key, extra=None):
    h = {'Content-Type': 'application/json', 'Idempotency-Key': key}
    if extra:
        h.update(extra)
    conn.request('POST', '/orders', body=BODY, headers=h)
    r = conn.getresponse()
    r.read()
    return r.status


def prewarm(port, prefix, n, nthreads=8):
    """Send PREFIX-1 .. PREFIX-n once each, so that they can be replayed."""
    bad = []

    def work(idx):
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
        for k in range(idx + 1, n + 1, nthreads):
            st = post(c, '%s-%d' % (prefix, k))
            if st != 201:
                bad.append(st)
        c.close()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if bad:
        die('prewarm on port %d: %d responses were not 201 (%s)' %
            (port, len(bad), sorted(set(bad))))


def counter_port(system):
    where = dict((s[0], s[3]) for s in SYSTEMS)[system]
    if where is None:
        return None
    return PORTS['upstream'] if where == 'upstream' else port_of(system)


def upstream_stats(port, key=None):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    c.request('GET', '/__stats' + ('?key=' + key if key else ''))
    r = c.getresponse()
    d = json.loads(r.read())
    c.close()
    return d


def wrk(port, script, args, duration, connections=None, threads=None):
    cmd = ['wrk', '-t', str(threads or CFG['threads']),
           '-c', str(connections or CFG['connections']),
           '-d', '%ds' % duration, '--timeout', '5s',
           '-s', os.path.join(BENCH, 'lua', script + '.lua'),
           'http://127.0.0.1:%d/orders' % port]
    if args:
        cmd += ['--'] + [str(a) for a in args]
    out = run(cmd)
    dist = None
    for line in out.splitlines():
        if line.startswith('BENCHDIST '):
            dist = [[float(v) for v in kv.split(':')]
                    for kv in line[10:].split()]
    for line in out.splitlines():
        if line.startswith('BENCH '):
            d = {k: float(v) for k, v in
                 (kv.split('=') for kv in line[6:].split())}
            d['rps'] = d['requests'] / (d['duration_us'] / 1e6)
            d['socket_errors'] = (d['err_connect'] + d['err_read'] +
                                  d['err_write'] + d['err_timeout'])
            # [[percentile, µs], ...] from 0 (the fastest) to 100 (max)
            d['dist'] = dist
            return d
    die('no BENCH line in wrk output:\n' + out)


# ---------------------------------------------------------- measurement

def measure(rnd, system, workload):
    if system != 'mysql-flush1':
        return measure_one(rnd, system, workload)
    # every commit flushed to disk, for this measurement (and its warm-up)
    # only
    flush_log(1)
    try:
        return measure_one(rnd, system, workload)
    finally:
        flush_log(FLUSH_DEFAULT)


def measure_one(rnd, system, workload):
    port = port_of(system)
    prefix = 'r%d-%s-%s-%06x' % (rnd, system, workload,
                                 random.getrandbits(24))
    script = {'return': 'unique', 'unique': 'unique', 'unique-c1': 'unique',
              'replay': 'replay', 'mix': 'mix', 'hook2k': 'webhook',
              'hook64k': 'webhook'}[workload]
    # unique-c1: one connection, for the latency of an unloaded system
    conns, threads = (1, 1) if workload == 'unique-c1' else (None, None)
    args = [HOOK_SIZE[workload]] if workload in HOOK_SIZE else []
    if workload in ('replay', 'mix'):
        prewarm(port, prefix, CFG['keys'])
        args = [prefix, CFG['keys']]
        if workload == 'mix':
            args.append(CFG['mix_new_pct'])
    if CFG['warmup'] > 0:
        wrk(port, script, args, CFG['warmup'], conns, threads)
    time.sleep(0.3)     # let completions of the warm-up land

    cport = counter_port(system)
    ex0 = upstream_stats(cport)['executions'] if cport else None
    my0, rd0 = mysql_status(), redis_commandstats()
    rss0 = workers_rss() if system in MODULE_SYSTEMS else None
    cpu0 = cpu_snapshot(system)
    busy0 = machine_busy()

    res = wrk(port, script, args, CFG['duration'], conns, threads)

    busy1 = machine_busy()
    cpu1 = cpu_snapshot(system)
    time.sleep(0.3)
    my1, rd1 = mysql_status(), redis_commandstats()
    rss1 = workers_rss() if system in MODULE_SYSTEMS else None
    ex1 = upstream_stats(cport)['executions'] if cport else None
    # the setting the measurement ran with (the module's durability)
    flush = flush_log_at_trx_commit() if system in MODULE_SYSTEMS else None

    n = max(res['requests'], 1)
    rec = {
        'round': rnd, 'system': system, 'workload': workload,
        'wrk': res,
        'upstream_executions': None if ex0 is None else ex1 - ex0,
        'mysql': {k: my1.get(k, 0) - my0.get(k, 0) for k in MYSQL_VARS},
        'redis': {k: rd1.get(k, 0) - rd0.get(k, 0)
                  for k in set(rd0) | set(rd1)
                  if rd1.get(k, 0) - rd0.get(k, 0) > 0},
        'rss_before_kib': rss0, 'rss_after_kib': rss1,
        'innodb_flush_log_at_trx_commit': flush,
        # CPU microseconds per request, per component (the whole machine:
        # other work on MariaDB and Redis counts too)
        'cpu_us_per_req': {k: (cpu1[k] - cpu0[k]) * 1e6 / max(
            res['requests'], 1) for k in cpu0},
        'cpu_seconds': {k: cpu1[k] - cpu0[k] for k in cpu0},
        # CPUs busy with anything but the processes above (other
        # sessions' work on a shared machine; also the kernel's softirq
        # time of the bench's own loopback traffic), per second of wall
        # time
        'other_cpus': max(0.0, (busy1 - busy0) - sum(
            cpu1[k] - cpu0[k] for k in cpu0)) / (res['duration_us'] / 1e6),
    }
    rec['mysql_per_req'] = {k: v / n for k, v in rec['mysql'].items()}
    rec['redis_per_req'] = sum(v for k, v in rec['redis'].items()
                               if k not in ('info', 'flushdb')) / n
    log('round %d %-20s %-7s %9.0f req/s  p50 %6.2f ms  p99 %7.2f ms  '
        'non2xx %d  sockerr %d  mysql q/req %.2f  redis cmd/req %.2f%s' % (
            rnd, system, workload, res['rps'], res['p50_us'] / 1000,
            res['p99_us'] / 1000, res['err_status'], res['socket_errors'],
            rec['mysql_per_req']['Questions'], rec['redis_per_req'],
            '' if ex0 is None else '  upstream execs %d' % (ex1 - ex0)))
    return rec


def burst(system):
    """BENCH_BURST identical requests at once, same key and body, with a
    slow upstream; how many executions got through?"""
    port = port_of(system)
    key = 'burst-%s-%08x' % (system, random.getrandbits(32))
    n = CFG['burst']
    barrier = threading.Barrier(n)
    statuses = []
    lock = threading.Lock()

    def one():
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
        c.connect()
        barrier.wait()
        try:
            st = post(c, key, {'X-Bench-Delay': str(CFG['burst_delay_ms'])})
        except OSError as e:
            st = 'error: %s' % e.__class__.__name__
        with lock:
            statuses.append(st)
        c.close()

    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    time.sleep(CFG['burst_delay_ms'] / 1000 + 0.5)
    execs = upstream_stats(counter_port(system), key)['per_key'][key]
    hist = {}
    for s in statuses:
        hist[str(s)] = hist.get(str(s), 0) + 1
    log('burst %-20s %d requests -> %d upstream executions, statuses %s' %
        (system, n, execs, hist))
    return {'system': system, 'requests': n, 'executions': execs,
            'statuses': hist, 'delay_ms': CFG['burst_delay_ms']}


def rss_run(shm_replay_rps):
    """A long replay run on the shm config; worker RSS before and after,
    sampled after each chunk."""
    port = PORTS['shm']
    prefix = 'rss-%06x' % random.getrandbits(24)
    prewarm(port, prefix, CFG['keys'])
    args = [prefix, CFG['keys']]
    wrk(port, 'replay', args, 2)     # warm: pools, connections, buffers
    time.sleep(0.5)
    before = workers_rss()
    samples = [{'requests': 0, 'rss_kib': before}]
    total, chunks = 0, 0
    target = CFG['rss_requests']
    t0 = time.time()
    while total < target and chunks < 200:
        left = target - total
        secs = max(2, min(20, int(left / max(shm_replay_rps, 1000) * 1.1) + 1))
        r = wrk(port, 'replay', args, secs)
        total += int(r['requests'])
        chunks += 1
        samples.append({'requests': total, 'rss_kib': workers_rss(),
                        'non2xx': r['err_status'],
                        'socket_errors': r['socket_errors']})
    time.sleep(0.5)
    after = workers_rss()
    change = {}
    for pid, kib in before.items():
        if after.get(pid):
            change[pid] = (after[pid] - kib) / kib * 100
    log('rss run: %d requests in %.0f s; per worker KiB before %s after %s' %
        (total, time.time() - t0, before, after))
    return {'requests': total, 'seconds': time.time() - t0,
            'before_kib': before, 'after_kib': after,
            'change_pct': change, 'samples': samples}


# -------------------------------------------------------------- machine

def sh(cmd):
    try:
        r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=20)
        return r.stdout.strip()
    except Exception as e:              # noqa: BLE001 (report, never fail)
        return '(%s)' % e


def machine():
    lscpu = sh('lscpu')
    info = {}
    for k in ('Model name', 'Architecture', 'CPU(s)', 'Thread(s) per core',
              'Hypervisor vendor', 'CPU MHz', 'L3 cache'):
        m = re.search(r'^%s:\s*(.*)$' % re.escape(k), lscpu, re.M)
        if m:
            info[k] = m.group(1).strip()
    pkgs = {}
    for p in ('express', 'express-idempotency',
              'express-idempotency-redis-adapter', '@node-idempotency/core',
              '@node-idempotency/storage-adapter-redis', 'redis',
              '@redis/client'):
        try:
            with open(os.path.join(BENCH, 'node', 'node_modules', p,
                                   'package.json')) as f:
                pkgs[p] = json.load(f)['version']
        except OSError:
            pkgs[p] = '?'
    return {
        'lscpu': info, 'nproc': sh('nproc'),
        'memory': sh("free -m | awk '/^Mem:/ {print $2 \" MiB\"}'"),
        'kernel': sh('uname -srm'),
        'os': sh(". /etc/os-release && echo $PRETTY_NAME"),
        'nginx': sh('%s -v 2>&1' % NGINX_BIN),
        'mariadb': sh('mariadb --no-defaults --protocol=socket --socket=%s '
                      '-uroot -N -e "SELECT VERSION()"' % MYSQL_SOCK),
        'redis': sh('redis-cli -p %d INFO server | grep redis_version'
                    % REDIS_PORT).replace('redis_version:', ''),
        'node': sh('node -v'), 'wrk': sh('wrk -v 2>&1 | head -1'),
        'gnuplot': sh('gnuplot --version'),
        'python': sh('python3 --version'),
        'npm_packages': pkgs,
        'loadavg_start': sh('cat /proc/loadavg'),
        'date': time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()),
    }


# ---------------------------------------------------------------- main

def command_line():
    parts = ['make bench']
    for k in ('BENCH_ROUNDS', 'BENCH_DURATION', 'BENCH_CONNECTIONS',
              'BENCH_THREADS', 'BENCH_RSS_REQUESTS', 'BENCH_KEYS',
              'BENCH_BURST', 'BENCH_BURST_DELAY_MS', 'BENCH_WARMUP',
              'BENCH_WORKERS'):
        if k in os.environ:
            parts.insert(0, '%s=%s' % (k, os.environ[k]))
    return ' '.join(parts)


def save(name, data):
    with open(os.path.join(RESULTS, name), 'w') as f:
        json.dump(data, f, indent=1, sort_keys=True)


def bench():
    if os.path.isdir(RESULTS):
        shutil.rmtree(RESULTS)
    os.makedirs(RESULTS)
    t0 = time.time()
    save('machine.json', machine())
    save('config.json', dict(CFG, command=command_line(),
                             ports=PORTS, mysql_port=MYSQL_PORT,
                             redis_port=REDIS_PORT))
    start_all()
    try:
        pairs = [(s[0], w) for s in SYSTEMS for w in s[2]]
        if ONLY:
            pairs = [p for p in pairs if '%s:%s' % p in ONLY]
        for rnd in range(1, CFG['rounds'] + 1):
            log('round %d of %d' % (rnd, CFG['rounds']))
            reset_stores()
            # all systems in each round; the order rotates between rounds
            k = (rnd - 1) % len(pairs)
            recs = [measure(rnd, s, w) for s, w in pairs[k:] + pairs[:k]]
            save('round-%d.json' % rnd, recs)

        if ONLY:
            only_summary(pairs)
            return

        reset_stores()
        bursts = [burst(s) for s in
                  ('proxy', 'mysql', 'redis', 'shm') + PEERS]
        save('burst.json', bursts)

        shm_rps = statistics.median(
            r['wrk']['rps'] for rnd in load_rounds() for r in rnd
            if r['system'] == 'shm' and r['workload'] == 'replay')
        save('rss.json', rss_run(shm_rps))
        err = open(os.path.join(PREFIX, 'error.log')).read()
        save('nginx-errors.json',
             [ln for ln in err.splitlines()
              if re.search(r'\[(emerg|alert|crit|error)\]', ln)][-50:])
    finally:
        stop_all()
    save('elapsed.json', {'seconds': time.time() - t0})
    report()


def only_summary(pairs):
    """BENCH_ONLY's table: medians over the rounds"""
    rounds = load_rounds()
    print('| system | workload | req/s | p99 ms | nginx CPU µs/req |')
    print('|---|---|--:|--:|--:|')
    for s, w in pairs:
        rs = [r for rnd in rounds for r in rnd
              if r['system'] == s and r['workload'] == w]
        print('| %s | %s | %.0f | %.2f | %.1f |' % (
            s, w, statistics.median(r['wrk']['rps'] for r in rs),
            statistics.median(r['wrk']['p99_us'] for r in rs) / 1000,
            statistics.median(r['cpu_us_per_req']['nginx'] for r in rs)))


def serve():
    start_all()
    log('serving (ports %s); ^C to stop' % PORTS)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        stop_all()


def load_rounds():
    out, i = [], 1
    while os.path.exists(os.path.join(RESULTS, 'round-%d.json' % i)):
        with open(os.path.join(RESULTS, 'round-%d.json' % i)) as f:
            out.append(json.load(f))
        i += 1
    return out


def report():
    sys.path.insert(0, BENCH)
    import report as rep            # bench/report.py
    rep.generate(RESULTS, DOC, PNG, BENCH)
    log('wrote %s and %s' % (os.path.relpath(DOC, ROOT),
                             os.path.relpath(PNG, ROOT)))


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else 'run'

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    if cmd == 'run':
        try:
            bench()
        except KeyboardInterrupt:
            stop_all()
            die('interrupted')
    elif cmd == 'report':
        report()
    elif cmd == 'serve':
        serve()
    else:
        die('usage: bench/run.sh [run|report|serve]')


if __name__ == '__main__':
    main()

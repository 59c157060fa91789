#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""Faults under retrying load: `make test-faults` (docs/reliability.md).

    scripts/faults/faults.py [--short] [--only NAME,...] [--no-galera]
    scripts/faults/faults.py --cleanup

Starts its own services under build/faults/ (nothing of build/services is
touched), runs scenarios one after another, and judges each with
scripts/faults/check.py:

- a private MariaDB (mysql/schema.sql) in the network namespace idemf-db,
  reached over a veth pair (10.231.0.1 <-> 10.231.0.2, port 3347), so that
  tc on the host's end of the pair can drop every packet (a silent
  partition: no RST) or one in 32 (this kernel has no netem: see
  tc_drop()); a relay in the namespace (relay.py) delays the store
  `slow`;
- a Redis on 127.0.0.1:6420, the backend (backend/app.py --exec-log
  --fence-header) on 127.0.0.1:8491, the bank of the fence scenarios
  (backend/app.py --bank-db, scripts/faults/fence.py) on 127.0.0.1:8492,
  and /usr/sbin/nginx with
  build/ngx_http_idempotency_module.so on 127.0.0.1:8480 (2 workers);
- for the Galera scenarios, the cluster of scripts/galera.sh under
  build/faults/galera (its fixed ports 13306-13308, 14567...: refused if
  another cluster runs) and two nginx on 8482 (node1) and 8483 (node2).

Load: scripts/faults/load.py.  The nemesis runs in a thread beside it,
one fault kind per scenario, then mixed.  After the load, every key is
sent again until it has a final answer (the settle phase).  Each
scenario's files are in build/faults/runs/NAME/; the table goes to
build/faults/table.md.  Exit status 1 when a verdict is violated, 2 when
the harness itself failed.  Every step has a timeout; namespaces, qdiscs
and processes are removed at the end, pass or fail (and by --cleanup).
"""

import sys
sys.dont_write_bytecode = True
import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import check  # noqa: E402
import fence  # noqa: E402
import load   # noqa: E402

B = os.path.join(ROOT, "build", "faults")
NGINX = os.environ.get("NGINX_BIN", "/usr/sbin/nginx")
MODULE = os.path.join(ROOT, "build", "ngx_http_idempotency_module.so")
SERVICES = os.path.join(ROOT, "scripts", "services.sh")
GALERA = os.path.join(ROOT, "scripts", "galera.sh")
PYTHON = sys.executable or "python3"

NS = "idemf-db"
VETH_HOST, VETH_NS = "idf0", "idf1"
HOST_IP, DB_IP = "10.231.0.1", "10.231.0.2"
DB_PORT = 3347
RELAY_PORT = 3348
REDIS_PORT = 6420
BACKEND_PORT = 8491
NGINX_PORT = 8480
G_NGINX_PORTS = (8482, 8483)
G_CLIENT_PORTS = (13306, 13307, 13308)
EPOCH_HEADER = "X-Idempotency-Epoch"

LEASE = 9.0            # idempotency_lease (server level)
SHORT_LEASE = 4.0      # /k/ and /f/: worker kills, where only the lease
                       # decides how soon a dead owner's key is taken over
QUERY_TIMEOUT = 1.0    # query_timeout= and connect_timeout=
BOUND = LEASE + 3 * QUERY_TIMEOUT + 3.0   # answers after the heal
# with idempotency_fence: a fence (query_timeout at most), a client's
# back-off (2 s at most) and its attempt (1.5 s), twice
FENCE_BOUND = 2 * (QUERY_TIMEOUT + 2.0 + 1.5)

LOG = None


def log(msg):
    line = "%s %s" % (time.strftime("%H:%M:%S"), msg)
    print(line, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()


def sh(cmd, timeout=30, check_rc=True, ns=None, quiet=False, env=None):
    """Run cmd (a list), bounded; stdout as text."""
    if ns:
        cmd = ["ip", "netns", "exec", ns] + cmd
    if LOG:
        LOG.write("$ %s\n" % " ".join(cmd))
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout,
                           text=True, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeError("timed out after %ss: %s" % (timeout, " ".join(cmd)))
    if LOG and p.stdout:
        LOG.write(p.stdout)
    if check_rc and p.returncode != 0:
        raise RuntimeError("exit %d: %s\n%s" % (p.returncode, " ".join(cmd),
                                                p.stdout[-2000:]))
    return p.stdout


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_until(what, secs, cond, interval=0.1):
    end = time.time() + secs
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise RuntimeError("timed out after %ss waiting for %s" % (secs, what))


def port_busy(port):
    out = sh(["ss", "-Htln", "sport = :%d" % port], check_rc=False)
    return bool(out.strip())


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def started_pid(out):
    m = re.search(r"\(pid (\d+)", out)
    if not m:
        raise RuntimeError("no pid in: %s" % out)
    return int(m.group(1))


def mysql_root(sock, sql, timeout=10):
    return sh(["mariadb", "--no-defaults", "--protocol=socket",
               "--socket=" + sock, "-uroot", "-N", "-B",
               "--connect-timeout=3", "-e", sql], timeout=timeout)


# ------------------------------------------------------------- network

# The kernel here has no sch_netem (CONFIG_NET_SCH_NETEM is not set) and
# no gact ("action drop"), but it has clsact, u32 and mirred: a packet is
# dropped silently by redirecting it to a veth whose peer is down
# (idfb0 -> idfb1).  Both directions are cut on the host's end of the
# pair: its egress (nginx -> MariaDB) and its ingress (MariaDB -> nginx).
# Delay is a relay in the namespace (scripts/faults/relay.py) in front of
# the store `slow`, since nothing in this kernel holds a packet back.
BLACKHOLE = ("idfb0", "idfb1")


def tc_drop(match):
    """match: u32 selector words; every packet it matches, both ways."""
    sh(["tc", "qdisc", "replace", "dev", VETH_HOST, "clsact"])
    for hook in ("egress", "ingress"):
        sh(["tc", "filter", "add", "dev", VETH_HOST, hook, "protocol", "ip",
            "pref", "10", "u32"] + match
           + ["action", "mirred", "egress", "redirect", "dev",
              BLACKHOLE[0]])


def tc_clear():
    sh(["tc", "qdisc", "del", "dev", VETH_HOST, "clsact"], check_rc=False,
       quiet=True)


def tc_stats():
    out = ""
    for hook in ("egress", "ingress"):
        out += sh(["tc", "-s", "filter", "show", "dev", VETH_HOST, hook],
                  check_rc=False)
    return sum(int(x) for x in re.findall(r"Sent \d+ bytes (\d+) pkt", out))


PARTITION = ["match", "u32", "0", "0"]
# loss: the packets whose IP identification ends in five zero bits, one in
# 32 of each direction of a connection (Linux counts the id up per packet
# of a socket; a retransmission has a new id and passes)
LOSS = ["match", "u16", "0", "0x001f", "at", "4"]


def net_up():
    net_down()
    sh(["ip", "netns", "add", NS])
    sh(["ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name",
        VETH_NS])
    sh(["ip", "link", "set", VETH_NS, "netns", NS])
    sh(["ip", "addr", "add", HOST_IP + "/30", "dev", VETH_HOST])
    sh(["ip", "link", "set", VETH_HOST, "up"])
    sh(["ip", "addr", "add", DB_IP + "/30", "dev", VETH_NS], ns=NS)
    sh(["ip", "link", "set", VETH_NS, "up"], ns=NS)
    sh(["ip", "link", "set", "lo", "up"], ns=NS)
    sh(["ip", "link", "add", BLACKHOLE[0], "type", "veth", "peer", "name",
        BLACKHOLE[1]])
    sh(["ip", "link", "set", BLACKHOLE[0], "up"])


def net_down():
    if os.path.exists("/run/netns/" + NS):
        sh(["ip", "netns", "del", NS], check_rc=False)
    sh(["ip", "link", "del", VETH_HOST], check_rc=False, quiet=True)
    sh(["ip", "link", "del", BLACKHOLE[0]], check_rc=False, quiet=True)


# ------------------------------------------------------------ services

class Services:
    def __init__(self):
        self.db_dir = os.path.join(B, "db")
        self.db_sock = os.path.join(self.db_dir, "mysql.sock")
        self.redis_dir = os.path.join(B, "redis")
        self.db_pid = None
        self.redis_pid = None
        self.backend = None
        self.exec_log = os.path.join(B, "exec.jsonl")

    def db_start(self):
        out = sh([SERVICES, "mysql", "start", self.db_dir, "--port",
                  str(DB_PORT), "--name", "faultsdb", "--timeout", "60",
                  "--", "--bind-address=" + DB_IP,
                  "--innodb-buffer-pool-size=64M",
                  "--innodb-log-file-size=16M", "--max-connections=400"],
                 ns=NS, timeout=120)
        self.db_pid = started_pid(out)
        # nginx connects from the host's end of the pair, the relay from
        # the namespace's own address
        for ip in (HOST_IP, DB_IP):
            mysql_root(self.db_sock,
                       "CREATE USER IF NOT EXISTS 'idem'@'%s' IDENTIFIED BY "
                       "'idem-secret'; GRANT SELECT, INSERT, UPDATE, DELETE "
                       "ON idempotency.* TO 'idem'@'%s'" % (ip, ip))

    def db_stop(self):
        # through its pid file and socket: no need of the namespace
        if os.path.isdir(self.db_dir):
            sh([SERVICES, "mysql", "stop", self.db_dir], timeout=60,
               check_rc=False)

    def redis_start(self):
        out = sh([SERVICES, "redis", "start", self.redis_dir, "--port",
                  str(REDIS_PORT), "--name", "faultsredis"], timeout=30)
        self.redis_pid = started_pid(out)

    def redis_stop(self):
        sh([SERVICES, "redis", "stop", self.redis_dir], timeout=30,
           check_rc=False)

    def backend_start(self):
        self.backend = subprocess.Popen(
            [PYTHON, os.path.join(ROOT, "backend", "app.py"), "--port",
             str(BACKEND_PORT), "--exec-log", self.exec_log,
             "--fence-header", EPOCH_HEADER,
             "--log", os.path.join(B, "backend.log"),
             "--pidfile", os.path.join(B, "backend.pid")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(B, "backend.err"), "a"),
            start_new_session=True)
        wait_until("the backend", 15, lambda: port_busy(BACKEND_PORT))

    def backend_stop(self):
        if self.backend and self.backend.poll() is None:
            self.backend.terminate()
            try:
                self.backend.wait(10)
            except subprocess.TimeoutExpired:
                self.backend.kill()


# --------------------------------------------------------------- nginx

NGINX_CONF = """\
load_module {module};
user root;
worker_processes 2;
error_log logs/error.log info;
pid logs/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    log_format idem '$msec $pid "$request" $status key=$http_idempotency_key '
                    'idem=$idempotency_status up=$upstream_addr '
                    'rt=$request_time';
    access_log logs/access.log idem;
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
{stores}
    server {{
        listen 127.0.0.1:{port};
        idempotency_lease {lease}s;
        idempotency_ttl 1h;
{locations}
    }}
}}
"""

LOCATION = """\
        location {path} {{
            idempotency {store};
{extra}            proxy_pass http://127.0.0.1:{backend};
        }}
"""


def store_line(name, mysql, redis=False, purge="off"):
    s = ("    idempotency_store %s mysql=%s user=idem password=idem-secret "
         "database=idempotency pool=16 connect_timeout=%dms "
         "query_timeout=%dms purge=%s" % (name, mysql,
                                          QUERY_TIMEOUT * 1000,
                                          QUERY_TIMEOUT * 1000, purge))
    if redis:
        s += (" redis=127.0.0.1:%d redis_timeout=300ms "
              "secret=faults-secret-0123456789abcdef" % REDIS_PORT)
    return s + ";\n"


class Nginx:
    def __init__(self, name, port, stores, locations):
        self.name = name
        self.port = port
        self.prefix = os.path.join(B, name)
        self.conf = os.path.join(self.prefix, "conf", "nginx.conf")
        self.pidfile = os.path.join(self.prefix, "logs", "nginx.pid")
        self.error_log = os.path.join(self.prefix, "logs", "error.log")
        for d in ("conf", "logs", "tmp"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        locs = "".join(LOCATION.format(
            path=loc[0], store=loc[1],
            backend=loc[3] if len(loc) > 3 else BACKEND_PORT,
            extra="".join("            %s;\n" % x for x in loc[2]))
            for loc in locations)
        with open(self.conf, "w") as f:
            f.write(NGINX_CONF.format(module=MODULE, port=port,
                                      lease=int(LEASE),
                                      stores="".join(stores),
                                      locations=locs))

    def cmd(self, *args, timeout=20):
        return sh([NGINX, "-p", self.prefix + "/", "-c", self.conf]
                  + list(args), timeout=timeout)

    def start(self):
        self.cmd("-t")
        self.cmd()
        wait_until("nginx %s" % self.name, 10, lambda: port_busy(self.port))

    def master(self):
        return read_pid(self.pidfile)

    def workers(self, master=None):
        """The worker processes of master (the new master of a binary
        upgrade is also a child of the old one: not a worker)."""
        master = master or self.master()
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            rest = st.rsplit(")", 1)[1].split()
            if int(rest[1]) == master and rest[0] != "Z" \
                    and cmd.startswith(b"nginx: worker process"):
                out.append(int(d))
        return out

    def stop(self):
        pids = []
        for pf in (self.pidfile, self.pidfile + ".oldbin"):
            pid = read_pid(pf)
            if pid and alive(pid):
                pids.append(pid)
        workers = [w for m in pids for w in self.workers(m)]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        try:
            wait_until("nginx %s to stop" % self.name, 15,
                       lambda: not any(alive(p) for p in pids + workers))
        except RuntimeError:
            for p in pids + workers:
                if alive(p):
                    os.kill(p, signal.SIGKILL)


def upstream_ports(pid, port):
    """Local ports of pid's TCP connections to 127.0.0.1:port."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return []
    ports = []
    want = "0100007F:%04X" % port
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            p = line.split()
            if p[2] == want and p[9] in inodes:
                ports.append(int(p[1].split(":")[1], 16))
    return ports


# --------------------------------------------------------------- nemesis

class Nemesis:
    """The fault log of one scenario: faults (kind, start, end), kills."""

    def __init__(self, env):
        self.env = env
        self.faults = []
        self.kills = []
        self.notes = []
        self.stop = threading.Event()

    def sleep(self, s):
        self.stop.wait(s)

    def fault(self, kind, start, end=None):
        f = {"kind": kind, "start": start, "end": end or time.time()}
        self.faults.append(f)
        log("  fault %s %.1fs" % (kind, f["end"] - f["start"]))
        return f

    # each of these injects and heals one fault; returns when healed
    def drop(self, kind, match, secs):
        """Packets that match dropped both ways for secs (the sockets seen
        by ss 2 s in, for the partition's record)."""
        t = time.time()
        tc_drop(match)
        self.sleep(min(2.0, secs))
        self.env.snapshot_ss(kind)
        self.sleep(max(0, secs - 2.0))
        dropped = tc_stats()
        tc_clear()
        self.fault(kind, t)
        self.notes.append("%s: %d packets dropped" % (kind, dropped))

    def partition(self, secs):
        self.drop("partition", PARTITION, secs)

    def loss(self, secs):
        self.drop("loss", LOSS, secs)

    def delay(self, secs):
        t = time.time()
        os.kill(self.env.relay.pid, signal.SIGUSR1)
        self.sleep(secs)
        os.kill(self.env.relay.pid, signal.SIGUSR2)
        self.fault("delay", t)

    def pause(self, kind, pid, secs):
        t = time.time()
        os.kill(pid, signal.SIGSTOP)
        self.sleep(secs)
        os.kill(pid, signal.SIGCONT)
        self.fault(kind, t)

    def db_pause(self, secs):
        self.pause("db-pause", self.env.svc.db_pid, secs)

    def db_kill(self, down=0.5):
        t = time.time()
        os.kill(self.env.svc.db_pid, signal.SIGKILL)
        wait_until("mariadbd to die", 10,
                   lambda: not alive(self.env.svc.db_pid))
        self.sleep(down)
        self.env.svc.db_start()
        self.fault("db-kill", t)

    def worker_kill(self, ngx=None):
        ngx = ngx or self.env.nginx
        t = time.time()
        best, ports = None, []
        for w in ngx.workers():
            p = upstream_ports(w, BACKEND_PORT)
            if best is None or len(p) > len(ports):
                best, ports = w, p
        if best is None:
            self.notes.append("no worker to kill")
            return
        # stopped first, so that the ports read are all it holds when
        # it dies (no connection opens between the look and the kill)
        os.kill(best, signal.SIGSTOP)
        ports = upstream_ports(best, BACKEND_PORT)
        os.kill(best, signal.SIGKILL)
        self.kills.append({"t": time.time(), "pid": best, "ports": ports})
        log("  killed worker %d holding %d upstream connections"
            % (best, len(ports)))
        self.fault("worker-kill", t, t + 0.01)

    def reload(self):
        t = time.time()
        ngx = self.env.nginx
        old = set(ngx.workers())
        ngx.cmd("-s", "reload")
        wait_until("the old workers to exit", 20,
                   lambda: not (old & set(ngx.workers())))
        self.fault("reload", t)

    def upgrade(self):
        t = time.time()
        ngx = self.env.nginx
        old = ngx.master()
        os.kill(old, signal.SIGUSR2)
        new = wait_until("the new master", 10,
                         lambda: (os.path.exists(ngx.pidfile + ".oldbin")
                                  and read_pid(ngx.pidfile) != old
                                  and read_pid(ngx.pidfile)))
        wait_until("the new workers", 10, lambda: ngx.workers(new))
        os.kill(old, signal.SIGWINCH)
        wait_until("the old workers to finish", 30,
                   lambda: not ngx.workers(old))
        os.kill(old, signal.SIGQUIT)
        wait_until("the old master to exit", 10, lambda: not alive(old))
        self.fault("upgrade", t)

    def redis_kill(self, down):
        t = time.time()
        os.kill(self.env.svc.redis_pid, signal.SIGKILL)
        self.sleep(down)
        self.env.svc.redis_start()
        self.fault("redis-kill", t)

    def redis_pause(self, secs):
        self.pause("redis-pause", self.env.svc.redis_pid, secs)

    def heal_all(self):
        """After an exception: leave nothing broken behind."""
        try:
            tc_clear()
            for pid in (self.env.svc.db_pid, self.env.svc.redis_pid):
                if pid and alive(pid):
                    os.kill(pid, signal.SIGCONT)
        except Exception as e:  # noqa: BLE001
            log("heal: %s" % e)


# -------------------------------------------------------------- scenarios

class Env:
    def __init__(self, args):
        self.args = args
        self.svc = Services()
        self.nginx = None
        self.gnginx = []
        self.galera = False
        self.galera_cmdlines = {}
        self.galera_started = []    # pids of the nodes restarted here
        self.galera_procs = {}      # node -> the last of them
        self.galera_logoff = {}     # node -> its log's size at that start
        self.run_id = time.strftime("%H%M%S")
        self.rows = []
        self.cur = None

    def snapshot_ss(self, tag):
        if self.cur:
            out = sh(["ss", "-tnoi", "dst", DB_IP], check_rc=False)
            with open(os.path.join(self.cur, "ss-%s.txt" % tag), "a") as f:
                f.write("# %s\n%s\n" % (time.strftime("%H:%M:%S"), out))


def exec_events(path, offset, keep):
    """The backend's execution events from offset on that keep() wants."""
    out = []
    with open(path) as f:
        f.seek(offset)
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if keep(e):
                out.append(e)
    return out


def file_size(p):
    try:
        return os.path.getsize(p)
    except OSError:
        return 0


def run_scenario(env, name, title, ops, nemesis_fn, policy=None,
                 logs=None, fencing=False, bound=BOUND, notes=(),
                 lease=LEASE, checker=None):
    d = os.path.join(B, "runs", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    env.cur = d
    log("scenario %s: %d keys, %d clients" % (
        name, len(ops), sum(o.clients for o in ops)))
    env.snapshot_ss("before")
    policy = policy or load.Policy()
    logs = logs or [env.nginx]
    offs = [(n, file_size(n.error_log)) for n in logs]
    exec_off = file_size(env.svc.exec_log)
    rec = load.Recorder(os.path.join(d, "answers.jsonl"))
    nem = Nemesis(env)
    err = []

    def nemesis_thread():
        try:
            nemesis_fn(nem)
        except Exception as e:  # noqa: BLE001
            err.append(e)
            nem.heal_all()

    async def main():
        th = threading.Thread(target=nemesis_thread, daemon=True)
        th.start()
        await load.run_load(ops, policy, rec, seed=len(name))
        loop = asyncio.get_event_loop()
        await loop.run_in_executor(None, th.join, 300)
        heal = max([f["end"] for f in nem.faults] + [time.time()])
        settled = await load.settle(ops, policy, rec, heal + bound + 10)
        return heal, settled

    t0 = time.time()
    heal, _ = asyncio.run(main())
    rec.close()
    if err:
        raise RuntimeError("nemesis of %s failed: %s" % (name, err[0]))
    keys = set(o.key for o in ops)
    with open(os.path.join(d, "exec.jsonl"), "w") as out:
        for e in exec_events(env.svc.exec_log, exec_off,
                             lambda e: e["key"] in keys):
            out.write(json.dumps(e, sort_keys=True) + "\n")
    elog = {}
    for n, off in offs:
        with open(n.error_log, errors="replace") as f, \
                open(os.path.join(d, "error-%s.log" % n.name), "w") as out:
            f.seek(off)
            text = f.read()
            out.write(text)
        elog[n.name] = log_summary(text)
    meta = {"name": name, "title": title, "keys": sorted(keys),
            "faults": nem.faults, "kills": nem.kills, "heal": heal,
            "bound": bound, "fencing": fencing, "lease": lease,
            "notes": list(notes) + nem.notes, "errorlog": elog,
            "wall": time.time() - t0}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    row = checker(d) if checker else check.check(d)
    row["fencing"] = fencing
    row["errorlog"] = elog
    row["wall"] = meta["wall"]
    env.rows.append(row)
    log("  %s: %d requests, %d executions, %d keys >1 (%d owner death), "
        "%d differing, %d unanswered, classes %s, %s (%.0fs)" % (
            name, row["requests"], row["execs"], row["keys_multi"],
            row["rerun_owner_death"], row["differs"], row["unanswered"],
            row["classes"], "ok" if row["ok"] else "VIOLATED", meta["wall"]))
    for p in row["problems"][:8]:
        log("    " + p)
    for n, s in elog.items():
        if s:
            log("    %s error.log: %s" % (n, ", ".join(
                "%s x%d" % (k, v) for k, v in sorted(s.items()))))
    env.cur = None
    return row


LOG_PATTERNS = [
    ("timed out", r"timed out"),
    ("store unreachable", r"unreachable"),
    ("reachable again", r"reachable again"),
    ("lease lost", r"lease lost"),
    ("takeover", r"takeover|taken over"),
    ("renewal failed", r"renew"),
    ("completion retry", r"completion.*(fail|retr)"),
    ("lost connection", r"[Ll]ost connection|gone away|2013|2006"),
    ("exited on signal", r"exited on signal"),
    ("alert/crit/emerg", r"\[(alert|crit|emerg)\]"),
]


def log_summary(text):
    out = {}
    for line in text.splitlines():
        if "idempotency" not in line and "signal" not in line \
                and "[alert]" not in line and "[crit]" not in line:
            continue
        for name, pat in LOG_PATTERNS:
            if re.search(pat, line):
                out[name] = out.get(name, 0) + 1
    return out


def ops_for(env, name, n, window, rng, path="/orders", port=NGINX_PORT,
            **kw):
    return load.make_ops("%s-%s" % (env.run_id, name), n, window, port, rng,
                         path=path, **kw)


def single_scenarios(env, short):
    """(name, title, ops, nemesis) of the one-MariaDB scenarios."""
    rng = random.Random(24)
    n = 40 if short else 120
    w = 8.0 if short else 18.0
    t_in = 2.0 if short else 5.0     # the fault begins
    dur = 3.0 if short else 4.0      # and lasts, well within the lease

    def at(fn):
        def run(nem):
            nem.sleep(t_in)
            fn(nem)
        return run

    sc = []
    sc.append(("partition", "partition nginx / MariaDB, silent (%gs)" % dur, ops_for(env, "partition", n, w, rng),
               at(lambda nem: nem.partition(dur))))
    if not short:
        sc.append(("delay", "delay 150 ms ± 50 ms each way (relay, %gs)"
                   % dur, ops_for(env, "delay", n, w, rng, path="/d/orders"),
                   at(lambda nem: nem.delay(dur))))
        sc.append(("loss", "packet loss 1 in 32 each way (%gs)" % dur,
                   ops_for(env, "loss", n, w, rng),
                   at(lambda nem: nem.loss(dur))))
        sc.append(("db-pause", "MariaDB SIGSTOP (%gs)" % dur,
                   ops_for(env, "dbpause", n, w, rng),
                   at(lambda nem: nem.db_pause(dur))))
    sc.append(("db-kill", "MariaDB SIGKILL, restarted",
               ops_for(env, "dbkill", n, w, rng),
               at(lambda nem: nem.db_kill(0.5))))
    if short:
        return sc
    sc.append(("partition-long", "partition longer than the lease (%gs, "
               "lease %gs)" % (LEASE + 3, LEASE),
               ops_for(env, "plong", n, w, rng),
               at(lambda nem: nem.partition(LEASE + 3))))

    def kills(nem):
        for _ in range(3):
            nem.worker_kill()
            nem.sleep(4.0)
    sc.append(("worker-kill", "nginx worker SIGKILL x3, mid-request "
               "(lease %gs)" % SHORT_LEASE,
               ops_for(env, "wkill", n, w, rng, path="/k/orders"),
               at(kills)))

    def reloads(nem):
        for _ in range(3):
            nem.reload()
            nem.sleep(2.0)
    sc.append(("reload", "nginx -s reload x3",
               ops_for(env, "reload", n, w, rng), at(reloads)))
    sc.append(("upgrade", "binary upgrade (USR2, WINCH, QUIT)",
               ops_for(env, "upgrade", n, w, rng),
               at(lambda nem: nem.upgrade())))
    sc.append(("redis-kill", "Redis SIGKILL, restarted after 4 s",
               ops_for(env, "rkill", n, w, rng, path="/r/orders"),
               at(lambda nem: nem.redis_kill(4.0))))
    sc.append(("redis-pause", "Redis SIGSTOP (%gs)" % dur,
               ops_for(env, "rpause", n, w, rng, path="/r/orders"),
               at(lambda nem: nem.redis_pause(dur))))

    # mixed: a seeded random schedule, up to two faults at once
    mrng = random.Random(2024)

    def mixed(nem):
        kinds = [
            lambda: nem.partition(mrng.uniform(2, 4)),
            lambda: nem.delay(mrng.uniform(2, 4)),
            lambda: nem.loss(mrng.uniform(2, 4)),
            lambda: nem.db_pause(mrng.uniform(1.5, 3)),
            lambda: nem.db_kill(0.3),
            lambda: nem.worker_kill(),
            lambda: nem.reload(),
            lambda: nem.redis_pause(mrng.uniform(1.5, 3)),
            lambda: nem.redis_kill(mrng.uniform(1, 3)),
        ]
        # the network kinds share the qdisc, MariaDB's kinds its pid:
        # one of each group at a time; other groups overlap them
        groups = [[0, 1, 2], [3, 4], [5, 6], [7, 8]]
        end = time.time() + 28.0
        nem.sleep(3.0)
        while time.time() < end:
            g = mrng.choice(groups[:2])
            f = kinds[mrng.choice(g)]
            other = kinds[mrng.choice(mrng.choice(groups[2:]))]
            th = threading.Thread(target=f)
            th.start()
            nem.sleep(mrng.uniform(0.3, 1.5))
            other()
            th.join(60)
            nem.sleep(mrng.uniform(0.5, 2.0))
    mops = ops_for(env, "mixed", n, 34.0, rng)
    mops += ops_for(env, "mixedr", n // 2, 34.0, rng, path="/r/orders")
    mops += ops_for(env, "mixedd", n // 2, 34.0, rng, path="/d/orders")
    sc.append(("mixed", "mixed: all of the above at random, two at a "
               "time", mops, mixed))
    return sc


def fencing_scenario(env):
    """Worker kills with 7 s operations in flight: the takeover after the
    lease runs while the dead owner's execution still sleeps."""
    rng = random.Random(7)
    ops = ops_for(env, "fence", 24, 12.0, rng, path="/f/orders",
                  delays=((1.0, 7000, 7500),), shared=0.3)
    # the lease of /f/ is SHORT_LEASE: a retry takes a dead owner's key
    # over 4-6 s after the kill, while its 7 s execution still runs

    def kills(nem):
        for t in (2.0, 6.0, 10.0):
            nem.sleep(t - (time.time() - start[0]))
            nem.worker_kill()
    start = [time.time()]

    def fn(nem):
        start[0] = time.time()
        kills(nem)
    return ("fencing", "nginx workers SIGKILLed, 7 s operations, fencing "
            "backend", ops, fn)


def gateway_scenario(env):
    """An nginx 504 after the request was sent: outcome unknown."""
    rng = random.Random(23)
    ops = ops_for(env, "gw", 40, 8.0, rng, path="/t/orders",
                  delays=((0.7, 20, 200), (0.3, 1300, 1600)), shared=0.2)
    return ("gateway-timeout", "backend slower than proxy_read_timeout 1s "
            "(no nemesis)", ops, lambda nem: None)


# ----------------------------------------------------------------- galera

def galera_env():
    e = dict(os.environ)
    e["IDEM_GALERA_DIR"] = os.path.join(B, "galera")
    return e


def gnode_sock(n):
    return os.path.join(B, "galera", "node%d" % n, "mysql.sock")


def gnode_pid(n):
    return read_pid(os.path.join(B, "galera", "node%d" % n, "mysql.pid"))


def gstatus(n, var):
    try:
        out = mysql_root(gnode_sock(n), "SHOW GLOBAL STATUS LIKE '%s'" % var,
                         timeout=5)
        return out.split("\t")[1].strip() if "\t" in out else None
    except RuntimeError:
        return None


def galera_synced(nodes=(1, 2, 3)):
    for n in nodes:
        if gstatus(n, "wsrep_local_state_comment") != "Synced" \
                or gstatus(n, "wsrep_cluster_size") != "3" \
                or gstatus(n, "wsrep_cluster_status") != "Primary":
            return False
    return True


def galera_start(env):
    for p in G_CLIENT_PORTS + (14567, 14577, 14587):
        if port_busy(p):
            raise RuntimeError("port %d is in use: another Galera cluster "
                               "runs (make test-galera?)" % p)
    log("galera: starting the cluster of scripts/galera.sh in %s"
        % os.path.join(B, "galera"))
    sh([GALERA, "start"], timeout=300, env=galera_env())
    env.galera = True
    for n in (1, 2, 3):
        env.galera_cmdlines[n] = node_cmdline(n)


def galera_stop(env):
    if env.galera or os.path.exists(os.path.join(B, "galera")):
        for n in (1, 2, 3):
            pid = gnode_pid(n)
            if pid and alive(pid):
                os.kill(pid, signal.SIGCONT)
        sh([GALERA, "stop"], timeout=180, env=galera_env(), check_rc=False)
        env.galera = False
    # a node restarted here that never answered has no pid file of its
    # own yet: by the pid its start returned (setsid execs mariadbd)
    for pid in env.galera_started:
        if alive(pid):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGTERM)
            try:
                wait_until("pid %d to stop" % pid, 30,
                           lambda: not alive(pid))
            except RuntimeError:
                os.kill(pid, signal.SIGKILL)


def node_cmdline(n):
    pid = gnode_pid(n)
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        args = f.read().split(b"\0")
    return [a.decode() for a in args if a and a != b"--wsrep-new-cluster"]


def node_position(env, n):
    """(uuid, seqno) that node n's InnoDB holds (mariadbd --wsrep-recover,
    what galera_recovery does before mysqld_safe starts a node)."""
    d = os.path.join(B, "galera", "node%d" % n)
    logf = os.path.join(d, "recover.log")
    try:
        os.unlink(logf)
    except OSError:
        pass
    args = [a for a in env.galera_cmdlines[n]
            if not a.startswith("--log-error")]
    sh(args + ["--wsrep-recover", "--log-error=" + logf], timeout=120,
       check_rc=False)
    with open(logf, errors="replace") as f:
        m = re.findall(r"Recovered position: ([0-9a-f-]+):(-?\d+)", f.read())
    return (m[-1][0], int(m[-1][1])) if m else (None, -1)


def node_restart(env, n, extra=(), bootstrap=False, wait=True, sst=False):
    """Start node n again with the command line it had (never
    --wsrep-new-cluster unless bootstrap), from the position its InnoDB
    recovered, so that it catches up by IST; its data directory belongs
    to nobody, as scripts/galera.sh leaves a joiner's, in case it needs
    an SST (rsync's daemon runs as nobody)."""
    d = os.path.join(B, "galera", "node%d" % n)
    if sst:
        # its state is given up: no grastate.dat, no position, a full SST
        uuid, seqno = None, -1
        for f in ("grastate.dat", "gvwstate.dat"):
            try:
                os.unlink(os.path.join(d, "data", f))
            except OSError:
                pass
    else:
        uuid, seqno = node_position(env, n)
    args = list(env.galera_cmdlines[n]) + list(extra)
    if uuid and seqno >= 0:
        args.append("--wsrep-start-position=%s:%d" % (uuid, seqno))
    if bootstrap:
        args.append("--wsrep-new-cluster")
    for f in ("mysql.pid", "mysql.sock", "mysql.sock.lock"):
        try:
            os.unlink(os.path.join(d, f))
        except OSError:
            pass
    if os.geteuid() == 0:
        try:
            os.chown(os.path.join(d, "data"), 65534, 65534)
        except OSError:
            pass
    env.galera_logoff[n] = file_size(os.path.join(d, "mysql.log"))
    p = subprocess.Popen(["setsid"] + args, stdin=subprocess.DEVNULL,
                         stdout=open(os.path.join(d, "restart.log"), "a"),
                         stderr=subprocess.STDOUT)
    env.galera_started.append(p.pid)
    env.galera_procs[n] = p.pid
    # a node that joins a component without quorum does not answer until
    # the primary component is back: the caller waits for the cluster
    if wait:
        wait_until("node%d to answer" % n, 120,
                   lambda: gstatus(n, "wsrep_ready") is not None, 0.2)
    return uuid, seqno


def node_kill(n):
    pid = gnode_pid(n)
    os.kill(pid, signal.SIGKILL)
    wait_until("node%d to die" % n, 10, lambda: not alive(pid), 0.02)


def galera_wait_synced(secs=120, env=None, notes=None):
    """Until all three nodes are Synced in a primary component.  With env:
    a node restarted here that exits because it holds commits the
    primary component does not have ("Reversing history ... Data loss is
    possible. Must abort.") is noted, and joins again by SST, giving
    them up (what an operator has to do)."""
    resynced = set()

    def check():
        if galera_synced():
            return True
        for n, pid in list((env.galera_procs if env else {}).items()):
            if alive(pid) or n in resynced:
                continue
            logf = os.path.join(B, "galera", "node%d" % n, "mysql.log")
            with open(logf, errors="replace") as f:
                f.seek(env.galera_logoff.get(n, 0))
                m = re.findall(r"Reversing history: (\d+) -> (\d+), this "
                               r"member has applied (\d+) more events",
                               f.read())
            if not m:
                continue
            resynced.add(n)
            note = ("node%d was refused: it had applied %s more events "
                    "than the primary component (seqno %s -> %s, "
                    "\"Reversing history\"); rejoined by SST"
                    % (n, m[-1][2], m[-1][0], m[-1][1]))
            log("  " + note)
            if notes is not None:
                notes.append(note)
            node_restart(env, n, getattr(env, "extra", ()), wait=False,
                         sst=True)
        return False
    wait_until("the cluster: 3 nodes Synced and Primary", secs, check, 0.3)


def galera_nginx(env):
    env.gnginx = []
    for i, port in enumerate(G_NGINX_PORTS):
        ngx = Nginx("nginx-g%d" % (i + 1), port,
                    [store_line("g", "127.0.0.1:%d" % G_CLIENT_PORTS[i])],
                    [("/orders", "g", [])])
        ngx.start()
        env.gnginx.append(ngx)


def galera_scenarios(env):
    rng = random.Random(13)
    n, w = 120, 18.0
    both = list(G_NGINX_PORTS)

    def gops(name):
        return load.make_ops("%s-%s" % (env.run_id, name), n, w, both, rng)

    def kill_one(nem):
        nem.sleep(5.0)
        t = time.time()
        node_kill(1)
        nem.sleep(3.0)
        node_restart(env, 1, wait=False)
        galera_wait_synced(120, env, nem.notes)
        nem.fault("galera: node1 killed", t)

    def kill_two(nem):
        nem.sleep(5.0)
        t = time.time()
        node_kill(2)
        time.sleep(0.2)
        node_kill(1)
        nem.sleep(2.0)
        node_restart(env, 2, wait=False)
        node_restart(env, 1, wait=False)
        try:
            galera_wait_synced(60, env, nem.notes)
        except RuntimeError:
            nem.notes.append("the primary component was not restored by "
                             "itself in 60 s: pc.bootstrap=YES on node3")
            mysql_root(gnode_sock(3), "SET GLOBAL wsrep_provider_options="
                       "'pc.bootstrap=YES'")
            galera_wait_synced(120, env, nem.notes)
        nem.fault("galera: node2, node1 killed 0.2 s apart", t)

    def isolate(nem):
        nem.sleep(5.0)
        t = time.time()
        mysql_root(gnode_sock(1), "SET GLOBAL wsrep_provider_options="
                   "'gmcast.isolate=1'")
        nem.sleep(6.0)
        mysql_root(gnode_sock(1), "SET GLOBAL wsrep_provider_options="
                   "'gmcast.isolate=0'")
        galera_wait_synced()
        nem.fault("galera: node1 isolated", t)

    return [
        ("g-node-kill", "Galera: node1 SIGKILLed, restarted",
         gops("gkill1"), kill_one),
        ("g-two-kill", "Galera: node2 then node1 SIGKILLed 0.2 s apart",
         gops("gkill2"), kill_two),
        ("g-partition", "Galera: node1 cut off (gmcast.isolate=1, 6 s)",
         gops("giso"), isolate),
    ]


# ------------------------------------------------------------------ main

def cleanup(env=None):
    """Everything this harness may have left: run at the end and by
    --cleanup.  Only what build/faults/ names: pid files, the namespace."""
    try:
        tc_clear()
    except Exception:  # noqa: BLE001
        pass
    if env:
        for ngx in [env.nginx] + env.gnginx:
            if ngx:
                ngx.stop()
        env.svc.backend_stop()
        fence.bank_stop(env)
        relay = getattr(env, "relay", None)
        if relay and relay.poll() is None:
            relay.terminate()
            try:
                relay.wait(5)
            except subprocess.TimeoutExpired:
                relay.kill()
    else:
        for name in ("nginx", "nginx-g1", "nginx-g2"):
            prefix = os.path.join(B, name)
            for pf in ("logs/nginx.pid", "logs/nginx.pid.oldbin"):
                pid = read_pid(os.path.join(prefix, pf))
                if pid and alive(pid):
                    os.kill(pid, signal.SIGTERM)
        for pf in ("backend.pid", "bank.pid"):
            pid = read_pid(os.path.join(B, pf))
            if pid and alive(pid):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGTERM)
    svc = env.svc if env else Services()
    if svc.db_pid and alive(svc.db_pid):
        os.kill(svc.db_pid, signal.SIGCONT)
    if svc.redis_pid and alive(svc.redis_pid):
        os.kill(svc.redis_pid, signal.SIGCONT)
    svc.db_stop()
    if os.path.isdir(svc.redis_dir):
        svc.redis_stop()
    if os.path.exists(os.path.join(B, "galera")):
        galera_stop(env or Env(None))
    net_down()


def write_table(env, path):
    head = ("Run of %s, commit %s, %s. Lease %gs, query_timeout and "
            "connect_timeout %gs; clients: attempt timeout %gs, back-off "
            "0.1 s doubling to 2 s with jitter; bound after the heal %gs.\n\n"
            % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               env.commit, "short" if env.args.short else "full", LEASE,
               QUERY_TIMEOUT, 1.5, BOUND))
    with open(path, "w") as f:
        f.write(head + check.table(env.rows) + "\n")
        for r in env.rows:
            extra = []
            if r.get("orphan_keys"):
                extra.append("%d keys answered 409 while no execution of "
                             "theirs ran, for up to %s" % (
                                 r["orphan_keys"],
                                 check.fmt_s(r["orphan_max"])))
            if r.get("fencing"):
                extra.append("%d keys committed by two executions, the "
                             "second begun after the first had committed"
                             % r["keys_commit_multi"])
            if r.get("module_lat_max") is not None:
                extra.append("slowest module answer (409/503/410) in the "
                             "fault %s" % check.fmt_s(r["module_lat_max"]))
            if r.get("errorlog"):
                for n, s in r["errorlog"].items():
                    if s:
                        extra.append("%s: %s" % (n, ", ".join(
                            "%s %d" % kv for kv in sorted(s.items()))))
            if r["notes"]:
                extra += r["notes"]
            if r["problems"]:
                extra.append("problems: " + "; ".join(r["problems"][:5]))
            f.write("\n- %s: %s" % (r["name"], "; ".join(extra) or "-"))
        f.write("\n")


def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--no-galera", action="store_true")
    ap.add_argument("--cleanup", action="store_true")
    args = ap.parse_args()

    if os.geteuid() != 0:
        print("faults: needs root (network namespaces, tc)", file=sys.stderr)
        return 2
    if args.cleanup:
        cleanup()
        return 0
    if not os.path.exists(MODULE):
        print("faults: %s missing: make build" % MODULE, file=sys.stderr)
        return 2

    cleanup()
    shutil.rmtree(B, ignore_errors=True)
    os.makedirs(B)
    LOG = open(os.path.join(B, "faults.log"), "a")
    env = Env(args)
    env.commit = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                    check_rc=False).strip() or "?"
    only = set(x for x in args.only.split(",") if x)
    t0 = time.time()

    def on_signal(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    rc = 0
    try:
        for p in (DB_PORT, REDIS_PORT, BACKEND_PORT, fence.BANK_PORT,
                  NGINX_PORT):
            if port_busy(p):
                raise RuntimeError("port %d is in use" % p)
        net_up()
        env.svc.db_start()
        env.svc.redis_start()
        env.svc.backend_start()
        fence.bank_start(sys.modules[__name__], env)
        env.relay = subprocess.Popen(
            ["ip", "netns", "exec", NS, PYTHON, os.path.join(HERE, "relay.py"),
             "%s:%d" % (DB_IP, RELAY_PORT), "%s:%d" % (DB_IP, DB_PORT),
             "150", "50"], stdin=subprocess.DEVNULL,
            stdout=open(os.path.join(B, "relay.log"), "a"),
            stderr=subprocess.STDOUT, start_new_session=True)
        locs = [("/orders", "main", []), ("/r/orders", "withredis", []),
                ("/d/orders", "slow", []),
                ("/k/orders", "main", ["idempotency_lease %ds"
                                       % SHORT_LEASE]),
                ("/t/orders", "main", ["proxy_read_timeout 1s"]),
                ("/f/orders", "main",
                 ["idempotency_lease %ds" % SHORT_LEASE,
                  "idempotency_epoch_header %s" % EPOCH_HEADER])]
        locs += fence.locations(SHORT_LEASE, NGINX_PORT)
        env.nginx = Nginx("nginx", NGINX_PORT,
                          [store_line("main", "%s:%d" % (DB_IP, DB_PORT)),
                           store_line("purging", "%s:%d" % (DB_IP, DB_PORT),
                                      purge="1s"),
                           store_line("withredis", "%s:%d" % (DB_IP, DB_PORT),
                                      redis=True),
                           store_line("slow", "%s:%d" % (DB_IP, RELAY_PORT))],
                          locs)
        env.nginx.start()

        scen = single_scenarios(env, args.short)
        if not args.short:
            scen.append(fencing_scenario(env))
            scen.append(gateway_scenario(env))
        scen += fence.scenarios(sys.modules[__name__], env, args.short,
                                random.Random(48))
        for name, title, ops, fn in scen:
            if only and name not in only:
                continue
            kw = {}
            if name.startswith("fence-"):
                # the first retry once the bank answers again decides;
                # after a worker kill, once the lease and the old
                # execution (5 s) are over
                kw = {"fencing": True, "bound": FENCE_BOUND,
                      "checker": lambda d, n=name: fence.check_run(
                          sys.modules[__name__], env, d, n)}
                if name == "fence-worker-kill":
                    kw.update(bound=SHORT_LEASE + 5.0 + FENCE_BOUND,
                              policy=load.Policy(budget=40.0),
                              lease=SHORT_LEASE)
            if name == "fencing":
                kw = {"fencing": True, "bound": SHORT_LEASE + 7.5 + BOUND,
                      "policy": load.Policy(budget=40.0),
                      "lease": SHORT_LEASE}
            elif name == "worker-kill":
                kw = {"lease": SHORT_LEASE}
            run_scenario(env, name, title, ops, fn, **kw)

        if not args.short and not args.no_galera and (
                not only or any(x.startswith("g-") for x in only)):
            galera_start(env)
            galera_nginx(env)
            for name, title, ops, fn in galera_scenarios(env):
                if only and name not in only:
                    continue
                run_scenario(env, name, title, ops, fn, logs=env.gnginx)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001
        log("faults: harness failure: %s" % e)
        rc = 2
    finally:
        log("cleaning up")
        try:
            cleanup(env)
        except Exception as e:  # noqa: BLE001
            log("cleanup: %s" % e)
            rc = rc or 2

    if env.rows:
        path = os.path.join(B, "table.md")
        write_table(env, path)
        print()
        print(open(path).read())
        if rc == 0 and not all(r["ok"] for r in env.rows):
            rc = 1
    log("faults: %s in %.0f s" % ({0: "passed", 1: "VIOLATED",
                                   2: "harness failure"}[rc],
                                  time.time() - t0))
    return rc


if __name__ == "__main__":
    sys.exit(main())

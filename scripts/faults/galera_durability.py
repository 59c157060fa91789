#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""What a claim survives on the Galera cluster, per setting (scale-out.md).

    scripts/faults/galera_durability.py [--configs NAME,...]

The cluster of scripts/galera.sh (build/faults/galera), two nginx (8482
on node1, 8483 on node2) and the backend (8493, --exec-log).  For each
configuration (innodb_flush_log_at_trx_commit, wsrep_sync_wait, set on
every node with SET GLOBAL and on the command line of every restart):

1. cost: 16 clients, each sending first requests (new keys, no delay)
   one after another for COST_SECONDS through both nginx, then the same
   keys again (replays): requests per second and latency;
2. for each crash pattern: the table emptied, new keys sent open-loop
   (about 60 a second) through both nginx; after 3 s the nodes of the
   pattern are SIGKILLed (100 ms apart); the load stops 1 s later; the
   cluster is recovered (the killed nodes started again with their
   command lines; when all three died, each is asked for its position
   with --wsrep-recover and the most advanced bootstraps); then
   - acknowledged claims: keys the backend executed (their claim INSERT
     had committed and answered nginx), and of those, the completed
     ones (the client had the response, which nginx sends only once the
     completion has committed);
   - what the table holds afterwards, on each node;
   - every acknowledged key sent again until it has a final answer: a
     key whose claim or completion was lost runs a second time.

The results go to build/faults/galera-durability.md.
"""

import sys
sys.dont_write_bytecode = True
import argparse
import asyncio
import json
import os
import random
import re
import signal
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import faults  # noqa: E402
import load    # noqa: E402
from faults import B, log, mysql_root, gnode_sock, alive  # noqa: E402

faults.BACKEND_PORT = 8493
COST_SECONDS = 8.0
COST_CLIENTS = 16

CONFIGS = {
    # name: (innodb_flush_log_at_trx_commit, wsrep_sync_wait)
    "flush2": (2, 0),     # the project's (scripts/services.sh) default
    "flush0": (0, 0),
    "flush1": (1, 0),
    "flush1-sync1": (1, 1),
}
PATTERNS = {
    "two": (1, 2),        # node1, then node2: node3 is left alone
    "all": (1, 2, 3),
}


def settings_sql(flush, sync_wait):
    return ("SET GLOBAL innodb_flush_log_at_trx_commit = %d; "
            "SET GLOBAL wsrep_sync_wait = %d" % (flush, sync_wait))


def extra_args(flush, sync_wait):
    return ["--innodb-flush-log-at-trx-commit=%d" % flush,
            "--wsrep-sync-wait=%d" % sync_wait]


def apply(env, flush, sync_wait):
    for n in (1, 2, 3):
        mysql_root(gnode_sock(n), settings_sql(flush, sync_wait))
    env.extra = extra_args(flush, sync_wait)


async def cost(env, tag):
    ports = list(faults.G_NGINX_PORTS)
    lat_first, lat_replay = [], []
    ops = []
    stop = time.time() + COST_SECONDS

    async def worker(i):
        n = 0
        while time.time() < stop:
            key = "%s-cost-%s-%d-%d" % (env.run_id, tag, i, n)
            op = load.Op(key, "/orders?op=%s" % key, b"{}", ports[i % 2], 0,
                         1)
            a = await load.attempt(op.host, op.port, op.request(op.port), 5)
            if a.outcome == "http" and a.status == 201:
                lat_first.append(a.t1 - a.t0)
                ops.append(op)
            n += 1

    t0 = time.time()
    await asyncio.gather(*(worker(i) for i in range(COST_CLIENTS)))
    wall = time.time() - t0
    sem = asyncio.Semaphore(COST_CLIENTS)

    async def replay(op):
        async with sem:
            a = await load.attempt(op.host, op.port, op.request(op.port), 5)
            if a.outcome == "http" and a.status == 201:
                lat_replay.append(a.t1 - a.t0)

    t1 = time.time()
    await asyncio.gather(*(replay(op) for op in ops))
    wall2 = time.time() - t1
    return {"first_rps": len(lat_first) / wall,
            "first_p50": load_pct(lat_first, 50),
            "first_p99": load_pct(lat_first, 99),
            "replay_rps": len(lat_replay) / wall2 if wall2 else 0,
            "replay_p50": load_pct(lat_replay, 50),
            "replay_p99": load_pct(lat_replay, 99)}


def load_pct(v, p):
    from check import pct
    return pct(v, p)


def recover_all(env, nodes):
    """All nodes died: the most advanced (by --wsrep-recover) bootstraps."""
    pos = dict((n, faults.node_position(env, n)[1]) for n in nodes)
    best = max(pos, key=lambda n: pos[n])
    gs = os.path.join(B, "galera", "node%d" % best, "data", "grastate.dat")
    with open(gs) as f:
        text = f.read()
    text = re.sub(r"safe_to_bootstrap:\s*\d", "safe_to_bootstrap: 1", text)
    with open(gs, "w") as f:
        f.write(text)
    faults.node_restart(env, best, env.extra, bootstrap=True)
    for n in nodes:
        if n != best:
            faults.node_restart(env, n, env.extra, wait=False)
    return pos, best


def table_counts(n):
    out = mysql_root(gnode_sock(n), "SELECT COUNT(*), COALESCE(SUM(state = "
                     "1), 0) FROM idempotency.idempotency_keys")
    rows, done = out.split()
    return int(rows), int(done)


def trial(env, tag, pattern):
    mysql_root(gnode_sock(1), "TRUNCATE TABLE idempotency.idempotency_keys")
    faults.galera_wait_synced(60)
    d = os.path.join(B, "durability", tag)
    os.makedirs(d, exist_ok=True)
    rec = load.Recorder(os.path.join(d, "answers.jsonl"))
    exec_off = faults.file_size(env.svc.exec_log)
    log_offs = [(n, faults.file_size(n.error_log)) for n in env.gnginx]
    rng = random.Random(5)
    ports = list(faults.G_NGINX_PORTS)
    n = 240
    ops = load.make_ops("%s-dur-%s" % (env.run_id, tag), n, 4.0, ports, rng,
                        delays=((1.0, 0, 30),), shared=0.0)
    policy = load.Policy(attempt_timeout=2.0, budget=3.0, max_attempts=2)
    killed_at = []

    async def run():
        async def nemesis():
            await asyncio.sleep(3.0)
            for i, node in enumerate(pattern):
                if i:
                    await asyncio.sleep(0.1)
                os.kill(faults.gnode_pid(node), signal.SIGKILL)
                killed_at.append(time.time())
        await asyncio.gather(load.run_load(ops, policy, rec, seed=3),
                             nemesis())
    asyncio.run(run())
    for node in pattern:
        pid = faults.gnode_pid(node)
        if pid:
            faults.wait_until("node%d to die" % node, 10,
                              lambda: not alive(pid))
    t_rec = time.time()
    notes = []
    if len(pattern) == 3:
        pos, best = recover_all(env, pattern)
        notes.append("positions %s, node%d bootstrapped" % (pos, best))
    else:
        for node in pattern:
            faults.node_restart(env, node, env.extra, wait=False)
    try:
        faults.galera_wait_synced(90, env, notes)
    except RuntimeError:
        notes.append("primary component not restored in 90 s: "
                     "pc.bootstrap=YES on node3")
        mysql_root(gnode_sock(3), "SET GLOBAL wsrep_provider_options="
                   "'pc.bootstrap=YES'")
        faults.galera_wait_synced(90, env, notes)
    recovery = time.time() - t_rec
    counts = {nd: table_counts(nd) for nd in (1, 2, 3)}

    from check import load_jsonl
    answers = load_jsonl(os.path.join(d, "answers.jsonl"))
    prefix = "%s-dur-%s-" % (env.run_id, tag)
    acked = set(e["key"] for e in faults.exec_events(
        env.svc.exec_log, exec_off,
        lambda e: e["ev"] == "exec" and e["key"].startswith(prefix)))
    completed = set(a["k"] for a in answers
                    if a.get("st") == 201 and a["ph"] == "load")
    # every acknowledged key again, until a final answer
    again = [o for o in ops if o.key in acked]
    rec2 = load.Recorder(os.path.join(d, "answers.jsonl"))
    settled = asyncio.run(load.settle(
        again, load.Policy(budget=40.0), rec2,
        time.time() + faults.LEASE + 20))
    rec.close()
    rec2.close()
    ran = {}
    for e in faults.exec_events(env.svc.exec_log, exec_off,
                                lambda e: e["ev"] == "exec"
                                and e["key"] in acked):
        ran[e["key"]] = ran.get(e["key"], 0) + 1
    # responses nginx sent although their completion had not committed
    # (query_timeout ran out: "not committed within ... sent to the client
    # anyway"): not a completion the store acknowledged
    unsure = set()
    for ngx, off in log_offs:
        with open(ngx.error_log, errors="replace") as f:
            f.seek(off)
            unsure |= set(re.findall(r"not committed within .*?request: "
                                     r"\"POST [^ \"]*op=([^& \"]+)",
                                     f.read()))
    completed -= unsure
    twice = [k for k, c in ran.items() if c > 1]
    twice_completed = [k for k in twice if k in completed]
    twice_unsure = [k for k in twice if k in unsure]
    rows_min = min(r for r, _ in counts.values())
    done_min = min(dn for _, dn in counts.values())
    res = {"acked": len(acked), "completed": len(completed),
           "unsure": len(unsure), "ran_twice_unsure": len(twice_unsure),
           "claims_lost": len(acked) - rows_min,
           # rows kept but not completed, of the keys nginx saw complete
           # (a lost row takes its completion with it: not counted twice)
           "completions_lost": max(0, len(completed) - done_min
                                   - (len(acked) - rows_min)),
           "rows": counts, "ran_twice": len(twice),
           "ran_twice_completed": len(twice_completed),
           "unsettled": sum(1 for v in settled.values() if v is None),
           "recovery": recovery, "notes": notes,
           "killed_span": (killed_at[-1] - killed_at[0]) if killed_at
           else None}
    json.dump(res, open(os.path.join(d, "result.json"), "w"), indent=1)
    log("  %s: %s" % (tag, res))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("galera-durability: needs root", file=sys.stderr)
        return 2
    faults.cleanup()
    import shutil
    shutil.rmtree(B, ignore_errors=True)
    os.makedirs(B)
    faults.LOG = open(os.path.join(B, "durability.log"), "a")
    env = faults.Env(argparse.Namespace(short=False))
    env.extra = []
    results = []
    rc = 0
    try:
        if faults.port_busy(faults.BACKEND_PORT):
            raise RuntimeError("port %d is in use" % faults.BACKEND_PORT)
        env.svc.backend_start()
        faults.galera_start(env)
        faults.galera_nginx(env)
        for name in args.configs.split(","):
            flush, sw = CONFIGS[name]
            log("config %s: innodb_flush_log_at_trx_commit=%d "
                "wsrep_sync_wait=%d" % (name, flush, sw))
            apply(env, flush, sw)
            c = asyncio.run(cost(env, name))
            log("  cost: %s" % c)
            row = {"config": name, "flush": flush, "sync_wait": sw,
                   "cost": c, "trials": {}}
            for p in args.patterns.split(","):
                for i in range(args.repeat):
                    row["trials"]["%s #%d" % (p, i + 1)] = trial(
                        env, "%s-%s-%d" % (name, p, i + 1), PATTERNS[p])
            results.append(row)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001
        log("galera-durability: harness failure: %s" % e)
        rc = 2
    finally:
        try:
            faults.cleanup(env)
        except Exception as e:  # noqa: BLE001
            log("cleanup: %s" % e)
    with open(os.path.join(B, "galera-durability.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(B, "galera-durability.md"), "w") as f:
        f.write(render(results))
    print(render(results))
    return rc


def render(results):
    fs = faults.check.fmt_s
    out = ["| setting | first requests/s | first p50 / p99 | replays/s | "
           "replay p50 / p99 | nodes killed | claims acknowledged | "
           "completions acknowledged | rows after (completed), each node | "
           "claims lost | completions lost | responses sent uncommitted | "
           "ran again | recovery | notes |", "|" + "---|" * 15]
    for r in results:
        c = r["cost"]
        for p, t in r["trials"].items():
            rows = ", ".join("%d (%d)" % tuple(t["rows"][n])
                             for n in (1, 2, 3))
            out.append("| flush=%d sync_wait=%d | %.0f | %s / %s | %.0f | "
                       "%s / %s | %s | %d | %d | %s | %d | %d | %d | %d "
                       "(%d of them after an uncommitted response) | "
                       "%.0f s | %s |" % (
                           r["flush"], r["sync_wait"], c["first_rps"],
                           fs(c["first_p50"]), fs(c["first_p99"]),
                           c["replay_rps"], fs(c["replay_p50"]),
                           fs(c["replay_p99"]), p, t["acked"],
                           t["completed"], rows, t["claims_lost"],
                           t["completions_lost"], t["unsure"],
                           t["ran_twice"], t["ran_twice_unsure"],
                           t["recovery"], "; ".join(t["notes"]) or "-"))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())

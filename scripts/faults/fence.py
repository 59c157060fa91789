# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""The fence-or-find scenarios of scripts/faults/ (docs/reliability.md).

Withdrawals under retrying load through /withdraw, a location with
idempotency_fence and proxy_read_timeout 1s, to the bank (backend/app.py
--bank-db, backend/withdraw.py) on the faults' MariaDB: each key
withdraws 1 from an account of its own, in one transaction with the
fence's marker.  The nemesis SIGKILLs the bank (restarted at once) or
stops it (SIGSTOP) past proxy_read_timeout while its transactions hold
their markers.  The clients obey the module's should-retry hint: a 502
outcome-unknown that says X-Should-Retry: true is retried.

The verdict comes from the bank's own tables, not from a log: per key at
most one withdrawal, exactly one when a client got 201 or 410
outcome-executed; no key answered both; every key has a definite final
answer (201, its replay, or 410 outcome-executed) within the bound after
the last fault healed.
"""

import sys
sys.dont_write_bytecode = True
import json
import os
import signal
import subprocess
import time

import check
import load

BANK_PORT = 8492
AMOUNT = 1
BALANCE = 100


def bank_python(faults):
    """An interpreter with Debian's python3-pymysql (scripts/deps.sh)."""
    for py in (faults.PYTHON, "/usr/bin/python3"):
        if subprocess.run([py, "-c", "import pymysql"],
                          stderr=subprocess.DEVNULL).returncode == 0:
            return py
    raise RuntimeError("no python3 with pymysql (scripts/deps.sh)")


def bank_start(faults, env):
    """The bank, connected to the faults' MariaDB over the veth pair."""
    svc = env.svc
    svc.bank = subprocess.Popen(
        [bank_python(faults), os.path.join(faults.ROOT, "backend", "app.py"),
         "--port", str(BANK_PORT), "--bank-db", "idempotency",
         "--bank-host", faults.DB_IP, "--bank-port", str(faults.DB_PORT),
         "--bank-user", "idem", "--bank-password", "idem-secret",
         "--log", os.path.join(faults.B, "bank.log"),
         "--pidfile", os.path.join(faults.B, "bank.pid")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(faults.B, "bank.err"), "a"),
        start_new_session=True)
    faults.wait_until("the bank", 15, lambda: faults.port_busy(BANK_PORT))


def bank_stop(env):
    bank = getattr(env.svc, "bank", None)
    if bank and bank.poll() is None:
        os.kill(bank.pid, signal.SIGCONT)
        bank.kill()
        bank.wait(10)


FENCE = ["idempotency_fence main",
         "idempotency_epoch_header Idempotency-Epoch",
         "proxy_set_header Idempotency-Marker $idempotency_marker"]


def locations(short_lease):
    """The fenced locations of faults.py's nginx: (path, store, extra,
    backend port).  /withdraw gives up after 1 s; /k/withdraw waits
    (proxy_read_timeout 60s) with a short lease, for the worker kills."""
    return [("/withdraw", "main", FENCE + ["proxy_read_timeout 1s"],
             BANK_PORT),
            ("/k/withdraw", "main", FENCE + [
                "idempotency_lease %ds" % short_lease,
                "proxy_read_timeout 60s"], BANK_PORT)]


def make_ops(faults, env, name, n, window, rng, path="/withdraw",
             slow=None):
    """n withdrawals, each key from an account of its own (opened here);
    slow: a query parameter for all of them (delay=MS, hold=MS)."""
    ops = []
    for i in range(n):
        key = "%s-%s-%04d" % (env.run_id, name, i)
        clients = rng.choice((1, 1, 1, 2, 3))
        ops.append(load.Op(key, "%s?account=%s&amount=%d%s"
                           % (path, key, AMOUNT,
                              "&" + slow(i) if slow else ""),
                           b"{}", faults.NGINX_PORT,
                           window * i / max(1, n) + rng.uniform(0, 0.05),
                           clients))
    values = ", ".join("('%s', %d)" % (o.key, BALANCE) for o in ops)
    faults.mysql_root(env.svc.db_sock, "INSERT INTO idempotency.accounts "
                      "VALUES %s" % values)
    return ops


def kill(faults, nem, times, gap):
    """SIGKILL the bank mid-withdrawals, started again at once."""
    for _ in range(times):
        t = time.time()
        bank = nem.env.svc.bank
        bank.kill()
        bank.wait(10)
        bank_start(faults, nem.env)
        nem.fault("bank-kill", t)
        nem.sleep(gap)


def pause(nem, secs):
    """SIGSTOP the bank for secs: past proxy_read_timeout, its open
    transactions hold their markers' locks."""
    nem.pause("bank-pause", nem.env.svc.bank.pid, secs)


def scenarios(faults, env, short, rng):
    """(name, title, ops, nemesis) of the fence scenarios."""
    n = 40 if short else 100
    w = 8.0 if short else 16.0

    def kills(nem):
        nem.sleep(1.5)
        kill(faults, nem, 3, w / 4)

    sc = [("fence-kill", "fenced withdrawals, bank SIGKILL x3, restarted",
           make_ops(faults, env, "fkill", n, w, rng), kills)]
    if short:
        return sc

    def pauses(nem):
        nem.sleep(2.0)
        for _ in range(2):
            pause(nem, 3.0)
            nem.sleep(3.0)
    sc.append(("fence-pause", "fenced withdrawals, bank SIGSTOP 3 s x2 "
               "(past proxy_read_timeout 1s)",
               make_ops(faults, env, "fpause", n, w, rng), pauses))

    # the owners' workers die while their withdrawals are slow: half wait
    # 5 s before their transaction, half hold their marker 5 s; after the
    # lease a retry fences the epoch while the old execution goes on
    def kills(nem):
        for t in (2.0, 6.0, 10.0):
            nem.sleep(t - (time.time() - start[0]))
            nem.worker_kill()
    start = [time.time()]

    def wkill(nem):
        start[0] = time.time()
        kills(nem)
    sc.append(("fence-worker-kill", "fenced withdrawals of 5 s, nginx "
               "workers SIGKILL x3 (lease %gs): takeovers racing the old "
               "executions" % faults.SHORT_LEASE,
               make_ops(faults, env, "fwkill", 24, 12.0, rng,
                        path="/k/withdraw",
                        slow=lambda i: ("delay=5000", "hold=5000")[i % 2]),
               wkill))
    return sc


def classify(a):
    if a["o"] == "timeout":
        return "timeout"
    if a["o"] != "http":
        return "conn"
    st, pt = a["st"], a.get("pt") or ""
    if 200 <= st < 300:
        return "replay" if a.get("rep") == "true" else "first"
    if st == 410 and pt.endswith("outcome-executed"):
        return "executed"
    if st == 502 and pt.endswith("outcome-unknown"):
        return "unknown"
    if st == 409 and pt.endswith("request-in-progress"):
        return "409"
    if st == 503 and pt.endswith("store-unavailable"):
        return "503"
    if st in (502, 504) and not pt:
        return "gateway"
    return "other"


def check_run(faults, env, rundir):
    """The row of check.table() for a fence scenario, from the answers
    and the bank's withdrawals."""
    meta = json.load(open(os.path.join(rundir, "meta.json")))
    answers = check.load_jsonl(os.path.join(rundir, "answers.jsonl"))
    keys = meta["keys"]
    out = faults.mysql_root(env.svc.db_sock,
                            "SELECT account, COUNT(*) FROM "
                            "idempotency.withdrawals WHERE account LIKE "
                            "'%s%%' GROUP BY account"
                            % keys[0].rsplit("-", 1)[0])
    ran = {}
    for line in out.splitlines():
        p = line.split("\t")
        if len(p) == 2 and p[1].isdigit():
            ran[p[0]] = int(p[1])

    classes, first_final, seen = {}, {}, {}
    for a in answers:
        c = classify(a)
        classes[c] = classes.get(c, 0) + 1
        seen.setdefault(a["k"], set()).add(c)
        if c in ("first", "replay", "executed"):
            t = first_final.get(a["k"])
            first_final[a["k"]] = a["t1"] if t is None else min(t, a["t1"])

    problems = []
    limit = meta["heal"] + meta["bound"]
    unanswered = 0
    for k in keys:
        n, s = ran.get(k, 0), seen.get(k, set())
        if n > 1:
            problems.append("key %s: %d withdrawals" % (k, n))
        if s & {"first", "replay", "executed"} and n != 1:
            problems.append("key %s: answered %s with %d withdrawals"
                            % (k, "/".join(sorted(s)), n))
        if {"first", "replay"} & s and "executed" in s:
            problems.append("key %s: answered both 201 and 410" % k)
        t = first_final.get(k)
        if t is None or t > limit:
            unanswered += 1
            problems.append("key %s: no definite answer within %.0fs of the "
                            "heal" % (k, meta["bound"]))
    if classes.get("other"):
        problems.append("%d answers of class other" % classes["other"])

    refused = open(os.path.join(faults.B, "bank.log"),
                   errors="replace").read().count("is fenced or ran")
    execs = sum(ran.values())
    return {
        "name": meta["name"], "title": meta["title"],
        "requests": len(answers), "keys": len(keys), "execs": execs,
        "keys_multi": sum(1 for v in ran.values() if v > 1),
        "keys_commit_multi": sum(1 for v in ran.values() if v > 1),
        "rerun_owner_death": 0, "rerun_long_outage": 0,
        "refused_start": refused, "refused_commit": 0, "fencing": True,
        "differs": 0, "unanswered": unanswered,
        "classes": {"first": classes.get("first", 0),
                    "replay": classes.get("replay", 0),
                    "409": classes.get("409", 0),
                    "503": classes.get("503", 0),
                    "410": classes.get("executed", 0),
                    "unknown": classes.get("unknown", 0),
                    "gateway": classes.get("gateway", 0),
                    "timeout": classes.get("timeout", 0),
                    "conn": classes.get("conn", 0)},
        "lat_p50": None, "lat_p99": None, "lat_max": None,
        "problems": problems, "ok": not problems,
        "notes": meta.get("notes", []) + [
            "%d withdrawals for %d keys; the bank refused %d stale "
            "executions by their marker (all runs so far); 410 = "
            "outcome-executed" % (execs, len(keys), refused)],
    }

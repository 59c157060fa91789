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


def locations(short_lease, nginx_port):
    """The fenced locations of faults.py's nginx: (path, store, extra,
    backend port).  /withdraw gives up after 1 s; /k/withdraw waits
    (proxy_read_timeout 60s) with a short lease, for the worker kills;
    /s/withdraw goes through a sidecar, /sc/ (a location of the same
    nginx without the module), which gives up after 1 s and answers 504;
    /p/withdraw keeps its keys 5 s, in the store "purging" (purge=1s),
    and /p2/withdraw, in the same table, an hour."""
    return [("/withdraw", "main", FENCE + ["proxy_read_timeout 1s"],
             BANK_PORT),
            ("/k/withdraw", "main", FENCE + [
                "idempotency_lease %ds" % short_lease,
                "proxy_read_timeout 60s"], BANK_PORT),
            ("/s/withdraw", "main", FENCE + [
                "proxy_read_timeout 10s",
                "rewrite ^/s/(.*)$ /sc/$1 break"], nginx_port),
            ("/sc/", "off", ["proxy_read_timeout 1s"], BANK_PORT),
            ("/p/withdraw", "purging", FENCE + [
                "idempotency_ttl 5s", "idempotency_lease 3s",
                "proxy_read_timeout 1s"], BANK_PORT),
            ("/p2/withdraw", "purging", FENCE + [
                "proxy_read_timeout 1s"], BANK_PORT)]


def make_ops(faults, env, name, n, window, rng, path="/withdraw",
             slow=None, amount=AMOUNT, at=0.0, accounts=True):
    """n withdrawals, each key from an account of its own (opened here);
    slow: a query parameter for all of them (delay=MS, hold=MS)."""
    ops = []
    for i in range(n):
        key = "%s-%s-%04d" % (env.run_id, name, i)
        clients = rng.choice((1, 1, 1, 2, 3))
        ops.append(load.Op(key, "%s?account=%s&amount=%d%s"
                           % (path, key, amount,
                              "&" + slow(i) if slow else ""),
                           b"{}", faults.NGINX_PORT,
                           at + window * i / max(1, n)
                           + rng.uniform(0, 0.05), clients))
    if not accounts:
        return ops
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

    # the fault is the backend's own answer: nothing else is done
    def idle(nem):
        nem.sleep(0.1)

    # issue 43: the attempt that committed and answered a 5xx is fenced
    # before the key runs again, and the retry finds the withdrawal's 201
    sc.append(("fence-5xx-commit", "fenced withdrawals that answer 503 "
               "after COMMIT (the commit's answer lost): fenced, then found",
               make_ops(faults, env, "f5xx", n, w, rng,
                        slow=lambda i: "lose=commit"), idle))
    sc.append(("fence-sidecar-504", "fenced withdrawals through a sidecar "
               "that answers 504 after 1 s while the bank answers 2 s after "
               "COMMIT: released as a 5xx, fenced, then found",
               make_ops(faults, env, "fside", n, w, rng, path="/s/withdraw",
                        slow=lambda i: "linger=2000"), idle))

    # a key's retention ends (5 s), the purge deletes its row, and the key
    # is used for another withdrawal: a new use, with a marker of its own
    # (kept an hour, so that the clients of the first use that ask again
    # at the end are told key-reused, not run anew)
    reuse = make_ops(faults, env, "freuse", n // 2, w / 2, rng,
                     path="/p/withdraw")
    reuse += make_ops(faults, env, "freuse", n // 2, w / 2, rng,
                      path="/p2/withdraw", amount=2 * AMOUNT,
                      at=w / 2 + 9.0, accounts=False)
    sc.append(("fence-purge-reuse", "fenced keys kept 5 s, purged, then "
               "used for another withdrawal: each use runs once", reuse,
               idle))

    # a fence storm on the keys' own store: withdrawals that hold their
    # marker 6 s, retried by several clients each, while other keys, 4 s
    # each (their lease renewed), must keep their leases and complete
    storm = make_ops(faults, env, "fstorm-s", 2 * n, w / 2, rng,
                     slow=lambda i: "hold=6000")
    for o in storm:
        o.clients = 3
    storm += [load.Op("%s-fstorm-u-%04d" % (env.run_id, i),
                      "/orders?delay=4000", b"{}", faults.NGINX_PORT,
                      1.0 + w * i / n, 1) for i in range(n // 2)]
    sc.append(("fence-storm", "a fence storm on the keys' store (%d keys "
               "holding their marker 6 s, 3 clients each) while %d other "
               "keys of 4 s run: theirs complete, no lease lost"
               % (2 * n, n // 2), storm, idle))
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
    if st >= 500 and pt and not pt.startswith("urn:ngx-idempotency:"):
        # the backend's own 5xx (a 503 after its commit): passed on
        return "gateway"
    if st == 422 and pt.endswith("key-reused"):
        # the first use's clients asking again after the key's new use
        return "reused"
    return "other"


def check_reuse(faults, env, answers, keys):
    """fence-purge-reuse: each key withdrew 1, then (its row purged) 2;
    both uses got a 2xx"""
    problems = []
    out = faults.mysql_root(env.svc.db_sock,
                            "SELECT account, GROUP_CONCAT(amount ORDER BY id)"
                            " FROM idempotency.withdrawals WHERE account LIKE"
                            " '%s%%' GROUP BY account"
                            % keys[0].rsplit("-", 1)[0])
    amounts = dict(line.split("\t") for line in out.splitlines()
                   if "\t" in line)
    for k in keys:
        if amounts.get(k) != "%d,%d" % (AMOUNT, 2 * AMOUNT):
            problems.append("key %s: withdrawals %s, not %d then %d"
                            % (k, amounts.get(k), AMOUNT, 2 * AMOUNT))
    oks = {}
    for a in answers:
        if classify(a) in ("first", "replay"):
            oks.setdefault(a["k"], set()).add(a.get("sha"))
    for k in keys:
        if len(oks.get(k, ())) < 2:
            problems.append("key %s: not both uses answered 2xx" % k)
    return problems


def check_storm(meta, answers):
    """fence-storm: the other keys were never refused for the store (503)
    and no lease was lost while the fences stormed"""
    problems = []
    n503 = sum(1 for a in answers if "-fstorm-u-" in a["k"]
               and classify(a) == "503")
    if n503:
        problems.append("%d answers 503 to keys not fenced" % n503)
    for ngx, s in meta.get("errorlog", {}).items():
        if s.get("lease lost"):
            problems.append("%s: %d lease lost" % (ngx, s["lease lost"]))
    return problems


def check_run(faults, env, rundir, name=""):
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
    uses = 2 if name == "fence-purge-reuse" else 1
    if name == "fence-purge-reuse":
        problems += check_reuse(faults, env, answers, keys)
    if name == "fence-storm":
        problems += check_storm(meta, answers)
    for k in keys:
        n, s = ran.get(k, 0), seen.get(k, set())
        if "-fstorm-u-" in k:
            if not {"first", "replay"} & s:
                problems.append("key %s (not fenced): no 2xx" % k)
            continue
        if n > uses:
            problems.append("key %s: %d withdrawals" % (k, n))
        if s & {"first", "replay", "executed"} and n != uses:
            problems.append("key %s: answered %s with %d withdrawals"
                            % (k, "/".join(sorted(s)), n))
        if {"first", "replay"} & s and "executed" in s:
            problems.append("key %s: answered both 201 and 410" % k)
        if "executed" in s and name in ("fence-5xx-commit",
                                        "fence-sidecar-504"):
            problems.append("key %s: 410, not the withdrawal's own answer"
                            % k)
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

#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""The checker of scripts/faults/: what held and what did not, per fault.

    python3 scripts/faults/check.py RUNDIR [RUNDIR...]   (a scenario each)

A scenario's directory holds meta.json (the scenario, its faults with
start and end, the time the last one healed, the bound for answers after
healing, the nginx workers killed and the upstream ports they held),
answers.jsonl (every attempt of every client, scripts/faults/load.py) and
exec.jsonl (the backend's execution log for the scenario's keys,
backend/app.py --exec-log).

Each answer is classified:

  first      the backend's response, not replayed, equal to the key's
             first result (status and body byte for byte: the SHA-256 of
             the body the backend sent against the one the client got)
  replay     Idempotent-Replayed: true and equal to the first result
  409        key in progress (documented; Retry-After expected)
  503        store-unavailable (documented)
  410        response-not-stored (documented)
  unknown    502 problem+json whose type ends in outcome-unknown
             (documented: sent, no complete answer)
  stale      409 from a fencing backend: a stale executor refused
  gateway    nginx's own 502/504 (no problem document)
  timeout    the client gave up on the attempt (its own timeout)
  conn       no HTTP answer (reset, refused, closed)
  differs    a backend response that is not the key's first result
  other      anything else

Verdict (exit status 1 when violated):
  - no key executes twice, except "re-run after owner death": the first
    execution was in flight on an upstream connection of an nginx worker
    that the nemesis killed (its port is in the kill's list) and started
    before the kill; and "re-run after a long outage": the store did not
    answer for so long (2/3 of the lease, less 1 s) that the owner could
    not renew its lease (design.md, "What is guaranteed": a lease lost
    while the owner is still working); both counted apart, as are, with
    fencing, the executions
    the backend refused (at start or at commit) and the commits per key;
  - every backend answer a client gets is the key's first result (for a
    re-run key: one of its executions' results, counted apart);
  - every key has a final answer within the bound after the last fault
    healed;
  - no answer of class "other"; with fencing (see fencing_problems()),
    every execution has an epoch, they rise with every takeover, and no
    execution commits once a newer epoch of its key has begun.

Latency "in the fault": of the attempts that got an HTTP answer (the
client's own timeouts are counted apart), those that began while a fault
lasted, or
within 3 s of the start of one that has no duration (a worker killed, a
reload).
"""

import sys
sys.dont_write_bytecode = True
import json
import os


# faults during which the store does not answer at all
OUTAGES = ("partition", "db-pause", "db-kill", "galera: node1 killed",
           "galera: node2, node1 killed 0.2 s apart",
           "galera: node1 isolated")


def load_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    i = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[i]


def classify(a, results, rerun_ok):
    """results: [(status, sha)] of the key's committed executions, first
    first. rerun_ok: a later execution's result is explained."""
    o = a["o"]
    if o == "timeout":
        return "timeout"
    if o != "http":
        return "conn"
    st = a["st"]
    pt = a.get("pt") or ""
    ct = a.get("ct") or ""
    if pt.endswith("outcome-unknown") and st == 502:
        return "unknown"
    if pt.endswith("stale-epoch"):
        return "stale"
    if pt.endswith("store-unavailable") and st == 503:
        return "503"
    if st == 409 and pt.endswith("request-in-progress"):
        return "409"
    if st == 410 and pt.endswith("response-not-stored"):
        return "410"
    if st in (502, 504) and not pt and "text/html" in ct:
        return "gateway"
    if 200 <= st < 300:
        me = (st, a.get("sha"))
        if results and me == results[0]:
            return "replay" if a.get("rep") == "true" else "first"
        if rerun_ok and me in results:
            return "rerun-answer"
        return "differs"
    return "other"


def check(rundir):
    meta = json.load(open(os.path.join(rundir, "meta.json")))
    answers = load_jsonl(os.path.join(rundir, "answers.jsonl"))
    execs = load_jsonl(os.path.join(rundir, "exec.jsonl"))
    keys = set(meta.get("keys") or [])
    kills = meta.get("kills", [])
    faults = meta.get("faults", [])
    heal = meta.get("heal")
    bound = meta.get("bound", 0)

    # store outages (merged where they overlap) long enough for a lease to
    # end without a renewal: a renewal comes every third of the lease, so
    # at the outage's start 2/3 of it may be all that is left; the
    # completion's retries come at most 1 s apart
    lease = meta.get("lease") or 0
    spans = sorted((f["start"], f["end"]) for f in faults
                   if f["kind"] in OUTAGES)
    merged = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    long_outages = [(a, b) for a, b in merged
                    if lease and b - a + 1.0 >= lease * 2 / 3]

    by_key = {}
    for e in execs:
        by_key.setdefault(e["key"], []).append(e)

    row = {"name": meta["name"], "title": meta.get("title", meta["name"])}
    row["requests"] = len(answers)
    row["keys"] = len(keys)
    row["execs"] = 0
    row["keys_multi"] = 0
    row["rerun_owner_death"] = 0
    row["rerun_long_outage"] = 0
    row["refused_start"] = 0
    row["refused_commit"] = 0
    row["keys_commit_multi"] = 0
    problems = []
    rerun_keys = set()
    results = {}

    for k in sorted(keys):
        evs = sorted(by_key.get(k, []), key=lambda e: e["t"])
        ex = [e for e in evs if e["ev"] == "exec"]
        done = [e for e in evs if e["ev"] == "done"]
        row["refused_start"] += sum(1 for e in evs
                                    if e["ev"] == "refused-start")
        row["refused_commit"] += sum(1 for e in evs
                                     if e["ev"] == "refused-commit")
        row["execs"] += len(ex)
        results[k] = [(e["status"], e["sha"]) for e in done]
        if len(done) > 1:
            row["keys_commit_multi"] += 1
        if len(ex) <= 1:
            continue
        row["keys_multi"] += 1
        why = set()
        for prev, nxt in zip(ex, ex[1:]):
            port = int(prev["peer"].rsplit(":", 1)[1]) if prev.get(
                "peer") else None
            if any(kl["t"] > prev["t"] and kl["t"] < nxt["t"]
                   and (port in kl.get("ports", []) or kl.get("all"))
                   for kl in kills):
                why.add("death")
            elif any(a < nxt["t"] and b > prev["t"]
                     for a, b in long_outages):
                why.add("outage")
            else:
                why.add(None)
        if None not in why:
            if "death" in why:
                row["rerun_owner_death"] += 1
            else:
                row["rerun_long_outage"] += 1
            rerun_keys.add(k)
        else:
            problems.append("key %s executed %d times (%s%s)" % (
                k, len(ex), ", ".join("%.3f %s epoch=%s" % (
                    e["t"], e.get("peer"), e.get("epoch")) for e in ex[:3]),
                ", ..." if len(ex) > 3 else ""))

    classes = {}
    first_answered = {}
    fault_lat = []
    module_lat = []
    for a in answers:
        k = a["k"]
        c = classify(a, results.get(k, []), k in rerun_keys)
        a["class"] = c
        classes[c] = classes.get(c, 0) + 1
        if c == "differs":
            problems.append("key %s: answer %s (replayed=%s) is not its "
                            "first result %s" % (
                                k, a.get("st"), a.get("rep"),
                                results.get(k, [None])[0]))
        elif c == "other":
            problems.append("key %s: unexpected answer %s %s %s" % (
                k, a.get("st"), a.get("pt") or a.get("ct"),
                (a.get("body") or "")[:80]))
        if c in ("first", "replay", "410", "unknown", "rerun-answer"):
            first_answered[k] = min(first_answered.get(k, a["t1"]), a["t1"])
        lat = a["t1"] - a["t0"]
        if a["o"] == "http" and any(f["start"] <= a["t0"] <= max(f["end"], f["start"] + 3.0)
               for f in faults):
            fault_lat.append(lat)
            if c in ("409", "503", "410", "unknown"):
                module_lat.append(lat)
    row["classes"] = classes

    # 409s while no execution of the key is in flight (1 s of slack
    # around each): the key is held by a claim nobody works on (an owner
    # that died, or a claim that committed after nginx gave up on it)
    spans = {}
    for k, evs in by_key.items():
        cur = {}
        for e in sorted(evs, key=lambda e: e["t"]):
            if e["ev"] == "exec":
                cur[e["n"]] = e["t"]
            elif e["ev"] in ("done", "refused-commit") and e.get("n") in cur:
                spans.setdefault(k, []).append((cur.pop(e["n"]) - 1.0,
                                                e["t"] + 1.0))
        for t in cur.values():
            spans.setdefault(k, []).append((t - 1.0, float("inf")))
    orphan = {}
    for a in answers:
        if a["class"] != "409":
            continue
        if any(x <= a["t1"] <= y for x, y in spans.get(a["k"], [])):
            continue
        lo, hi = orphan.get(a["k"], (a["t0"], a["t1"]))
        orphan[a["k"]] = (min(lo, a["t0"]), max(hi, a["t1"]))
    row["orphan_keys"] = len(orphan)
    row["orphan_max"] = max([hi - lo for lo, hi in orphan.values()] or
                            [None], key=lambda x: x or 0)
    row["differs"] = classes.get("differs", 0)
    row["other"] = classes.get("other", 0)

    # keys without a final answer by the heal + bound (the earliest
    # final answer counts: one before the heal is fine)
    unanswered = []
    limit = None if heal is None else heal + bound
    for k in sorted(keys):
        t = first_answered.get(k)
        if t is None or (limit is not None and t > limit):
            unanswered.append((k, t))
    row["unanswered"] = len(unanswered)
    for k, t in unanswered[:10]:
        problems.append("key %s not answered within %.0fs of the heal%s" % (
            k, bound, "" if t is None else " (answered %.1fs after it)"
            % (t - heal)))

    row["lat_p50"] = pct(fault_lat, 50)
    row["lat_p99"] = pct(fault_lat, 99)
    row["lat_max"] = max(fault_lat) if fault_lat else None
    row["module_lat_max"] = max(module_lat) if module_lat else None
    row["fault_requests"] = len(fault_lat)

    if meta.get("fencing"):
        problems.extend(fencing_problems(keys, by_key))
    row["problems"] = problems
    row["ok"] = not problems
    row["notes"] = meta.get("notes", [])
    return row


def fencing_problems(keys, by_key):
    """Behind the fencing backend: every execution carries an epoch, each
    later execution of a key a higher one, and no execution commits once
    a newer epoch of its key has begun (two overlapping executions both
    committed).  A re-run that begins after the earlier one committed (a
    dead owner whose execution ended before the takeover) is not for a
    fence to refuse: it counts as a re-run after owner death."""
    out = []
    for k in sorted(keys):
        evs = sorted(by_key.get(k, []), key=lambda e: e["t"])
        ex = [e for e in evs if e["ev"] == "exec"]
        if not ex:
            continue
        # the first execution may carry 2 or more: an owner killed
        # between its claim and forwarding never reached the backend
        if (ex[0].get("epoch") or 0) < 1:
            out.append("key %s: execution without an epoch" % k)
        for a, b in zip(ex, ex[1:]):
            if (a.get("epoch") or 0) >= (b.get("epoch") or 0):
                out.append("key %s: epoch did not rise (%s then %s)"
                           % (k, a.get("epoch"), b.get("epoch")))
        starts = [(e["t"], e.get("epoch") or 0) for e in ex]
        for d in evs:
            if d["ev"] != "done" or d.get("epoch") is None:
                continue
            if any(t < d["t"] and ep > d["epoch"] for t, ep in starts):
                out.append("key %s: epoch %s committed after epoch %s had "
                           "begun" % (k, d["epoch"], max(
                               ep for t, ep in starts if t < d["t"])))
    return out


def fmt_s(v):
    if v is None:
        return "-"
    if v < 1:
        return "%d ms" % round(v * 1000)
    return "%.2f s" % v


def table(rows):
    head = ("| fault | requests | keys | executions | keys run >1 | "
            "re-run after owner death / long outage | fenced: refused start / commit | "
            "answers differing | unanswered after heal | first / replay / "
            "409 / 503 / 410 / unknown / gateway / timeout / conn | "
            "latency in fault p50 / p99 / max | verdict |")
    out = [head, "|" + "---|" * 12]
    for r in rows:
        c = r["classes"]
        cl = " / ".join(str(c.get(x, 0)) for x in (
            "first", "replay", "409", "503", "410", "unknown", "gateway",
            "timeout", "conn"))
        if c.get("rerun-answer"):
            cl += " (+%d answers of a re-run)" % c["rerun-answer"]
        if c.get("stale"):
            cl += " (+%d stale 409)" % c["stale"]
        fenced = "-"
        if r["refused_start"] or r["refused_commit"] or r.get("fencing"):
            fenced = "%d / %d" % (r["refused_start"], r["refused_commit"])
        out.append("| %s | %d | %d | %d | %d | %s | %s | %d | %d | %s | "
                   "%s / %s / %s | %s |" % (
                       r["title"], r["requests"], r["keys"], r["execs"],
                       r["keys_multi"], "%d / %d" % (
                           r["rerun_owner_death"], r["rerun_long_outage"]),
                       fenced,
                       r["differs"], r["unanswered"], cl,
                       fmt_s(r["lat_p50"]), fmt_s(r["lat_p99"]),
                       fmt_s(r["lat_max"]),
                       "ok" if r["ok"] else "**violated**"))
    return "\n".join(out)


def main(argv):
    rows = []
    for d in argv[1:]:
        r = check(d)
        rows.append(r)
    print(table(rows))
    bad = 0
    for r in rows:
        for p in r["problems"][:20]:
            print("%s: %s" % (r["name"], p))
        if not r["ok"]:
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

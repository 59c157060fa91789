# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""Clients that retry like real ones, for scripts/faults/ (stdlib only).

An *operation* is one key with one request (method, URI, body): what a
client means to do once.  Each operation is sent by one client, or by two
or three clients at once (a double click, two tabs, a relay that
redelivers).  A client sends attempts until it gets an answer it can act
on (a final answer, see FINAL below) or its own budget runs out:

- every attempt has its own timeout and gives up early (the operation may
  take longer than the client waits);
- between attempts, exponential back-off with jitter (a random wait
  between half and all of min(cap, base * 2^n)).

Every attempt is one line of JSON in the answers file (see record()), so
that scripts/faults/check.py can judge every answer afterwards.
"""

import asyncio
import hashlib
import json
import random
import time


class Attempt:
    __slots__ = ("t0", "t1", "outcome", "status", "headers", "body")

    def __init__(self):
        self.t0 = time.time()
        self.t1 = None
        self.outcome = None     # "http", "timeout", "error:<reason>"
        self.status = None
        self.headers = {}       # lower-case name -> value (last wins)
        self.body = b""


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        n = int(headers["content-length"])
        body = await reader.readexactly(n) if n else b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                break
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(chunks)
    else:
        body = await reader.read()
    return status, headers, body


async def attempt(host, port, request, timeout):
    a = Attempt()
    writer = None

    async def exchange():
        nonlocal writer
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request)
        await writer.drain()
        return await read_response(reader)

    try:
        a.status, a.headers, a.body = await asyncio.wait_for(exchange(),
                                                             timeout)
        a.outcome = "http"
    except asyncio.TimeoutError:
        a.outcome = "timeout"
    except asyncio.IncompleteReadError:
        a.outcome = "error:incomplete"
    except (ConnectionError, OSError, ValueError, IndexError,
            asyncio.LimitOverrunError) as e:
        a.outcome = "error:" + type(e).__name__
    finally:
        if writer is not None:
            writer.close()
    a.t1 = time.time()
    return a


def problem_type(a):
    if not a.headers.get("content-type", "").startswith(
            "application/problem+json"):
        return None
    try:
        return json.loads(a.body.decode()).get("type")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None


def final(a):
    """True for an answer a client acts on and does not retry: the
    operation's result (first or replayed), 410 (executed, not stored), an
    outcome-unknown problem (never run again: nothing to retry for) and any
    other 4xx but 409 (a client error retrying does not mend).  As the
    SDKs do, X-Should-Retry: true makes any answer worth a retry (an
    outcome-unknown that a fence may decide)."""
    if a.outcome != "http":
        return False
    if a.headers.get("x-should-retry") == "true":
        return False
    if 200 <= a.status < 300:
        return True
    if a.status == 409 or a.status == 429:
        return False
    if 400 <= a.status < 500:
        return True
    if a.status == 502:
        t = problem_type(a)
        return bool(t and t.endswith("outcome-unknown"))
    return False


class Op:
    """One operation: a key, its request, the clients that send it."""

    def __init__(self, key, uri, body, port, at, clients, host="127.0.0.1"):
        self.key = key
        self.uri = uri
        self.body = body
        self.host = host
        self.port = port        # one port, or one per client
        self.at = at            # start, seconds from the load's start
        self.clients = clients

    def request(self, port):
        head = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                "Idempotency-Key: %s\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\nConnection: close\r\n\r\n"
                % (self.uri, port, self.key, len(self.body)))
        return head.encode() + self.body

    def port_for(self, i):
        if isinstance(self.port, (list, tuple)):
            return self.port[i % len(self.port)]
        return self.port


class Policy:
    def __init__(self, attempt_timeout=1.5, base=0.1, cap=2.0, budget=15.0,
                 max_attempts=40):
        self.attempt_timeout = attempt_timeout
        self.base = base
        self.cap = cap
        self.budget = budget
        self.max_attempts = max_attempts

    def backoff(self, n, rng):
        d = min(self.cap, self.base * (2 ** n))
        return rng.uniform(d / 2, d)


class Recorder:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def record(self, op, client, n, phase, a, port):
        line = {
            "k": op.key, "c": client, "n": n, "ph": phase, "port": port,
            "t0": round(a.t0, 6), "t1": round(a.t1, 6), "o": a.outcome,
        }
        if a.outcome == "http":
            line["st"] = a.status
            line["sha"] = hashlib.sha256(a.body).hexdigest()
            line["len"] = len(a.body)
            for h, short in (("idempotent-replayed", "rep"),
                             ("retry-after", "ra"),
                             ("content-type", "ct"),
                             ("x-order-id", "oid")):
                if h in a.headers:
                    line[short] = a.headers[h]
            pt = problem_type(a)
            if pt:
                line["pt"] = pt
            elif a.status >= 400:
                line["body"] = a.body[:200].decode("latin-1")
        self.f.write(json.dumps(line, separators=(",", ":")) + "\n")

    def close(self):
        self.f.close()


async def run_client(op, client, phase, policy, rec, rng, deadline=None,
                     sem=None):
    """Attempts until a final answer; the time it came, or None."""
    started = time.time()
    end = started + policy.budget
    if deadline is not None:
        end = min(end, deadline)
    port = op.port_for(client)
    request = op.request(port)
    for n in range(policy.max_attempts):
        if sem is not None:
            async with sem:
                a = await attempt(op.host, port, request,
                                  policy.attempt_timeout)
        else:
            a = await attempt(op.host, port, request, policy.attempt_timeout)
        rec.record(op, client, n, phase, a, port)
        if final(a):
            return a.t1
        wait = policy.backoff(n, rng)
        if time.time() + wait >= end:
            return None
        await asyncio.sleep(wait)
    return None


async def run_load(ops, policy, rec, seed=1, stop=None):
    """Every op's clients, each op at its start time; returns once all
    clients have ended.  stop: an asyncio.Event that ends new attempts."""
    rng = random.Random(seed)
    t_start = time.time()
    tasks = []

    async def one(op):
        await asyncio.sleep(max(0.0, t_start + op.at - time.time()))
        cs = []
        for i in range(op.clients):
            cs.append(asyncio.ensure_future(
                run_client(op, i, "load", policy, rec,
                           random.Random(rng.random()))))
            if i + 1 < op.clients:
                await asyncio.sleep(rng.uniform(0, 0.05))
        await asyncio.gather(*cs)

    for op in ops:
        tasks.append(asyncio.ensure_future(one(op)))
    await asyncio.gather(*tasks)


async def settle(ops, policy, rec, deadline, seed=2, parallel=32):
    """After the faults heal: every op is sent again (client 9) until a
    final answer or the deadline. {key: time answered or None}."""
    rng = random.Random(seed)
    sem = asyncio.Semaphore(parallel)
    res = {}

    async def one(op):
        res[op.key] = await run_client(op, 9, "settle", policy, rec,
                                       random.Random(rng.random()),
                                       deadline=deadline, sem=sem)

    await asyncio.gather(*(one(op) for op in ops))
    return res


def make_ops(prefix, n, window, port, rng, path="/orders",
             delays=((0.7, 20, 200), (0.2, 300, 900), (0.1, 1500, 2500)),
             shared=0.25, host="127.0.0.1"):
    """n operations spread evenly over window seconds; a share of them
    sent by 2 or 3 clients at once.  delays: (probability, min, max) ms of
    the backend's work."""
    ops = []
    for i in range(n):
        r = rng.random()
        acc = 0.0
        lo, hi = delays[-1][1], delays[-1][2]
        for p, a, b in delays:
            acc += p
            if r < acc:
                lo, hi = a, b
                break
        delay = rng.randint(lo, hi)
        clients = 1
        if rng.random() < shared:
            clients = rng.choice((2, 3))
        body = json.dumps({"op": i, "amount": rng.randint(1, 99999),
                           "memo": "x" * rng.randint(0, 64)}).encode()
        key = "%s-%04d" % (prefix, i)
        ops.append(Op(key, "%s?delay=%d&op=%s" % (path, delay, key), body,
                      port, window * i / max(1, n) + rng.uniform(0, 0.05),
                      clients, host))
    return ops

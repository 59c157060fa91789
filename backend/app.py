#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""Demo and test backend for ngx_http_idempotency_module (stdlib only).

    python3 backend/app.py --port 8081 [--host 127.0.0.1]
                           [--pidfile F] [--log F]
                           [--exec-log F] [--fence-header NAME]
                           [--bank-db NAME --bank-user U ...]

Every request except the two control endpoints is one "execution": it is
counted per Idempotency-Key (the header value exactly as received, "-" when
absent) and globally, and answered according to its query parameters.

Control endpoints (not executions):
    GET  /__count?key=K   200 text/plain, executions of K (percent-decoded;
                          "+" is kept literally); without key= the global count
    POST /__reset         zero all counters, 204

Query parameters of an execution (combinable):
    status=N     answer with status N (no body for 1xx, 204, 304, HEAD)
    delay=MS     sleep MS milliseconds before answering
    size=N       body of N bytes, byte i = i % 251, application/octet-stream
    binary=1     body = bytes 0..255, 255..0, 64 NULs, application/octet-stream
    chunked=1    Transfer-Encoding: chunked, at least 3 chunks
    gzip=1       gzip-compressed body (deterministic), Content-Encoding: gzip
    empty=1      Content-Length: 0, no body
    cookies=N    N headers "Set-Cookie: c<i>=v<i>; Path=/"
    reset=1      headers with Content-Length: 1000, 10 body bytes, then RST
    slow_body=MS headers and half the body, sleep MS, the rest
    nolength=1   no Content-Length, body ends with the connection close
    charset=CS   the JSON answer as "application/json; charset=CS"
    etag=V       an ETag: "V" header
    lastmod=1    a Last-Modified header (Mon, 02 Jan 2006 15:04:05 GMT)
    expires=1    Expires: Thu, 01 Jan 1970 00:00:01 GMT and Cache-Control:
                 no-cache
    accel_charset=CS  an X-Accel-Charset: CS header
    retry_after=S  a Retry-After: S header (with status=429, say)
    dedup=1      the backend deduplicates by the key itself: the first
                 request of a key runs; later ones wait for it and get its
                 answer, plus X-Deduplicated: <Idempotency-Attempt or ->,
                 and are not counted
    location=URL Location: URL instead of /orders/ord-<n> (percent-encoded)

Default answer: 201 for POST, 200 otherwise, application/json,
Location: /orders/ord-<n>, X-Execution: <count for the key>,
X-Order-Id: ord-<n>, body
{"order_id":"ord-<n>","key":"<key>","execution":<c>,"method":"<m>",
 "uri":"<path?query>","body_bytes":<len>}\\n
where n is the global execution number.

Execution log (--exec-log F, for scripts/faults/): one JSON object a line
per execution, appended when it starts ({"ev":"exec","t":T,"key":K,"n":
<execution of K>,"total":N,"peer":"IP:PORT","epoch":E|null}) and when its
answer is decided ({"ev":"done",...,"status":S,"sha":<sha256 of the body,
hex>} or, fenced, {"ev":"refused-commit",...}); a stale executor refused
before it runs is {"ev":"refused-start",...} and is not an execution.

Fencing (--fence-header NAME, HTTP only): the backend remembers the highest
claim epoch seen per key in request header NAME (a positive integer; a
request without it is not fenced). An epoch below the highest is refused
at once (409 application/problem+json, type .../stale-epoch, not counted);
after the delay (the commit point) an execution whose epoch is no longer
the highest is not committed and answers the same 409. So each key
commits at most once per epoch, and never from a stale executor.

Withdrawals (--bank-db NAME, with --bank-user, --bank-password,
--bank-socket or --bank-host/--bank-port, --fence-table, --marker-header,
--epoch-header): POST /withdraw runs a MariaDB transaction that takes part
in the module's fence (backend/withdraw.py; Debian's python3-pymysql).

Webhook receivers: POST /hooks/<provider> checks a delivery's signature
(given secret=), counts it under "hook:<provider>:<id>" and answers the
provider's acknowledgement (backend/webhooks.py).

"""

import argparse
import gzip
import hashlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote_to_bytes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import webhooks  # noqa: E402


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.per_key = {}
        self.total = 0

    def execute(self, key):
        with self.lock:
            self.total += 1
            n = self.per_key.get(key, 0) + 1
            self.per_key[key] = n
            return self.total, n

    def get(self, key):
        with self.lock:
            if key is None:
                return self.total
            return self.per_key.get(key, 0)

    def reset(self):
        with self.lock:
            self.per_key.clear()
            self.total = 0


COUNTERS = Counters()


class ExecLog:
    """--exec-log: one JSON line per execution event (off by default)."""

    def __init__(self):
        self.f = None
        self.lock = threading.Lock()

    def write(self, ev, **fields):
        if self.f is None:
            return
        fields["ev"] = ev
        fields["t"] = round(time.time(), 6)
        line = json.dumps(fields, separators=(",", ":"), sort_keys=True)
        with self.lock:
            try:
                self.f.write(line + "\n")
                self.f.flush()
            except Exception:
                pass


class Fence:
    """--fence-header: the highest claim epoch seen per key."""

    def __init__(self, header):
        self.header = header
        self.lock = threading.Lock()
        self.highest = {}

    def start(self, key, epoch):
        """False when epoch is stale (below the highest seen)."""
        with self.lock:
            top = self.highest.get(key, 0)
            if epoch < top:
                return False
            self.highest[key] = epoch
            return True

    def commit(self, key, epoch):
        """True when no newer epoch arrived since start."""
        with self.lock:
            return self.highest.get(key, 0) <= epoch


EXECLOG = ExecLog()
FENCE = None
BANK = None
LOG_LOCK = threading.Lock()
LOG = sys.stderr

PATTERN_251 = bytes(i % 251 for i in range(251))
BINARY = bytes(range(256)) + bytes(range(255, -1, -1)) + b"\0" * 64


def log(line):
    with LOG_LOCK:
        try:
            LOG.write(line + "\n")
            LOG.flush()
        except Exception:
            pass


def parse_query(query):
    """Query string -> {name: value} (last wins), percent-decoded, '+' kept."""
    params = {}
    if not query:
        return params
    for part in query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        name = unquote_to_bytes(name).decode("latin-1")
        params[name] = unquote_to_bytes(value).decode("latin-1")
    return params


def int_param(params, name, default=0):
    try:
        return int(params.get(name, default))
    except ValueError:
        return default


def pattern_body(n):
    full, rest = divmod(n, 251)
    return PATTERN_251 * full + PATTERN_251[:rest]


def split_pieces(data, n):
    """Split data into at most n non-empty pieces of similar size."""
    if not data:
        return []
    size = max(1, -(-len(data) // n))
    return [data[i:i + size] for i in range(0, len(data), size)]


class Answer:
    """What a request is answered.

    status, headers (without the framing ones), body (the whole body),
    framed (a framing header is due: Content-Length, or Transfer-Encoding /
    Connection for chunked / nolength), chunked, nolength, groups (the body
    as it is written: groups of pieces, pause seconds between the groups;
    empty for HEAD), reset (headers, 10 body bytes, then a RST), and for
    the log: nbytes, key, note.
    """

    def __init__(self, status, headers, body, note, key, nbytes=None):
        self.status = status
        self.headers = headers
        self.body = body
        self.framed = True
        self.chunked = False
        self.nolength = False
        self.groups = [[body]] if body else []
        self.pause = 0.0
        self.reset = False
        self.note = note
        self.key = key
        self.nbytes = len(body) if nbytes is None else nbytes


def answer(method, uri, key, reqbody, meta=None):
    """Count and answer one request (sleeps for delay=): an Answer.

    meta (HTTP only): {"peer": "IP:PORT", "epoch": int or None}, for the
    execution log and fencing."""
    path, _, query = uri.partition("?")

    if path == "/__count" and method in ("GET", "HEAD"):
        params = parse_query(query)
        count_key = params.get("key")
        out = str(COUNTERS.get(count_key)).encode()
        a = Answer(200, [("Content-Type", "text/plain")], out, "count",
                   count_key or "*")
        if method == "HEAD":
            a.groups = []
        return a

    if path == "/__reset" and method == "POST":
        COUNTERS.reset()
        a = Answer(204, [], b"", "reset", "-")
        a.framed = False
        return a

    meta = meta or {}
    if "dedup=1" in query.split("&") and not meta.get("deduped"):
        return DEDUP.answer(key, meta.get("attempt"),
                            lambda: answer(method, uri, key, reqbody,
                                           dict(meta, deduped=True)))
    peer = meta.get("peer")
    epoch = meta.get("epoch")
    fenced = FENCE is not None and epoch is not None
    if fenced and not FENCE.start(key, epoch):
        EXECLOG.write("refused-start", key=key, peer=peer, epoch=epoch)
        return stale_answer(key, epoch, "refused-start")

    total, execution = COUNTERS.execute(key)
    EXECLOG.write("exec", key=key, n=execution, total=total, peer=peer,
                  epoch=epoch, uri=uri)
    a = execute(method, uri, query, key, total, execution, reqbody)
    if fenced and not FENCE.commit(key, epoch):
        EXECLOG.write("refused-commit", key=key, n=execution, total=total,
                      peer=peer, epoch=epoch)
        return stale_answer(key, epoch, "refused-commit")
    if EXECLOG.f is not None:
        EXECLOG.write("done", key=key, n=execution, total=total, peer=peer,
                      epoch=epoch, status=a.status,
                      sha=hashlib.sha256(a.body).hexdigest())
    return a


class Dedup:
    """A backend that deduplicates by itself (dedup=1), as the seed's
    dedup table does: the first request of a key runs, and every later one
    waits for it (a row lock) and gets its answer, counted as nothing and
    marked X-Deduplicated: <its Idempotency-Attempt header, or ->."""

    def __init__(self):
        self.lock = threading.Lock()
        self.keys = {}

    def answer(self, key, attempt, run):
        with self.lock:
            entry = self.keys.setdefault(key, [threading.Lock(), None])
        with entry[0]:
            if entry[1] is None:
                entry[1] = run()
                return entry[1]
            first = entry[1]
        a = Answer(first.status, first.headers + [
                       ("X-Deduplicated", attempt or "-")],
                   first.body, "dedup", key)
        return a


DEDUP = Dedup()


def stale_answer(key, epoch, note):
    body = (json.dumps({
        "type": "https://example.invalid/problems/stale-epoch",
        "title": "stale executor",
        "status": 409,
        "detail": "epoch %d of key %s is not the newest" % (epoch, key),
    }, separators=(",", ":")) + "\n").encode()
    return Answer(409, [("Content-Type", "application/problem+json")], body,
                  note, key)


def execute(method, uri, query, key, total, execution, reqbody):
    p = parse_query(query)
    order = "ord-%d" % total

    status = int_param(p, "status", 201 if method == "POST" else 200)
    delay = int_param(p, "delay")
    if delay > 0:
        time.sleep(delay / 1000.0)

    ctype = "application/octet-stream"
    if "size" in p:
        body = pattern_body(max(0, int_param(p, "size")))
    elif p.get("binary") == "1":
        body = BINARY
    else:
        ctype = "application/json"
        if p.get("charset"):
            ctype += "; charset=" + p["charset"]
        body = (json.dumps({
            "order_id": order,
            "key": key,
            "execution": execution,
            "method": method,
            "uri": uri,
            "body_bytes": len(reqbody),
        }, separators=(",", ":")) + "\n").encode()

    no_body = (status < 200 or status in (204, 304))
    gz = p.get("gzip") == "1" and not no_body and p.get("empty") != "1"
    if gz:
        body = gzip.compress(body, mtime=0)

    headers = []
    if p.get("empty") == "1" or no_body:
        body = b""
        if not no_body:
            headers.append(("Content-Length", "0"))
    else:
        headers.append(("Content-Type", ctype))
    if gz:
        headers.append(("Content-Encoding", "gzip"))
        headers.append(("Vary", "Accept-Encoding"))
    headers.append(("Location", p.get("location") or "/orders/" + order))
    if p.get("etag"):
        headers.append(("ETag", '"%s"' % p["etag"]))
    if p.get("lastmod") == "1":
        headers.append(("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT"))
    if p.get("expires") == "1":
        headers.append(("Expires", "Thu, 01 Jan 1970 00:00:01 GMT"))
        headers.append(("Cache-Control", "no-cache"))
    if p.get("accel_charset"):
        headers.append(("X-Accel-Charset", p["accel_charset"]))
    if p.get("retry_after"):
        headers.append(("Retry-After", p["retry_after"]))
    headers.append(("X-Execution", str(execution)))
    headers.append(("X-Order-Id", order))
    for i in range(1, int_param(p, "cookies") + 1):
        headers.append(("Set-Cookie", "c%d=v%d; Path=/" % (i, i)))

    send_body = body and method != "HEAD"
    slow = int_param(p, "slow_body")

    a = Answer(status, headers, body, "exec %d/%d" % (execution, total), key,
               len(body) if send_body else 0)
    a.framed = bool(body) or not (no_body or p.get("empty") == "1")
    a.chunked = p.get("chunked") == "1" and not no_body \
        and p.get("empty") != "1"
    a.nolength = p.get("nolength") == "1"
    a.reset = p.get("reset") == "1"
    if slow > 0:
        a.pause = slow / 1000.0

    half = len(body) // 2
    if method == "HEAD":
        a.groups = []
    elif a.chunked:
        a.groups = [split_pieces(body[:half], 2),
                    split_pieces(body[half:], 2)]
    elif send_body and slow > 0:
        a.groups = [[body[:half]], [body[half:]]]
    elif send_body:
        a.groups = [[body]]
    else:
        a.groups = []
    return a


def access(addr, method, uri, version, started, status, nbytes, key, note):
    log('%s %s:%d "%s %s %s" %d %d key=%s %s %.3fs' % (
        time.strftime("%Y-%m-%dT%H:%M:%S"), addr[0], addr[1], method, uri,
        version, status, nbytes, json.dumps(key), note,
        time.time() - started))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # headers and body are separate writes
    server_version = "idem-backend/1.0"

    def version_string(self):
        return self.server_version

    # any method is handled by do_ANY
    def __getattr__(self, name):
        if name.startswith("do_"):
            return self.do_ANY
        raise AttributeError(name)

    def log_message(self, fmt, *args):  # silence the default access log
        pass

    def log_request(self, code="-", size="-"):
        pass

    # ------------------------------------------------------------ request

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("eof in chunked body")
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until the empty line
                    while True:
                        line = self.rfile.readline(65537)
                        if line in (b"\r\n", b"\n", b""):
                            break
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)  # CRLF after the chunk data
            return b"".join(chunks)
        length = self.headers.get("Content-Length")
        if length:
            n = int(length)
            data = self.rfile.read(n) if n > 0 else b""
            if len(data) < n:
                raise ConnectionError("eof in body")
            return data
        return b""

    def key(self):
        values = self.headers.get_all("Idempotency-Key")
        if not values:
            return "-"
        return ", ".join(values)

    def meta(self):
        """Peer and claim epoch, for --exec-log and --fence-header."""
        epoch = None
        if FENCE is not None:
            value = self.headers.get(FENCE.header)
            if value is not None:
                try:
                    epoch = int(value.strip())
                except ValueError:
                    epoch = None
        return {"peer": "%s:%d" % self.client_address[:2], "epoch": epoch,
                "attempt": self.headers.get("Idempotency-Attempt")}

    # ----------------------------------------------------------- response

    def do_ANY(self):
        started = time.time()
        try:
            body = self.read_body()
        except (ConnectionError, ValueError) as e:
            log("%s %s body read failed: %s" % (self.command, self.path, e))
            self.close_connection = True
            return

        path = self.path.partition("?")[0]
        if BANK is not None and path.endswith("/withdraw"):
            a = self.withdraw()
        elif path.startswith("/hooks/"):
            a = self.hook(path[7:], body)
        elif BANK is not None and path.startswith("/accounts/"):
            status, headers, body, note = BANK.account(path[10:])
            a = Answer(status, headers, body, note, self.key())
        else:
            a = answer(self.command, self.path, self.key(), body,
                       self.meta())
        if a.reset:
            self.send_reset(a, started)
            return
        self.send_answer(a)
        self.access(started, a.status, a.nbytes, a.key, a.note)

    def hook(self, provider, body):
        status, headers, out, note, key = webhooks.answer(
            provider, parse_query(self.path.partition("?")[2]),
            self.headers, body, COUNTERS)
        a = Answer(status, headers, out, note, key)
        a.framed = status >= 200 and status not in (204, 304)
        return a

    def withdraw(self):
        status, headers, body, note = BANK.answer(
            self.headers, parse_query(self.path.partition("?")[2]),
            parse_query)
        return Answer(status, headers, body, note, self.key())

    def send_answer(self, a):
        self.send_response(a.status)
        for name, value in a.headers:
            self.send_header(name, value)
        if a.framed:
            if a.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            elif a.nolength:
                self.send_header("Connection", "close")
            else:
                self.send_header("Content-Length", str(len(a.body)))
        if a.nolength:
            self.close_connection = True
        self.end_headers()

        for i, group in enumerate(a.groups):
            if i and a.pause > 0:
                time.sleep(a.pause)
            for piece in group:
                if a.chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                else:
                    self.wfile.write(piece)
        if a.chunked and self.command != "HEAD":
            self.wfile.write(b"0\r\n\r\n")

    def send_reset(self, a, started):
        self.send_response(a.status)
        for name, value in a.headers:
            if name != "Content-Length":
                self.send_header(name, value)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write((a.body + b"x" * 10)[:10])
        time.sleep(0.05)  # let the bytes leave before the RST discards them
        self.access(started, a.status, 10, a.key, "reset")
        sock = self.connection
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                        struct.pack("ii", 1, 0))
        self.close_connection = True
        # the rfile holds a reference: close it so the fd really closes now
        try:
            self.rfile.close()
        except Exception:
            pass
        sock.close()

    def access(self, started, status, nbytes, key, note):
        access(self.client_address, self.command, self.path,
               self.request_version, started, status, nbytes, key, note)

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, BrokenPipeError, socket.timeout, OSError) as e:
            log("connection %s:%d: %s" % (self.client_address[0],
                                          self.client_address[1], e))
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        log("error handling %s: %s" % (client_address, sys.exc_info()[1]))


def main():
    global LOG, FENCE, BANK
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--pidfile")
    ap.add_argument("--log", help="append the request log here (default: stderr)")
    ap.add_argument("--exec-log",
                    help="append a JSON line per execution event here")
    ap.add_argument("--fence-header", metavar="NAME",
                    help="refuse stale claim epochs sent in header NAME")
    ap.add_argument("--bank-db", help="serve POST /withdraw on this "
                    "database (backend/withdraw.py)")
    ap.add_argument("--bank-user", default="idem")
    ap.add_argument("--bank-password", default="")
    ap.add_argument("--bank-socket")
    ap.add_argument("--bank-host", default="127.0.0.1")
    ap.add_argument("--bank-port", type=int, default=3306)
    ap.add_argument("--fence-table", default="idempotency_fence")
    ap.add_argument("--marker-header", default="Idempotency-Marker")
    ap.add_argument("--epoch-header", default="Idempotency-Epoch")
    args = ap.parse_args()

    if args.log:
        LOG = open(args.log, "a", buffering=1)
    if args.exec_log:
        EXECLOG.f = open(args.exec_log, "a", buffering=1)
    if args.fence_header:
        FENCE = Fence(args.fence_header)
    if args.bank_db:
        from withdraw import Bank
        BANK = Bank(args, log)

    try:
        server = Server((args.host, args.port), Handler)
    except OSError as e:
        sys.stderr.write("backend: cannot listen on %s:%d: %s\n"
                         % (args.host, args.port, e))
        sys.exit(1)

    if args.pidfile:
        tmp = args.pidfile + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(tmp, args.pidfile)

    def stop(signum, frame):
        if args.pidfile:
            try:
                with open(args.pidfile) as f:
                    if f.read().strip() == str(os.getpid()):
                        os.unlink(args.pidfile)
            except OSError:
                pass
        log("backend: signal %d, exiting" % signum)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    log("backend: listening on %s:%d (pid %d)" % (args.host, args.port,
                                                  os.getpid()))
    server.serve_forever(poll_interval=0.5)


if __name__ == "__main__":
    main()

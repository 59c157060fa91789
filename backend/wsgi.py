# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""The uWSGI test app (t/086-uwsgi.t, Python's standard library only).

Run by the suite's own uWSGI (scripts/services.sh uwsgi) behind nginx's
uwsgi_pass.  Every request but GET /__count is one execution, counted per
Idempotency-Key (the header as received, "-" when absent) in a file of
IDEM_COUNT_DIR under flock(), so that the count is right across uWSGI's
worker processes.

    GET /__count?key=K   text/plain, the executions of K (without key=:
                         of every key); not an execution

Query parameters of an execution:
    status=N     answer with status N (201 for POST, 200 otherwise)
    delay=MS     sleep MS ms first
    size=N       body of N bytes, byte i = i % 251, octet-stream
    binary=1     body = bytes 0..255, 255..0, 64 NULs, octet-stream
    cookies=N    N headers "Set-Cookie: c<i>=v<i>; Path=/"
    length=1     a Content-Length header (uWSGI sends none by itself)
    slow_body=MS the headers and half the body, sleep MS, the rest
    kill=1       the headers and half the body, then the worker kills
                 itself (SIGKILL): the answer never ends
    harakiri=S   this request's harakiri: uWSGI's master kills the
                 worker S seconds after this point
Default body: {"order_id":"ord-<n>","key":K,"execution":<c>,"method":M,
"uri":U,"body_bytes":<len>}\\n, n the count of every key.
"""

import fcntl
import hashlib
import http
import json
import os
import signal
import time
from urllib.parse import parse_qsl

PATTERN_251 = bytes(range(251))
BINARY = bytes(range(256)) + bytes(range(255, -1, -1)) + b"\0" * 64


def count_file(key):
    name = hashlib.sha256(key.encode("latin-1")).hexdigest()
    return os.path.join(os.environ["IDEM_COUNT_DIR"], "k-" + name)


def execute_once(key):
    """One more execution of key (and of all keys): (n of all, n of key)."""
    out = []
    for path in (count_file("\0all"), count_file(key)):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            n = int(os.read(fd, 32) or b"0") + 1
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, str(n).encode())
        finally:
            os.close(fd)
        out.append(n)
    return out


def read_count(key):
    try:
        with open(count_file(key), "rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            return int(f.read() or b"0")
    except FileNotFoundError:
        return 0


def status_line(status):
    try:
        return "%d %s" % (status, http.HTTPStatus(status).phrase)
    except ValueError:
        return "%d Status" % status


def application(environ, start_response):
    method = environ["REQUEST_METHOD"]
    query = environ.get("QUERY_STRING", "")
    uri = environ.get("REQUEST_URI") or environ.get("PATH_INFO", "/")
    p = dict(parse_qsl(query, keep_blank_values=True, encoding="latin-1"))

    if environ.get("PATH_INFO") == "/__count" and method == "GET":
        n = read_count(p["key"]) if "key" in p else read_count("\0all")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(n).encode()]

    key = environ.get("HTTP_IDEMPOTENCY_KEY", "-")
    length = int(environ.get("CONTENT_LENGTH") or 0)
    reqbody = environ["wsgi.input"].read(length) if length else b""
    total, execution = execute_once(key)

    if "harakiri" in p:
        import uwsgi
        uwsgi.set_user_harakiri(int(p["harakiri"]))

    time.sleep(int(p.get("delay", 0)) / 1000.0)

    status = int(p.get("status", 201 if method == "POST" else 200))
    order = "ord-%d" % total
    if "size" in p:
        n = int(p["size"])
        body = (PATTERN_251 * (n // 251 + 1))[:n]
        ctype = "application/octet-stream"
    elif p.get("binary") == "1":
        body = BINARY
        ctype = "application/octet-stream"
    else:
        body = (json.dumps({"order_id": order, "key": key,
                            "execution": execution, "method": method,
                            "uri": uri, "body_bytes": len(reqbody)},
                           separators=(",", ":")) + "\n").encode()
        ctype = "application/json"

    headers = [("Content-Type", ctype), ("Location", "/orders/" + order),
               ("X-Execution", str(execution)), ("X-Order-Id", order)]
    for i in range(1, int(p.get("cookies", 0)) + 1):
        headers.append(("Set-Cookie", "c%d=v%d; Path=/" % (i, i)))
    if p.get("length") == "1":
        headers.append(("Content-Length", str(len(body))))
    start_response(status_line(status), headers)

    slow = int(p.get("slow_body", 0))
    if slow > 0 or p.get("kill") == "1":
        return halves(body, slow, p.get("kill") == "1")
    return [body]


def halves(body, slow, kill):
    """The first half, then the worker dies (kill) or, slow ms later,
    the rest."""
    half = len(body) // 2
    yield body[:half]
    if kill:
        time.sleep(0.1)     # let the first half leave the worker
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(slow / 1000.0)
    yield body[half:]

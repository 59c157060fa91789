#!/usr/bin/env python3
"""Demo and test backend for ngx_http_idempotency_module (stdlib only).

    python3 backend/app.py --port 8081 [--host 127.0.0.1] [--pidfile F] [--log F]

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

Default answer: 201 for POST, 200 otherwise, application/json,
Location: /orders/ord-<n>, X-Execution: <count for the key>,
X-Order-Id: ord-<n>, body
{"order_id":"ord-<n>","key":"<key>","execution":<c>,"method":"<m>",
 "uri":"<path?query>","body_bytes":<len>}\\n
where n is the global execution number.
"""

import argparse
import gzip
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

    # ----------------------------------------------------------- response

    def do_ANY(self):
        started = time.time()
        path, _, query = self.path.partition("?")
        try:
            body = self.read_body()
        except (ConnectionError, ValueError) as e:
            log("%s %s body read failed: %s" % (self.command, self.path, e))
            self.close_connection = True
            return

        if path == "/__count" and self.command in ("GET", "HEAD"):
            params = parse_query(query)
            key = params.get("key")
            out = str(COUNTERS.get(key)).encode()
            self.send_simple(200, "text/plain", out)
            self.access(started, 200, len(out), key or "*", "count")
            return

        if path == "/__reset" and self.command == "POST":
            COUNTERS.reset()
            self.send_response(204)
            self.end_headers()
            self.access(started, 204, 0, "-", "reset")
            return

        key = self.key()
        total, execution = COUNTERS.execute(key)
        self.execute(started, path, query, key, total, execution, body)

    def send_simple(self, status, ctype, out):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    def execute(self, started, path, query, key, total, execution, reqbody):
        p = parse_query(query)
        method = self.command
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
            body = (json.dumps({
                "order_id": order,
                "key": key,
                "execution": execution,
                "method": method,
                "uri": self.path,
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
        headers.append(("Location", "/orders/" + order))
        headers.append(("X-Execution", str(execution)))
        headers.append(("X-Order-Id", order))
        for i in range(1, int_param(p, "cookies") + 1):
            headers.append(("Set-Cookie", "c%d=v%d; Path=/" % (i, i)))

        send_body = body and method != "HEAD"
        chunked = p.get("chunked") == "1" and not no_body \
            and p.get("empty") != "1"
        nolength = p.get("nolength") == "1"
        slow = int_param(p, "slow_body")

        if p.get("reset") == "1":
            self.send_reset(status, headers, body, started, key)
            return

        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if body or not (no_body or p.get("empty") == "1"):
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            elif nolength:
                self.send_header("Connection", "close")
            else:
                self.send_header("Content-Length", str(len(body)))
        if nolength:
            self.close_connection = True
        self.end_headers()

        if method == "HEAD":
            pass
        elif chunked:
            half = len(body) // 2
            first = split_pieces(body[:half], 2)
            second = split_pieces(body[half:], 2)
            for piece in first:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            if slow > 0:
                time.sleep(slow / 1000.0)
            for piece in second:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif send_body:
            if slow > 0:
                half = len(body) // 2
                self.wfile.write(body[:half])
                time.sleep(slow / 1000.0)
                self.wfile.write(body[half:])
            else:
                self.wfile.write(body)

        self.access(started, status, len(body) if send_body else 0, key,
                    "exec %d/%d" % (execution, total))

    def send_reset(self, status, headers, body, started, key):
        self.send_response(status)
        for name, value in headers:
            if name != "Content-Length":
                self.send_header(name, value)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write((body + b"x" * 10)[:10])
        time.sleep(0.05)  # let the bytes leave before the RST discards them
        self.access(started, status, 10, key, "reset")
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
        log('%s %s:%d "%s %s %s" %d %d key=%s %s %.3fs' % (
            time.strftime("%Y-%m-%dT%H:%M:%S"), self.client_address[0],
            self.client_address[1], self.command, self.path,
            self.request_version, status, nbytes, json.dumps(key), note,
            time.time() - started))

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
    global LOG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--pidfile")
    ap.add_argument("--log", help="append the request log here (default: stderr)")
    args = ap.parse_args()

    if args.log:
        LOG = open(args.log, "a", buffering=1)

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

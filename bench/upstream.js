// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause

'use strict';
// The tiny upstream of `make bench`.
//
// execute() is "the operation": it counts one execution for the request's
// Idempotency-Key and produces a small fixed JSON body with status 201.
// An X-Bench-Delay header (milliseconds) makes it slow, for the burst test;
// X-Bench-Pad (bytes) makes the body longer, for make bench-scale's
// realistic stored responses.
// Every system of the benchmark runs exactly this code once per execution:
// nginx proxies to the plain `http` server below, and the express peers
// (bench/node/peer-*.js) call execute() from their route handler.
//
// Control endpoints (any method):
//   /__stats   {"executions": N, "keys": K, "max_per_key": M, "per_key": {...}}
//              (per_key only with ?key=K: {"K": count})
//   /__reset   zero the counters
//
//   node bench/upstream.js PORT

const http = require('http');

const BODY = '{"id":"ord_0001","status":"created","amount":4200,' +
             '"currency":"EUR"}';

const counts = new Map();
let executions = 0;

function keyOf(headers) {
    const k = headers['idempotency-key'];
    return k === undefined ? '' : String(k);
}

// done(status, contentType, body) is called once the operation finished.
function execute(headers, done) {
    const key = keyOf(headers);
    executions++;
    counts.set(key, (counts.get(key) || 0) + 1);

    const delay = parseInt(headers['x-bench-delay'] || '0', 10);
    const pad = Math.min(parseInt(headers['x-bench-pad'] || '0', 10), 65536);
    const body = pad > 0
        ? BODY.slice(0, -1) + ',"note":"' + 'n'.repeat(pad) + '"}' : BODY;
    if (delay > 0) {
        setTimeout(done, delay, 201, 'application/json', body);
    } else {
        done(201, 'application/json', body);
    }
}

function stats(url) {
    let max = 0;
    for (const v of counts.values()) {
        if (v > max) {
            max = v;
        }
    }
    const out = { executions, keys: counts.size, max_per_key: max };
    const m = /[?&]key=([^&]*)/.exec(url);
    if (m) {
        const k = decodeURIComponent(m[1]);
        out.per_key = { [k]: counts.get(k) || 0 };
    }
    return JSON.stringify(out);
}

function reset() {
    counts.clear();
    executions = 0;
}

// Answers /__stats and /__reset; returns false for any other URL.
function control(url, send) {
    if (url.startsWith('/__stats')) {
        send(200, 'application/json', stats(url));
        return true;
    }
    if (url.startsWith('/__reset')) {
        reset();
        send(200, 'application/json', '{"reset":true}');
        return true;
    }
    return false;
}

module.exports = { execute, control };

if (require.main === module) {
    const port = parseInt(process.argv[2] || '18090', 10);

    const server = http.createServer((req, res) => {
        const send = (status, type, body) => {
            res.writeHead(status, {
                'Content-Type': type,
                'Content-Length': Buffer.byteLength(body),
            });
            res.end(body);
        };
        if (control(req.url, send)) {
            req.resume();
            return;
        }
        // read (and drop) the request body, then run the operation
        req.on('data', () => {});
        req.on('end', () => execute(req.headers, send));
    });
    server.keepAliveTimeout = 65000;
    server.listen(port, '127.0.0.1', () => {
        console.log(`upstream: listening on 127.0.0.1:${port}`);
    });
}

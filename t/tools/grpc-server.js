#!/usr/bin/env node
// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause
//
// The gRPC backend of the tests: a real @grpc/grpc-js server (h2c, as
// nginx's grpc_pass speaks to it), started by scripts/services.sh.
//
//   node t/tools/grpc-server.js --port PORT [--pidfile F] [--log F]
//
// Service idem.Payments, messages are JSON (grpc-json.js):
//
//   Charge  {"amount": N, "mode": M, "sleep_ms": T, "code": C,
//            "message": S}
//           counts one execution of the key in the idempotency-key
//           metadata, then, as mode says:
//             ok       (default) answers {"key", "execution", "amount",
//                      "pid"} with initial metadata x-served-by and
//                      trailing metadata x-charge-id and x-charge-seq
//             fail     ends with status C, message S and trailing
//                      metadata x-charge-id, before any response header
//                      (grpc-js sends that trailers-only)
//             fail-late  sends its header first, then status C, S
//           and "wait": F holds the answer of any mode until file F
//           exists
//             sleep    answers as ok after T ms (a deadline shorter
//                      than T ends the call first)
//             rst      resets the stream (RST_STREAM INTERNAL_ERROR)
//             nostatus answers its message and ends the stream without
//                      trailers: no grpc-status at all
//             len0     a header with content-length: 0, then the trailers
//                      with grpc-status 0 and x-charge-id (no message)
//             refuse   ends with UNAVAILABLE before it executes (not
//                      counted)
//   Count   {"key": K} -> {"count": executions of K so far}
//
// Needs @grpc/grpc-js in build/node (scripts/node-deps.sh) or
// IDEM_NODE_DIR.

'use strict';

const fs = require('fs');
const http2 = require('http2');
const { grpc, method } = require('./grpc-json');

const args = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) {
    args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
}
if (!/^\d+$/.test(args.port || '')) {
    process.stderr.write('usage: grpc-server.js --port PORT [--pidfile F] [--log F]\n');
    process.exit(2);
}

const logFile = args.log ? fs.openSync(args.log, 'a') : null;
function log(line) {
    const s = `${new Date().toISOString()} ${line}\n`;
    if (logFile !== null) fs.writeSync(logFile, s); else process.stdout.write(s);
}

const service = { Charge: method('Charge'), Count: method('Count') };
const counts = new Map();

// the HTTP/2 stream under a unary call (grpc-js keeps it in its chain of
// intercepting calls)
function streamOf(call) {
    let c = call.call;
    while (c && !c.stream && c.nextCall) c = c.nextCall;
    return c && c.stream;
}

function charge(call, callback) {
    const req = call.request || {};
    const key = String(call.metadata.get('idempotency-key')[0] || '');
    const mode = req.mode || 'ok';

    if (mode === 'refuse') {
        log(`Charge ${key} refused`);
        callback({ code: grpc.status.UNAVAILABLE, details: 'not now' });
        return;
    }

    const n = (counts.get(key) || 0) + 1;
    counts.set(key, n);
    log(`Charge ${key} execution ${n} mode ${mode}`);

    const trailing = new grpc.Metadata();
    trailing.set('x-charge-id', `ch_${key}_${n}`);
    trailing.set('x-charge-seq', String(n));

    // the answer, once the test lets it go (req.wait names a file)
    const go = (f) => {
        if (!req.wait || fs.existsSync(req.wait)) {
            f();
        } else {
            setTimeout(() => go(f), 20);
        }
    };

    const answer = () => {
        const md = new grpc.Metadata();
        md.set('x-served-by', 'grpc-server');
        call.sendMetadata(md);
        callback(null, { key, execution: n, amount: req.amount || 0,
                         pid: process.pid }, trailing);
    };

    switch (mode) {
    case 'fail':
        go(() => callback({ code: req.code, details: req.message || '',
                            metadata: trailing }));
        return;
    case 'fail-late':
        call.sendMetadata(new grpc.Metadata());
        setTimeout(() => callback({ code: req.code,
                                    details: req.message || '',
                                    metadata: trailing }), 20);
        return;
    case 'sleep':
        setTimeout(answer, req.sleep_ms || 0);
        return;
    case 'rst': {
        const stream = streamOf(call);
        stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
        return;
    }
    case 'nostatus': {
        // the answer framed by hand (a 5-byte prefix), no trailers
        const stream = streamOf(call);
        const msg = Buffer.from(JSON.stringify({ key, execution: n }));
        const frame = Buffer.alloc(5 + msg.length);
        frame.writeUInt32BE(msg.length, 1);
        msg.copy(frame, 5);
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
        stream.end(frame);
        return;
    }
    case 'len0': {
        const stream = streamOf(call);
        stream.respond({ ':status': 200, 'content-type': 'application/grpc',
                         'content-length': '0' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({
            'grpc-status': '0', 'x-charge-id': `ch_${key}_${n}` }));
        stream.end();
        return;
    }
    default:
        go(answer);
    }
}

function count(call, callback) {
    const key = String((call.request || {}).key || '');
    callback(null, { count: counts.get(key) || 0 });
}

const server = new grpc.Server();
server.addService(service, { Charge: charge, Count: count });
server.bindAsync(`127.0.0.1:${args.port}`, grpc.ServerCredentials.createInsecure(),
    (err) => {
        if (err) {
            log(`cannot listen on 127.0.0.1:${args.port}: ${err.message}`);
            process.exit(1);
        }
        if (args.pidfile) fs.writeFileSync(args.pidfile, `${process.pid}\n`);
        log(`grpc-server: listening on 127.0.0.1:${args.port}`);
    });

for (const sig of ['SIGTERM', 'SIGINT']) {
    process.on(sig, () => server.tryShutdown(() => process.exit(0)));
}

#!/usr/bin/env node
// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause
//
// A real @grpc/grpc-js client of t/tools/grpc-server.js, for the tests.
//
//   node t/tools/grpc-call.js PORT METHOD KEY REQUEST_JSON [N [DEADLINE_MS]]
//
// Makes N (default 1) concurrent unary calls of idem.Payments/METHOD on
// 127.0.0.1:PORT (h2c), each with the metadata idempotency-key: KEY (none
// when KEY is "-") and the JSON request, and a deadline of DEADLINE_MS
// if given.  Prints one JSON array, a result per call:
//   {"code": gRPC status code, "details": its message,
//    "initial": {initial metadata}, "trailing": {trailing metadata},
//    "response": the answer or null}
// Exits 0 once every call has ended; 2 on usage errors.

'use strict';

const { grpc, method } = require('./grpc-json');

const [port, methodName, key, body, nArg, deadlineArg] = process.argv.slice(2);
if (!/^\d+$/.test(port || '') || !methodName || key === undefined
    || body === undefined) {
    process.stderr.write('usage: grpc-call.js PORT METHOD KEY REQUEST_JSON [N [DEADLINE_MS]]\n');
    process.exit(2);
}
const n = Number(nArg || 1);

const Client = grpc.makeGenericClientConstructor(
    { [methodName]: method(methodName) }, 'Payments');

const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());

function mdObject(md) {
    const o = {};
    if (!md) return o;
    for (const [k, v] of Object.entries(md.getMap())) {
        o[k] = Buffer.isBuffer(v) ? v.toString('base64') : String(v);
    }
    return o;
}

function one() {
    return new Promise((resolve) => {
        const md = new grpc.Metadata();
        if (key !== '-') md.set('idempotency-key', key);
        const opts = deadlineArg ? { deadline: Date.now() + Number(deadlineArg) } : {};
        const out = { code: null, details: null, initial: {}, trailing: {},
                      response: null };
        let pending = 2;
        const done = () => { if (--pending === 0) resolve(out); };

        const call = client[methodName](JSON.parse(body), md, opts, (err, res) => {
            if (err) {
                out.code = err.code;
                out.details = err.details;
            } else {
                out.response = res;
            }
            done();
        });
        call.on('metadata', (m) => { out.initial = mdObject(m); });
        call.on('status', (s) => {
            out.code = s.code;
            out.details = s.details;
            out.trailing = mdObject(s.metadata);
            done();
        });
    });
}

Promise.all(Array.from({ length: n }, one)).then((results) => {
    process.stdout.write(JSON.stringify(results) + '\n');
    client.close();
    process.exit(0);
});

#!/usr/bin/env node
// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause
//
// One POST through the official Stripe Node library (stripe-node), with its
// own automatic Idempotency-Key and its own retry logic, for the tests.
//
//   node t/tools/stripe-retry.js PORT PATH TIMEOUT_MS MAX_RETRIES
//
// The client is pointed at http://127.0.0.1:PORT (apiKey sk_test_x,
// timeout TIMEOUT_MS, maxNetworkRetries MAX_RETRIES) and does
// stripe.rawRequest('POST', PATH, {amount: 1}): the library's request
// machinery adds "Idempotency-Key: stripe-node-retry-<uuid>" and keeps that
// same key on every retry.  Prints one JSON line and exits 0:
//
//   {"ok":true,"status":S,"body":<parsed body>,"idempotencyKey":"<key sent>",
//    "replayed":<Idempotent-Replayed header of the final response, or null>,
//    "attempts":[...]}
//   {"ok":false,"type":"StripeConnectionError","statusCode":S|null,
//    "message":"...","code":"...","idempotencyKey":"...","attempts":[...]}
//
// attempts: one entry per HTTP attempt the library made, in order:
//   {"t":MS since the first attempt,"status":S,"replayed":"true"|null}
//   {"t":MS,"error":"ETIMEDOUT"|"ECONNRESET"|...}
// Note that stripe-node returns any JSON body without an "error" member as a
// success, whatever its status: check "status" too.
//
// The library is loaded from build/node (scripts/node-deps.sh installs it);
// IDEM_NODE_DIR overrides that directory.  Usage errors and a missing
// library exit 2.

'use strict';

const path = require('path');

const args = process.argv.slice(2);
if (args.length !== 4 || !/^\d+$/.test(args[0]) || !args[1].startsWith('/')
    || !/^\d+$/.test(args[2]) || !/^\d+$/.test(args[3])) {
    process.stderr.write(
        'usage: node stripe-retry.js PORT PATH TIMEOUT_MS MAX_RETRIES\n');
    process.exit(2);
}
const [port, reqPath] = args;
const timeout = Number(args[2]);
const maxRetries = Number(args[3]);

const nodeDir = process.env.IDEM_NODE_DIR
    || path.join(__dirname, '..', '..', 'build', 'node');
let Stripe;
try {
    Stripe = require(path.join(nodeDir, 'node_modules', 'stripe'));
} catch (e) {
    process.stderr.write(`stripe-retry: cannot load the stripe package from ${nodeDir}`
        + ` (run scripts/node-deps.sh): ${e.message}\n`);
    process.exit(2);
}

// The library's own Node HTTP client, wrapped only to record each attempt:
// the retry decisions, backoff and headers are all the library's.
const attempts = [];
let t0 = null;

class RecordingHttpClient extends Stripe.HttpClient {
    constructor() {
        super();
        this._inner = Stripe.createNodeHttpClient();
    }
    getClientName() {
        return this._inner.getClientName();
    }
    makeRequest(host, port, p, method, headers, data, protocol, timeoutMs) {
        const now = Date.now();
        if (t0 === null) t0 = now;
        const entry = { t: now - t0 };
        attempts.push(entry);
        return this._inner
            .makeRequest(host, port, p, method, headers, data, protocol, timeoutMs)
            .then((res) => {
                const h = res.getHeaders();
                entry.status = res.getStatusCode();
                entry.replayed = h['idempotent-replayed'] ?? null;
                return res;
            }, (err) => {
                entry.error = err.code || err.message;
                throw err;
            });
    }
}

const stripe = Stripe('sk_test_x', {
    host: '127.0.0.1',
    port: Number(port),
    protocol: 'http',
    timeout,
    maxNetworkRetries: maxRetries,
    httpClient: new RecordingHttpClient(),
    telemetry: false,
});

// the key the library generated and sent (the same on every retry)
let sentKey = null;
stripe.on('request', (ev) => {
    if (sentKey === null && ev.idempotency_key) sentKey = ev.idempotency_key;
});

function done(obj) {
    process.stdout.write(JSON.stringify(obj) + '\n', () => process.exit(0));
}

stripe.rawRequest('POST', reqPath, { amount: 1 }).then((body) => {
    const last = body.lastResponse || {};
    const headers = last.headers || {};
    done({
        ok: true,
        status: last.statusCode ?? null,
        body,
        idempotencyKey: sentKey || last.idempotencyKey || null,
        replayed: headers['idempotent-replayed'] ?? null,
        attempts,
    });
}, (err) => {
    const detail = err.detail || err.raw?.detail || null;
    done({
        ok: false,
        type: err.type || err.name || null,
        statusCode: err.statusCode ?? null,
        message: err.message,
        code: err.code || (detail && detail.code) || null,
        idempotencyKey: sentKey,
        attempts,
    });
});

setTimeout(() => {
    done({ ok: false, type: 'ToolTimeout', statusCode: null,
           message: 'no result within 120 s', code: null,
           idempotencyKey: sentKey, attempts });
}, 120000).unref();

#!/usr/bin/env node
// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause
//
// Reset one HTTP/2 stream in the middle of a keyed POST, for the tests.
//
//   node t/tools/h2-reset.js PORT PATH KEY BODY RESET_AFTER_MS
//
// Connects to http://127.0.0.1:PORT with HTTP/2 over cleartext (h2c with
// prior knowledge, as nginx's "listen ... http2" expects), sends
//   POST PATH   idempotency-key: KEY   body BODY
// and RESET_AFTER_MS milliseconds after the request was sent, if the response
// has not ended by then, resets just that stream with RST_STREAM CANCEL.  The
// connection stays open 300 ms more before the session is closed, so that
// what nginx sees is the stream reset, not the connection going away.
//
// Prints one line and exits 0:
//   reset             the stream was reset before the response ended
//   complete STATUS   the response ended first (STATUS: its :status)
// On a connection or protocol failure before either (e.g. nginx reset the
// stream itself), prints "error CODE: MESSAGE[ (status STATUS)]" and exits 1.
// Usage errors exit 2.
//
// Needs nothing but node (>= 18; the built-in http2 module).

'use strict';

const http2 = require('http2');

const HOLD_MS = 300;          // keep the connection open after the reset
const GIVE_UP_MS = 30000;     // overall safety limit

const args = process.argv.slice(2);
if (args.length !== 5 || !/^\d+$/.test(args[0]) || !/^\d+$/.test(args[4])
    || !args[1].startsWith('/')) {
    process.stderr.write('usage: node h2-reset.js PORT PATH KEY BODY RESET_AFTER_MS\n');
    process.exit(2);
}
const [port, path, key, body] = args;
const resetAfter = Number(args[4]);

let finished = false;         // a result line was printed
let status = null;

function finish(line, code) {
    if (finished) return;
    finished = true;
    process.stdout.write(line + '\n');
    process.exitCode = code;
}

const session = http2.connect(`http://127.0.0.1:${port}`);

function closeSession(delay) {
    setTimeout(() => {
        // GOAWAY, then the socket: nginx does not close an idle h2c
        // connection on a client's GOAWAY, so don't wait for it to
        session.close(() => process.exit());
        setTimeout(() => { session.destroy(); process.exit(); }, 100).unref();
    }, delay);
}

session.on('error', (err) => {
    finish('error ' + (err.code || 'session') + ': ' + err.message, 1);
    session.destroy();
    process.exit();
});

const payload = Buffer.from(body, 'utf8');
const req = session.request({
    ':method': 'POST',
    ':path': path,
    'idempotency-key': key,
    'content-type': 'application/json',
    'content-length': String(payload.length),
});

req.on('response', (headers) => { status = headers[':status']; });
req.on('data', () => {});
req.on('end', () => {
    if (finished) return;
    clearTimeout(resetTimer);
    finish('complete ' + status, 0);
    closeSession(0);
});
req.on('error', (err) => {
    if (finished) return;
    clearTimeout(resetTimer);
    // a failed connect also cancels the stream: let the session's own error
    // (ECONNREFUSED, ...) be the one reported
    setTimeout(() => {
        if (finished) return;
        finish('error ' + (err.code || 'stream') + ': ' + err.message
               + (status !== null ? ' (status ' + status + ')' : ''), 1);
        closeSession(0);
    }, 20);
});

const resetTimer = setTimeout(() => {
    if (finished) return;
    req.close(http2.constants.NGHTTP2_CANCEL);
    finish('reset', 0);
    closeSession(HOLD_MS);
}, resetAfter);

req.end(payload);

setTimeout(() => {
    finish('error timeout', 1);
    session.destroy();
    process.exit();
}, GIVE_UP_MS).unref();

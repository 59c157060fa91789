#!/usr/bin/env node
// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause
//
// An HTTP/2 client that posts with a key, reads a little, then stops
// reading (its stream window closes) and holds the connection, for the
// tests of a client that stops reading (t/045).
//
//   node t/tools/h2-stall.js PORT PATH KEY HOLD_MS
//
// Prints "status S got N" (the bytes it read) when it lets go.

'use strict';

const http2 = require('http2');

const [port, path, key, hold] = process.argv.slice(2);

const session = http2.connect(`http://127.0.0.1:${port}`,
                              { settings: { initialWindowSize: 65535 } });
session.on('error', (e) => { console.log('session error ' + e.message); });

const req = session.request({ ':method': 'POST', ':path': path,
                              'idempotency-key': key,
                              'content-length': '1' });
req.end('x');

let got = 0;
let status = null;

req.on('response', (h) => { status = h[':status']; });
req.on('data', (d) => {
    got += d.length;
    if (got > 16384) {
        req.pause();
    }
});
req.on('error', (e) => { console.log('stream error ' + e.message); });

setTimeout(() => {
    console.log(`status ${status} got ${got}`);
    session.destroy();
    process.exit(0);
}, Number(hold));

// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause

'use strict';
// Peer 1: express + express-idempotency with its Redis adapter
// (express-idempotency-redis-adapter), wired as both READMEs show.
// The route runs the same execute() as bench/upstream.js.
//
//   node bench/node/peer-express-idempotency.js PORT REDIS_URL
//   (REDIS_URL e.g. redis://127.0.0.1:6380/8)

const idempotency = require('express-idempotency');
const RedisAdapter = require('express-idempotency-redis-adapter').default;
const upstream = require('../upstream.js');

const port = parseInt(process.argv[2] || '18091', 10);
const redisUrl = process.argv[3] || 'redis://127.0.0.1:6380/8';

const adapter = new RedisAdapter({ connectionConfig: { url: redisUrl } });

const app = require('./app.js').app();

app.post('*', idempotency.idempotency({ dataAdapter: adapter }),
    (req, res) => {
        // the middleware has already answered a duplicate
        if (idempotency.getSharedIdempotencyService().isHit(req)) {
            return;
        }
        upstream.execute(req.headers, (status, type, body) => {
            res.status(status).type(type).send(body);
        });
    });

// conflict (409) and misuse (417) arrive here from the middleware
app.use((err, req, res, next) => {
    if (res.headersSent) {
        return next(err);
    }
    const status = res.statusCode >= 400 ? res.statusCode : 500;
    res.status(status).json({ error: err.message });
});

adapter.connect().then(() => {
    app.listen(port, '127.0.0.1', () => {
        console.log(`express-idempotency peer: 127.0.0.1:${port}`);
    });
}).catch((err) => {
    console.error('redis connect failed:', err);
    process.exit(1);
});

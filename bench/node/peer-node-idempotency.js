// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause

'use strict';
// Peer 2: express + @node-idempotency/core with its Redis storage adapter
// (@node-idempotency/storage-adapter-redis).  The package's own express
// middleware is not in the registry, so this file wires the core API into
// express as its README describes: onRequest() before the handler (a
// stored response is answered from it), onResponse() with the handler's
// response.  The route runs the same execute() as bench/upstream.js.
//
//   node bench/node/peer-node-idempotency.js PORT REDIS_URL

const { Idempotency, IdempotencyError, IdempotencyErrorCodes } =
    require('@node-idempotency/core');
const { RedisStorageAdapter } =
    require('@node-idempotency/storage-adapter-redis');
const upstream = require('../upstream.js');

const port = parseInt(process.argv[2] || '18092', 10);
const redisUrl = process.argv[3] || 'redis://127.0.0.1:6380/8';

const storage = new RedisStorageAdapter({ url: redisUrl });
const idem = new Idempotency(storage, { cacheTTLMS: 86400 * 1000 });

function errorStatus(err) {
    if (!(err instanceof IdempotencyError)) {
        return 500;
    }
    switch (err.code) {
    case IdempotencyErrorCodes.REQUEST_IN_PROGRESS:
        return 409;
    case IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH:
        return 422;
    default:
        return 400;
    }
}

async function idempotent(req, res, next) {
    const params = {
        method: req.method,
        path: req.path,
        headers: req.headers,
        body: req.body,
    };
    let stored;
    try {
        stored = await idem.onRequest(params);
    } catch (err) {
        res.status(errorStatus(err)).json({ error: err.message });
        return;
    }
    if (stored) {
        const a = stored.additional || {};
        res.status(a.status || 200).type(a.type || 'application/json')
            .set('Idempotent-Replayed', 'true').send(stored.body);
        return;
    }
    // a first request: store its response when the handler sends it
    const send = res.send;
    res.send = function (body) {
        idem.onResponse(params, {
            body,
            additional: { status: res.statusCode, type: res.get('Content-Type') },
        }).catch((err) => console.error('onResponse failed:', err.message));
        return send.call(this, body);
    };
    next();
}

const app = require('./app.js').app();

app.post('*', idempotent, (req, res) => {
    upstream.execute(req.headers, (status, type, body) => {
        res.status(status).type(type).send(body);
    });
});

storage.connect().then(() => {
    app.listen(port, '127.0.0.1', () => {
        console.log(`@node-idempotency peer: 127.0.0.1:${port}`);
    });
}).catch((err) => {
    console.error('redis connect failed:', err);
    process.exit(1);
});

// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause

'use strict';
// The peers' baseline: express with the same route as
// bench/node/peer-*.js (express.json(), then the same execute() of
// bench/upstream.js) and no idempotency middleware.  What a peer costs
// over this is what its middleware and Redis cost.
//
//   node bench/node/plain-express.js PORT

const upstream = require('../upstream.js');

const port = parseInt(process.argv[2] || '18093', 10);

const app = require('./app.js').app();

app.post('*', (req, res) => {
    upstream.execute(req.headers, (status, type, body) => {
        res.status(status).type(type).send(body);
    });
});

app.listen(port, '127.0.0.1', () => {
    console.log(`plain express: 127.0.0.1:${port}`);
});

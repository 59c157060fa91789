// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause

'use strict';
// The express application that plain express and the two peers share:
// its settings, the bench's control routes (/__stats, /__reset of
// bench/upstream.js) and the JSON body parser.  Each adds its own POST
// route on top.

const express = require('express');
const upstream = require('../upstream.js');

function app() {
    const a = express();
    a.set('x-powered-by', false);
    a.set('etag', false);

    a.all(['/__stats', '/__reset'], (req, res) => {
        upstream.control(req.url, (status, type, body) => {
            res.status(status).type(type).send(body);
        });
    });

    a.use(express.json());

    return a;
}

module.exports = { app };

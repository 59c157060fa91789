// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause
//
// What grpc-server.js and grpc-call.js share: @grpc/grpc-js from
// build/node (scripts/node-deps.sh) or IDEM_NODE_DIR, and the unary
// methods of idem.Payments with JSON messages (a codec of their own, so
// that no .proto file is needed; framing, metadata and status are
// gRPC's).

'use strict';

const path = require('path');

const nodeDir = process.env.IDEM_NODE_DIR
    || path.join(__dirname, '..', '..', 'build', 'node');
const grpc = require(path.join(nodeDir, 'node_modules', '@grpc', 'grpc-js'));

const serialize = (o) => Buffer.from(JSON.stringify(o));
const deserialize = (b) => JSON.parse(b.toString() || '{}');

function method(name) {
    return {
        path: `/idem.Payments/${name}`,
        requestStream: false,
        responseStream: false,
        requestSerialize: serialize,
        requestDeserialize: deserialize,
        responseSerialize: serialize,
        responseDeserialize: deserialize,
    };
}

module.exports = { grpc, method };

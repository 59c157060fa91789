#!/usr/bin/env node
// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause
//
// Signs webhook deliveries the way the providers do, with their own
// libraries, for the tests:
//
//   echo '[{"scheme":"stripe","secret":"whsec_...","body":"{...}"}, ...]' \
//       | node t/tools/webhook-sign.js
//
// Each job is {"scheme", "secret", "body", "id" (standard), "timestamp"
// (unix seconds; default now)}; the answer is one JSON line, an array of
// the headers to send with each delivery, in order:
//
//   stripe    Stripe-Signature, from stripe-node's
//             webhooks.generateTestHeaderString({payload, secret, timestamp})
//   standard  webhook-id, webhook-timestamp, webhook-signature, from the
//             standardwebhooks package's new Webhook(secret).sign(id, date,
//             body); "svix": true names them svix-*
//   github    X-Hub-Signature-256, from @octokit/webhooks-methods'
//             sign(secret, body)
//   shopify   X-Shopify-Hmac-Sha256: base64 of Node's crypto HMAC-SHA256
//             (Shopify's own libraries compute it so)
//
// The libraries are loaded from build/node (scripts/node-deps.sh);
// IDEM_NODE_DIR overrides that directory.  A missing library exits 2.

'use strict';

const crypto = require('crypto');
const path = require('path');
const { pathToFileURL } = require('url');

const nodeDir = process.env.IDEM_NODE_DIR
    || path.join(__dirname, '..', '..', 'build', 'node');
const mod = (name) => path.join(nodeDir, 'node_modules', name);

async function main() {
    let Stripe, Webhook, octokit;
    try {
        Stripe = require(mod('stripe'));
        ({ Webhook } = require(mod('standardwebhooks')));
        // ESM only: its entry for Node, from its package.json's exports
        const dir = mod('@octokit/webhooks-methods');
        const entry = require(path.join(dir, 'package.json'))
            .exports['.'].node.import;
        octokit = await import(pathToFileURL(path.join(dir, entry)).href);
    } catch (e) {
        process.stderr.write(`webhook-sign: cannot load a library from ${nodeDir}`
            + ` (run scripts/node-deps.sh): ${e.message}\n`);
        process.exit(2);
    }

    const stripe = Stripe('sk_test_x');
    const jobs = JSON.parse(require('fs').readFileSync(0, 'utf8'));
    const out = [];

    for (const j of jobs) {
        const ts = j.timestamp ?? Math.floor(Date.now() / 1000);
        const h = {};

        switch (j.scheme) {
        case 'stripe':
            h['Stripe-Signature'] = stripe.webhooks.generateTestHeaderString({
                payload: j.body, secret: j.secret, timestamp: ts });
            break;

        case 'standard': {
            const p = j.svix ? 'svix' : 'webhook';
            h[`${p}-id`] = j.id;
            h[`${p}-timestamp`] = String(ts);
            h[`${p}-signature`] = new Webhook(j.secret).sign(j.id,
                new Date(ts * 1000), j.body);
            break;
        }

        case 'github':
            h['X-Hub-Signature-256'] = await octokit.sign(j.secret, j.body);
            break;

        case 'shopify':
            h['X-Shopify-Hmac-Sha256'] = crypto.createHmac('sha256', j.secret)
                .update(j.body, 'utf8').digest('base64');
            break;

        default:
            throw new Error(`no scheme "${j.scheme}"`);
        }

        out.push(h);
    }

    process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
    process.stderr.write(`webhook-sign: ${e.stack || e}\n`);
    process.exit(1);
});

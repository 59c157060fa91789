
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: from a known key to a verdict.
 *
 * The tiers are asked first; decide() is the one place that then chooses
 * between a tier's response and a claim in MySQL.  A claim is a few
 * prepared statements (sql.c), one round trip each: the INSERT of a new
 * key, the READ of a key that exists, the TAKE of a key past retention or
 * of a dead owner.  A new key costs the INSERT only.  The row gives the
 * verdict: forward (the key is ours), replay, 410, 422, or a key in
 * progress elsewhere, which is held (hold.c) and decided again when the
 * hold ends, or gets 409.  A won claim is then the request's (owner.c)
 * until the completion takes it over or it is given back.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <openssl/rand.h>

#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_claim.h"
#include "ngx_http_idempotency_problem.h"
#include "ngx_http_idempotency_sql.h"
#include "ngx_http_idempotency_tier.h"
#include "ngx_http_idempotency_hold.h"
#include "ngx_http_idempotency_owner.h"
#include "ngx_http_idempotency_fence.h"
#include "ngx_http_idempotency_ctx.h"


/*
 * How often one request claims: after a 1213 (a lost race at commit,
 * claimed again after a pause), and how many steps it takes otherwise
 * (a row that went away between the INSERT and the READ, or changed
 * between the READ and the TAKE, sends the claim round again at once).
 */
#define NGX_HTTP_IDEMPOTENCY_LOST_TRIES   8
#define NGX_HTTP_IDEMPOTENCY_STEP_TRIES   16

/*
 * Which step a claim starts with.  The share of claims that found their
 * key already there is averaged over about the last 32 claims of this
 * worker on this server (shard->existing, 0 .. EXISTING_ONE): while it is
 * under half, a claim starts with the INSERT, and a first request is one
 * round trip; above it, with the READ, and a duplicate is one point read
 * instead of a refused INSERT and a read.  A key already seen in
 * progress by this request (a held duplicate's poll) is always read.
 */
#define NGX_HTTP_IDEMPOTENCY_EXISTING_ONE 1024
#define NGX_HTTP_IDEMPOTENCY_EXISTING_AVG 32


static void ngx_http_idempotency_decide(ngx_http_idempotency_ctx_t *ctx,
    ngx_int_t rc);
static void ngx_http_idempotency_claim_end(ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_claim(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_claim_step(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t stmt, ngx_uint_t urgent);
static void ngx_http_idempotency_claim_seen(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t existing);
static ngx_int_t ngx_http_idempotency_claim_next(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op);
static ngx_int_t ngx_http_idempotency_token(ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_claim_done(ngx_http_idempotency_op_t *op);
static ngx_int_t ngx_http_idempotency_claim_lost(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_reclaim_handler(ngx_event_t *ev);
static void ngx_http_idempotency_won(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, time_t ttl, ngx_uint_t status);
static ngx_int_t ngx_http_idempotency_verdict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op);
static ngx_int_t ngx_http_idempotency_done_verdict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op,
    ngx_int_t state, ngx_uint_t dead, ngx_int_t ttl_s);
static ngx_int_t ngx_http_idempotency_rerun(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_fenced(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_fence_e rc);
static void ngx_http_idempotency_find(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_find_done(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_row_life(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_new_life(ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_row_replay(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op,
    ngx_int_t ttl_s);
static void ngx_http_idempotency_not_issued(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_hold_or_conflict(
    ngx_http_request_t *r, ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_entry_verdict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_claim_failed(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_poll_failed(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, const char *what);


/*
 * The key, and the body's fingerprint, are known: a completed key is
 * replayed from a tier without MySQL.
 */

void
ngx_http_idempotency_lookup(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t  rc;

    rc = ngx_http_idempotency_tier_lookup(ctx, ngx_http_idempotency_decide);

    if (rc == NGX_AGAIN) {
        ctx->state = NGX_HTTP_IDEMPOTENCY_S_STORE;

        /* notice a client that goes away while Redis works */
        r->read_event_handler = ngx_http_test_reading;
        return;
    }

    ngx_http_idempotency_decide(ctx, rc);
}


/*
 * After the tiers (a lookup, or the end of a held duplicate's wait): the
 * one place that chooses between a tier's response and MySQL's verdict.
 */

static void
ngx_http_idempotency_decide(ngx_http_idempotency_ctx_t *ctx, ngx_int_t rc)
{
    ngx_http_request_t  *r;

    r = ctx->request;

    if (rc == NGX_OK) {
        ngx_http_idempotency_entry_verdict(r, ctx);
        ngx_http_idempotency_resume(r);
        return;
    }

    ngx_http_idempotency_claim(r, ctx);
}


/* a claim starts; claim_done() takes each step's result from there */

static void
ngx_http_idempotency_claim(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_uint_t  stmt;

    /* an expired issued key may only be looked up: it must have a row */

    stmt = (ctx->claim.in_progress || ctx->expired_key
            || ctx->shard->existing > NGX_HTTP_IDEMPOTENCY_EXISTING_ONE / 2)
           ? NGX_HTTP_IDEMPOTENCY_STMT_READ : NGX_HTTP_IDEMPOTENCY_STMT_CLAIM;

    ctx->claim.take = 0;

    ngx_http_idempotency_claim_step(r, ctx, stmt, 0);
}


/* one round trip of a claim */

static void
ngx_http_idempotency_claim_step(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t stmt, ngx_uint_t urgent)
{
    ngx_http_idempotency_op_t     *op;
    ngx_http_idempotency_claim_t   cl;

    op = NULL;

    /*
     * A READ before the request's first write needs no token: no row can
     * be its own yet, and a duplicate that the READ answers never draws
     * one.  What the claim leaves when the request ends is its own to
     * undo.
     */

    if (ngx_http_idempotency_on_end(ctx, ngx_http_idempotency_claim_end)
        == NGX_OK
        && ((stmt == NGX_HTTP_IDEMPOTENCY_STMT_READ && !ctx->has_token)
            || ngx_http_idempotency_token(ctx) == NGX_OK))
    {
        cl.key_hash = ctx->key_hash;
        cl.owner = ctx->has_token ? ctx->token : NULL;
        cl.fingerprint = ctx->conf->fingerprint ? ctx->fingerprint : NULL;
        cl.lease = ctx->conf->lease;
        cl.ttl = ctx->conf->ttl;
        cl.epoch = ctx->epoch;
        /* a key of unknown outcome is taken only when its epoch was
         * fenced, or on the backend's own say (a redrive) */
        cl.fenced = (ctx->claim.take == NGX_HTTP_IDEMPOTENCY_TAKE_FENCED
                     || ctx->claim.take == NGX_HTTP_IDEMPOTENCY_TAKE_REDRIVE);

        op = ngx_http_idempotency_sql_claim(ctx->shard, ngx_cycle->log, stmt,
                                            &cl);
    }

    if (op == NULL) {
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        ngx_http_idempotency_resume(r);
        return;
    }

    op->handler = ngx_http_idempotency_claim_done;
    op->data = ctx;

    /* a claim under way goes ahead of the claims that start */
    op->urgent = urgent;

    ctx->claim.op = op;
    ctx->state = NGX_HTTP_IDEMPOTENCY_S_STORE;
    ctx->claim.tries++;
    ctx->claim.sent = ngx_current_msec;

    /* notice a client that goes away while the store works */
    r->read_event_handler = ngx_http_test_reading;

    ngx_http_idempotency_op_run(op);
}


/*
 * The owner token, drawn before the request's first claim and kept for
 * its later ones: a duplicate that a tier answers never claims.  Tokens
 * come from a per-process reserve that RAND_bytes() fills TOKENS at a
 * time:
 * each call has a fixed cost (locks, the DRBG's checks, a getpid() for
 * its fork test) many times that of 16 bytes, and was one of the dearest
 * steps of a first request.  The reserve remembers the pid that filled it,
 * so a process never hands out tokens drawn before it was forked.
 */

#define NGX_HTTP_IDEMPOTENCY_TOKENS  64

static ngx_int_t
ngx_http_idempotency_token(ngx_http_idempotency_ctx_t *ctx)
{
    u_char  *p;

    static ngx_pid_t   pid;
    static ngx_uint_t  left;
    static u_char      reserve[NGX_HTTP_IDEMPOTENCY_TOKENS
                               * NGX_HTTP_IDEMPOTENCY_TOKEN_LEN];

    if (ctx->has_token) {
        return NGX_OK;
    }

    if (left == 0 || pid != ngx_pid) {
        if (RAND_bytes(reserve, sizeof(reserve)) != 1) {
            left = 0;
            return NGX_ERROR;
        }

        pid = ngx_pid;
        left = NGX_HTTP_IDEMPOTENCY_TOKENS;
    }

    /* each token is handed out once: its bytes leave the reserve */

    p = reserve + --left * NGX_HTTP_IDEMPOTENCY_TOKEN_LEN;
    ngx_memcpy(ctx->token, p, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);
    ngx_memzero(p, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);

    ctx->has_token = 1;

    return NGX_OK;
}


static void
ngx_http_idempotency_claim_done(ngx_http_idempotency_op_t *op)
{
    ngx_int_t                    next;
    ngx_http_request_t          *r;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = op->data;
    r = ctx->request;

    ctx->claim.op = NULL;

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK) {

        next = ngx_http_idempotency_claim_next(r, ctx, op);

        if (next == NGX_AGAIN) {
            /* held */
            return;
        }

        if (next > 0) {
            if (ctx->claim.tries - ctx->claim.lost
                < NGX_HTTP_IDEMPOTENCY_STEP_TRIES)
            {
                ngx_http_idempotency_claim_step(r, ctx, next, 1);
                return;
            }

            ngx_http_idempotency_claim_failed(r, ctx, op);
        }

    } else if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR
               && op->cause == NGX_HTTP_IDEMPOTENCY_CAUSE_RACE)
    {
        if (ngx_http_idempotency_claim_lost(r, ctx) == NGX_AGAIN) {
            return;
        }

    } else {
        ngx_http_idempotency_claim_failed(r, ctx, op);
    }

    ngx_http_idempotency_resume(r);
}


/*
 * A step's result: 0 when the request is decided (and is to resume), the
 * statement the claim goes on with, or NGX_AGAIN when the verdict waits
 * (a held duplicate).
 */

static ngx_int_t
ngx_http_idempotency_claim_next(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op)
{
    ngx_uint_t  first, status;

    first = (ctx->claim.tries - ctx->claim.lost == 1
             && !ctx->claim.in_progress);

    ctx->tier = NGX_HTTP_IDEMPOTENCY_TIER_MYSQL;

    switch (op->stmt) {

    case NGX_HTTP_IDEMPOTENCY_STMT_CLAIM:

        if (first) {
            ngx_http_idempotency_claim_seen(ctx, op->affected_rows == 0);
        }

        if (op->affected_rows == 1) {
            /* the INSERT made the row: a new key, nothing was read; its
             * life is this claim's */
            ctx->epoch = 1;
            ngx_http_idempotency_new_life(ctx);
            ngx_http_idempotency_won(r, ctx, ctx->conf->ttl,
                                     NGX_HTTP_IDEMPOTENCY_NEW);
            return 0;
        }

        ctx->claim.exists = 1;

        return NGX_HTTP_IDEMPOTENCY_STMT_READ;

    case NGX_HTTP_IDEMPOTENCY_STMT_READ:

        if (first) {
            ngx_http_idempotency_claim_seen(ctx, op->nrows != 0);
        }

        if (op->nrows == 0) {

            if (ctx->expired_key) {
                ngx_http_idempotency_not_issued(r, ctx);
                return 0;
            }

            /* no such key, or its owner's release deleted it since */
            return NGX_HTTP_IDEMPOTENCY_STMT_CLAIM;
        }

        ctx->claim.exists = 1;

        if (op->nfields < NGX_HTTP_IDEMPOTENCY_F_COUNT) {
            ngx_http_idempotency_claim_failed(r, ctx, op);
            return 0;
        }

        if (ngx_http_idempotency_verdict(r, ctx, op) == NGX_AGAIN) {
            return NGX_AGAIN;
        }

        return ctx->claim.take ? NGX_HTTP_IDEMPOTENCY_STMT_TAKE : 0;

    default: /* NGX_HTTP_IDEMPOTENCY_STMT_TAKE */

        if (op->affected_rows == 0) {
            /* the row changed since it was read: read it again */
            ctx->claim.take = 0;
            return NGX_HTTP_IDEMPOTENCY_STMT_READ;
        }

        /* the TAKE was conditional on the epoch read: it is one more */
        ctx->epoch++;

        switch (ctx->claim.take) {

        case NGX_HTTP_IDEMPOTENCY_TAKE_EXPIRED:

            /* a new operation, and a new life; a dead owner's past
             * retention is still a takeover to the log */

            ngx_http_idempotency_new_life(ctx);
            ngx_http_idempotency_won(r, ctx, ctx->conf->ttl,
                                     ctx->claim.state
                                         == NGX_HTTP_IDEMPOTENCY_ROW_PROGRESS
                                     && ctx->claim.same
                                     ? NGX_HTTP_IDEMPOTENCY_TAKEOVER
                                     : NGX_HTTP_IDEMPOTENCY_NEW);
            return 0;

        case NGX_HTTP_IDEMPOTENCY_TAKE_REDRIVE:
            status = NGX_HTTP_IDEMPOTENCY_REDRIVE;
            break;

        default: /* TAKE_LEASE, TAKE_FENCED */
            status = NGX_HTTP_IDEMPOTENCY_TAKEOVER;
            break;
        }

        ngx_http_idempotency_won(r, ctx, ctx->claim.take_ttl, status);
        return 0;
    }
}


static void
ngx_http_idempotency_claim_seen(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t existing)
{
    ngx_int_t  *avg;

    avg = &ctx->shard->existing;

    *avg += ((existing ? NGX_HTTP_IDEMPOTENCY_EXISTING_ONE : 0) - *avg)
            / NGX_HTTP_IDEMPOTENCY_EXISTING_AVG;
}


/*
 * The claim lost a race at commit: a Galera node answers 1213 (deadlock)
 * when a write of the same key from another node was certified first, or
 * when the applier of such a write aborted ours.  Another request holds
 * the key, but its row may not be applied on this node yet, and claiming
 * again at once tends to lose the same way.  So the claim runs again
 * after a short, growing pause; it then reads (or wins) the row.  If the
 * node keeps answering 1213, the key is busy elsewhere: the duplicate is
 * held or gets 409, as for any key in progress.  This is never a store
 * failure: with "idempotency_on_store_error pass" that would forward the
 * request unprotected and could execute it twice.
 */

static ngx_int_t
ngx_http_idempotency_claim_lost(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_msec_t  delay;

    ctx->claim.lost++;

    if (ctx->claim.lost < NGX_HTTP_IDEMPOTENCY_LOST_TRIES) {

        /* 10 ms, doubling up to 320 ms: about 1 s for all the tries */

        delay = (ngx_msec_t) 10 << ngx_min(ctx->claim.lost - 1, 5);

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idempotency: claim lost a race at commit (1213), "
                       "claiming again in %M ms (lost %ui)", delay,
                       ctx->claim.lost);

        ctx->state = NGX_HTTP_IDEMPOTENCY_S_STORE;
        ctx->wait_ev.handler = ngx_http_idempotency_reclaim_handler;
        ctx->wait_ev.data = ctx;
        ctx->wait_ev.log = r->connection->log;
        ngx_add_timer(&ctx->wait_ev, delay);

        return NGX_AGAIN;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idempotency store \"%V\" mysql=%V: claim of key %V "
                  "lost %ui races at commit (1213): the key is in progress "
                  "elsewhere", &ctx->conf->store->name, &ctx->shard->name,
                  &ctx->key_id, ctx->claim.lost);

    ctx->claim.in_progress = 1;

    return ngx_http_idempotency_hold_or_conflict(r, ctx);
}


static void
ngx_http_idempotency_reclaim_handler(ngx_event_t *ev)
{
    ngx_http_request_t          *r;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ev->data;
    r = ctx->request;

    ngx_http_idempotency_claim(r, ctx);
}


/* the request holds the key: forward it, renewing the lease meanwhile */

static void
ngx_http_idempotency_won(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, time_t ttl, ngx_uint_t status)
{
    ctx->owner = 1;

    /* the tiers keep the response as long as the row keeps the key */
    ctx->expires = ngx_time() + ngx_max(ttl, 0);

    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_FORWARD,
                                 status);

    if (ctx->claim.take == NGX_HTTP_IDEMPOTENCY_TAKE_FENCED) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "idempotency: key %V of unknown outcome taken over "
                      "at epoch %ui: its epoch %ui was fenced",
                      &ctx->key_id, ctx->epoch, ctx->epoch - 1);

    } else if (status == NGX_HTTP_IDEMPOTENCY_TAKEOVER) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "idempotency: key %V taken over from an owner "
                      "whose lease ended", &ctx->key_id);
    }

    /* the lease counts from the claim's INSERT, sent no earlier */

    ctx->lease.shard = ctx->shard;
    ctx->lease.key = &ctx->key_id;
    ctx->lease.key_hash = ctx->key_hash;
    ctx->lease.token = ctx->token;
    ctx->lease.lease = ctx->conf->lease;
    ctx->lease.renewed = ctx->claim.sent;
    ctx->lease.log = r->connection->log;

    ngx_http_idempotency_lease_start(&ctx->lease);
}


static ngx_int_t
ngx_http_idempotency_verdict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op)
{
    ngx_int_t                         state, ttl_s, expired, dead;
    ngx_str_t                        *f;
    ngx_uint_t                        same;
    ngx_http_idempotency_loc_conf_t  *ilcf;

    ilcf = ctx->conf;
    f = op->fields;

    state = ngx_http_idempotency_field_int(&f[NGX_HTTP_IDEMPOTENCY_F_STATE]);
    expired = ngx_http_idempotency_field_int(
                                        &f[NGX_HTTP_IDEMPOTENCY_F_EXPIRED]);

    /* the lease ended: of an owner (0), or of a live owner's window (5) */
    dead = ngx_http_idempotency_field_int(&f[NGX_HTTP_IDEMPOTENCY_F_DEAD]);

    /* the retention left, by the database's clock, in whole seconds */
    ttl_s = ngx_http_idempotency_field_int(&f[NGX_HTTP_IDEMPOTENCY_F_TTL_S]);

    ctx->epoch = ngx_max(ngx_http_idempotency_field_int(
                             &f[NGX_HTTP_IDEMPOTENCY_F_EPOCH]), 1);

    ngx_http_idempotency_row_life(ctx, op);

    if (ctx->has_token
        && ngx_http_idempotency_field_is(&f[NGX_HTTP_IDEMPOTENCY_F_OWNER],
                                         ctx->token,
                                         NGX_HTTP_IDEMPOTENCY_TOKEN_LEN))
    {
        /* our own row: an INSERT that committed, but whose answer was
         * lost with its connection, and was sent again */

        ngx_http_idempotency_won(r, ctx, ttl_s, NGX_HTTP_IDEMPOTENCY_NEW);
        return NGX_OK;
    }

    same = !ilcf->fingerprint
           || ngx_http_idempotency_field_is(&f[NGX_HTTP_IDEMPOTENCY_F_FP],
                                            ctx->fingerprint,
                                            NGX_HTTP_IDEMPOTENCY_HASH_LEN);

    ctx->claim.state = state;
    ctx->claim.same = same;
    ctx->claim.take_ttl = ttl_s;

    /* released or past retention, or its owner died: the TAKE decides */

    if (expired == 1) {

        if (ctx->expired_key) {
            /* past retention, the key would be used anew */
            ngx_http_idempotency_not_issued(r, ctx);
            return NGX_OK;
        }

        ctx->claim.take = NGX_HTTP_IDEMPOTENCY_TAKE_EXPIRED;

        /*
         * A released key's last epoch may have reached the backend (a
         * 5xx after its commit, an operator's release), and so may that
         * of an owner that died after the key's retention: the marker
         * decides before the key runs again.  A completed epoch ran and
         * answered: a new operation may follow it.
         */

        if (ilcf->fence
            && (state == NGX_HTTP_IDEMPOTENCY_ROW_RELEASED
                || state == NGX_HTTP_IDEMPOTENCY_ROW_PROGRESS))
        {
            ngx_http_idempotency_fence(ctx, ngx_http_idempotency_fenced);
            return NGX_AGAIN;
        }

        return NGX_OK;
    }

    if (same && dead == 1 && state == NGX_HTTP_IDEMPOTENCY_ROW_PROGRESS) {

        ctx->claim.take = NGX_HTTP_IDEMPOTENCY_TAKE_LEASE;

        /* the owner may still be executing: its epoch is fenced first,
         * so that it can never commit once the key runs again */

        if (ilcf->fence) {
            ngx_http_idempotency_fence(ctx, ngx_http_idempotency_fenced);
            return NGX_AGAIN;
        }

        return ngx_http_idempotency_rerun(r, ctx);
    }

    if (!same) {
        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_MISMATCH);
        return NGX_OK;
    }

    return ngx_http_idempotency_done_verdict(r, ctx, op, state,
                                             dead == 1, ttl_s);
}


/* a row of the same request that nobody may take: what its state says */

static ngx_int_t
ngx_http_idempotency_done_verdict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op,
    ngx_int_t state, ngx_uint_t dead, ngx_int_t ttl_s)
{
    switch (state) {

    case NGX_HTTP_IDEMPOTENCY_ROW_DONE:
        ngx_http_idempotency_row_replay(r, ctx, op, ttl_s);
        return NGX_OK;

    case NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED:
        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_UNSTORED);
        return NGX_OK;

    case NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED:

        if (!dead) {
            /* found executed while its owner's lease had ended: that
             * owner, if alive, may still store its answer */
            break;
        }

        /* a fence found the backend's marker: its result is in the row */

        (void) ngx_http_idempotency_fence_result(ctx,
                               &op->fields[NGX_HTTP_IDEMPOTENCY_F_RESPONSE]);
        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_EXECUTED);
        return NGX_OK;

    case NGX_HTTP_IDEMPOTENCY_ROW_UNKNOWN:

        /*
         * Sent upstream, no complete response came back: it may have run,
         * so it never runs again as it is, and nothing is replayed.  With
         * a fence, the backend's marker decides: that epoch fenced, the
         * key runs again; found executed, the backend is asked for its
         * answer.  A backend that deduplicates by itself is asked again.
         */

        if (ctx->conf->fence) {
            ngx_http_idempotency_fence(ctx, ngx_http_idempotency_fenced);
            return NGX_AGAIN;
        }

        if (ctx->conf->on_unknown == NGX_HTTP_IDEMPOTENCY_UNKNOWN_REDRIVE) {
            ctx->claim.take = NGX_HTTP_IDEMPOTENCY_TAKE_REDRIVE;
            return ngx_http_idempotency_rerun(r, ctx);
        }

        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_UNKNOWN);
        return NGX_OK;

    default:
        break;
    }

    /* in progress elsewhere: hold the duplicate, or answer 409 */

    ctx->claim.in_progress = 1;

    return ngx_http_idempotency_hold_or_conflict(r, ctx);
}


/*
 * An attempt that may have run and did not answer is followed by another
 * (a takeover, a fenced epoch, a redrive) while the key's epoch is below
 * idempotency_max_attempts: behind a backend that times out on every
 * attempt, retries end on 504 attempts-exhausted instead of running the
 * key again each time.
 */

static ngx_int_t
ngx_http_idempotency_rerun(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->epoch < ctx->conf->max_attempts) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "idempotency: key %V was attempted %ui times without an "
                  "answer (idempotency_max_attempts): not again",
                  &ctx->key_id, ctx->epoch);

    ctx->claim.take = 0;
    ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_EXHAUSTED);

    return NGX_OK;
}


/*
 * What the fence of the epoch read found.  Fenced (by this request or
 * another nginx): nobody can commit that epoch, and the TAKE on it
 * decides which of those that fenced runs the key.  Executed: the key
 * ran; the backend is asked for its answer (a find), or the key is
 * recorded as executed.  Undecided (the backend's transaction holds its
 * marker, or the store failed): as without a fence, and the next retry
 * tries again.
 */

static void
ngx_http_idempotency_fenced(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_fence_e rc)
{
    ngx_msec_t           live;
    ngx_http_request_t  *r;

    r = ctx->request;

    switch (rc) {

    case NGX_HTTP_IDEMPOTENCY_FENCE_FENCED:

        if (ctx->claim.take == 0) {
            ctx->claim.take = NGX_HTTP_IDEMPOTENCY_TAKE_FENCED;
        }

        if (ctx->claim.take != NGX_HTTP_IDEMPOTENCY_TAKE_EXPIRED
            && (ngx_http_idempotency_rerun(r, ctx) != NGX_OK
                || ctx->claim.take == 0))
        {
            break;
        }

        ngx_http_idempotency_claim_step(r, ctx, NGX_HTTP_IDEMPOTENCY_STMT_TAKE,
                                        1);
        return;

    case NGX_HTTP_IDEMPOTENCY_FENCE_EXECUTED:

        if (ctx->claim.take == NGX_HTTP_IDEMPOTENCY_TAKE_EXPIRED
            && ctx->claim.take_ttl <= 0
            && ctx->claim.state != NGX_HTTP_IDEMPOTENCY_ROW_RELEASED)
        {
            /* it ran, and its retention has ended: a new operation */
            ngx_http_idempotency_claim_step(r, ctx,
                                            NGX_HTTP_IDEMPOTENCY_STMT_TAKE, 1);
            return;
        }

        live = (ctx->claim.take == NGX_HTTP_IDEMPOTENCY_TAKE_LEASE)
               ? ngx_max(2 * ctx->conf->lease,
                         NGX_HTTP_IDEMPOTENCY_COMPLETE_TIME)
               : 0;

        ctx->claim.take = 0;

        if (!ctx->claim.same) {
            /* a released key that ran, asked for by another request */
            ngx_http_idempotency_refuse(r, ctx,
                                        NGX_HTTP_IDEMPOTENCY_P_MISMATCH);
            break;
        }

        if (ctx->conf->fence_find) {
            ngx_http_idempotency_find(r, ctx);
            return;
        }

        ngx_http_idempotency_fence_record(ctx, live);

        if (live) {
            /* its owner, if alive, may still store the answer */
            ctx->claim.in_progress = 1;

            if (ngx_http_idempotency_hold_or_conflict(r, ctx) == NGX_AGAIN) {
                return;
            }

            break;
        }

        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_EXECUTED);
        break;

    default: /* NGX_HTTP_IDEMPOTENCY_FENCE_UNDECIDED */

        if (ctx->claim.take == NGX_HTTP_IDEMPOTENCY_TAKE_LEASE
            || (ctx->claim.take == NGX_HTTP_IDEMPOTENCY_TAKE_EXPIRED
                && ctx->claim.state == NGX_HTTP_IDEMPOTENCY_ROW_PROGRESS))
        {
            /* the old owner's transaction is open: it is alive */

            ctx->claim.take = 0;
            ctx->claim.in_progress = 1;

            if (ngx_http_idempotency_hold_or_conflict(r, ctx) == NGX_AGAIN) {
                return;
            }

            break;
        }

        ctx->claim.take = 0;
        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_UNKNOWN);
        break;
    }

    ngx_http_idempotency_resume(r);
}


/*
 * Find: the epoch read ran, by its backend's marker, and its answer never
 * reached the store.  The row becomes this request's at the same epoch
 * and life, and the request is forwarded once more, marked
 * (idempotency_attempt_header), so that the backend's marker insert
 * collides with its own executed row and the backend answers from its
 * records: that answer becomes the key's.
 */

static void
ngx_http_idempotency_find(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_http_idempotency_op_t  *op;

    op = NULL;

    if (ngx_http_idempotency_token(ctx) == NGX_OK) {
        op = ngx_http_idempotency_sql_find(ctx->shard, ngx_cycle->log,
                                           ctx->key_hash, ctx->token,
                                           ctx->epoch, ctx->conf->lease);
    }

    if (op == NULL) {
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        ngx_http_idempotency_resume(r);
        return;
    }

    op->handler = ngx_http_idempotency_find_done;
    op->data = ctx;

    ctx->claim.op = op;
    ctx->claim.sent = ngx_current_msec;
    ctx->state = NGX_HTTP_IDEMPOTENCY_S_STORE;

    ngx_http_idempotency_op_run(op);
}


static void
ngx_http_idempotency_find_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_request_t          *r;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = op->data;
    r = ctx->request;

    ctx->claim.op = NULL;

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR
        && op->cause == NGX_HTTP_IDEMPOTENCY_CAUSE_RACE)
    {
        /*
         * Galera: another node's find or fence of the row was certified
         * first; as for a claim's lost race, the row is read again after
         * a pause (a store failure would give a 503 for a key that has
         * its answer)
         */

        if (ngx_http_idempotency_claim_lost(r, ctx) == NGX_AGAIN) {
            return;
        }

        ngx_http_idempotency_resume(r);
        return;
    }

    if (op->rc != NGX_HTTP_IDEMPOTENCY_OP_OK) {
        ngx_http_idempotency_claim_failed(r, ctx, op);
        ngx_http_idempotency_resume(r);
        return;
    }

    if (op->affected_rows == 0) {
        /* the row changed since it was read (another find, a late
         * completion): read it again */

        if (ctx->claim.tries - ctx->claim.lost
            < NGX_HTTP_IDEMPOTENCY_STEP_TRIES)
        {
            ngx_http_idempotency_claim_step(r, ctx,
                                            NGX_HTTP_IDEMPOTENCY_STMT_READ, 1);
            return;
        }

        ngx_http_idempotency_claim_failed(r, ctx, op);
        ngx_http_idempotency_resume(r);
        return;
    }

    ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                  "idempotency: epoch %ui of key %V ran: its answer is "
                  "asked of the backend (find)", ctx->epoch, &ctx->key_id);

    ngx_http_idempotency_won(r, ctx, ctx->claim.take_ttl,
                             NGX_HTTP_IDEMPOTENCY_FIND);
    ngx_http_idempotency_resume(r);
}


/* the key's life, as its row says (a store whose keys are fenced) */

static void
ngx_http_idempotency_row_life(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_op_t *op)
{
    ngx_str_t  *f;

    ctx->has_life = 0;

    if (!ctx->conf->store->life || op->nfields <= NGX_HTTP_IDEMPOTENCY_F_LIFE)
    {
        return;
    }

    f = &op->fields[NGX_HTTP_IDEMPOTENCY_F_LIFE];

    if (f->data && f->len == NGX_HTTP_IDEMPOTENCY_TOKEN_LEN) {
        ngx_memcpy(ctx->life, f->data, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);
        ctx->has_life = 1;
    }
}


/* an INSERT or a TAKE of a new operation: the life is this claim's */

static void
ngx_http_idempotency_new_life(ngx_http_idempotency_ctx_t *ctx)
{
    ctx->has_life = ctx->conf->store->life;

    if (ctx->has_life) {
        ngx_memcpy(ctx->life, ctx->token, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);
    }
}


/* a completed row: replay its record, and give it to the tiers */

static void
ngx_http_idempotency_row_replay(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op,
    ngx_int_t ttl_s)
{
    ngx_str_t                        *f;
    const char                       *why;
    ngx_http_idempotency_loc_conf_t  *ilcf;
    ngx_http_idempotency_counters_t  *counters;

    ilcf = ctx->conf;
    f = &op->fields[NGX_HTTP_IDEMPOTENCY_F_RESPONSE];

    ngx_http_idempotency_replay_pool(ctx,
                                     ngx_http_idempotency_op_take_pool(op));

    why = "not a record";

    if (f->data == NULL
        || ngx_http_idempotency_record_parse(op->pool, f->data, f->len,
                                             &ctx->record)
           != NGX_OK
        || ngx_http_idempotency_record_validate(&ctx->record, &why)
           != NGX_OK)
    {
        /* never forwarded: the key was executed already */

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "idempotency store \"%V\": stored response of key %V "
                      "is malformed (%uz bytes: %s), not replayed",
                      &ilcf->store->name, &ctx->key_id, f->len, why);

        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_STORE);
        return;
    }

    /*
     * later duplicates are served by the tiers; the row's fingerprint
     * is known only if this request compared it (and it matched)
     */

    if (ttl_s > 0) {
        ngx_http_idempotency_tier_put(ilcf->store, ctx->key_hash,
                                      ilcf->fingerprint
                                      ? NGX_HTTP_IDEMPOTENCY_ENTRY_FP : 0,
                                      ctx->fingerprint, ctx->epoch,
                                      ngx_time() + ttl_s, f->data, f->len);
    }

    counters = ngx_http_idempotency_counters(ilcf->store);
    ngx_http_idempotency_count(counters, mysql_replays);

    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_REPLAY,
                                 NGX_HTTP_IDEMPOTENCY_REPLAY);
}


/*
 * A key in progress elsewhere: the duplicate is held (hold.c) while its
 * idempotency_wait lasts, then decided again; NGX_AGAIN.  Otherwise it
 * gets 409.  A live owner renews its lease while it works, so the rest
 * of the lease says nothing about when the answer will be there: clients
 * that honour Retry-After (stripe-node does) would wait a whole lease for
 * a response ready a moment later.  A retry is one cheap claim.
 */

static ngx_int_t
ngx_http_idempotency_hold_or_conflict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    if (ngx_http_idempotency_hold(ctx, ngx_http_idempotency_decide)
        == NGX_AGAIN)
    {
        /* the poll that ends the hold is a claim of its own: its steps
         * and lost races count from zero */
        ctx->claim.tries = 0;
        ctx->claim.lost = 0;

        return NGX_AGAIN;
    }

    ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_CONFLICT);
    return NGX_OK;
}


/*
 * An issued key past its expiry that has no row (or whose row is past
 * retention): this would be its first use, which the expiry bounds.
 */

static void
ngx_http_idempotency_not_issued(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idempotency: \"%V\" header: the key has expired",
                  &ctx->conf->header);

    ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_NOT_ISSUED);
}


/*
 * A tier had the completed response: the same verdict MySQL would give
 * for a completed row, fingerprint first.
 */

static void
ngx_http_idempotency_entry_verdict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->conf->fingerprint
        && ngx_memcmp(ctx->entry.fingerprint, ctx->fingerprint,
                      NGX_HTTP_IDEMPOTENCY_HASH_LEN)
           != 0)
    {
        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_MISMATCH);
        return;
    }

    ctx->record = ctx->entry.record;

    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_REPLAY,
                                 NGX_HTTP_IDEMPOTENCY_REPLAY);
}


static void
ngx_http_idempotency_claim_failed(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op)
{
    ngx_uint_t                        level, pass;
    const char                       *what;
    ngx_http_idempotency_loc_conf_t  *ilcf;

    ilcf = ctx->conf;

    /*
     * A write whose outcome is unknown may have made the key the
     * request's: it is given back as soon as a connection can, and the
     * token goes with it, so that a later poll of this request never
     * takes the row being given back for its own.
     */

    if (op->stmt != NGX_HTTP_IDEMPOTENCY_STMT_READ && ctx->has_token
        && ngx_http_idempotency_op_unsure(op))
    {
        ngx_http_idempotency_release_unsure(ctx, op);
        ctx->has_token = 0;
    }

    switch (op->rc) {

    case NGX_HTTP_IDEMPOTENCY_OP_OK:
        what = "the claim returned no row";
        break;

    case NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR:
        what = (op->cause == NGX_HTTP_IDEMPOTENCY_CAUSE_NO_SCHEMA)
               ? "the table is missing or has the wrong columns "
                 "(apply mysql/schema.sql)"
               : "the statement failed";
        break;

    case NGX_HTTP_IDEMPOTENCY_OP_DOWN:
        what = "the server is unreachable";
        break;

    case NGX_HTTP_IDEMPOTENCY_OP_TIMEOUT:
        what = "timed out";
        break;

    default: /* NGX_HTTP_IDEMPOTENCY_OP_BUSY */
        what = "no free connection (pool and wait queue full)";
        break;
    }

    if (ctx->claim.in_progress) {
        ngx_http_idempotency_poll_failed(r, ctx, what);
        return;
    }

    /*
     * A key whose row this request has seen (its INSERT was refused, or a
     * READ found it) may have run already: it is never passed unprotected
     */

    /* an expired issued key may not run without the row it needs */

    pass = (ilcf->on_store_error == NGX_HTTP_IDEMPOTENCY_STORE_PASS
            && !ctx->claim.exists && !ctx->expired_key);

    level = pass ? NGX_LOG_WARN : NGX_LOG_ERR;

    ngx_log_error(level, r->connection->log, 0,
                  "idempotency store \"%V\" mysql=%V: claim of key %V "
                  "failed: %s%s%*s%s, %s",
                  &ilcf->store->name, &ctx->shard->name, &ctx->key_id, what,
                  op->err_text.len ? " (" : "", op->err_text.len,
                  op->err_text.data, op->err_text.len ? ")" : "",
                  pass ? "passing the request unprotected"
                       : ctx->claim.exists ? "rejecting the request (the key "
                                       "exists: never passed)"
                                     : "rejecting the request");

    if (pass) {
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_FORWARD,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        return;
    }

    ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_STORE);
}


/*
 * A held duplicate's poll failed.  The key was seen in progress: under
 * any idempotency_on_store_error, forwarding it could run the operation
 * twice.  It goes on waiting while its wait lasts, then gets 409.
 */

static void
ngx_http_idempotency_poll_failed(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, const char *what)
{
    /* info: a flood of held duplicates would write one line per poll */

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idempotency store \"%V\" mysql=%V: poll of key %V "
                  "failed: %s; the key was in progress, so the request is "
                  "never forwarded", &ctx->conf->store->name,
                  &ctx->shard->name, &ctx->key_id, what);

    (void) ngx_http_idempotency_hold_or_conflict(r, ctx);
}


/*
 * The request ends: a claim in flight goes on without it (owner.c), the
 * timer of a claim again after a lost race goes, and a key it holds is
 * given back (what went upstream was recorded by the capture's end,
 * which ran before this)
 */

static void
ngx_http_idempotency_claim_end(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->claim.op) {
        /* the client left while its claim was in flight: the claim may
         * still win, and then the key must be given back */

        ngx_http_idempotency_orphan(ctx, ctx->claim.op);
        ctx->claim.op = NULL;
    }

    if (ctx->wait_ev.timer_set) {
        ngx_del_timer(&ctx->wait_ev);
    }

    ngx_http_idempotency_owner_end(ctx);
}

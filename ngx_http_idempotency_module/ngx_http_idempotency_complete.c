
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the completion write.
 *
 *     UPDATE t SET state = 1, status = ?, response = ?, ...
 *      WHERE key_hash = ? AND owner = ?          (prepared, sql.c)
 *
 * The job owns the captured response (the capture pool) and outlives the
 * request.  Until the write is committed it keeps renewing the lease, so
 * that neither a slow store nor a long retry lets a duplicate take the key
 * over and run it again.  A record the server cannot take (larger than
 * its max_allowed_packet, or refused for a reason that will repeat) is
 * replaced at once by the small "executed, not stored" update: retries
 * then get 410, never a second execution.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_complete.h"
#include "ngx_http_idempotency_owner.h"
#include "ngx_http_idempotency_lease.h"
#include "ngx_http_idempotency_sql.h"
#include "ngx_http_idempotency_tier.h"
#include "ngx_http_idempotency_hold.h"
#include "ngx_http_idempotency_ctx.h"


/* statements up to this size fit any server's max_allowed_packet as
 * configured in practice; above it the server's value is asked once */
#define NGX_HTTP_IDEMPOTENCY_SAFE_PACKET     (1024 * 1024)

/* what the execute packet carries besides the record */
#define NGX_HTTP_IDEMPOTENCY_PACKET_EXTRA    128


typedef struct {
    ngx_pool_t                     *pool;
    ngx_http_idempotency_store_t   *store;
    ngx_http_idempotency_shard_t   *shard;
    ngx_http_idempotency_ctx_t     *ctx;       /* NULL once it ended */
    ngx_uint_t                      state;     /* ROW_DONE, ... */
    ngx_http_idempotency_ctx_pt     done;      /* tells ctx the end */
    ngx_str_t                       record;    /* bound to the UPDATE */
    ngx_str_t                       key;       /* the key id, for logs */
    ngx_uint_t                      status;
    ngx_uint_t                      tries;
    ngx_msec_t                      deadline;
    ngx_event_t                     retry;
    ngx_http_idempotency_lease_t    lease;
    ngx_queue_t                     queue;     /* the worker's jobs */

    /* the record is head, body length, body, trailers (all in pool);
     * for the replay tiers too once the row is completed; head.len 0:
     * the response is recorded as executed, not stored */
    ngx_str_t                       head;
    ngx_chain_t                    *body;
    size_t                          body_len;
    ngx_str_t                       trailers;  /* len 0: none */
    time_t                          expires;
    ngx_uint_t                      epoch;     /* the claim's */

    unsigned                        asked:1;   /* max_allowed_packet */
    unsigned                        lost:1;    /* a connection lost */

    u_char                    key_hash[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                    fingerprint[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                    token[NGX_HTTP_IDEMPOTENCY_TOKEN_LEN];
    u_char                    key_id[NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN];
} ngx_http_idempotency_job_t;


static void ngx_http_idempotency_complete_end(
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_job_record(
    ngx_http_idempotency_job_t *job);
static void ngx_http_idempotency_job_unstored(ngx_http_idempotency_job_t *job,
    ngx_str_t *why);
static void ngx_http_idempotency_job_run(ngx_event_t *ev);
static void ngx_http_idempotency_job_ask(ngx_http_idempotency_job_t *job);
static void ngx_http_idempotency_job_asked(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_job_done(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_job_failed(ngx_http_idempotency_job_t *job,
    ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_job_verify(ngx_http_idempotency_job_t *job);
static void ngx_http_idempotency_job_verified(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_job_committed(
    ngx_http_idempotency_job_t *job);
static ngx_uint_t ngx_http_idempotency_job_repeats(
    ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_job_tiers(ngx_http_idempotency_job_t *job);
static void ngx_http_idempotency_job_end(ngx_http_idempotency_job_t *job);


/* the worker's jobs, for its exit */
static ngx_queue_t  ngx_http_idempotency_jobs;


ngx_int_t
ngx_http_idempotency_complete_reserve(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->reserve) {
        return NGX_OK;
    }

    if (ngx_http_idempotency_on_end(ctx, ngx_http_idempotency_complete_end)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ctx->capture.pool == NULL) {
        ctx->capture.pool = ngx_create_pool(4096, ngx_cycle->log);
        if (ctx->capture.pool == NULL) {
            return NGX_ERROR;
        }
    }

    ctx->reserve = ngx_pcalloc(ctx->capture.pool,
                               sizeof(ngx_http_idempotency_job_t));

    return ctx->reserve ? NGX_OK : NGX_ERROR;
}


ngx_int_t
ngx_http_idempotency_complete(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t state, ngx_http_idempotency_ctx_pt done)
{
    ngx_pool_t                  *pool;
    ngx_http_idempotency_job_t  *job;

    static ngx_str_t  no_memory = ngx_string("no memory for the record");

    /*
     * The job was reserved before the request was sent: the outcome of
     * a request that went upstream is recorded whatever memory is left
     * now, for giving the key back would let a retry execute it again.
     */

    if (ngx_http_idempotency_complete_reserve(ctx) != NGX_OK) {
        ngx_http_idempotency_release(ctx, "no memory");
        return NGX_ERROR;
    }

    pool = ctx->capture.pool;
    job = ctx->reserve;
    ctx->reserve = NULL;

    job->pool = pool;
    job->state = state;
    job->store = ctx->conf->store;
    job->shard = ctx->shard;
    job->status = ctx->capture.status;
    job->expires = ctx->expires;
    job->epoch = ctx->epoch;
    job->deadline = ngx_current_msec
                    + ngx_max(2 * ctx->conf->lease,
                              NGX_HTTP_IDEMPOTENCY_COMPLETE_TIME);

    ngx_memcpy(job->key_hash, ctx->key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    ngx_memcpy(job->token, ctx->token, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);

    /* the row's fingerprint: zeros when fingerprints are not compared */

    if (ctx->conf->fingerprint) {
        ngx_memcpy(job->fingerprint, ctx->fingerprint,
                   NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    }

    if (state == NGX_HTTP_IDEMPOTENCY_ROW_DONE) {
        if (ctx->capture.too_large) {
            job->state = NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED;

        } else {
            job->head = ctx->capture.head;
            job->body = ctx->capture.body;
            job->body_len = ctx->capture.body_len;
            job->trailers = ctx->capture.trailers;
        }
    }

    ngx_memcpy(job->key_id, ctx->key_id.data, ctx->key_id.len);
    job->key.data = job->key_id;
    job->key.len = ctx->key_id.len;

    if (ngx_http_idempotency_job_record(job) != NGX_OK) {
        ngx_http_idempotency_job_unstored(job, &no_memory);
        ngx_str_null(&job->record);
    }

    /* executed by its backend's marker, which found no answer: the row
     * keeps the marker's reference to the result, as a fence records it
     * (without memory for it, the state alone) */

    if (state == NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED && ctx->fence.result.len) {
        job->record.data = ngx_pnalloc(pool, ctx->fence.result.len);

        if (job->record.data) {
            job->record.len = ctx->fence.result.len;
            ngx_memcpy(job->record.data, ctx->fence.result.data,
                       job->record.len);
        }
    }

    /* the job owns the capture and the claim now */

    ctx->capture.pool = NULL;

    job->lease = ctx->lease;
    job->lease.op = NULL;
    job->lease.counted = 0;
    ngx_memzero(&job->lease.ev, sizeof(ngx_event_t));
    job->lease.key = &job->key;
    job->lease.key_hash = job->key_hash;
    job->lease.token = job->token;
    job->lease.log = ngx_cycle->log;

    /* a renewal that lands after the write committed changes no row:
     * the write's own result tells whether the lease was lost */
    job->lease.quiet = 1;

    ngx_http_idempotency_handed_over(ctx);
    ngx_http_idempotency_lease_start(&job->lease);

    job->ctx = ctx;
    job->done = done;
    ctx->job = job;

    job->retry.handler = ngx_http_idempotency_job_run;
    job->retry.data = job;
    job->retry.log = ngx_cycle->log;

    if (ngx_http_idempotency_jobs.next == NULL) {
        ngx_queue_init(&ngx_http_idempotency_jobs);
    }

    ngx_queue_insert_tail(&ngx_http_idempotency_jobs, &job->queue);

    ngx_http_idempotency_job_run(&job->retry);

    return NGX_OK;
}


/*
 * The request ends: a completion write goes on without it, and a capture
 * that no job took is freed with its charge
 */

static void
ngx_http_idempotency_complete_end(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_http_idempotency_job_t  *job;

    job = ctx->job;

    if (job) {
        job->ctx = NULL;
        ctx->job = NULL;
    }

    if (ctx->capture.pool) {
        ngx_destroy_pool(ctx->capture.pool);
        ctx->capture.pool = NULL;
        ctx->reserve = NULL;
        ctx->capture.charged = NULL;
    }
}


/* head, body length, body and trailers: in one piece, as the driver
 * sends a value */

static ngx_int_t
ngx_http_idempotency_job_record(ngx_http_idempotency_job_t *job)
{
    u_char       *p;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    if (job->head.len == 0) {
        ngx_str_null(&job->record);
        return NGX_OK;
    }

    job->record.len = job->head.len + 4 + job->body_len + job->trailers.len;

    p = ngx_pnalloc(job->pool, job->record.len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    job->record.data = p;

    p = ngx_cpymem(p, job->head.data, job->head.len);

    ngx_http_idempotency_record_body_len(p, job->body_len);
    p += 4;

    for (cl = job->body; cl; cl = cl->next) {
        b = cl->buf;
        p = ngx_cpymem(p, b->pos, b->last - b->pos);
    }

    if (job->trailers.len) {
        (void) ngx_cpymem(p, job->trailers.data, job->trailers.len);
        ngx_http_idempotency_record_has_trailers(job->record.data);
    }

    return NGX_OK;
}


/* the record cannot be stored: record the key as executed instead */

static void
ngx_http_idempotency_job_unstored(ngx_http_idempotency_job_t *job,
    ngx_str_t *why)
{
    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "idempotency store \"%V\" mysql=%V: response of key "
                  "%V (%uz bytes) cannot be stored: %V; recorded as "
                  "executed, not stored (retries get 410)",
                  &job->store->name, &job->shard->name, &job->key,
                  job->record.len, why);

    job->head.len = 0;
    job->body = NULL;
    job->body_len = 0;
    job->trailers.len = 0;
    job->state = NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED;
}


static void
ngx_http_idempotency_job_run(ngx_event_t *ev)
{
    size_t                         size;
    ngx_http_idempotency_op_t     *op;
    ngx_http_idempotency_job_t    *job;
    ngx_http_idempotency_shard_t  *shard;

    static ngx_str_t  too_large =
        ngx_string("larger than the server's max_allowed_packet");

    job = ev->data;
    shard = job->shard;

    /*
     * A large record, or one whose connection was lost (a server closes
     * the connection after refusing a packet over its limit, and the
     * client may see only that): check it against max_allowed_packet.
     */

    size = job->record.len + NGX_HTTP_IDEMPOTENCY_PACKET_EXTRA;

    if (job->head.len
        && (size > NGX_HTTP_IDEMPOTENCY_SAFE_PACKET || job->lost))
    {
        if ((shard->max_packet == 0 || job->lost) && !job->asked) {
            ngx_http_idempotency_job_ask(job);
            return;
        }

        if (shard->max_packet && size >= shard->max_packet) {
            ngx_http_idempotency_job_unstored(job, &too_large);
            (void) ngx_http_idempotency_job_record(job);
        }
    }

    op = ngx_http_idempotency_sql_complete(shard, ngx_cycle->log,
                                           job->key_hash, job->token,
                                           job->state, job->status,
                                           job->record.len ? &job->record
                                                           : NULL);
    if (op == NULL) {
        ngx_http_idempotency_job_failed(job, NULL);
        return;
    }

    op->urgent = 1;
    op->handler = ngx_http_idempotency_job_done;
    op->data = job;

    job->tries++;

    ngx_http_idempotency_op_run(op);
}


/* the server's max_allowed_packet, once per worker and server */

static void
ngx_http_idempotency_job_ask(ngx_http_idempotency_job_t *job)
{
    ngx_http_idempotency_op_t  *op;

    job->asked = 1;

    op = ngx_http_idempotency_sql_max_packet(job->shard, ngx_cycle->log);
    if (op == NULL) {
        ngx_http_idempotency_job_run(&job->retry);
        return;
    }

    op->urgent = 1;
    op->handler = ngx_http_idempotency_job_asked;
    op->data = job;

    ngx_http_idempotency_op_run(op);
}


static void
ngx_http_idempotency_job_asked(ngx_http_idempotency_op_t *op)
{
    ngx_int_t                    n;
    ngx_http_idempotency_job_t  *job;

    job = op->data;

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK && op->nrows == 1
        && op->fields[0].data)
    {
        n = ngx_atoi(op->fields[0].data, op->fields[0].len);

        if (n > 0) {
            job->shard->max_packet = n;
        }
    }

    ngx_http_idempotency_job_run(&job->retry);
}


static void
ngx_http_idempotency_job_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_job_t  *job;

    job = op->data;

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK) {

        if (op->affected_rows == 0) {
            /* lost, or committed already (a batch's statement that is
             * run again changes nothing): the row says which */
            ngx_http_idempotency_job_verify(job);
            return;
        }

        ngx_http_idempotency_job_committed(job);
        ngx_http_idempotency_job_end(job);
        return;
    }

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR
        && op->cause == NGX_HTTP_IDEMPOTENCY_CAUSE_LOST)
    {
        job->lost = 1;

        if (job->head.len && !job->asked) {
            /* first see whether the record fits the server at all */
            ngx_http_idempotency_job_run(&job->retry);
            return;
        }
    }

    if (job->head.len && ngx_http_idempotency_job_repeats(op)) {
        ngx_http_idempotency_job_unstored(job, &op->err_text);
        (void) ngx_http_idempotency_job_record(job);

        ngx_http_idempotency_job_run(&job->retry);
        return;
    }

    ngx_http_idempotency_job_failed(job, op);
}


/*
 * The UPDATE is conditional on the owner token: running it again is
 * harmless, so every other failure (a lost connection, KILL QUERY, a
 * lock wait timeout, the store away, no memory for the statement: op is
 * NULL) is retried while the lease is kept alive.
 */

static void
ngx_http_idempotency_job_failed(ngx_http_idempotency_job_t *job,
    ngx_http_idempotency_op_t *op)
{
    ngx_int_t                      rc;
    ngx_str_t                     *err;
    ngx_http_idempotency_shard_t  *shard;

    static ngx_str_t  no_memory = ngx_string("no memory for the statement");

    shard = job->shard;

    /* -1: no op */
    rc = op ? (ngx_int_t) op->rc : -1;
    err = op ? &op->err_text : &no_memory;

    if ((ngx_msec_int_t) (job->deadline - ngx_current_msec) > 0) {
        ngx_http_idempotency_metric(shard->store, completion_retries);

        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "idempotency store \"%V\" mysql=%V: storing the "
                      "response of key %V failed (%i%s%V), retrying",
                      &shard->store->name, &shard->name, &job->key, rc,
                      err->len ? ": " : "", err);

        /* 250 ms doubling up to 1 s; the timer is not cancelable, so a
         * graceful shutdown waits for the write */

        ngx_add_timer(&job->retry,
                      job->tries > 2 ? 1000
                                     : 250 << (ngx_max(job->tries, 1) - 1));
        return;
    }

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "idempotency store \"%V\" mysql=%V: response of key %V "
                  "could not be stored (%i%s%V): the key stays in "
                  "progress and a retry after its lease executes it again",
                  &shard->store->name, &shard->name, &job->key, rc,
                  err->len ? ": " : "", err);

    ngx_http_idempotency_job_end(job);
}


/* the write changed no row: is the row ours, and as the job wrote it? */

static void
ngx_http_idempotency_job_verify(ngx_http_idempotency_job_t *job)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_owner(job->shard, ngx_cycle->log,
                                        job->key_hash, job->token);
    if (op == NULL) {
        ngx_http_idempotency_job_failed(job, NULL);
        return;
    }

    op->urgent = 1;
    op->handler = ngx_http_idempotency_job_verified;
    op->data = job;

    ngx_http_idempotency_op_run(op);
}


static void
ngx_http_idempotency_job_verified(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_job_t    *job;
    ngx_http_idempotency_shard_t  *shard;

    job = op->data;
    shard = job->shard;

    if (op->rc != NGX_HTTP_IDEMPOTENCY_OP_OK) {
        ngx_http_idempotency_job_failed(job, op);
        return;
    }

    if (op->nrows == 1
        && ngx_http_idempotency_field_int(&op->fields[0])
           == (ngx_int_t) job->state
        && ngx_http_idempotency_field_int(&op->fields[1]) == 1)
    {
        ngx_http_idempotency_job_committed(job);

    } else {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "idempotency store \"%V\" mysql=%V: response of "
                      "key %V not stored: the key is no longer "
                      "held by its request (lease lost)",
                      &shard->store->name, &shard->name, &job->key);

        ngx_http_idempotency_metric(shard->store, lease_losses);
    }

    ngx_http_idempotency_job_end(job);
}


/* the row is as the job wrote it: tell the tiers, the held duplicates */

static void
ngx_http_idempotency_job_committed(ngx_http_idempotency_job_t *job)
{
    switch (job->state) {

    case NGX_HTTP_IDEMPOTENCY_ROW_DONE:
        ngx_http_idempotency_job_tiers(job);
        break;

    case NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED:
        ngx_http_idempotency_metric(job->store, unstored);
        break;

    default: /* NGX_HTTP_IDEMPOTENCY_ROW_UNKNOWN */
        ngx_http_idempotency_metric(job->store, unknown);
        break;
    }

    /* the row never changes again within its retention: the duplicates
     * this worker holds may look again at once */

    ngx_http_idempotency_hold_wake(job->store, job->key_hash);
}


/* a refusal that the same statement would get again */

static ngx_uint_t
ngx_http_idempotency_job_repeats(ngx_http_idempotency_op_t *op)
{
    return op->rc == NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR
           && op->cause == NGX_HTTP_IDEMPOTENCY_CAUSE_TOO_LARGE;
}


/*
 * The row is completed now, and never changes again within its
 * retention: the tiers may serve it.
 */

static void
ngx_http_idempotency_job_tiers(ngx_http_idempotency_job_t *job)
{
    if (job->head.len) {
        ngx_http_idempotency_tier_put(job->store, job->key_hash,
                                      NGX_HTTP_IDEMPOTENCY_ENTRY_FP,
                                      job->fingerprint, job->epoch,
                                      job->expires, job->record.data,
                                      job->record.len);
    }
}


static void
ngx_http_idempotency_job_end(ngx_http_idempotency_job_t *job)
{
    ngx_http_idempotency_ctx_t  *ctx;

    ngx_http_idempotency_lease_stop(&job->lease);

    if (job->retry.timer_set) {
        ngx_del_timer(&job->retry);
    }

    ctx = job->ctx;

    if (ctx) {
        ctx->job = NULL;
        job->done(ctx);
    }

    ngx_queue_remove(&job->queue);
    ngx_destroy_pool(job->pool);
}


/*
 * The worker exits with writes not committed: a graceful shutdown waits
 * for them (their retry timer is not cancelable), so this is a fast one
 * (or nginx without worker processes).  Their statements were dropped
 * with the connections (mysql.c); each key stays in progress until its
 * lease ends.
 */

void
ngx_http_idempotency_complete_exit(ngx_cycle_t *cycle)
{
    ngx_queue_t                 *q;
    ngx_http_idempotency_job_t  *job;

    if (ngx_http_idempotency_jobs.next == NULL) {
        return;
    }

    while (!ngx_queue_empty(&ngx_http_idempotency_jobs)) {
        q = ngx_queue_head(&ngx_http_idempotency_jobs);
        job = ngx_queue_data(q, ngx_http_idempotency_job_t, queue);

        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "idempotency store \"%V\" mysql=%V: response of key "
                      "%V not stored: the process exits; the key stays in "
                      "progress and a retry after its lease executes it "
                      "again", &job->store->name, &job->shard->name,
                      &job->key);

        if (job->retry.timer_set) {
            ngx_del_timer(&job->retry);
        }

        if (job->lease.ev.timer_set) {
            ngx_del_timer(&job->lease.ev);
        }

        if (job->ctx) {
            job->ctx->job = NULL;
        }

        ngx_queue_remove(q);
        ngx_destroy_pool(job->pool);
    }
}

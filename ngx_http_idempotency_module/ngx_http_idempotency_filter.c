
/*
 * ngx_http_idempotency_module: the capture filters.
 *
 * For a request that won its claim, the header filter records the status
 * and headers and the body filter copies each buffer before passing it
 * on, so the client never waits for the capture.  After the last buffer
 * the record is written with a conditional UPDATE that outlives the
 * request: it owns its memory and is retried when the store fails.
 */


#include "ngx_http_idempotency_filter.h"
#include "ngx_http_idempotency_handler.h"
#include "ngx_http_idempotency_sql.h"
#include "ngx_http_idempotency_tier.h"


/* completion writes are retried this long, at least twice the lease */
#define NGX_HTTP_IDEMPOTENCY_COMPLETE_TIME   60000


/* one completion write and its retries */
typedef struct {
    ngx_pool_t                     *pool;
    ngx_http_idempotency_shard_t   *shard;
    ngx_str_t                       sql;
    ngx_str_t                       key;
    ngx_uint_t                      tries;
    ngx_msec_t                      deadline;
    ngx_event_t                     retry;

    /* for the replay tiers once the row is completed: the record is
     * head, body length, body (all in pool); head.len 0: not stored */
    ngx_http_idempotency_store_t   *store;
    ngx_str_t                       head;
    ngx_chain_t                    *body;
    size_t                          body_len;
    time_t                          expires;
    u_char                          body_len_be[4];
    u_char                    key_hash[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                    fingerprint[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
} ngx_http_idempotency_job_t;


static ngx_int_t ngx_http_idempotency_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_idempotency_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_idempotency_capture(ngx_http_idempotency_ctx_t *ctx,
    u_char *data, size_t size);
static void ngx_http_idempotency_complete(ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_job_run(ngx_event_t *ev);
static void ngx_http_idempotency_job_done(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_job_tiers(ngx_http_idempotency_job_t *job);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


ngx_int_t
ngx_http_idempotency_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_idempotency_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_idempotency_body_filter;

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_header_filter(ngx_http_request_t *r)
{
    ngx_int_t                         rc;
    ngx_uint_t                        status;
    ngx_http_idempotency_ctx_t       *ctx;
    ngx_http_idempotency_loc_conf_t  *ilcf;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_idempotency_get_ctx(r);

    if (ctx == NULL || !ctx->owner || ctx->capture_seen) {
        return ngx_http_next_header_filter(r);
    }

    ctx->capture_seen = 1;
    ilcf = ctx->conf;
    status = r->headers_out.status;

    /*
     * Not the backend's answer to keep: a 5xx (unless asked to), or a
     * page nginx made through error_page.  The key is given back so that
     * a retry executes again.
     */

    if (status < NGX_HTTP_OK
        || (status >= NGX_HTTP_INTERNAL_SERVER_ERROR && !ilcf->store_5xx)
        || r->error_page)
    {
        ngx_http_idempotency_release(ctx, "response not kept");
        return ngx_http_next_header_filter(r);
    }

    ctx->capture = ngx_create_pool(4096, ngx_cycle->log);
    if (ctx->capture == NULL) {
        ngx_http_idempotency_release(ctx, "no memory");
        return ngx_http_next_header_filter(r);
    }

    if (ngx_http_idempotency_record_head(r, ctx->capture, &ctx->head)
        != NGX_OK)
    {
        ngx_http_idempotency_release(ctx, "headers not recordable");
        return ngx_http_next_header_filter(r);
    }

    ctx->resp_status = status;
    ctx->expect_len = r->headers_out.content_length_n;
    ctx->capturing = 1;

    /* file buffers reach this filter read into memory */
    r->filter_need_in_memory = 1;

    rc = ngx_http_next_header_filter(r);

    if (rc == NGX_ERROR) {
        ctx->capturing = 0;
        ngx_http_idempotency_release(ctx, "header not sent");
        return rc;
    }

    if (r->header_only && ctx->capturing) {
        /* no body filter call follows a header-only response */
        ngx_http_idempotency_complete(ctx);
    }

    return rc;
}


static ngx_int_t
ngx_http_idempotency_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    size_t                       size;
    ngx_int_t                    rc;
    ngx_uint_t                   last;
    ngx_buf_t                   *b;
    ngx_chain_t                 *cl;
    ngx_http_idempotency_ctx_t  *ctx;

    if (r != r->main || in == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_idempotency_get_ctx(r);

    if (ctx == NULL || !ctx->capturing) {
        return ngx_http_next_body_filter(r, in);
    }

    last = 0;

    /* copy before passing on: later filters consume the buffers */

    for (cl = in; cl; cl = cl->next) {
        b = cl->buf;

        if (ngx_buf_in_memory(b)) {
            size = b->last - b->pos;

            if (size
                && ngx_http_idempotency_capture(ctx, b->pos, size) != NGX_OK)
            {
                ctx->capturing = 0;
                ngx_http_idempotency_release(ctx, "no memory");
                return ngx_http_next_body_filter(r, in);
            }
        }

        if (b->last_buf) {
            last = 1;
        }
    }

    rc = ngx_http_next_body_filter(r, in);

    if (last) {
        ngx_http_idempotency_complete(ctx);
    }

    return rc;
}


static ngx_int_t
ngx_http_idempotency_capture(ngx_http_idempotency_ctx_t *ctx, u_char *data,
    size_t size)
{
    size_t        n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    ctx->body_len += size;

    if (ctx->too_large) {
        return NGX_OK;
    }

    if (ctx->body_len > ctx->conf->max_response_size) {

        /* still streamed in full; recorded as executed, not stored */

        ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                      "idempotency: response of key \"%V\" exceeds "
                      "idempotency_max_response_size, not stored",
                      &ctx->key);

        ctx->too_large = 1;
        ctx->body = NULL;
        ctx->tail = NULL;
        return NGX_OK;
    }

    /* fill the current buffer, then allocate a larger one */

    cl = ctx->tail;

    while (size) {
        if (cl == NULL || cl->buf->end == cl->buf->last) {
            n = ngx_max(size, 16384);
            n = ngx_min(n, ctx->conf->max_response_size + 1);

            b = ngx_create_temp_buf(ctx->capture, ngx_max(n, size));
            if (b == NULL) {
                return NGX_ERROR;
            }

            cl = ngx_alloc_chain_link(ctx->capture);
            if (cl == NULL) {
                return NGX_ERROR;
            }

            cl->buf = b;
            cl->next = NULL;

            if (ctx->tail) {
                ctx->tail->next = cl;

            } else {
                ctx->body = cl;
            }

            ctx->tail = cl;
        }

        b = cl->buf;
        n = ngx_min(size, (size_t) (b->end - b->last));
        b->last = ngx_cpymem(b->last, data, n);
        data += n;
        size -= n;
    }

    return NGX_OK;
}


void
ngx_http_idempotency_abandon(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "idempotency: client closed the connection during the "
                  "response of key \"%V\": recorded as executed, not stored",
                  &ctx->key);

    ctx->too_large = 1;
    ctx->body = NULL;
    ctx->tail = NULL;
    ctx->expect_len = -1;

    ngx_http_idempotency_complete(ctx);
}


static void
ngx_http_idempotency_complete(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t                    rc;
    ngx_pool_t                  *pool;
    ngx_http_idempotency_job_t  *job;

    ctx->capturing = 0;

    if (ctx->expect_len >= 0 && (off_t) ctx->body_len != ctx->expect_len) {
        ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                      "idempotency: response of key \"%V\" was truncated "
                      "(%uz of %O bytes), key released",
                      &ctx->key, ctx->body_len, ctx->expect_len);
        ngx_http_idempotency_release(ctx, "truncated response");
        return;
    }

    pool = ctx->capture;

    job = ngx_pcalloc(pool, sizeof(ngx_http_idempotency_job_t));
    if (job == NULL) {
        ngx_http_idempotency_release(ctx, "no memory");
        return;
    }

    job->pool = pool;
    job->shard = ctx->shard;
    job->deadline = ngx_current_msec
                    + ngx_max(2 * ctx->conf->lease,
                              NGX_HTTP_IDEMPOTENCY_COMPLETE_TIME);

    job->store = ctx->conf->store;
    job->expires = ctx->expires;
    ngx_memcpy(job->key_hash, ctx->key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);

    /* the row's fingerprint: zeros when fingerprints are not compared */

    if (ctx->conf->fingerprint) {
        ngx_memcpy(job->fingerprint, ctx->fingerprint,
                   NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    }

    if (!ctx->too_large) {
        job->head = ctx->head;
        job->body = ctx->body;
        job->body_len = ctx->body_len;
    }

    job->key.data = ngx_pstrdup(pool, &ctx->key);
    job->key.len = ctx->key.len;

    rc = ngx_http_idempotency_sql_complete(pool, ctx->conf->store,
                                           ctx->key_hash, ctx->token,
                                           ctx->resp_status,
                                           ctx->too_large ? NULL : &ctx->head,
                                           ctx->body, ctx->body_len,
                                           &job->sql);

    if (rc != NGX_OK || job->key.data == NULL) {
        ngx_http_idempotency_release(ctx, "no memory");
        return;
    }

    /* the job owns the capture now; the request may end before it */

    ctx->capture = NULL;
    ngx_http_idempotency_handed_over(ctx);

    job->retry.handler = ngx_http_idempotency_job_run;
    job->retry.data = job;
    job->retry.log = ngx_cycle->log;

    ngx_http_idempotency_job_run(&job->retry);
}


static void
ngx_http_idempotency_job_run(ngx_event_t *ev)
{
    ngx_http_idempotency_op_t   *op;
    ngx_http_idempotency_job_t  *job;

    job = ev->data;

    op = ngx_http_idempotency_op_create(job->shard, ngx_cycle->log, 0);
    if (op == NULL) {
        ngx_destroy_pool(job->pool);
        return;
    }

    op->name = "complete";
    op->sql = job->sql;
    op->handler = ngx_http_idempotency_job_done;
    op->data = job;

    job->tries++;

    ngx_http_idempotency_op_run(op);
}


static void
ngx_http_idempotency_job_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_job_t    *job;
    ngx_http_idempotency_shard_t  *shard;

    job = op->data;
    shard = job->shard;

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK) {

        if (op->affected_rows == 0) {
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "idempotency store \"%V\" mysql=%V: response of "
                          "key \"%V\" not stored: the key is no longer "
                          "held by its request (lease lost)",
                          &shard->store->name, &shard->name, &job->key);

        } else {
            ngx_http_idempotency_job_tiers(job);
        }

        ngx_destroy_pool(job->pool);
        return;
    }

    /*
     * The UPDATE is conditional on the owner token: running it again is
     * harmless, so every failure (a lost connection, KILL QUERY, a lock
     * wait timeout, the store away) is retried.  The interval stays short
     * so that a store that comes back before the lease ends gets the
     * write before a duplicate can take the key over.
     */

    if ((ngx_msec_int_t) (job->deadline - ngx_current_msec) > 0) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "idempotency store \"%V\" mysql=%V: storing the "
                      "response of key \"%V\" failed (%ui%s%V), retrying",
                      &shard->store->name, &shard->name, &job->key, op->rc,
                      op->err_text.len ? ": " : "", &op->err_text);

        /* 250 ms doubling up to 1 s; the timer is not cancelable, so a
         * graceful shutdown waits for the write */

        ngx_add_timer(&job->retry,
                      job->tries > 2 ? 1000 : 250 << (job->tries - 1));
        return;
    }

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "idempotency store \"%V\" mysql=%V: response of key \"%V\" "
                  "could not be stored (%ui%s%V): the key stays in "
                  "progress and a retry after its lease executes it again",
                  &shard->store->name, &shard->name, &job->key, op->rc,
                  op->err_text.len ? ": " : "", &op->err_text);

    ngx_destroy_pool(job->pool);
}


/*
 * The row is completed now, and never changes again within its
 * retention: the tiers may serve it, and the duplicates this worker
 * holds may look again at once.
 */

static void
ngx_http_idempotency_job_tiers(ngx_http_idempotency_job_t *job)
{
    ngx_buf_t    hb, lb;
    ngx_chain_t  hcl, lcl;

    if (job->head.len) {
        ngx_memzero(&hb, sizeof(ngx_buf_t));
        hb.pos = job->head.data;
        hb.last = job->head.data + job->head.len;

        ngx_http_idempotency_record_body_len(job->body_len_be, job->body_len);

        ngx_memzero(&lb, sizeof(ngx_buf_t));
        lb.pos = job->body_len_be;
        lb.last = job->body_len_be + sizeof(job->body_len_be);

        hcl.buf = &hb;
        hcl.next = &lcl;
        lcl.buf = &lb;
        lcl.next = job->body;

        ngx_http_idempotency_tier_put(job->store, job->key_hash,
                                      NGX_HTTP_IDEMPOTENCY_ENTRY_FP,
                                      job->fingerprint, job->expires, &hcl,
                                      job->head.len + sizeof(job->body_len_be)
                                      + job->body_len);
    }

    ngx_http_idempotency_tier_wake(job->store, job->key_hash);
}

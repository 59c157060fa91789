
/*
 * ngx_http_idempotency_module: the capture filters.
 *
 * For a request that won its claim, the header filter records the status
 * and headers and the body filter copies each buffer before passing it
 * on.  Once the whole response is captured, the completion job writes it
 * (complete.c), and the end of the response is held back until that
 * write is committed: a client that has the response and repeats the
 * request is always answered by the replay, never by 409.
 *
 * A client that goes away does not end the exchange: the location's
 * upstream ignores client aborts (module.c), and these filters hide a
 * failed write to the client from the upstream module, so that it reads
 * the response to its end, and the capture stores it for the retry.
 */


#include "ngx_http_idempotency_filter.h"
#include "ngx_http_idempotency_owner.h"
#include "ngx_http_idempotency_complete.h"


/* how long the end of a response waits for its completion */
#define ngx_http_idempotency_defer_time(ctx)                                 \
    ((ctx)->conf->store->query_timeout ? (ctx)->conf->store->query_timeout  \
                                       : 2000)


/*
 * r->buffered (4 bits, all taken by nginx's filters): the end of the
 * response waits for its completion.  The bit is the image filter's,
 * which never acts on the same response (it keeps whole image bodies of
 * GET responses, and a protected method's response is never an image
 * to resize).
 */
#define NGX_HTTP_IDEMPOTENCY_BUFFERED   0x08


static ngx_int_t ngx_http_idempotency_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_idempotency_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_idempotency_capture_chain(
    ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in);
static ngx_int_t ngx_http_idempotency_capture(ngx_http_idempotency_ctx_t *ctx,
    u_char *data, size_t size);
static void ngx_http_idempotency_captured(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t last);
static ngx_int_t ngx_http_idempotency_defer(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in);
static void ngx_http_idempotency_defer_timeout(ngx_event_t *ev);
static void ngx_http_idempotency_committed(ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_send_deferred(
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_send_deferred_handler(ngx_event_t *ev);
static void ngx_http_idempotency_client_gone(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in);
static void ngx_http_idempotency_consume(ngx_chain_t *in);
static ngx_int_t ngx_http_idempotency_charge(ngx_http_idempotency_ctx_t *ctx,
    size_t n);
static void ngx_http_idempotency_uncharge(void *data);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;

static size_t  ngx_http_idempotency_charged;


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
    ngx_pool_cleanup_t               *cln;
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

    /* what the capture charges is given back with its pool, by whoever
     * owns it then (the request, or the completion job) */

    cln = ngx_pool_cleanup_add(ctx->capture, sizeof(size_t));
    if (cln == NULL) {
        ngx_http_idempotency_release(ctx, "no memory");
        return ngx_http_next_header_filter(r);
    }

    ctx->charged = cln->data;
    *ctx->charged = 0;
    cln->handler = ngx_http_idempotency_uncharge;

    rc = ngx_http_idempotency_record_head(r, ctx->capture, ilcf->skip_headers,
                                          &ctx->head);

    if (rc == NGX_ERROR) {
        ngx_http_idempotency_release(ctx, "headers not recordable");
        return ngx_http_next_header_filter(r);
    }

    if (rc == NGX_DECLINED) {

        /* it ran: never again, but nothing a replay may not send */

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "idempotency: response of key %V has a status or "
                      "header that is never replayed: recorded as "
                      "executed, not stored", &ctx->key_id);
        ctx->too_large = 1;
    }

    ctx->resp_status = status;
    ctx->expect_len = r->headers_out.content_length_n;
    ctx->capturing = 1;

    /* file buffers reach this filter read into memory */
    r->filter_need_in_memory = 1;

    if (r->connection->error) {
        ctx->gone = 1;
        rc = NGX_OK;

    } else {
        rc = ngx_http_next_header_filter(r);

        if (rc == NGX_ERROR) {
            /* the upstream goes on: the response is still stored */
            ngx_http_idempotency_client_gone(r, ctx, NULL);
            rc = NGX_OK;
        }
    }

    if (r->header_only && ctx->capturing) {
        /* no body filter call follows a header-only response */
        ngx_http_idempotency_captured(ctx, 1);
    }

    return rc;
}


static ngx_int_t
ngx_http_idempotency_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t                    rc;
    ngx_chain_t                 *cl;
    ngx_http_idempotency_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_idempotency_get_ctx(r);

    if (ctx == NULL || !(ctx->capturing || ctx->deferred || ctx->gone)) {
        return ngx_http_next_body_filter(r, in);
    }

    /* copy before passing on: later filters consume the buffers */

    if (ctx->capturing && in) {
        ngx_http_idempotency_captured(ctx,
                                      ngx_http_idempotency_capture_chain(ctx,
                                                                         in));
    }

    if (ctx->gone) {
        ngx_http_idempotency_consume(in);
        return NGX_OK;
    }

    if (ctx->job && ctx->deferring) {
        return ngx_http_idempotency_defer(r, ctx, in);
    }

    if (ctx->deferred) {
        /* the completion is committed (or its wait ended): send the end */

        for (cl = ctx->deferred; cl->next; cl = cl->next) { /* void */ }

        cl->next = in;
        in = ctx->deferred;
        ctx->deferred = NULL;
        r->buffered &= ~NGX_HTTP_IDEMPOTENCY_BUFFERED;
    }

    rc = ngx_http_next_body_filter(r, in);

    if (rc == NGX_ERROR && ctx->capturing) {
        ngx_http_idempotency_client_gone(r, ctx, in);
        return NGX_OK;
    }

    return rc;
}


/* returns 1 when the chain ends the response */

static ngx_int_t
ngx_http_idempotency_capture_chain(ngx_http_idempotency_ctx_t *ctx,
    ngx_chain_t *in)
{
    size_t        size;
    ngx_int_t     last;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    last = 0;

    for (cl = in; cl; cl = cl->next) {
        b = cl->buf;

        if (ngx_buf_in_memory(b)) {
            size = b->last - b->pos;

            if (size
                && ngx_http_idempotency_capture(ctx, b->pos, size) != NGX_OK)
            {
                ctx->capturing = 0;
                ngx_http_idempotency_release(ctx, "no memory");
                return 0;
            }
        }

        if (b->last_buf) {
            last = 1;
        }
    }

    return last;
}


/*
 * The memory of responses being captured and stored, per worker: a
 * captured byte counts twice, for its copy and for the record in one
 * piece that the completion binds (complete.c).  At the limit a response
 * is still sent in full, and recorded as executed, not stored.
 */

static ngx_int_t
ngx_http_idempotency_charge(ngx_http_idempotency_ctx_t *ctx, size_t n)
{
    ngx_http_idempotency_main_conf_t  *imcf;

    imcf = ngx_http_get_module_main_conf(ctx->request,
                                         ngx_http_idempotency_module);

    if (ngx_http_idempotency_charged + 2 * n > imcf->capture_memory) {
        ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                      "idempotency: response of key %V not stored: the "
                      "responses being stored by this worker hold %uz of "
                      "idempotency_capture_memory %uz",
                      &ctx->key_id, ngx_http_idempotency_charged,
                      imcf->capture_memory);
        return NGX_DECLINED;
    }

    ngx_http_idempotency_charged += 2 * n;
    *ctx->charged += 2 * n;

    return NGX_OK;
}


static void
ngx_http_idempotency_uncharge(void *data)
{
    size_t  *charged = data;

    ngx_http_idempotency_charged -= *charged;
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
                      "idempotency: response of key %V exceeds "
                      "idempotency_max_response_size, not stored",
                      &ctx->key_id);

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
            n = ngx_max(n, size);

            if (ngx_http_idempotency_charge(ctx, n) != NGX_OK) {
                ctx->too_large = 1;
                ctx->body = NULL;
                ctx->tail = NULL;
                return NGX_OK;
            }

            b = ngx_create_temp_buf(ctx->capture, n);
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


/*
 * The response is complete when its last buffer passes, or, with a
 * Content-Length, as soon as all its bytes have: the client knows it has
 * the whole response then, so these bytes already wait for the commit.
 */

static void
ngx_http_idempotency_captured(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t last)
{
    ngx_http_request_t  *r;

    if (!ctx->capturing) {
        return;
    }

    if (!last
        && !(ctx->expect_len >= 0 && (off_t) ctx->body_len >= ctx->expect_len))
    {
        return;
    }

    r = ctx->request;
    ctx->capturing = 0;

    if (ctx->expect_len >= 0 && (off_t) ctx->body_len != ctx->expect_len) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "idempotency: response of key %V was truncated "
                      "(%uz of %O bytes), key released",
                      &ctx->key_id, ctx->body_len, ctx->expect_len);
        ngx_http_idempotency_release(ctx, "truncated response");
        return;
    }

    if (ngx_http_idempotency_complete(ctx, ngx_http_idempotency_committed)
        != NGX_OK
        || ctx->gone || r->header_only)
    {
        return;
    }

    ctx->deferring = 1;

    ctx->defer_ev.handler = ngx_http_idempotency_defer_timeout;
    ctx->defer_ev.data = ctx;
    ctx->defer_ev.log = r->connection->log;

    ngx_add_timer(&ctx->defer_ev, ngx_http_idempotency_defer_time(ctx));
}


static ngx_int_t
ngx_http_idempotency_defer(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in)
{
    ngx_chain_t  *cl, **ll;

    for (ll = &ctx->deferred; *ll; ll = &(*ll)->next) { /* void */ }

    for ( /* void */ ; in; in = in->next) {
        cl = ngx_alloc_chain_link(r->pool);
        if (cl == NULL) {
            return NGX_ERROR;
        }

        cl->buf = in->buf;
        cl->next = NULL;
        *ll = cl;
        ll = &cl->next;
    }

    r->buffered |= NGX_HTTP_IDEMPOTENCY_BUFFERED;

    return NGX_AGAIN;
}


/* the completion write ended: the end of the response goes on */

static void
ngx_http_idempotency_committed(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->defer_ev.timer_set) {
        ngx_del_timer(&ctx->defer_ev);
    }

    ngx_http_idempotency_send_deferred(ctx);
}


static void
ngx_http_idempotency_defer_timeout(ngx_event_t *ev)
{
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ev->data;

    ngx_log_error(NGX_LOG_ERR, ev->log, 0,
                  "idempotency store \"%V\" mysql=%V: response of key %V "
                  "not committed within %M ms: sent to the client anyway, "
                  "the write goes on (a duplicate meanwhile gets 409)",
                  &ctx->conf->store->name, &ctx->shard->name, &ctx->key_id,
                  ngx_http_idempotency_defer_time(ctx));

    ngx_http_idempotency_send_deferred(ctx);
}


static void
ngx_http_idempotency_send_deferred(ngx_http_idempotency_ctx_t *ctx)
{
    if (!ctx->deferring) {
        return;
    }

    ctx->deferring = 0;

    if (ctx->deferred == NULL) {
        return;
    }

    /* not from inside the store op's handler: the request may end */

    ctx->resume_ev.handler = ngx_http_idempotency_send_deferred_handler;
    ctx->resume_ev.data = ctx->request;
    ctx->resume_ev.log = ctx->request->connection->log;

    ngx_post_event(&ctx->resume_ev, &ngx_posted_events);
}


static void
ngx_http_idempotency_send_deferred_handler(ngx_event_t *ev)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ev->data;
    c = r->connection;

    /* ngx_http_writer(), or the upstream's downstream handler: both send
     * what the output filters still hold */

    r->write_event_handler(r);
    ngx_http_run_posted_requests(c);
}


void
ngx_http_idempotency_filter_abandon(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "idempotency: the response of key %V ended before "
                  "its end with its client gone: recorded as executed, "
                  "not stored", &ctx->key_id);

    ctx->capturing = 0;
    ctx->too_large = 1;
    ctx->body = NULL;
    ctx->tail = NULL;

    (void) ngx_http_idempotency_complete(ctx,
                                         ngx_http_idempotency_committed);
}


void
ngx_http_idempotency_filter_cleanup(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->defer_ev.timer_set) {
        ngx_del_timer(&ctx->defer_ev);
    }
}


/*
 * The client cannot be written to any more.  The upstream module must not
 * learn of it, or it would cut the upstream off: the filters now swallow
 * the response, marking every buffer sent so that the upstream's buffers
 * are reused, and the capture goes on to the end.
 */

static void
ngx_http_idempotency_client_gone(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in)
{
    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idempotency: client of key %V is gone; the response "
                  "is still read from the upstream and stored", &ctx->key_id);

    ctx->gone = 1;
    r->connection->error = 1;

    ngx_http_idempotency_consume(in);

#if (NGX_HTTP_V2)
    if (r->stream) {
        /* queued frames still point to their buffers */
        return;
    }
#endif

    ngx_http_idempotency_consume(r->out);
}


static void
ngx_http_idempotency_consume(ngx_chain_t *in)
{
    ngx_buf_t  *b;

    for ( /* void */ ; in; in = in->next) {
        b = in->buf;

        if (ngx_buf_in_memory(b)) {
            b->pos = b->last;
        }

        if (b->in_file) {
            b->file_pos = b->file_last;
        }
    }
}


/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the capture filters.
 *
 * For a request that won its claim, the header filter decides what the
 * response is (outcome.c): the backend's answer, which is captured;
 * nginx's own page for a request that never reached an upstream, and
 * the key is given back; or nginx's page for one that did and got no
 * complete answer, and the outcome is recorded as unknown.  The body
 * filter copies each buffer of a captured response before passing it on.
 * Once the whole response is captured, the completion job writes it
 * (complete.c), and the end of the response (the header itself, for a
 * response without a body) is held back until that write is committed:
 * a client that has the response and repeats the request is always
 * answered by the replay, never by 409.
 *
 * A client that goes away does not end the exchange: the location's
 * upstream ignores client aborts (module.c), these filters hide a failed
 * write to the client from the upstream module, and a client that stops
 * reading counts as gone rather than timing the upstream out, so that
 * the upstream is read to its end and the response stored for the retry.
 */


#include "ngx_http_idempotency_filter.h"
#include "ngx_http_idempotency_owner.h"
#include "ngx_http_idempotency_complete.h"
#include "ngx_http_idempotency_outcome.h"
#include "ngx_http_idempotency_grpc.h"
#include "ngx_http_idempotency_ctx.h"


/* how long the end of a response waits for its completion */
#define ngx_http_idempotency_defer_time(ctx)                                 \
    ((ctx)->conf->store->query_timeout)


/*
 * r->buffered (4 bits, all taken by nginx's filters): the end of the
 * response waits for its completion.  The bit is the image filter's,
 * which never acts on the same response (it keeps whole image bodies of
 * GET responses, and a protected method's response is never an image
 * to resize).
 */
#define NGX_HTTP_IDEMPOTENCY_BUFFERED   0x08

/* the guard looks for a redirected request's upstream this often, ms,
 * this many times (a body read meanwhile: 10 s) */
#define NGX_HTTP_IDEMPOTENCY_GUARD_EVERY  50
#define NGX_HTTP_IDEMPOTENCY_GUARD_LOOKS  200


static void ngx_http_idempotency_filter_end(ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_idempotency_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_idempotency_capture_start(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_uint_t ngx_http_idempotency_header_only(ngx_http_request_t *r);
static ngx_uint_t ngx_http_idempotency_header_ends(ngx_http_request_t *r);
static ngx_int_t ngx_http_idempotency_header_defer(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_header_unsure(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, const char *why);
static void ngx_http_idempotency_replaced(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t status);
static void ngx_http_idempotency_downstream_handler(ngx_http_request_t *r);
static void ngx_http_idempotency_guard_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_idempotency_capture_chain(
    ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in);
static ngx_int_t ngx_http_idempotency_capture(ngx_http_idempotency_ctx_t *ctx,
    u_char *data, size_t size);
static void ngx_http_idempotency_cut(ngx_http_idempotency_ctx_t *ctx,
    ngx_chain_t *in);
static void ngx_http_idempotency_captured(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t last);
static void ngx_http_idempotency_capture_trailers(
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_defer_start(ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_defer(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in);
static void ngx_http_idempotency_defer_timeout(ngx_event_t *ev);
static void ngx_http_idempotency_committed(ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_send_deferred(
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_send_deferred_handler(ngx_event_t *ev);
static ngx_uint_t ngx_http_idempotency_not_found(
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t status);
static void ngx_http_idempotency_not_kept(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t status);
static void ngx_http_idempotency_client_gone(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in);
static void ngx_http_idempotency_consume(ngx_chain_t *in);
#if (NGX_HTTP_V2)
static void ngx_http_idempotency_renew_buffer(ngx_http_request_t *r);
#endif
static void ngx_http_idempotency_stall_watch(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_int_t rc);
static void ngx_http_idempotency_stall_handler(ngx_event_t *ev);
static void ngx_http_idempotency_capture_drop(
    ngx_http_idempotency_ctx_t *ctx);
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
    ngx_int_t                    rc;
    ngx_uint_t                   status;
    ngx_http_idempotency_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_idempotency_get_ctx(r);

    if (ctx == NULL || !ctx->owner || ctx->capture.seen) {
        return ngx_http_next_header_filter(r);
    }

    ctx->capture.seen = 1;

    switch (ngx_http_idempotency_outcome(r, &status)) {

    case NGX_HTTP_IDEMPOTENCY_NOT_SENT:
        ngx_http_idempotency_release(ctx, "not sent upstream");
        return ngx_http_next_header_filter(r);

    case NGX_HTTP_IDEMPOTENCY_UNSURE:

        /* nginx's own page (a gateway timeout, a reset, an invalid
         * header): the first client gets it, a retry learns the outcome
         * is unknown once it is recorded */

        return ngx_http_idempotency_header_unsure(r, ctx, "no complete "
                                        "response came back from the upstream");

    case NGX_HTTP_IDEMPOTENCY_REPLACED:
        ngx_http_idempotency_replaced(ctx, status);
        return ngx_http_next_header_filter(r);

    default: /* NGX_HTTP_IDEMPOTENCY_ANSWERED */
        break;
    }

    status = r->headers_out.status;

    /*
     * A status that idempotency_store_status does not keep (a 5xx, a
     * transient 408, 425 or 429, by default) passes to the client as it
     * is, Retry-After included, and the key is given back, so that a
     * retry executes again; an interim status is nothing to keep
     */

    if (!ngx_http_idempotency_kept(ctx->conf, status)
        || ngx_http_idempotency_not_found(ctx, status))
    {
        ngx_http_idempotency_not_kept(ctx, status);
        return ngx_http_next_header_filter(r);
    }

    /* a trailers-only gRPC status (grpc.c): the call never ran, or was
     * given up on; any other is the call's answer */

    switch (ngx_http_idempotency_grpc_outcome(r, 0)) {

    case NGX_HTTP_IDEMPOTENCY_NOT_SENT:
        ngx_http_idempotency_release(ctx, "a gRPC status that says the "
                                     "call did not run");
        return ngx_http_next_header_filter(r);

    case NGX_HTTP_IDEMPOTENCY_UNSURE:
        return ngx_http_idempotency_header_unsure(r, ctx, "the gRPC server "
                                        "gave up on the call (its status)");

    default:
        break;
    }

    if (ngx_http_idempotency_capture_start(r, ctx) != NGX_OK) {
        ngx_http_idempotency_release(ctx, "no memory");
        return ngx_http_next_header_filter(r);
    }

    if (ngx_http_idempotency_header_ends(r)) {

        /* no body follows, or an empty one: the response is complete
         * now, and its header waits for the completion */

        ngx_http_idempotency_captured(ctx, 1);

        return ngx_http_idempotency_header_defer(r, ctx);
    }

    if (r->connection->error) {
        ctx->filter.gone = 1;
        return NGX_OK;
    }

    rc = ngx_http_next_header_filter(r);

    if (rc == NGX_ERROR) {
        /* the upstream goes on: the response is still stored */
        ngx_http_idempotency_client_gone(r, ctx, NULL);
        rc = NGX_OK;
    }

    return rc;
}


/* the response passes on; its end waits for the unknown outcome to be
 * recorded, so that a retry at once learns it */

static ngx_int_t
ngx_http_idempotency_header_unsure(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, const char *why)
{
    if (ngx_http_idempotency_filter_unsure(ctx, why) == NGX_OK
        && !r->connection->error)
    {
        ngx_http_idempotency_defer_start(ctx);

        if (ngx_http_idempotency_header_ends(r)) {
            return ngx_http_idempotency_header_defer(r, ctx);
        }
    }

    return ngx_http_next_header_filter(r);
}


/*
 * The header of a response that has no body, or an empty one, is its
 * end: over HTTP/2 it ends the stream (a gRPC trailers-only response),
 * and over HTTP/1.1 it is all a client reading by Content-Length waits
 * for.  It waits for the completion like the end of any response.
 */

static ngx_int_t
ngx_http_idempotency_header_defer(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->filter.gone) {
        return NGX_OK;
    }

    if (!(ctx->job && ctx->filter.deferring)) {
        return ngx_http_next_header_filter(r);
    }

    /* the content handler sends no body after it (a HEAD of a static
     * file would, and desync a keep-alive connection); an empty body's
     * last buffer waits behind the header, which the filters below
     * then see as they would have (add_trailer's trailers, chunked) */

    if (ngx_http_idempotency_header_only(r)) {
        r->header_only = 1;
    }

    ctx->filter.header_deferred = 1;
    r->buffered |= NGX_HTTP_IDEMPOTENCY_BUFFERED;

    return NGX_OK;
}


/*
 * Before the request goes upstream, while running out of memory may
 * still give the key back: the capture pool, its charge, and the job
 * that records the outcome (complete.c).  Once the request is sent, an
 * allocation that fails makes the key "executed, not stored" (410) or
 * of unknown outcome (502), never free to run again.
 */

ngx_int_t
ngx_http_idempotency_capture_prepare(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_pool_cleanup_t  *cln;

    /* the completion's end is asked for first, so that this one runs
     * before it: an outcome it records is the job's to finish */

    if (ngx_http_idempotency_complete_reserve(ctx) != NGX_OK
        || ngx_http_idempotency_on_end(ctx, ngx_http_idempotency_filter_end)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ctx->capture.charged) {
        return NGX_OK;
    }

    /* what the capture charges is given back with its pool, by whoever
     * owns it then (the request, or the completion job) */

    cln = ngx_pool_cleanup_add(ctx->capture.pool, sizeof(size_t));
    if (cln == NULL) {
        return NGX_ERROR;
    }

    ctx->capture.charged = cln->data;
    *ctx->capture.charged = 0;
    cln->handler = ngx_http_idempotency_uncharge;

    return NGX_OK;
}


/* the response is the backend's: its status and headers, recorded */

static ngx_int_t
ngx_http_idempotency_capture_start(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t  rc;

    /* prepared when the request was forwarded (handler.c) */

    if (ctx->capture.charged == NULL
        && ngx_http_idempotency_capture_prepare(ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    rc = ngx_http_idempotency_record_head(r, ctx->capture.pool,
                                          ctx->conf->skip_headers,
                                          &ctx->capture.head);

    if (rc == NGX_ERROR) {

        /* it ran: out of memory must not let a retry run it again */

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "idempotency: the head of the response of key %V "
                      "cannot be recorded (no memory, or more than a "
                      "record frames): recorded as executed, not stored",
                      &ctx->key_id);
        ctx->capture.too_large = 1;

    } else if (rc == NGX_DECLINED) {

        /* it ran: never again, but nothing a replay may not send */

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "idempotency: response of key %V has a status or "
                      "header that is never replayed: recorded as "
                      "executed, not stored", &ctx->key_id);
        ctx->capture.too_large = 1;
    }

    ctx->capture.status = r->headers_out.status;
    ctx->capture.active = 1;

    /* a HEAD response's Content-Length is that of a body it never has */

    ctx->capture.expect_len = ngx_http_idempotency_header_only(r)
                      ? -1 : r->headers_out.content_length_n;

    /* file buffers reach this filter read into memory */
    r->filter_need_in_memory = 1;

    return NGX_OK;
}


/* a response with no body: a header-only status, or a HEAD request */

static ngx_uint_t
ngx_http_idempotency_header_only(ngx_http_request_t *r)
{
    return r->header_only
           || r->method == NGX_HTTP_HEAD
           || r->headers_out.status == NGX_HTTP_NO_CONTENT
           || r->headers_out.status == NGX_HTTP_NOT_MODIFIED;
}


/*
 * A response whose header is all of it: no body, or Content-Length 0;
 * not a gRPC answer whose status (in its trailers) is still to come
 */

static ngx_uint_t
ngx_http_idempotency_header_ends(ngx_http_request_t *r)
{
    return ngx_http_idempotency_header_only(r)
           || (r->headers_out.content_length_n == 0
               && !ngx_http_idempotency_grpc_trailers_follow(r));
}


/*
 * The backend answered, and nginx sends a page of its own instead
 * (proxy_intercept_errors with error_page): a status that is not kept
 * is given back, as when it is sent; otherwise it executed, and its
 * answer is not there to store.
 */

static void
ngx_http_idempotency_replaced(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t status)
{
    if (!ngx_http_idempotency_kept(ctx->conf, status)
        || ngx_http_idempotency_not_found(ctx, status))
    {
        ngx_http_idempotency_not_kept(ctx, status);
        return;
    }

    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "idempotency: the backend answered key %V with %ui and "
                  "error_page replaced its response: recorded as "
                  "executed, not stored", &ctx->key_id, status);

    ctx->capture.status = status;

    if (ngx_http_idempotency_complete(ctx, NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED,
                                      ngx_http_idempotency_committed)
        == NGX_OK
        && !ctx->request->connection->error)
    {
        ngx_http_idempotency_defer_start(ctx);
    }
}


/* a find answered "no such record": the backend cannot give the answer */

static ngx_uint_t
ngx_http_idempotency_not_found(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t status)
{
    return ctx->status == NGX_HTTP_IDEMPOTENCY_FIND
           && (status == NGX_HTTP_NOT_FOUND || status == 410);
}


/*
 * An answer that is not the operation's result: the key is given back,
 * so that a retry runs it.  But a find's (its epoch ran, by the backend's
 * marker) says the backend cannot give the answer (a 404, a 410, or any
 * status not kept): the key is recorded as executed, and retries get 410
 * outcome-executed, never a find again, nor a run.
 */

static void
ngx_http_idempotency_not_kept(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t status)
{
    if (ctx->status != NGX_HTTP_IDEMPOTENCY_FIND) {
        ngx_http_idempotency_release(ctx, "response not kept");
        return;
    }

    ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                  "idempotency: the backend answered the find of key %V, "
                  "whose epoch %ui ran, with %ui: recorded as executed, "
                  "its answer not found", &ctx->key_id, ctx->epoch, status);

    ctx->capture.status = status;

    if (ngx_http_idempotency_complete(ctx, NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED,
                                      ngx_http_idempotency_committed)
        == NGX_OK
        && !ctx->request->connection->error)
    {
        ngx_http_idempotency_defer_start(ctx);
    }
}


/*
 * The request was sent upstream and no complete response came back:
 * whether the backend executed it is unknown.  The key is recorded so
 * (retries get "outcome-unknown" and it never runs again), or, with
 * "idempotency_on_unknown_outcome release", given back.
 */

ngx_int_t
ngx_http_idempotency_filter_unsure(ngx_http_idempotency_ctx_t *ctx,
    const char *why)
{
    ngx_http_request_t  *r;

    r = ctx->request;

    ctx->capture.active = 0;

    if (ctx->conf->on_unknown == NGX_HTTP_IDEMPOTENCY_UNKNOWN_RELEASE) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idempotency: key %V released: %s "
                      "(idempotency_on_unknown_outcome release)",
                      &ctx->key_id, why);
        ngx_http_idempotency_release(ctx, why);
        return NGX_DECLINED;
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "idempotency: key %V: %s; its outcome is unknown, and it "
                  "is not executed again", &ctx->key_id, why);

    ctx->capture.status = r->err_status ? (ngx_uint_t) r->err_status
                                     : r->headers_out.status;

    return ngx_http_idempotency_complete(ctx,
                                         NGX_HTTP_IDEMPOTENCY_ROW_UNKNOWN,
                                         ngx_http_idempotency_committed);
}


static ngx_int_t
ngx_http_idempotency_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t                    rc, last;
    ngx_chain_t                 *cl;
    ngx_http_idempotency_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_idempotency_get_ctx(r);

    if (ctx == NULL
        || !(ctx->capture.active || ctx->filter.deferring
             || ctx->filter.deferred || ctx->filter.header_deferred
             || ctx->filter.gone))
    {
        return ngx_http_next_body_filter(r, in);
    }

    /* a client that stops reading is a client that left (see below) */

    if (ctx->capture.active && r->write_event_handler
                          != ngx_http_idempotency_downstream_handler)
    {
        ctx->filter.downstream = r->write_event_handler;
        r->write_event_handler = ngx_http_idempotency_downstream_handler;
    }

    /* copy before passing on: later filters consume the buffers */

    if (ctx->capture.active && in) {
        last = ngx_http_idempotency_capture_chain(ctx, in);

        if (last && ngx_http_idempotency_outcome_cut(r)) {
            ngx_http_idempotency_cut(ctx, in);

        } else {
            ngx_http_idempotency_captured(ctx, last);
        }
    }

    if (ctx->filter.gone) {
        ngx_http_idempotency_consume(ctx->filter.deferred);
        ngx_http_idempotency_consume(in);
        ctx->filter.deferred = NULL;
        r->buffered &= ~NGX_HTTP_IDEMPOTENCY_BUFFERED;
        return NGX_OK;
    }

    if (ctx->job && ctx->filter.deferring) {
        return ngx_http_idempotency_defer(r, ctx, in);
    }

    if (ctx->filter.header_deferred) {

        /* stored: the header of a response without a body goes out; its
         * end is the header itself, or the empty last buffer held */

        ctx->filter.header_deferred = 0;
        r->buffered &= ~NGX_HTTP_IDEMPOTENCY_BUFFERED;

        rc = ngx_http_next_header_filter(r);

        if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
            ngx_http_idempotency_consume(ctx->filter.deferred);
            ngx_http_idempotency_consume(in);
            ctx->filter.deferred = NULL;

            return (rc == NGX_ERROR || rc > NGX_OK) ? NGX_ERROR : rc;
        }
    }

    if (ctx->filter.deferred) {
        /* the completion is committed (or its wait ended): send the end */

        for (cl = ctx->filter.deferred; cl->next; cl = cl->next) { /* void */ }

        cl->next = in;
        in = ctx->filter.deferred;
        ctx->filter.deferred = NULL;
        r->buffered &= ~NGX_HTTP_IDEMPOTENCY_BUFFERED;
    }

    rc = ngx_http_next_body_filter(r, in);

    if (rc == NGX_ERROR && ctx->capture.active) {
        ngx_http_idempotency_client_gone(r, ctx, in);
        return NGX_OK;
    }

    if (ctx->capture.active) {
        ngx_http_idempotency_stall_watch(r, ctx, rc);
    }

    return rc;
}


/*
 * A client that stops reading is a client that left.  While a captured
 * response cannot be sent (the client does not read), a timer a little
 * shorter than send_timeout runs, whichever write handler nginx has put
 * in place (the upstream's, or ngx_http_writer once the upstream is done
 * and the rest waits in a temp file): when it ends, the client counts
 * as gone, the filters swallow what is left, and the write handler runs
 * once more, so that nginx passes the rest of the response through the
 * capture and the upstream is read to its end.
 */

static void
ngx_http_idempotency_stall_watch(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_int_t rc)
{
    ngx_msec_t                 t;
    ngx_http_core_loc_conf_t  *clcf;

    if (rc != NGX_AGAIN && !r->connection->buffered) {
        if (ctx->filter.stall_ev.timer_set) {
            ngx_del_timer(&ctx->filter.stall_ev);
        }

        return;
    }

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    t = clcf->send_timeout;
    t = (t > 200) ? t - 100 : t / 2;

    ctx->filter.stall_sent = r->connection->sent;
    ctx->filter.stall_ev.handler = ngx_http_idempotency_stall_handler;
    ctx->filter.stall_ev.data = ctx;
    ctx->filter.stall_ev.log = r->connection->log;

    ngx_add_timer(&ctx->filter.stall_ev, t);
}


static void
ngx_http_idempotency_stall_handler(ngx_event_t *ev)
{
    ngx_connection_t            *c;
    ngx_http_request_t          *r;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ev->data;
    r = ctx->request;
    c = r->connection;

    if (!ctx->capture.active || ctx->filter.gone) {
        return;
    }

    if (c->sent != ctx->filter.stall_sent) {
        /* the client reads, slowly: as send_timeout, counted anew */
        ngx_http_idempotency_stall_watch(r, ctx, NGX_AGAIN);
        return;
    }

    ngx_log_error(NGX_LOG_INFO, c->log, NGX_ETIMEDOUT,
                  "idempotency: client of key %V stopped reading",
                  &ctx->key_id);

    ngx_http_idempotency_client_gone(r, ctx, NULL);

    /* what nginx holds for the client goes through the filters at once */

    c->write->ready = 1;

    r->write_event_handler(r);
    ngx_http_run_posted_requests(c);
}


/*
 * The downstream write handler of a captured response (the upstream's,
 * or ngx_http_writer).  When the client has not read for send_timeout,
 * the upstream module would cut the upstream off: instead the client
 * counts as gone, the filters swallow what is left, and the exchange
 * with the upstream goes on to its end, so that its response is stored.
 */

static void
ngx_http_idempotency_downstream_handler(ngx_http_request_t *r)
{
    ngx_event_t                 *wev;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_idempotency_get_ctx(r);
    wev = r->connection->write;

    if (ctx->capture.active && !ctx->filter.gone && wev->timedout) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, NGX_ETIMEDOUT,
                      "idempotency: client of key %V stopped reading",
                      &ctx->key_id);

        wev->timedout = 0;
        ngx_http_idempotency_client_gone(r, ctx, NULL);

        /* what the upstream module holds goes to the filters at once */
        wev->ready = 1;
    }

    ctx->filter.downstream(r);
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
                /* it ran: recorded as executed, not stored */
                ngx_http_idempotency_capture_drop(ctx);
            }
        }

        if (b->last_buf) {
            last = 1;
        }
    }

    return last;
}


/* the response is streamed on, and recorded as executed, not stored */

static void
ngx_http_idempotency_capture_drop(ngx_http_idempotency_ctx_t *ctx)
{
    ctx->capture.too_large = 1;
    ctx->capture.body = NULL;
    ctx->capture.tail = NULL;
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
    *ctx->capture.charged += 2 * n;

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
    off_t         left;
    size_t        n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    ctx->capture.body_len += size;

    if (ctx->capture.too_large) {
        return NGX_OK;
    }

    if (ctx->capture.body_len > ctx->conf->max_response_size) {

        /* still streamed in full; recorded as executed, not stored */

        ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                      "idempotency: response of key %V exceeds "
                      "idempotency_max_response_size, not stored",
                      &ctx->key_id);

        ngx_http_idempotency_capture_drop(ctx);
        return NGX_OK;
    }

    /* fill the current buffer, then allocate a larger one */

    cl = ctx->capture.tail;

    while (size) {
        if (cl == NULL || cl->buf->end == cl->buf->last) {
            n = ngx_max(size, 16384);
            n = ngx_min(n, ctx->conf->max_response_size + 1);

            /* no more than the rest of a known length: a small response
             * stays a small allocation of the capture pool */

            left = ctx->capture.expect_len
                   - (off_t) (ctx->capture.body_len - size);

            if (ctx->capture.expect_len >= 0 && left > 0) {
                n = ngx_min(n, (size_t) left);
            }

            n = ngx_max(n, size);

            if (ngx_http_idempotency_charge(ctx, n) != NGX_OK) {
                ngx_http_idempotency_capture_drop(ctx);
                return NGX_OK;
            }

            b = ngx_create_temp_buf(ctx->capture.pool, n);
            if (b == NULL) {
                return NGX_ERROR;
            }

            cl = ngx_alloc_chain_link(ctx->capture.pool);
            if (cl == NULL) {
                return NGX_ERROR;
            }

            cl->buf = b;
            cl->next = NULL;

            if (ctx->capture.tail) {
                ctx->capture.tail->next = cl;

            } else {
                ctx->capture.body = cl;
            }

            ctx->capture.tail = cl;
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
    ngx_int_t            rc;
    ngx_http_request_t  *r;

    if (!ctx->capture.active) {
        return;
    }

    r = ctx->request;

    /* an upstream that passes trailers (grpc_pass) has them set when
     * its last buffer passes, after the last byte of a known length */

    if (!last
        && !(ctx->capture.expect_len >= 0
             && (off_t) ctx->capture.body_len >= ctx->capture.expect_len
             && !(r->upstream && r->upstream->conf->pass_trailers)))
    {
        return;
    }

    ctx->capture.active = 0;

    if (ctx->capture.expect_len >= 0
        && (off_t) ctx->capture.body_len != ctx->capture.expect_len)
    {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "idempotency: response of key %V was truncated "
                      "(%uz of %O bytes)", &ctx->key_id,
                      ctx->capture.body_len, ctx->capture.expect_len);

        rc = ngx_http_idempotency_filter_unsure(ctx,
                                                "its response was truncated");

    } else if (ngx_http_idempotency_grpc_outcome(r, 1)
               == NGX_HTTP_IDEMPOTENCY_UNSURE)
    {
        rc = ngx_http_idempotency_filter_unsure(ctx, "the gRPC server gave "
                                                "up on the call (its status)");

    } else {
        ngx_http_idempotency_capture_trailers(ctx);
        rc = ngx_http_idempotency_complete(ctx, NGX_HTTP_IDEMPOTENCY_ROW_DONE,
                                           ngx_http_idempotency_committed);
    }

    if (rc == NGX_OK && !ctx->filter.gone) {
        ngx_http_idempotency_defer_start(ctx);
    }
}


/*
 * The FastCGI server closed the connection before it ended the request
 * (outcome.c), and nginx passes on what came as the whole answer.  It
 * may be cut: the outcome is unknown, and the client's response ends as
 * nginx ends one it knows is cut, without its end (the last chunk, or
 * HTTP/2's end of stream) and on a connection that then closes.
 */

static void
ngx_http_idempotency_cut(ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in)
{
    ngx_int_t            rc;
    ngx_chain_t         *cl;
    ngx_http_request_t  *r;

    r = ctx->request;

    for (cl = in; cl; cl = cl->next) {
        if (cl->buf->last_buf) {
            cl->buf->last_buf = 0;
            cl->buf->flush = 1;
        }
    }

    r->keepalive = 0;

    rc = ngx_http_idempotency_filter_unsure(ctx, "the FastCGI server closed "
                                            "the connection before it "
                                            "ended the request");

    if (rc == NGX_OK && !ctx->filter.gone) {
        ngx_http_idempotency_defer_start(ctx);
    }
}


/* the response's trailers, for the record (record.h, format 3) */

static void
ngx_http_idempotency_capture_trailers(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t  rc;

    if (ctx->capture.too_large) {
        return;
    }

    rc = ngx_http_idempotency_record_trailers(ctx->request, ctx->capture.pool,
                                              &ctx->capture.trailers);

    if (rc == NGX_OK) {
        return;
    }

    ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                  "idempotency: the trailers of the response of key %V %s: "
                  "recorded as executed, not stored", &ctx->key_id,
                  rc == NGX_DECLINED ? "have one that is never replayed"
                                     : "cannot be recorded");

    ctx->capture.too_large = 1;
}


/* the end of the response waits for the completion, for a while */

static void
ngx_http_idempotency_defer_start(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->job == NULL) {
        /* the write ended at once */
        return;
    }

    ctx->filter.deferring = 1;

    ctx->filter.defer_ev.handler = ngx_http_idempotency_defer_timeout;
    ctx->filter.defer_ev.data = ctx;
    ctx->filter.defer_ev.log = ctx->request->connection->log;

    ngx_add_timer(&ctx->filter.defer_ev, ngx_http_idempotency_defer_time(ctx));
}


static ngx_int_t
ngx_http_idempotency_defer(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_chain_t *in)
{
    ngx_chain_t  *cl, **ll;

    for (ll = &ctx->filter.deferred; *ll; ll = &(*ll)->next) { /* void */ }

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
    if (ctx->filter.defer_ev.timer_set) {
        ngx_del_timer(&ctx->filter.defer_ev);
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
    if (!ctx->filter.deferring) {
        return;
    }

    ctx->filter.deferring = 0;

    if (ctx->filter.deferred == NULL && !ctx->filter.header_deferred) {
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


/*
 * The request ends: the end of a response no longer waits, and a key it
 * still holds is recorded as far as is known.  Its response did not
 * reach its end (an upstream that failed mid-response, with the client
 * there or not), or none came (the upstream failed after the client
 * left, so nginx had nobody to send its page to): if any of it reached
 * an upstream, the outcome is unknown.  A key that nothing sent upstream
 * is given back by the claim's own end (claim.c), which runs after this.
 */

static void
ngx_http_idempotency_filter_end(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->filter.defer_ev.timer_set) {
        ngx_del_timer(&ctx->filter.defer_ev);
    }

    if (ctx->filter.guard_ev.posted) {
        ngx_delete_posted_event(&ctx->filter.guard_ev);
    }

    if (ctx->filter.guard_ev.timer_set) {
        ngx_del_timer(&ctx->filter.guard_ev);
    }

    if (ctx->filter.stall_ev.timer_set) {
        ngx_del_timer(&ctx->filter.stall_ev);
    }

    if (ctx->owner
        && (ctx->capture.active
            || ngx_http_idempotency_outcome_sent(ctx->request)
               == NGX_HTTP_IDEMPOTENCY_UNSURE))
    {
        (void) ngx_http_idempotency_filter_unsure(ctx, ctx->capture.active
                                ? "its response did not reach its end"
                                : "no response came back from the upstream");
    }
}


/*
 * A forwarded request that an internal redirect (error_page, try_files)
 * takes to a location of its own: once that location's content handler
 * has started its upstream, the upstream ignores the client's abort for
 * this request too, as in a location with a store (module.c).
 */

void
ngx_http_idempotency_filter_guard(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->filter.guard_ev.posted) {
        return;
    }

    ctx->filter.guard_ev.handler = ngx_http_idempotency_guard_handler;
    ctx->filter.guard_ev.data = ctx;
    ctx->filter.guard_ev.log = r->connection->log;

    ngx_post_event(&ctx->filter.guard_ev, &ngx_posted_events);
}


static void
ngx_http_idempotency_guard_handler(ngx_event_t *ev)
{
    ngx_http_request_t          *r;
    ngx_http_upstream_t         *u;
    ngx_http_upstream_conf_t    *conf;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ev->data;
    r = ctx->request;
    u = r->upstream;

    if (!ctx->owner || r->header_sent) {
        return;
    }

    if (u == NULL || u->cleanup == NULL) {

        /* the content handler reads the body first (idempotency_
         * fingerprint off): look again, for a while */

        if (ctx->filter.guards++ < NGX_HTTP_IDEMPOTENCY_GUARD_LOOKS) {
            ngx_add_timer(&ctx->filter.guard_ev,
                          NGX_HTTP_IDEMPOTENCY_GUARD_EVERY);
        }

        return;
    }

    if (u->header_sent || u->conf->ignore_client_abort) {
        return;
    }

    /* the location's configuration is shared: this request gets a copy */

    conf = ngx_palloc(r->pool, sizeof(ngx_http_upstream_conf_t));
    if (conf == NULL) {
        return;
    }

    *conf = *u->conf;
    conf->ignore_client_abort = 1;
    u->conf = conf;

    /* the checks of a broken client connection the upstream set up */

    if (!r->reading_body) {
        r->read_event_handler = ngx_http_block_reading;
    }

    r->write_event_handler = ngx_http_request_empty_handler;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idempotency: upstream of key %V ignores client "
                   "aborts", &ctx->key_id);
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

    ctx->filter.gone = 1;
    r->connection->error = 1;

    if (ctx->filter.stall_ev.timer_set) {
        ngx_del_timer(&ctx->filter.stall_ev);
    }

    ngx_http_idempotency_consume(in);

#if (NGX_HTTP_V2)
    if (r->stream) {

        /*
         * Queued frames still point to their buffers, and flow control
         * may keep them queued for ever: an unbuffered upstream, which
         * would wait for its buffer to be sent, reads on into another.
         */

        ngx_http_idempotency_renew_buffer(r);
        return;
    }
#endif

    ngx_http_idempotency_consume(r->out);

    /* nothing is left for the write filter to send */
    r->connection->buffered &= ~NGX_HTTP_WRITE_BUFFERED;
}


#if (NGX_HTTP_V2)

static void
ngx_http_idempotency_renew_buffer(ngx_http_request_t *r)
{
    size_t                size;
    u_char               *p;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    if (u == NULL || u->buffering || u->buffer.start == NULL
        || u->busy_bufs == NULL)
    {
        return;
    }

    size = u->buffer.end - u->buffer.start;

    p = ngx_palloc(r->pool, size);
    if (p == NULL) {
        return;
    }

    /* what the old buffer still holds, the queued frames and out_bufs
     * point to; it stays in the request's pool */

    u->buffer.start = p;
    u->buffer.pos = p;
    u->buffer.last = p;
    u->buffer.end = p + size;
    u->busy_bufs = NULL;
}

#endif


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

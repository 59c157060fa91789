
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the precontent phase handler.
 *
 * The handler runs once per main request: keysrc.c reads its key, and
 * the body when the fingerprint, the key or a signature needs it, and
 * hands the request to claim.c, which decides it (tiers, claim, verdict,
 * hold).  The phases are suspended
 * meanwhile; claim.c resolves the outcome and resumes the phases (ctx.c),
 * where the handler lets a won claim go on to its content handler or
 * answers the request itself (replay, 409, 422, ...).  When the request
 * ends, each step undoes its own work (ctx.h, on_end).
 */


#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_handler.h"
#include "ngx_http_idempotency_keysrc.h"
#include "ngx_http_idempotency_claim.h"
#include "ngx_http_idempotency_problem.h"
#include "ngx_http_idempotency_tier.h"
#include "ngx_http_idempotency_hold.h"
#include "ngx_http_idempotency_complete.h"
#include "ngx_http_idempotency_filter.h"
#include "ngx_http_idempotency_owner.h"
#include "ngx_http_idempotency_outcome.h"
#include "ngx_http_idempotency_resend.h"
#include "ngx_http_idempotency_ctx.h"


static ngx_int_t ngx_http_idempotency_start(ngx_http_request_t *r,
    ngx_http_idempotency_loc_conf_t *ilcf);
static ngx_int_t ngx_http_idempotency_respond(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_replay(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_epoch_header(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_request_header(ngx_http_request_t *r,
    ngx_str_t *name, ngx_str_t *value);
static ngx_int_t ngx_http_idempotency_strip_headers(ngx_http_request_t *r,
    ngx_http_idempotency_loc_conf_t *ilcf);
static ngx_int_t ngx_http_idempotency_strip_header(ngx_http_request_t *r,
    ngx_str_t *name);
static ngx_int_t ngx_http_idempotency_list_delete(ngx_pool_t *pool,
    ngx_list_t *l, ngx_list_part_t *prev, ngx_list_part_t *part,
    ngx_uint_t i);


ngx_int_t
ngx_http_idempotency_handler(ngx_http_request_t *r)
{
    ngx_http_idempotency_ctx_t       *ctx;
    ngx_http_idempotency_loc_conf_t  *ilcf;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_idempotency_get_ctx(r);

    if (ctx) {
        switch (ctx->state) {

        case NGX_HTTP_IDEMPOTENCY_S_DECIDED:
            ctx->state = NGX_HTTP_IDEMPOTENCY_S_DONE;
            return ngx_http_idempotency_respond(r, ctx);

        case NGX_HTTP_IDEMPOTENCY_S_DONE:

            /* an internal redirect of a forwarded request: not forwarded
             * again after an attempt that may have executed, and the
             * upstream of this location must not be cut off by its
             * client either */

            if (ctx->owner && r->internal) {
                if (ngx_http_idempotency_resend_guard(r, ctx) == NGX_DONE) {
                    return NGX_DONE;
                }

                ngx_http_idempotency_filter_guard(r, ctx);
            }

            /* a request that holds no claim (it was not protected where
             * it came from) never brings its client's headers here */

            if (r->internal && ctx->status != NGX_HTTP_IDEMPOTENCY_NEW
                && ctx->status != NGX_HTTP_IDEMPOTENCY_TAKEOVER
                && ctx->status != NGX_HTTP_IDEMPOTENCY_FIND
                && ctx->status != NGX_HTTP_IDEMPOTENCY_REDRIVE
                && ngx_http_idempotency_strip_headers(r,
                       ngx_http_get_module_loc_conf(r,
                                               ngx_http_idempotency_module))
                   != NGX_OK)
            {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            return NGX_DECLINED;

        default:
            /* still waiting for the body or the store */
            return NGX_DONE;
        }
    }

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idempotency_module);

    if (ngx_http_idempotency_strip_headers(r, ilcf) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ilcf->store == NULL || !(r->method & ilcf->methods)) {
        return NGX_DECLINED;
    }

    return ngx_http_idempotency_start(r, ilcf);
}


static ngx_int_t
ngx_http_idempotency_start(ngx_http_request_t *r,
    ngx_http_idempotency_loc_conf_t *ilcf)
{
    ngx_int_t                    rc;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_idempotency_ctx_create(r, ilcf);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* its key, fingerprint and signature (keysrc.c), then the claim */

    rc = ngx_http_idempotency_identify(r, ctx, ngx_http_idempotency_lookup);

    switch (rc) {

    case NGX_DONE:
    case NGX_DECLINED:
        return rc;

    case NGX_ABORT:
        /* a problem response, resolved */
        return ngx_http_idempotency_handler(r);

    case NGX_ERROR:
        return NGX_HTTP_INTERNAL_SERVER_ERROR;

    default:
        /* the body could not be read */
        return rc;
    }
}


static ngx_int_t
ngx_http_idempotency_respond(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t  rc;

    switch (ctx->outcome) {

    case NGX_HTTP_IDEMPOTENCY_OUT_FORWARD:

        /* what records the outcome is had before anything is sent */

        if (ctx->owner
            && (ngx_http_idempotency_capture_prepare(ctx) != NGX_OK
                || ngx_http_idempotency_epoch_header(r, ctx) != NGX_OK))
        {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return NGX_DONE;
        }

        return NGX_DECLINED;

    case NGX_HTTP_IDEMPOTENCY_OUT_REPLAY:
        rc = ngx_http_idempotency_replay(r, ctx);
        break;

    case NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM:
        /*
         * A busy key or store, or an unknown outcome that a fence may
         * decide (fence.c): worth a retry a second later
         */
        rc = ngx_http_idempotency_problem(r, ctx->problem,
                 ctx->detail.len ? &ctx->detail : NULL,
                 (ctx->problem == NGX_HTTP_IDEMPOTENCY_P_STORE
                  || ctx->problem == NGX_HTTP_IDEMPOTENCY_P_CONFLICT
                  || (ctx->problem == NGX_HTTP_IDEMPOTENCY_P_UNKNOWN
                      && ctx->conf->fence))
                 ? 1 : 0, &ctx->fence.members);
        break;

    default:
        rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        break;
    }

    /* the response is ours: finalize here, not in the phase checker,
     * for which NGX_OK would mean "go on to the next phase" */

    ngx_http_finalize_request(r, rc);
    return NGX_DONE;
}


static ngx_int_t
ngx_http_idempotency_replay(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_buf_t  *b;

    static ngx_str_t  replayed = ngx_string("Idempotent-Replayed");
    static ngx_str_t  yes = ngx_string("true");

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }

    if (ngx_http_idempotency_record_apply(r, &ctx->record) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /*
     * The first answer, whatever the retry's conditions: nginx's upstream
     * turns the not_modified filter off for what it did not cache (an
     * If-Match or If-Unmodified-Since would make the replay a 412, an
     * If-None-Match a 304), and it allows ranges only with
     * *_force_ranges, which the capture (before the range filter) never
     * saw: r->allow_ranges stays 0, and a Range gets the whole answer.
     */

    r->disable_not_modified = 1;

    if (ngx_http_idempotency_add_header(r, &replayed, &yes) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->record.body.len == 0) {
        return ngx_http_idempotency_send(r, NULL);
    }

    /* the body stays in the replay pool until the request ends */

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = ctx->record.body.data;
    b->last = b->pos + ctx->record.body.len;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    return ngx_http_idempotency_send(r, b);
}


/*
 * What the upstream learns of the claim, in request headers of the
 * names configured (a client's headers of those names were removed by
 * the handler): "idempotency_epoch_header", the claim's epoch (1, one
 * more per takeover), so that it can refuse a stale executor; and
 * "idempotency_attempt_header", "find" or "redrive" when the request is
 * forwarded to ask for the answer of an attempt that may have run.
 */

static ngx_int_t
ngx_http_idempotency_epoch_header(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    u_char     *p;
    ngx_str_t   value;

    static ngx_str_t  find = ngx_string("find");
    static ngx_str_t  redrive = ngx_string("redrive");

    if (ctx->conf->epoch_header.len) {
        p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
        if (p == NULL) {
            return NGX_ERROR;
        }

        value.data = p;
        value.len = ngx_sprintf(p, "%ui", ctx->epoch) - p;

        if (ngx_http_idempotency_request_header(r, &ctx->conf->epoch_header,
                                                &value)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (ctx->conf->attempt_header.len == 0
        || (ctx->status != NGX_HTTP_IDEMPOTENCY_FIND
            && ctx->status != NGX_HTTP_IDEMPOTENCY_REDRIVE))
    {
        return NGX_OK;
    }

    return ngx_http_idempotency_request_header(r, &ctx->conf->attempt_header,
               ctx->status == NGX_HTTP_IDEMPOTENCY_FIND ? &find : &redrive);
}


static ngx_int_t
ngx_http_idempotency_request_header(ngx_http_request_t *r, ngx_str_t *name,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_in.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->lowcase_key = ngx_pnalloc(r->pool, name->len);
    if (h->lowcase_key == NULL) {
        return NGX_ERROR;
    }

    h->key = *name;
    h->value = *value;
    h->hash = ngx_hash_key_lc(name->data, name->len);

    ngx_strlow(h->lowcase_key, name->data, name->len);

#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}


/*
 * Whatever becomes of the request, the upstream never gets a client's
 * epoch or attempt header: only an owner's, which the module sets.
 */

static ngx_int_t
ngx_http_idempotency_strip_headers(ngx_http_request_t *r,
    ngx_http_idempotency_loc_conf_t *ilcf)
{
    if (ilcf->epoch_header.len
        && ngx_http_idempotency_strip_header(r, &ilcf->epoch_header)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ilcf->attempt_header.len
        && (ilcf->fence
            || ilcf->on_unknown == NGX_HTTP_IDEMPOTENCY_UNKNOWN_REDRIVE)
        && ngx_http_idempotency_strip_header(r, &ilcf->attempt_header)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* every request header called "name" goes, before anything is sent */

static ngx_int_t
ngx_http_idempotency_strip_header(ngx_http_request_t *r, ngx_str_t *name)
{
    ngx_uint_t        i;
    ngx_table_elt_t  *h;
    ngx_list_part_t  *part, *prev;

again:

    prev = NULL;
    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NGX_OK;
            }

            prev = part;
            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == name->len
            && ngx_strncasecmp(h[i].key.data, name->data, name->len) == 0)
        {
            if (ngx_http_idempotency_list_delete(r->pool,
                                                 &r->headers_in.headers,
                                                 prev, part, i)
                != NGX_OK)
            {
                return NGX_ERROR;
            }

            /* rare (a client that sends the header): from the start */
            goto again;
        }
    }
}


/*
 * Deletes element i of a part of a list.  The other elements keep their
 * addresses (r->headers_in points at some of them): the part is cut in
 * two around it, and only the first part of a list is ever left empty,
 * as the list's readers expect.  When the last part was cut, it counts
 * as full, so that the next push starts a new part instead of writing
 * past the end of a piece.
 */

static ngx_int_t
ngx_http_idempotency_list_delete(ngx_pool_t *pool, ngx_list_t *l,
    ngx_list_part_t *prev, ngx_list_part_t *part, ngx_uint_t i)
{
    ngx_uint_t        last;
    ngx_list_part_t  *tail;

    last = (l->last == part);

    if (i + 1 < part->nelts) {
        tail = ngx_palloc(pool, sizeof(ngx_list_part_t));
        if (tail == NULL) {
            return NGX_ERROR;
        }

        tail->elts = (u_char *) part->elts + (i + 1) * l->size;
        tail->nelts = part->nelts - i - 1;
        tail->next = part->next;

        part->next = tail;

        if (last) {
            l->last = tail;
        }
    }

    part->nelts = i;

    if (i == 0 && prev) {
        prev->next = part->next;

        if (l->last == part) {
            l->last = prev;
        }
    }

    /* an empty last part is the first, whole: its room is nalloc */

    if (last && l->last->nelts) {
        l->nalloc = l->last->nelts;
    }

    return NGX_OK;
}

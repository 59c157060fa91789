
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: nginx's own resends.
 *
 * After a failed attempt nginx asks the request's peer for another
 * server while tries are left (proxy_next_upstream error timeout, and
 * one try more when the failed connection was a cached keepalive one).
 * The peer.init of every upstream{} is wrapped; for the main request of
 * a claim's owner, the wrapper wraps the request's peer as the keepalive
 * module does: free() ends the tries after an attempt that took a byte
 * of the request and had no answer, and get() refuses a server to a
 * request that had such an attempt, as in the location an error_page
 * names.  An attempt that sent nothing (a refused or timed out connect)
 * fails over as before.
 *
 * A proxy_pass with variables whose name resolves at run time gets a
 * peer of its own (ngx_http_upstream_create_round_robin_peer), not an
 * upstream{}'s: outcome.c then records a resend as an unknown outcome.
 */


#include "ngx_http_idempotency_resend.h"
#include "ngx_http_idempotency_outcome.h"
#include "ngx_http_idempotency_problem.h"
#include "ngx_http_idempotency_ctx.h"


typedef struct {
    ngx_http_upstream_srv_conf_t      *uscf;
    ngx_http_upstream_init_peer_pt     init;
} ngx_http_idempotency_resend_init_t;


typedef struct {
    ngx_http_idempotency_ctx_t        *ctx;
    ngx_http_upstream_t               *upstream;

    void                              *data;
    ngx_event_get_peer_pt              get;
    ngx_event_free_peer_pt             free;
    ngx_event_notify_peer_pt           notify;
#if (NGX_HTTP_SSL)
    ngx_event_set_peer_session_pt      set_session;
    ngx_event_save_peer_session_pt     save_session;
#endif
} ngx_http_idempotency_resend_peer_t;


static int ngx_libc_cdecl ngx_http_idempotency_resend_cmp(const void *one,
    const void *two);
static ngx_int_t ngx_http_idempotency_resend_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_idempotency_resend_get(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_idempotency_resend_free(ngx_peer_connection_t *pc,
    void *data, ngx_uint_t state);
static void ngx_http_idempotency_resend_notify(ngx_peer_connection_t *pc,
    void *data, ngx_uint_t type);
#if (NGX_HTTP_SSL)
static ngx_int_t ngx_http_idempotency_resend_set_session(
    ngx_peer_connection_t *pc, void *data);
static void ngx_http_idempotency_resend_save_session(
    ngx_peer_connection_t *pc, void *data);
#endif


ngx_int_t
ngx_http_idempotency_resend_init(ngx_conf_t *cf)
{
    ngx_uint_t                           i;
    ngx_http_upstream_srv_conf_t       **uscfp;
    ngx_http_upstream_main_conf_t       *umcf;
    ngx_http_idempotency_main_conf_t    *imcf;
    ngx_http_idempotency_resend_init_t  *ri;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idempotency_module);

    if (imcf->locations.nelts == 0) {
        /* nothing claims: the upstreams stay as they are */
        return NGX_OK;
    }

    umcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_upstream_module);
    uscfp = umcf->upstreams.elts;

    if (ngx_array_init(&imcf->resends, cf->pool, umcf->upstreams.nelts + 1,
                       sizeof(ngx_http_idempotency_resend_init_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < umcf->upstreams.nelts; i++) {

        if (uscfp[i]->peer.init == NULL) {
            continue;
        }

        ri = ngx_array_push(&imcf->resends);
        if (ri == NULL) {
            return NGX_ERROR;
        }

        ri->uscf = uscfp[i];
        ri->init = uscfp[i]->peer.init;

        uscfp[i]->peer.init = ngx_http_idempotency_resend_init_peer;
    }

    /* looked up by the upstream's address for every request */

    ngx_qsort(imcf->resends.elts, imcf->resends.nelts,
              sizeof(ngx_http_idempotency_resend_init_t),
              ngx_http_idempotency_resend_cmp);

    return NGX_OK;
}


static int ngx_libc_cdecl
ngx_http_idempotency_resend_cmp(const void *one, const void *two)
{
    const ngx_http_idempotency_resend_init_t  *a = one, *b = two;

    if ((uintptr_t) a->uscf == (uintptr_t) b->uscf) {
        return 0;
    }

    return ((uintptr_t) a->uscf < (uintptr_t) b->uscf) ? -1 : 1;
}


static ngx_int_t
ngx_http_idempotency_resend_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_uint_t                           lo, hi, mid;
    ngx_http_upstream_t                 *u;
    ngx_http_idempotency_ctx_t          *ctx;
    ngx_http_idempotency_main_conf_t    *imcf;
    ngx_http_idempotency_resend_init_t  *ri;
    ngx_http_idempotency_resend_peer_t  *p;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idempotency_module);

    ri = imcf->resends.elts;
    lo = 0;
    hi = imcf->resends.nelts;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if ((uintptr_t) ri[mid].uscf < (uintptr_t) us) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    if (lo == imcf->resends.nelts || ri[lo].uscf != us) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "idempotency: upstream \"%V\" not found", &us->host);
        return NGX_ERROR;
    }

    if (ri[lo].init(r, us) != NGX_OK) {
        return NGX_ERROR;
    }

    /* subrequests (a mirror, auth_request) keep nginx's failover */

    if (r != r->main) {
        return NGX_OK;
    }

    ctx = ngx_http_idempotency_get_ctx(r);

    if (ctx == NULL || !ctx->owner) {
        return NGX_OK;
    }

    p = ngx_palloc(r->pool, sizeof(ngx_http_idempotency_resend_peer_t));
    if (p == NULL) {
        return NGX_ERROR;
    }

    u = r->upstream;

    p->ctx = ctx;
    p->upstream = u;

    p->data = u->peer.data;
    p->get = u->peer.get;
    p->free = u->peer.free;
    p->notify = u->peer.notify;

    u->peer.data = p;
    u->peer.get = ngx_http_idempotency_resend_get;
    u->peer.free = ngx_http_idempotency_resend_free;

    if (u->peer.notify) {
        u->peer.notify = ngx_http_idempotency_resend_notify;
    }

#if (NGX_HTTP_SSL)
    p->set_session = u->peer.set_session;
    p->save_session = u->peer.save_session;
    u->peer.set_session = ngx_http_idempotency_resend_set_session;
    u->peer.save_session = ngx_http_idempotency_resend_save_session;
#endif

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_resend_get(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_idempotency_resend_peer_t  *p = data;

    /* an upstream before this one (error_page to a location that proxies
     * again) may have executed the request */

    if (ngx_http_idempotency_outcome_lost(p->ctx->request)) {
        ngx_log_error(NGX_LOG_WARN, pc->log, 0,
                      "idempotency: key %V was sent upstream and no answer "
                      "came back: it is not sent to another", &p->ctx->key_id);
        pc->tries = 0;
        return NGX_BUSY;
    }

    return p->get(pc, p->data);
}


static void
ngx_http_idempotency_resend_free(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    ngx_uint_t                           lost;
    ngx_http_upstream_t                 *u;
    ngx_http_idempotency_resend_peer_t  *p = data;

    u = p->upstream;

    /* the attempt took a byte of the request and no header came back */

    lost = (state & NGX_PEER_FAILED)
           && pc->connection && pc->connection->sent > 0
           && u->state && u->state->header_time == (ngx_msec_t) -1;

    p->free(pc, p->data, state);

    if (!lost) {
        return;
    }

    if (pc->tries || pc->cached) {
        ngx_log_error(NGX_LOG_WARN, pc->log, 0,
                      "idempotency: key %V was sent upstream and no answer "
                      "came back: it is not sent to another server",
                      &p->ctx->key_id);
    }

    /* after the free of the balancer, which counts its try; "cached"
     * would give a failed keepalive connection one try more */

    pc->tries = 0;
    pc->cached = 0;
}


static void
ngx_http_idempotency_resend_notify(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t type)
{
    ngx_http_idempotency_resend_peer_t  *p = data;

    p->notify(pc, p->data, type);
}


#if (NGX_HTTP_SSL)

static ngx_int_t
ngx_http_idempotency_resend_set_session(ngx_peer_connection_t *pc,
    void *data)
{
    ngx_http_idempotency_resend_peer_t  *p = data;

    return p->set_session(pc, p->data);
}


static void
ngx_http_idempotency_resend_save_session(ngx_peer_connection_t *pc,
    void *data)
{
    ngx_http_idempotency_resend_peer_t  *p = data;

    p->save_session(pc, p->data);
}

#endif


ngx_int_t
ngx_http_idempotency_resend_guard(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t                  rc;
    ngx_http_core_loc_conf_t  *clcf;

    /*
     * A location with a handler of its own (proxy_pass, fastcgi_pass, a
     * proxy_pass with variables whose peer is not wrapped) would forward
     * the request again; static files, "return" and the like answer it.
     */

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (clcf->handler == NULL || !ngx_http_idempotency_outcome_lost(r)) {
        return NGX_DECLINED;
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "idempotency: key %V was sent upstream and no answer came "
                  "back: location \"%V\" does not forward it again",
                  &ctx->key_id, &clcf->name);

    /* the header filter records the outcome as unknown */

    rc = ngx_http_idempotency_problem(r, NGX_HTTP_IDEMPOTENCY_P_UNKNOWN,
                                      NULL, 0, NULL);

    ngx_http_finalize_request(r, rc);

    return NGX_DONE;
}

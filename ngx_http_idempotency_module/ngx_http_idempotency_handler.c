
/*
 * ngx_http_idempotency_module: the precontent phase handler.
 *
 * The handler runs once per main request: it reads the key, reads the
 * body when the fingerprint needs it, claims the key with one store round
 * trip and then either lets the request go on to its content handler
 * (the claim was won) or answers it itself (replay, 409, 422, ...).
 * While the store works the phases are suspended; the op's handler
 * resumes them.
 */


#include <openssl/rand.h>

#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_issue.h"
#include "ngx_http_idempotency_handler.h"
#include "ngx_http_idempotency_key.h"
#include "ngx_http_idempotency_problem.h"
#include "ngx_http_idempotency_sql.h"
#include "ngx_http_idempotency_tier.h"
#include "ngx_http_idempotency_cache.h"
#include "ngx_http_idempotency_complete.h"
#include "ngx_http_idempotency_filter.h"


/*
 * How many claims one request makes: after a 1213 (a lost race at
 * commit, claimed again after a pause) and after a row that went away
 * between the claim's INSERT and its SELECT (claimed again at once).
 */
#define NGX_HTTP_IDEMPOTENCY_LOST_TRIES   8
#define NGX_HTTP_IDEMPOTENCY_NOROW_TRIES  8


/* what an orphaned claim needs to give the key back */
typedef struct {
    ngx_http_idempotency_shard_t  *shard;
    u_char                         key_hash[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                         token[NGX_HTTP_IDEMPOTENCY_TOKEN_LEN];
} ngx_http_idempotency_orphan_t;


static ngx_int_t ngx_http_idempotency_start(ngx_http_request_t *r,
    ngx_http_idempotency_loc_conf_t *ilcf);
static ngx_int_t ngx_http_idempotency_request_key(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_body_handler(ngx_http_request_t *r);
static void ngx_http_idempotency_mysql_replay(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op,
    ngx_int_t ttl_s);
static void ngx_http_idempotency_hash_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_idempotency_claim(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_token(ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_claim_done(ngx_http_idempotency_op_t *op);
static ngx_int_t ngx_http_idempotency_claim_lost(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_reclaim_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_idempotency_hold(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_won(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, time_t ttl, ngx_uint_t status);
static ngx_int_t ngx_http_idempotency_verdict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_entry_verdict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_store_failed(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_store_failed_held(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, const char *what);
static void ngx_http_idempotency_resolve(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t outcome,
    ngx_uint_t status);
static void ngx_http_idempotency_resume(ngx_http_request_t *r);
static void ngx_http_idempotency_resume_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_idempotency_respond(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_replay(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_wait_handler(ngx_event_t *ev);
static void ngx_http_idempotency_cleanup(void *data);
static void ngx_http_idempotency_orphan_done(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_release_done(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_release_key(
    ngx_http_idempotency_shard_t *shard, u_char *key_hash, u_char *token);
static ngx_int_t ngx_http_idempotency_atoi(ngx_str_t *s);


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
        switch (ctx->phase) {

        case NGX_HTTP_IDEMPOTENCY_PH_RESOLVED:
            ctx->phase = NGX_HTTP_IDEMPOTENCY_PH_PASSED;
            return ngx_http_idempotency_respond(r, ctx);

        case NGX_HTTP_IDEMPOTENCY_PH_PASSED:
            return NGX_DECLINED;

        default:
            /* still waiting for the body or the store */
            return NGX_DONE;
        }
    }

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idempotency_module);

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
    ngx_pool_cleanup_t          *cln;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_idempotency_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* a pool cleanup finds the ctx again after an internal redirect and
     * gives back whatever the request still holds when it ends */

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_idempotency_cleanup;
    cln->data = ctx;

    ctx->request = r;
    ctx->conf = ilcf;
    ctx->status = NGX_HTTP_IDEMPOTENCY_BYPASS;
    ctx->phase = NGX_HTTP_IDEMPOTENCY_PH_PASSED;

    ngx_http_set_ctx(r, ctx, ngx_http_idempotency_module);

    rc = ngx_http_idempotency_request_key(r, ctx);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return NGX_DECLINED;
    }

    if (rc == NGX_ABORT) {
        /* a problem response, resolved */
        return ngx_http_idempotency_handler(r);
    }

    ctx->shard = ngx_http_idempotency_shard(ilcf->store, ctx->key_hash);
    ctx->wait_until = ngx_current_msec + ilcf->wait;

    if (!ilcf->fingerprint) {
        rc = ngx_http_idempotency_claim(r, ctx);
        return (rc == NGX_OK) ? NGX_DONE : NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the fingerprint covers the body: read it first (as the mirror
     * module does), keeping a temp file body for the upstream */

    ctx->phase = NGX_HTTP_IDEMPOTENCY_PH_BODY;
    r->preserve_body = 1;

    rc = ngx_http_read_client_request_body(r,
                                           ngx_http_idempotency_body_handler);
    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        ctx->phase = NGX_HTTP_IDEMPOTENCY_PH_PASSED;
        return rc;
    }

    ngx_http_finalize_request(r, NGX_DONE);
    return NGX_DONE;
}


/*
 * The key header, parsed, and the hash of scope and key: NGX_OK;
 * NGX_DECLINED: no header, and none is required; NGX_ABORT: a problem
 * response is resolved (missing, invalid, no scope); NGX_ERROR.
 */

static ngx_int_t
ngx_http_idempotency_request_key(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t                         rc;
    ngx_str_t                         raw, scope;
    const char                       *reason;
    ngx_http_idempotency_loc_conf_t  *ilcf;

    ilcf = ctx->conf;

    rc = ngx_http_idempotency_find_header(r, &ilcf->header, &raw);

    if (rc == NGX_DECLINED) {
        if (!ilcf->required) {
            return NGX_DECLINED;
        }

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idempotency: request without \"%V\" header",
                      &ilcf->header);

        ctx->problem = NGX_HTTP_IDEMPOTENCY_P_MISSING;
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                     NGX_HTTP_IDEMPOTENCY_MISSING);
        return NGX_ABORT;
    }

    if (rc == NGX_ERROR) {
        reason = "the header is repeated";

    } else {
        rc = ngx_http_idempotency_parse_key(r->pool, &raw, &ctx->key,
                                            &reason);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_OK) {
            reason = NULL;
        }
    }

    if (reason == NULL && ilcf->keys == NGX_HTTP_IDEMPOTENCY_KEYS_ISSUED) {

        /* checked here, without a store round trip */

        rc = ngx_http_idempotency_issued(ilcf->store, &ctx->key, &reason);

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_DECLINED) {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "idempotency: \"%V\" header: %s", &ilcf->header,
                          reason);

            ctx->problem = NGX_HTTP_IDEMPOTENCY_P_NOT_ISSUED;
            ngx_http_idempotency_resolve(r, ctx,
                                         NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                         NGX_HTTP_IDEMPOTENCY_INVALID);
            return NGX_ABORT;
        }
    }

    if (reason) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idempotency: invalid \"%V\" header: %s",
                      &ilcf->header, reason);

        ctx->problem = NGX_HTTP_IDEMPOTENCY_P_INVALID;
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                     NGX_HTTP_IDEMPOTENCY_INVALID);
        return NGX_ABORT;
    }

    ngx_str_null(&scope);

    if (ilcf->scope) {
        if (ngx_http_complex_value(r, ilcf->scope, &scope) != NGX_OK) {
            return NGX_ERROR;
        }

        /* a configured scope names a client: never fall back to the
         * namespace every location of the store shares */

        if (scope.len == 0) {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "idempotency: \"idempotency_scope\" is empty "
                          "for this request");

            ctx->problem = NGX_HTTP_IDEMPOTENCY_P_SCOPE;
            ngx_http_idempotency_resolve(r, ctx,
                                         NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                         NGX_HTTP_IDEMPOTENCY_NOSCOPE);
            return NGX_ABORT;
        }
    }

    if (ngx_http_idempotency_key_hash(&scope, &ctx->key, ctx->key_hash)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* the error log names a key by its hash: the key may be a secret */

    ngx_hex_dump(ctx->key_id_data, ctx->key_hash,
                 NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN / 2);
    ctx->key_id.data = ctx->key_id_data;
    ctx->key_id.len = NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN;

    return NGX_OK;
}


static void
ngx_http_idempotency_body_handler(ngx_http_request_t *r)
{
    ngx_int_t                    rc;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_idempotency_get_ctx(r);

    r->write_event_handler = ngx_http_core_run_phases;

    if (ctx == NULL || ctx->phase != NGX_HTTP_IDEMPOTENCY_PH_BODY) {
        return;
    }

    rc = ngx_http_idempotency_fingerprint(r, &ctx->fp, ctx->fingerprint);

    if (rc == NGX_AGAIN) {

        /* the next slice of a temp file after the events that are ready
         * now: other connections are served in between */

        ctx->hash_ev.handler = ngx_http_idempotency_hash_handler;
        ctx->hash_ev.data = ctx;
        ctx->hash_ev.log = r->connection->log;

        ngx_post_event(&ctx->hash_ev, &ngx_posted_next_events);
        return;
    }

    if (rc != NGX_OK || ngx_http_idempotency_claim(r, ctx) != NGX_OK) {
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        ngx_http_idempotency_resume(r);
    }
}


static void
ngx_http_idempotency_hash_handler(ngx_event_t *ev)
{
    ngx_connection_t            *c;
    ngx_http_request_t          *r;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ev->data;
    r = ctx->request;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    ngx_http_idempotency_body_handler(r);
    ngx_http_run_posted_requests(c);
}


static ngx_int_t
ngx_http_idempotency_claim(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t                      rc;
    ngx_http_idempotency_op_t     *op;
    ngx_http_idempotency_claim_t   cl;

    if (!ctx->looked_up) {

        /* a completed key is replayed from a tier without MySQL */

        ctx->looked_up = 1;

        rc = ngx_http_idempotency_tier_lookup(ctx);

        if (rc == NGX_OK) {
            ngx_http_idempotency_entry_verdict(r, ctx);
            ngx_http_idempotency_resume(r);
            return NGX_OK;
        }

        if (rc == NGX_AGAIN) {
            ctx->phase = NGX_HTTP_IDEMPOTENCY_PH_CLAIM;
            r->read_event_handler = ngx_http_test_reading;
            return NGX_OK;
        }
    }

    if (ngx_http_idempotency_token(ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    cl.key_hash = ctx->key_hash;
    cl.owner = ctx->token;
    cl.fingerprint = ctx->conf->fingerprint ? ctx->fingerprint : NULL;
    cl.lease = ctx->conf->lease;
    cl.ttl = ctx->conf->ttl;

    op = ngx_http_idempotency_sql_claim(ctx->shard, ngx_cycle->log, &cl);
    if (op == NULL) {
        return NGX_ERROR;
    }

    op->handler = ngx_http_idempotency_claim_done;
    op->data = ctx;

    ctx->op = op;
    ctx->phase = NGX_HTTP_IDEMPOTENCY_PH_CLAIM;
    ctx->tries++;
    ctx->claimed = ngx_current_msec;

    /* notice a client that goes away while the store works */
    r->read_event_handler = ngx_http_test_reading;

    ngx_http_idempotency_op_run(op);

    return NGX_OK;
}


/*
 * The owner token, drawn before the request's first claim and kept for
 * its later ones: a duplicate that a tier answers never claims, and
 * RAND_bytes() is one of the dearest steps of a replay.
 */

static ngx_int_t
ngx_http_idempotency_token(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->has_token) {
        return NGX_OK;
    }

    if (RAND_bytes(ctx->token, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN) != 1) {
        return NGX_ERROR;
    }

    ctx->has_token = 1;

    return NGX_OK;
}


static void
ngx_http_idempotency_claim_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_request_t          *r;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = op->data;
    r = ctx->request;

    ctx->op = NULL;

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK
        && op->nrows == 1
        && op->nfields >= NGX_HTTP_IDEMPOTENCY_F_COUNT)
    {
        if (ngx_http_idempotency_verdict(r, ctx, op) == NGX_AGAIN) {
            return;
        }

    } else if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK
               && op->nrows == 0
               && op->affected_rows == 1)
    {
        /* the INSERT made the row: a new key, and no SELECT was run */

        ctx->tier = NGX_HTTP_IDEMPOTENCY_TIER_MYSQL;
        ngx_http_idempotency_won(r, ctx, ctx->conf->ttl,
                                 NGX_HTTP_IDEMPOTENCY_NEW);

    } else if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR
               && op->err == 1213)
    {
        if (ngx_http_idempotency_claim_lost(r, ctx) == NGX_AGAIN) {
            return;
        }

    } else if (ctx->tries - ctx->lost < NGX_HTTP_IDEMPOTENCY_NOROW_TRIES
               && op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK
               && op->nrows == 0)
    {
        /*
         * The row existed, but the owner's release deleted it between our
         * INSERT and SELECT: claiming again reads (or wins) the current
         * row.
         */

        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idempotency: claim lost a race, claiming again");

        if (ngx_http_idempotency_claim(r, ctx) == NGX_OK) {
            return;
        }

        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);

    } else {
        ngx_http_idempotency_store_failed(r, ctx, op);
    }

    ngx_http_idempotency_resume(r);
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

    ctx->lost++;

    if (ctx->lost < NGX_HTTP_IDEMPOTENCY_LOST_TRIES) {

        /* 10 ms, doubling up to 320 ms: about 1 s for all the tries */

        delay = (ngx_msec_t) 10 << ngx_min(ctx->lost - 1, 5);

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idempotency: claim lost a race at commit (1213), "
                       "claiming again in %M ms (lost %ui)", delay,
                       ctx->lost);

        ctx->phase = NGX_HTTP_IDEMPOTENCY_PH_CLAIM;
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
                  &ctx->key_id, ctx->lost);

    ctx->in_progress = 1;

    if (ngx_http_idempotency_hold(r, ctx) == NGX_AGAIN) {
        return NGX_AGAIN;
    }

    ctx->problem = NGX_HTTP_IDEMPOTENCY_P_CONFLICT;
    ctx->retry_after = 1;
    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                 NGX_HTTP_IDEMPOTENCY_CONFLICT);
    return NGX_OK;
}


static void
ngx_http_idempotency_reclaim_handler(ngx_event_t *ev)
{
    ngx_http_request_t          *r;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ev->data;
    r = ctx->request;

    if (ngx_http_idempotency_claim(r, ctx) != NGX_OK) {
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        ngx_http_idempotency_resume(r);
    }
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

    if (status == NGX_HTTP_IDEMPOTENCY_TAKEOVER) {
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
    ctx->lease.renewed = ctx->claimed;
    ctx->lease.log = r->connection->log;

    ngx_http_idempotency_lease_start(&ctx->lease);
}


static ngx_int_t
ngx_http_idempotency_verdict(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op)
{
    ngx_int_t                         state, take, ttl_s;
    ngx_str_t                        *f;
    ngx_http_idempotency_loc_conf_t  *ilcf;

    ilcf = ctx->conf;
    f = op->fields;

    state = ngx_http_idempotency_atoi(&f[NGX_HTTP_IDEMPOTENCY_F_STATE]);

    /* the retention left, by the database's clock, in whole seconds */
    ttl_s = ngx_http_idempotency_atoi(&f[NGX_HTTP_IDEMPOTENCY_F_TTL_S]);

    ctx->tier = NGX_HTTP_IDEMPOTENCY_TIER_MYSQL;

    if (ngx_http_idempotency_atoi(&f[NGX_HTTP_IDEMPOTENCY_F_MINE]) == 1) {

        /* won: an expired key, a dead owner's, or (after a retried
         * round trip) our own new row */

        take = ngx_http_idempotency_atoi(&f[NGX_HTTP_IDEMPOTENCY_F_TAKE]);

        ngx_http_idempotency_won(r, ctx, ttl_s,
                                 (op->affected_rows == 2
                                  && take == NGX_HTTP_IDEMPOTENCY_TAKE_LEASE)
                                 ? NGX_HTTP_IDEMPOTENCY_TAKEOVER
                                 : NGX_HTTP_IDEMPOTENCY_NEW);
        return NGX_OK;
    }

    if (ilcf->fingerprint
        && ngx_http_idempotency_atoi(&f[NGX_HTTP_IDEMPOTENCY_F_SAME_FP]) != 1)
    {
        ctx->problem = NGX_HTTP_IDEMPOTENCY_P_MISMATCH;
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                     NGX_HTTP_IDEMPOTENCY_MISMATCH);
        return NGX_OK;
    }

    if (state == NGX_HTTP_IDEMPOTENCY_ROW_DONE) {
        ngx_http_idempotency_mysql_replay(r, ctx, op, ttl_s);
        return NGX_OK;
    }

    if (state == NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED) {
        ctx->problem = NGX_HTTP_IDEMPOTENCY_P_UNSTORED;
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                     NGX_HTTP_IDEMPOTENCY_UNSTORED);
        return NGX_OK;
    }

    /* in progress elsewhere: hold the duplicate, or answer 409 */

    ctx->in_progress = 1;

    if (ngx_http_idempotency_hold(r, ctx) == NGX_AGAIN) {
        return NGX_AGAIN;
    }

    /*
     * A live owner renews its lease while it works, so the rest of the
     * lease says nothing about when the answer will be there: clients
     * that honour Retry-After (stripe-node does) would wait a whole lease
     * for a response ready a moment later.  A retry is one cheap claim.
     */

    ctx->problem = NGX_HTTP_IDEMPOTENCY_P_CONFLICT;
    ctx->retry_after = 1;

    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                 NGX_HTTP_IDEMPOTENCY_CONFLICT);
    return NGX_OK;
}


/* a completed row: replay its record, and give it to the tiers */

static void
ngx_http_idempotency_mysql_replay(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op,
    ngx_int_t ttl_s)
{
    ngx_buf_t                         b;
    ngx_str_t                        *f;
    const char                       *why;
    ngx_chain_t                       cl;
    ngx_http_idempotency_loc_conf_t  *ilcf;
    ngx_http_idempotency_counters_t  *counters;

    ilcf = ctx->conf;
    f = &op->fields[NGX_HTTP_IDEMPOTENCY_F_RESPONSE];

    op->keep_pool = 1;
    ctx->replay_pool = op->pool;

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

        ctx->problem = NGX_HTTP_IDEMPOTENCY_P_STORE;
        ctx->retry_after = 1;
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        return;
    }

    /*
     * later duplicates are served by the tiers; the row's fingerprint
     * is known only if this request compared it (and it matched)
     */

    if (ttl_s > 0) {
        ngx_memzero(&b, sizeof(ngx_buf_t));
        b.pos = f->data;
        b.last = f->data + f->len;
        cl.buf = &b;
        cl.next = NULL;

        ngx_http_idempotency_tier_put(ilcf->store, ctx->key_hash,
                                      ilcf->fingerprint
                                      ? NGX_HTTP_IDEMPOTENCY_ENTRY_FP : 0,
                                      ctx->fingerprint,
                                      ngx_time() + ttl_s, &cl, f->len);
    }

    counters = ngx_http_idempotency_counters(ilcf->store);
    ngx_http_idempotency_count(counters, mysql_replays);

    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_REPLAY,
                                 NGX_HTTP_IDEMPOTENCY_REPLAY);
}


/*
 * A duplicate of a key in progress elsewhere is held while the
 * idempotency_wait time lasts: woken by a completion in this worker, it
 * looks into the cache zone meanwhile and polls MySQL in delay ms.
 */

static ngx_int_t
ngx_http_idempotency_hold(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_msec_t  delay;

    if (!ctx->conf->wait
        || (ngx_msec_int_t) (ctx->wait_until - ngx_current_msec) <= 0)
    {
        return NGX_DECLINED;
    }

    ctx->poll_delay = ctx->poll_delay ? ngx_min(ctx->poll_delay * 2, 500)
                                      : 25;
    delay = ngx_min(ctx->poll_delay, ctx->wait_until - ngx_current_msec);

    ctx->wait_ev.handler = ngx_http_idempotency_wait_handler;
    ctx->wait_ev.data = ctx;
    ctx->wait_ev.log = r->connection->log;

    if (ngx_http_idempotency_tier_hold(ctx, delay) != NGX_OK) {
        return NGX_DECLINED;
    }

    ctx->phase = NGX_HTTP_IDEMPOTENCY_PH_WAIT;
    ctx->tries = 0;
    ctx->lost = 0;

    return NGX_AGAIN;
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
        ctx->problem = NGX_HTTP_IDEMPOTENCY_P_MISMATCH;
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                     NGX_HTTP_IDEMPOTENCY_MISMATCH);
        return;
    }

    ctx->record = ctx->entry.record;

    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_REPLAY,
                                 NGX_HTTP_IDEMPOTENCY_REPLAY);
}


void
ngx_http_idempotency_lookup_done(ngx_http_idempotency_ctx_t *ctx,
    ngx_int_t rc)
{
    ngx_http_request_t  *r;

    r = ctx->request;

    if (rc == NGX_OK) {
        ngx_http_idempotency_entry_verdict(r, ctx);
        ngx_http_idempotency_resume(r);
        return;
    }

    /* no tier could answer: MySQL decides */

    if (ngx_http_idempotency_claim(r, ctx) != NGX_OK) {
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        ngx_http_idempotency_resume(r);
    }
}


static void
ngx_http_idempotency_store_failed(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op)
{
    ngx_uint_t                        level;
    const char                       *what;
    ngx_http_idempotency_loc_conf_t  *ilcf;

    ilcf = ctx->conf;

    switch (op->rc) {

    case NGX_HTTP_IDEMPOTENCY_OP_OK:
        what = "the claim returned no row";
        break;

    case NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR:
        what = (op->err == 1146 || op->err == 1054)
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

    if (ctx->in_progress) {
        ngx_http_idempotency_store_failed_held(r, ctx, what);
        return;
    }

    level = (ilcf->on_store_error == NGX_HTTP_IDEMPOTENCY_STORE_PASS)
            ? NGX_LOG_WARN : NGX_LOG_ERR;

    ngx_log_error(level, r->connection->log, 0,
                  "idempotency store \"%V\" mysql=%V: claim of key %V "
                  "failed: %s%s%*s%s, %s",
                  &ilcf->store->name, &ctx->shard->name, &ctx->key_id, what,
                  op->err_text.len ? " (" : "", op->err_text.len,
                  op->err_text.data, op->err_text.len ? ")" : "",
                  ilcf->on_store_error == NGX_HTTP_IDEMPOTENCY_STORE_PASS
                  ? "passing the request unprotected"
                  : "rejecting the request");

    if (ilcf->on_store_error == NGX_HTTP_IDEMPOTENCY_STORE_PASS) {
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_FORWARD,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        return;
    }

    ctx->problem = NGX_HTTP_IDEMPOTENCY_P_STORE;
    ctx->retry_after = 1;
    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                 NGX_HTTP_IDEMPOTENCY_ERROR);
}


/*
 * A held duplicate's poll failed.  The key was seen in progress: under
 * any idempotency_on_store_error, forwarding it could run the operation
 * twice.  It goes on waiting while its wait lasts, then gets 409.
 */

static void
ngx_http_idempotency_store_failed_held(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, const char *what)
{
    /* info: a flood of held duplicates would write one line per poll */

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idempotency store \"%V\" mysql=%V: poll of key %V "
                  "failed: %s; the key was in progress, so the request is "
                  "never forwarded", &ctx->conf->store->name,
                  &ctx->shard->name, &ctx->key_id, what);

    if (ngx_http_idempotency_hold(r, ctx) == NGX_AGAIN) {
        return;
    }

    ctx->problem = NGX_HTTP_IDEMPOTENCY_P_CONFLICT;
    ctx->retry_after = 1;
    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                 NGX_HTTP_IDEMPOTENCY_CONFLICT);
}


static void
ngx_http_idempotency_resolve(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t outcome, ngx_uint_t status)
{
    ctx->outcome = outcome;
    ctx->status = status;
    ctx->phase = NGX_HTTP_IDEMPOTENCY_PH_RESOLVED;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idempotency: outcome %ui, status %ui", outcome, status);
}


static void
ngx_http_idempotency_resume(ngx_http_request_t *r)
{
    ngx_http_idempotency_ctx_t  *ctx;

    /*
     * Resume from a posted event, not from inside the store op's handler:
     * finalizing the request here could free the op's pool (kept for a
     * replay) while the pool code still looks at the op.
     */

    ctx = ngx_http_idempotency_get_ctx(r);

    ctx->resume_ev.handler = ngx_http_idempotency_resume_handler;
    ctx->resume_ev.data = r;
    ctx->resume_ev.log = r->connection->log;

    ngx_post_event(&ctx->resume_ev, &ngx_posted_events);
}


static void
ngx_http_idempotency_resume_handler(ngx_event_t *ev)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ev->data;
    c = r->connection;

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}


static ngx_int_t
ngx_http_idempotency_respond(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t  rc;

    switch (ctx->outcome) {

    case NGX_HTTP_IDEMPOTENCY_OUT_FORWARD:
        return NGX_DECLINED;

    case NGX_HTTP_IDEMPOTENCY_OUT_REPLAY:
        rc = ngx_http_idempotency_replay(r, ctx);
        break;

    case NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM:
        rc = ngx_http_idempotency_problem(r, ctx->problem,
                                          ctx->retry_after);
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
    ngx_int_t         rc;
    ngx_buf_t        *b;
    ngx_chain_t       out;
    ngx_table_elt_t  *h;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }

    if (ngx_http_idempotency_record_apply(r, &ctx->record) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Idempotent-Replayed");
    ngx_str_set(&h->value, "true");
    h->lowcase_key = NULL;

    if (ctx->record.body.len == 0) {
        rc = ngx_http_send_header(r);

        if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
            return rc;
        }

        return ngx_http_send_special(r, NGX_HTTP_LAST);
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    /* the body stays in the store op's pool until the request ends */

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = ctx->record.body.data;
    b->last = b->pos + ctx->record.body.len;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


static void
ngx_http_idempotency_wait_handler(ngx_event_t *ev)
{
    ngx_int_t                    rc;
    ngx_http_request_t          *r;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ev->data;
    r = ctx->request;

    rc = ngx_http_idempotency_tier_held(ctx);

    if (rc == NGX_OK) {
        /* the owner completed in this nginx: the cache zone has it */
        ngx_http_idempotency_entry_verdict(r, ctx);
        ngx_http_idempotency_resume(r);
        return;
    }

    if (rc == NGX_AGAIN) {
        return;
    }

    if (ngx_http_idempotency_claim(r, ctx) != NGX_OK) {
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        ngx_http_idempotency_resume(r);
    }
}


void
ngx_http_idempotency_handed_over(ngx_http_idempotency_ctx_t *ctx)
{
    ctx->owner = 0;

    ngx_http_idempotency_lease_stop(&ctx->lease);
}


void
ngx_http_idempotency_release(ngx_http_idempotency_ctx_t *ctx,
    const char *why)
{
    if (!ctx->owner) {
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "idempotency: releasing key \"%V\": %s", &ctx->key, why);

    ngx_http_idempotency_handed_over(ctx);
    ngx_http_idempotency_release_key(ctx->shard, ctx->key_hash, ctx->token);
}


static void
ngx_http_idempotency_release_key(ngx_http_idempotency_shard_t *shard,
    u_char *key_hash, u_char *token)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_release(shard, ngx_cycle->log, key_hash,
                                          token);
    if (op == NULL) {
        return;
    }

    op->handler = ngx_http_idempotency_release_done;
    op->data = shard;

    ngx_http_idempotency_op_run(op);
}


static void
ngx_http_idempotency_release_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_shard_t  *shard;

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK) {
        return;
    }

    shard = op->data;

    ngx_log_error(NGX_LOG_ERR, op->log, 0,
                  "idempotency store \"%V\" mysql=%V: release failed (%ui): "
                  "the key stays in progress until its lease ends",
                  &shard->store->name, &shard->name, op->rc);
}


static void
ngx_http_idempotency_cleanup(void *data)
{
    ngx_http_idempotency_ctx_t  *ctx = data;

    ngx_connection_t               *c;
    ngx_http_idempotency_op_t      *op;
    ngx_http_idempotency_orphan_t  *o;

    ngx_http_idempotency_metrics_request(ctx->conf->store, ctx->status,
                                         ctx->tier);

    if (ctx->wait_ev.timer_set) {
        ngx_del_timer(&ctx->wait_ev);
    }

    if (ctx->resume_ev.posted) {
        ngx_delete_posted_event(&ctx->resume_ev);
    }

    if (ctx->hash_ev.posted) {
        ngx_delete_posted_event(&ctx->hash_ev);
    }

    /* a Redis lookup in flight, the waiter list, a posted wakeup */
    ngx_http_idempotency_tier_cleanup(ctx);

    if (ctx->keep_ev.timer_set) {
        ngx_del_timer(&ctx->keep_ev);
    }

    ngx_http_idempotency_lease_stop(&ctx->lease);

    op = ctx->op;

    if (op) {
        /* the client left while its claim was in flight: the claim may
         * still win, and then the key must be given back */

        o = ngx_palloc(op->pool, sizeof(ngx_http_idempotency_orphan_t));

        if (o == NULL) {
            ngx_http_idempotency_op_detach(op);

        } else {
            o->shard = ctx->shard;
            ngx_memcpy(o->key_hash, ctx->key_hash,
                       NGX_HTTP_IDEMPOTENCY_HASH_LEN);
            ngx_memcpy(o->token, ctx->token, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);

            op->handler = ngx_http_idempotency_orphan_done;
            op->data = o;
        }

        ctx->op = NULL;
    }

    c = ctx->request->connection;

    if (ctx->owner && (c->error || c->timedout)) {

        /*
         * The client is gone and the response did not reach its end: the
         * upstream failed after the client left, a client that stopped
         * reading hit send_timeout (nginx then drains and cuts the
         * upstream), or a content handler that is not an upstream stopped
         * with its client.  Whether it executed is unknown.  A known
         * status is recorded as executed-not-stored; otherwise the key
         * stays in progress, unrenewed, until its lease ends (as when an
         * owner dies).  Releasing it would invite a second execution.
         */

        if (ctx->capturing) {
            ngx_http_idempotency_filter_abandon(ctx);

        } else {
            ngx_log_error(NGX_LOG_INFO, c->log, 0,
                          "idempotency: client closed the connection while "
                          "key %V was upstream: the key stays in "
                          "progress until its lease ends", &ctx->key_id);
            ngx_http_idempotency_handed_over(ctx);
        }
    }

    ngx_http_idempotency_release(ctx, "request ended before its response "
                                      "was complete");

    /* a completion write goes on without the request */
    ngx_http_idempotency_complete_detach(ctx);

    if (ctx->capture) {
        ngx_destroy_pool(ctx->capture);
        ctx->capture = NULL;
    }

    if (ctx->replay_pool) {
        ngx_destroy_pool(ctx->replay_pool);
        ctx->replay_pool = NULL;
    }
}


static void
ngx_http_idempotency_orphan_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_orphan_t  *o;

    o = op->data;

    if (op->rc != NGX_HTTP_IDEMPOTENCY_OP_OK) {
        return;
    }

    /* a new row (no SELECT was run), or a row the SELECT says is ours */

    if ((op->nrows == 0 && op->affected_rows == 1)
        || (op->nrows == 1
            && op->nfields >= NGX_HTTP_IDEMPOTENCY_F_COUNT
            && ngx_http_idempotency_atoi(
                   &op->fields[NGX_HTTP_IDEMPOTENCY_F_MINE]) == 1))
    {
        ngx_http_idempotency_release_key(o->shard, o->key_hash, o->token);
    }
}


ngx_http_idempotency_ctx_t *
ngx_http_idempotency_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t          *cln;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_idempotency_module);

    if (ctx || !(r->internal || r->error_page)) {
        return ctx;
    }

    /* an internal redirect zeroed r->ctx; the cleanup still has it */

    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_idempotency_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_idempotency_module);
            return ctx;
        }
    }

    return NULL;
}


ngx_http_idempotency_shard_t *
ngx_http_idempotency_shard(ngx_http_idempotency_store_t *store,
    u_char *key_hash)
{
    uint32_t                       h;
    ngx_http_idempotency_shard_t  *shards;

    shards = store->shards.elts;

    if (store->shards.nelts == 1) {
        return &shards[0];
    }

    /* the first four bytes of the key hash, big-endian, modulo the
     * number of servers: stable for a given ordered server list */

    h = ngx_http_idempotency_get_be(key_hash, 4);

    return &shards[h % store->shards.nelts];
}


static ngx_int_t
ngx_http_idempotency_atoi(ngx_str_t *s)
{
    if (s->data == NULL || s->len == 0) {
        return -1;
    }

    return ngx_atoi(s->data, s->len);
}

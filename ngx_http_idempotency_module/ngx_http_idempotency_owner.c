
/*
 * ngx_http_idempotency_module: the claim a request holds.
 *
 *     DELETE FROM t WHERE key_hash = ? AND state = 0 AND owner = ?
 *
 * A release is conditional on the owner token, so it never removes a
 * row that another request has taken over, or one that is completed.
 */


#include "ngx_http_idempotency_owner.h"
#include "ngx_http_idempotency_sql.h"


/* what an orphaned claim needs to give the key back */
typedef struct {
    ngx_http_idempotency_shard_t  *shard;
    u_char                         key_hash[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                         token[NGX_HTTP_IDEMPOTENCY_TOKEN_LEN];
} ngx_http_idempotency_orphan_t;


static void ngx_http_idempotency_release_key(
    ngx_http_idempotency_shard_t *shard, u_char *key_hash, u_char *token);
static void ngx_http_idempotency_release_done(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_orphan_done(ngx_http_idempotency_op_t *op);


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


void
ngx_http_idempotency_orphan(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_orphan_t  *o;

    /* without a token, nothing the request sent can have won */

    o = ctx->has_token
        ? ngx_palloc(op->pool, sizeof(ngx_http_idempotency_orphan_t))
        : NULL;

    if (o == NULL) {
        ngx_http_idempotency_op_detach(op);
        return;
    }

    o->shard = ctx->shard;
    ngx_memcpy(o->key_hash, ctx->key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    ngx_memcpy(o->token, ctx->token, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);

    op->handler = ngx_http_idempotency_orphan_done;
    op->data = o;
}


static void
ngx_http_idempotency_orphan_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_orphan_t  *o;

    o = op->data;

    /*
     * A READ tells whose the row is.  A write may have made it ours even
     * when it does not say so (a timeout, a lost connection, or 0 rows
     * from a batchable INSERT, which may have shared its statement with a
     * key that exists): the release deletes the row only if it is ours
     * and in progress, so it is sent unless the write alone said no.
     */

    if (op->stmt == NGX_HTTP_IDEMPOTENCY_STMT_READ
        ? ngx_http_idempotency_sql_row_owned(op, o->token)
        : !(op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK && op->affected_rows == 0
            && op->batch == NULL))
    {
        ngx_http_idempotency_release_key(o->shard, o->key_hash, o->token);
    }
}

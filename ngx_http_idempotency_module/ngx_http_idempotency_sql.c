
/*
 * ngx_http_idempotency_module: the statements the lifecycle sends.
 *
 * Every statement that changes a row is conditional on the owner token,
 * so running one twice (a retry after a lost connection) is harmless.
 * Times are the database's (UTC_TIMESTAMP), never the nginx host's.
 */


#include "ngx_http_idempotency_sql.h"
#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_record.h"


#define NGX_HTTP_IDEMPOTENCY_HEX(n)   (sizeof("X''") - 1 + 2 * (n))


static u_char *ngx_http_idempotency_owned(u_char *p, u_char *key_hash,
    u_char *owner);
static u_char *ngx_http_idempotency_hex(u_char *p, u_char *src, size_t len);


/*
 * One round trip for every verdict.  The INSERT claims a new key; on a
 * duplicate, ON DUPLICATE KEY UPDATE takes the row over only when it is
 * past retention (a new operation; never while its owner still holds a
 * live lease) or in progress with a dead lease and the same fingerprint
 * (the owner died).  @idem_take is computed in the
 * first assignment, from the row as it was, and the others reuse it.
 * The SELECT then tells the caller who holds the key and, for a
 * completed key with the same fingerprint, returns the stored response
 * (a mismatch is answered 422 without reading it).  When the INSERT made a
 * new row (ROW_COUNT() is 1), the caller holds it and knows all the
 * SELECT would say: the condition is constant, so MariaDB answers with
 * an empty result without reading the table.
 */

static const char  ngx_http_idempotency_claim_sql[] =
    "INSERT INTO `%V` (key_hash, state, owner, fingerprint, created_at, "
    "lease_until, expires_at) VALUES (%s, 0, %s, %s, UTC_TIMESTAMP(3), "
    "UTC_TIMESTAMP(3) + INTERVAL %M000 MICROSECOND, "
    "UTC_TIMESTAMP(3) + INTERVAL %T SECOND) "
    "ON DUPLICATE KEY UPDATE "
    "owner = IF(@idem_take := CASE "
    "WHEN expires_at <= UTC_TIMESTAMP(3) "
    "AND (state <> 0 OR lease_until <= UTC_TIMESTAMP(3)) THEN 1 "
    "WHEN state = 0 AND lease_until <= UTC_TIMESTAMP(3) AND %s THEN 2 "
    "ELSE 0 END, VALUES(owner), owner), "
    "state = IF(@idem_take, 0, state), "
    "fingerprint = IF(@idem_take, VALUES(fingerprint), fingerprint), "
    "created_at = IF(@idem_take = 1, VALUES(created_at), created_at), "
    "lease_until = IF(@idem_take, VALUES(lease_until), lease_until), "
    "expires_at = IF(@idem_take = 1, VALUES(expires_at), expires_at), "
    "status = IF(@idem_take, NULL, status), "
    "response = IF(@idem_take, NULL, response); "
    "SELECT state, owner = %s, %s, "
    "GREATEST(TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(3), expires_at), 0), "
    "@idem_take, status, IF(%s, response, NULL) FROM `%V` "
    "WHERE key_hash = %s "
    "AND ROW_COUNT() <> 1";


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_claim(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, ngx_http_idempotency_claim_t *cl)
{
    size_t                      size;
    ngx_str_t                  *table;
    ngx_http_idempotency_op_t  *op;
    u_char                      kh[NGX_HTTP_IDEMPOTENCY_HEX(32) + 1];
    u_char                      ow[NGX_HTTP_IDEMPOTENCY_HEX(16) + 1];
    u_char                      fp[NGX_HTTP_IDEMPOTENCY_HEX(32) + 1];
    u_char                      fpeq[sizeof("fingerprint = ")
                                     + NGX_HTTP_IDEMPOTENCY_HEX(32)];

    table = &shard->store->table;

    *ngx_http_idempotency_hex(kh, cl->key_hash, 32) = '\0';
    *ngx_http_idempotency_hex(ow, cl->owner, 16) = '\0';

    if (cl->fingerprint) {
        *ngx_http_idempotency_hex(fp, cl->fingerprint, 32) = '\0';
        *ngx_sprintf(fpeq, "fingerprint = %s", fp) = '\0';

    } else {
        /* stored as zeros and never compared */
        fp[0] = 'X';
        fp[1] = '\'';
        ngx_memset(fp + 2, '0', 64);
        fp[66] = '\'';
        fp[67] = '\0';
        fpeq[0] = '1';
        fpeq[1] = '\0';
    }

    size = sizeof(ngx_http_idempotency_claim_sql) + 2 * table->len
           + 4 * sizeof(kh) + 2 * sizeof(ow) + 3 * sizeof(fpeq)
           + sizeof(fp) + 2 * NGX_INT64_LEN;

    op = ngx_http_idempotency_op_create(shard, log, size);
    if (op == NULL) {
        return NULL;
    }

    op->name = "claim";
    op->kind = NGX_HTTP_IDEMPOTENCY_OP_CLAIM;
    op->sql.len = ngx_sprintf(op->sql.data, ngx_http_idempotency_claim_sql,
                              table, kh, ow, fp, cl->lease, cl->ttl,
                              fpeq, ow, fpeq, fpeq, table, kh)
                  - op->sql.data;

    return op;
}


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_renew(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *key_hash, u_char *owner, ngx_msec_t lease)
{
    u_char                     *p;
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_op_create(shard, log, 256
                                        + shard->store->table.len);
    if (op == NULL) {
        return NULL;
    }

    op->name = "renew";
    op->kind = NGX_HTTP_IDEMPOTENCY_OP_RENEW;

    p = ngx_sprintf(op->sql.data, "UPDATE `%V` SET lease_until = "
                    "UTC_TIMESTAMP(3) + INTERVAL %M000 MICROSECOND "
                    "WHERE key_hash = ", &shard->store->table, lease);
    p = ngx_http_idempotency_owned(p, key_hash, owner);

    op->sql.len = p - op->sql.data;

    return op;
}


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_release(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *key_hash, u_char *owner)
{
    u_char                     *p;
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_op_create(shard, log, 256
                                        + shard->store->table.len);
    if (op == NULL) {
        return NULL;
    }

    op->name = "release";
    op->kind = NGX_HTTP_IDEMPOTENCY_OP_RELEASE;

    p = ngx_sprintf(op->sql.data, "DELETE FROM `%V` WHERE key_hash = ",
                    &shard->store->table);
    p = ngx_http_idempotency_owned(p, key_hash, owner);

    op->sql.len = p - op->sql.data;

    return op;
}


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_max_packet(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log)
{
    ngx_http_idempotency_op_t  *op;

    /* a pooled session keeps the value it had when it connected */
    static ngx_str_t  sql = ngx_string("SELECT LEAST(@@max_allowed_packet, "
                                       "@@global.max_allowed_packet)");

    op = ngx_http_idempotency_op_create(shard, log, 0);
    if (op == NULL) {
        return NULL;
    }

    op->name = "max_allowed_packet";
    op->sql = sql;

    return op;
}


/*
 * The purge lease is a reserved row of the key table (key hash all zeros,
 * never the SHA-256 of a real key, expiring in 9999), so that purging
 * needs no other table or privilege and works the same on Galera, where
 * GET_LOCK() is refused.  The statement takes the row over when its lease
 * has ended or when it is ours already; SELECT tells which.
 */

static const char  ngx_http_idempotency_purge_lease_sql[] =
    "SET @idem_purge := 1; "
    "INSERT INTO `%V` (key_hash, state, owner, fingerprint, created_at, "
    "lease_until, expires_at) VALUES (%s, 0, %s, %s, UTC_TIMESTAMP(3), "
    "UTC_TIMESTAMP(3) + INTERVAL %M000 MICROSECOND, '9999-12-31') "
    "ON DUPLICATE KEY UPDATE "
    "owner = IF(@idem_purge := (owner = VALUES(owner) "
    "OR lease_until <= UTC_TIMESTAMP(3)), VALUES(owner), owner), "
    "lease_until = IF(@idem_purge, VALUES(lease_until), lease_until); "
    "SELECT @idem_purge";


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_purge_lease(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *owner, ngx_msec_t lease)
{
    size_t                      size;
    ngx_http_idempotency_op_t  *op;
    u_char                      ow[NGX_HTTP_IDEMPOTENCY_HEX(16) + 1];
    u_char                      zero[NGX_HTTP_IDEMPOTENCY_HEX(32) + 1];
    u_char                      nul[NGX_HTTP_IDEMPOTENCY_HASH_LEN];

    ngx_memzero(nul, sizeof(nul));

    *ngx_http_idempotency_hex(ow, owner, 16) = '\0';
    *ngx_http_idempotency_hex(zero, nul, sizeof(nul)) = '\0';

    size = sizeof(ngx_http_idempotency_purge_lease_sql)
           + shard->store->table.len + 2 * sizeof(zero) + sizeof(ow)
           + NGX_INT64_LEN;

    op = ngx_http_idempotency_op_create(shard, log, size);
    if (op == NULL) {
        return NULL;
    }

    op->name = "purge lease";
    op->sql.len = ngx_sprintf(op->sql.data,
                              ngx_http_idempotency_purge_lease_sql,
                              &shard->store->table, zero, ow, zero, lease)
                  - op->sql.data;

    return op;
}


/*
 * One batch: the oldest expired rows, never a key whose owner still holds
 * a live lease.  InnoDB re-reads each row it locks, so a row reclaimed by
 * a claim in the meantime no longer matches and stays.
 */

ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_purge(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, ngx_uint_t batch)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_op_create(shard, log, 256
                                        + shard->store->table.len);
    if (op == NULL) {
        return NULL;
    }

    op->name = "purge";
    op->kind = NGX_HTTP_IDEMPOTENCY_OP_PURGE;
    op->sql.len = ngx_sprintf(op->sql.data,
                              "DELETE FROM `%V` "
                              "WHERE expires_at <= UTC_TIMESTAMP(3) "
                              "AND (state <> 0 "
                              "OR lease_until <= UTC_TIMESTAMP(3)) "
                              "ORDER BY expires_at LIMIT %ui",
                              &shard->store->table, batch)
                  - op->sql.data;

    return op;
}


/*
 * The record goes in as one hex literal: no byte of the response is ever
 * read as SQL text, whatever the session's character set and sql_mode,
 * and the statement's size is known before it is built.
 */

ngx_int_t
ngx_http_idempotency_sql_complete(ngx_pool_t *pool,
    ngx_http_idempotency_store_t *store, u_char *key_hash, u_char *owner,
    ngx_uint_t status, ngx_str_t *head, ngx_chain_t *body, size_t body_len,
    ngx_str_t *sql)
{
    u_char       *p;
    size_t        size;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;
    u_char        blen[4];

    size = 256 + store->table.len;

    if (head) {
        size += NGX_HTTP_IDEMPOTENCY_HEX(head->len + sizeof(blen) + body_len);
    }

    p = ngx_pnalloc(pool, size);
    if (p == NULL) {
        return NGX_ERROR;
    }

    sql->data = p;

    p = ngx_sprintf(p, "UPDATE `%V` SET state = %d, status = %ui, "
                    "lease_until = UTC_TIMESTAMP(3), response = ",
                    &store->table,
                    head ? NGX_HTTP_IDEMPOTENCY_ROW_DONE
                         : NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED,
                    status);

    if (head) {
        *p++ = 'X';
        *p++ = '\'';
        p = ngx_hex_dump(p, head->data, head->len);

        ngx_http_idempotency_record_body_len(blen, body_len);
        p = ngx_hex_dump(p, blen, sizeof(blen));

        for (cl = body; cl; cl = cl->next) {
            b = cl->buf;
            p = ngx_hex_dump(p, b->pos, b->last - b->pos);
        }

        *p++ = '\'';

    } else {
        p = ngx_cpymem(p, "NULL", 4);
    }

    p = ngx_cpymem(p, " WHERE key_hash = ", 18);
    p = ngx_http_idempotency_hex(p, key_hash, 32);
    p = ngx_cpymem(p, " AND owner = ", 13);
    p = ngx_http_idempotency_hex(p, owner, 16);

    sql->len = p - sql->data;

    return NGX_OK;
}


/* the key's row while it is in progress and held by owner */

static u_char *
ngx_http_idempotency_owned(u_char *p, u_char *key_hash, u_char *owner)
{
    p = ngx_http_idempotency_hex(p, key_hash, 32);
    p = ngx_cpymem(p, " AND state = 0 AND owner = ", 27);

    return ngx_http_idempotency_hex(p, owner, 16);
}


static u_char *
ngx_http_idempotency_hex(u_char *p, u_char *src, size_t len)
{
    *p++ = 'X';
    *p++ = '\'';
    p = ngx_hex_dump(p, src, len);
    *p++ = '\'';

    return p;
}

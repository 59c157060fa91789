
/*
 * ngx_http_idempotency_module: the statements the lifecycle sends.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_SQL_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_SQL_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_mysql.h"


/* the columns of the row the claim returns */
#define NGX_HTTP_IDEMPOTENCY_F_STATE      0
#define NGX_HTTP_IDEMPOTENCY_F_MINE       1
#define NGX_HTTP_IDEMPOTENCY_F_SAME_FP    2
#define NGX_HTTP_IDEMPOTENCY_F_TTL_S      3
#define NGX_HTTP_IDEMPOTENCY_F_TAKE       4
#define NGX_HTTP_IDEMPOTENCY_F_STATUS     5
#define NGX_HTTP_IDEMPOTENCY_F_RESPONSE   6
#define NGX_HTTP_IDEMPOTENCY_F_COUNT      7

/* "take" when the claim updated an existing row */
#define NGX_HTTP_IDEMPOTENCY_TAKE_EXPIRED 1
#define NGX_HTTP_IDEMPOTENCY_TAKE_LEASE   2


typedef struct {
    u_char       *key_hash;
    u_char       *owner;
    u_char       *fingerprint;     /* NULL: fingerprints are not compared */
    ngx_msec_t    lease;
    time_t        ttl;
} ngx_http_idempotency_claim_t;


ngx_http_idempotency_op_t *ngx_http_idempotency_sql_claim(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log,
    ngx_http_idempotency_claim_t *cl);

ngx_http_idempotency_op_t *ngx_http_idempotency_sql_renew(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, u_char *key_hash,
    u_char *owner, ngx_msec_t lease);

ngx_http_idempotency_op_t *ngx_http_idempotency_sql_release(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, u_char *key_hash,
    u_char *owner);

/* the server's max_allowed_packet, in one field */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_max_packet(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log);

/* takes or renews the purge lease; returns one field, "1" when held */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_purge_lease(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, u_char *owner,
    ngx_msec_t lease);

/* deletes up to batch expired rows; op->affected_rows tells how many */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_purge(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, ngx_uint_t batch);

/*
 * The completion UPDATE, built in pool: with head == NULL the response is
 * recorded as executed but not stored.
 */
ngx_int_t ngx_http_idempotency_sql_complete(ngx_pool_t *pool,
    ngx_http_idempotency_store_t *store, u_char *key_hash, u_char *owner,
    ngx_uint_t status, ngx_str_t *head, ngx_chain_t *body, size_t body_len,
    ngx_str_t *sql);


#endif /* _NGX_HTTP_IDEMPOTENCY_SQL_H_INCLUDED_ */


/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: every statement the module sends.
 *
 * With the op API (mysql.h) this is the store's one door: the other files
 * ask for an op by what it does, run it, and read its rows and its
 * outcome (op->rc, op->cause), never a statement's text or a server's
 * code; a second store would plug in here.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_SQL_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_SQL_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_mysql.h"


/* the prepared statements: slots of a connection (mysql.h) */
#define NGX_HTTP_IDEMPOTENCY_STMT_CLAIM     1   /* INSERT IGNORE */
#define NGX_HTTP_IDEMPOTENCY_STMT_READ      2   /* SELECT of the row */
#define NGX_HTTP_IDEMPOTENCY_STMT_TAKE      3   /* conditional UPDATE */
#define NGX_HTTP_IDEMPOTENCY_STMT_COMPLETE  4

/* the columns of the row the claim's READ returns */
#define NGX_HTTP_IDEMPOTENCY_F_KEY        0
#define NGX_HTTP_IDEMPOTENCY_F_STATE      1
#define NGX_HTTP_IDEMPOTENCY_F_OWNER      2
#define NGX_HTTP_IDEMPOTENCY_F_FP         3
#define NGX_HTTP_IDEMPOTENCY_F_TTL_S      4   /* retention left, s */
#define NGX_HTTP_IDEMPOTENCY_F_EXPIRED    5   /* past retention, no lease */
#define NGX_HTTP_IDEMPOTENCY_F_DEAD       6   /* in progress, lease ended */
#define NGX_HTTP_IDEMPOTENCY_F_STATUS     7
#define NGX_HTTP_IDEMPOTENCY_F_EPOCH      8   /* of the last claim */
#define NGX_HTTP_IDEMPOTENCY_F_RESPONSE   9   /* completed, unexpired */
#define NGX_HTTP_IDEMPOTENCY_F_COUNT      10  /* at least */
#define NGX_HTTP_IDEMPOTENCY_F_LIFE       10  /* store->life: the token of
                                                 the life's first claim */

/*
 * What a release (the module's, or an operator's) sets: the row is free
 * (ROW_RELEASED) and nobody's, so that neither a renewal nor a completion
 * of the owner it had changes it again; its epoch and expires_at stay, so
 * that the next claim goes on counting epochs and the purge keeps the row
 * until the key's retention ends.  A token is 16 random bytes: never
 * all zeros in practice.
 */
#define NGX_HTTP_IDEMPOTENCY_SQL_RELEASE                                     \
    "state = 4, owner = X'00000000000000000000000000000000', "              \
    "lease_until = UTC_TIMESTAMP(3), status = NULL, response = NULL"

/* "take": the row may be taken over, and why */
#define NGX_HTTP_IDEMPOTENCY_TAKE_EXPIRED 1   /* released, or past retention */
#define NGX_HTTP_IDEMPOTENCY_TAKE_LEASE   2
#define NGX_HTTP_IDEMPOTENCY_TAKE_FENCED  3   /* unknown, its epoch fenced */
#define NGX_HTTP_IDEMPOTENCY_TAKE_REDRIVE 4   /* unknown, driven again */


typedef struct {
    u_char       *key_hash;
    u_char       *owner;
    u_char       *fingerprint;     /* NULL: fingerprints are not compared */
    ngx_msec_t    lease;
    time_t        ttl;
    ngx_uint_t    epoch;           /* TAKE: the epoch the READ saw */
    ngx_uint_t    fenced;          /* TAKE: that epoch was fenced */
} ngx_http_idempotency_claim_t;


/* one step of a claim: STMT_CLAIM, STMT_READ or STMT_TAKE */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_claim(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, ngx_uint_t stmt,
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
 * The completion UPDATE: the row's final state (ROW_DONE with the record;
 * with record == NULL the response is recorded as executed but not
 * stored), or ROW_UNSTORED, ROW_UNKNOWN.  The record is not copied: it
 * must stay until the op's handler runs.
 */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_complete(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, u_char *key_hash,
    u_char *owner, ngx_uint_t state, ngx_uint_t status, ngx_str_t *record);

/*
 * KILL of a server thread, KILL QUERY of its statement; the count of its
 * PROCESSLIST rows (0: gone)
 */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_kill(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, ngx_uint_t thread,
    ngx_uint_t query);
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_running(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, ngx_uint_t thread);

/* the columns of the fence's row: the marker's state, the result */
#define NGX_HTTP_IDEMPOTENCY_FENCE_F_STATE    0
#define NGX_HTTP_IDEMPOTENCY_FENCE_F_RESULT   1

/* the fence's state of a marker, and the backend's */
#define NGX_HTTP_IDEMPOTENCY_MARK_EXECUTED    1
#define NGX_HTTP_IDEMPOTENCY_MARK_FENCED      2

/*
 * The fence of a marker (a key's life) and epoch in the marker table;
 * lock_wait, in whole seconds (0: none), bounds the wait for a backend's
 * uncommitted marker, for this statement only
 */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_fence(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, ngx_str_t *table,
    u_char *marker, ngx_uint_t epoch, ngx_uint_t lock_wait);

/*
 * The key ran, by the backend's marker of epoch: ROW_EXECUTED, its lease
 * for live ms more (a live owner's completion may still come)
 */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_executed(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, u_char *key_hash,
    ngx_uint_t epoch, ngx_str_t *result, ngx_msec_t live);

/*
 * A find: the key's row at epoch, which its backend's marker says ran,
 * becomes owner's, in progress for lease, at the same epoch, so that the
 * backend's own record of the answer becomes the key's.  Only while the
 * row is still of that epoch and nobody else's: unknown, released, or in
 * progress with a dead lease.  One row changed: it is owner's.
 */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_find(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, u_char *key_hash,
    u_char *owner, ngx_uint_t epoch, ngx_msec_t lease);

/* the key's state, and whether owner holds it ("1" or "0") */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_owner(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, u_char *key_hash,
    u_char *owner);

/* the columns of an operator's row (admin.c), and their count */
#define NGX_HTTP_IDEMPOTENCY_ADMIN_F_HASH     0
#define NGX_HTTP_IDEMPOTENCY_ADMIN_F_STATE    1
#define NGX_HTTP_IDEMPOTENCY_ADMIN_F_CREATED  3
#define NGX_HTTP_IDEMPOTENCY_ADMIN_F_VERSION  10
#define NGX_HTTP_IDEMPOTENCY_ADMIN_F_COUNT    11

/* an operator's read: the key's row, or up to rows keys of a state */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_admin_show(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, u_char *key_hash);
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_admin_list(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, ngx_uint_t state,
    ngx_uint_t rows);

/*
 * An operator's change: the UPDATE that releases a key in progress or of
 * unknown outcome (completed: a completed key, or one its backend's fence
 * marker says ran) while its row is still at
 * version, then the row.  A version is sent as it is, so the caller lets
 * through only one as GET shows it: digits, A-F and "-".
 */
ngx_http_idempotency_op_t *ngx_http_idempotency_sql_admin_change(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, u_char *key_hash,
    ngx_uint_t completed, ngx_str_t *version);

/* a result field is these bytes; its number (-1: NULL or empty) */
ngx_uint_t ngx_http_idempotency_field_is(ngx_str_t *f, u_char *data,
    size_t len);
ngx_int_t ngx_http_idempotency_field_int(ngx_str_t *f);

/* a READ returned the key's row, and its owner is token */
ngx_uint_t ngx_http_idempotency_sql_row_owned(ngx_http_idempotency_op_t *op,
    u_char *token);


#endif /* _NGX_HTTP_IDEMPOTENCY_SQL_H_INCLUDED_ */

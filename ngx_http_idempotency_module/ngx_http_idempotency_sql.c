
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: every statement the module sends: the
 * lifecycle's, the purge's and the operator API's.
 *
 * Every statement that changes a row is conditional on the owner token,
 * so running one twice (a retry after a lost connection) is harmless.
 * Times are the database's (UTC_TIMESTAMP), never the nginx host's.
 */


#include "ngx_http_idempotency_sql.h"
#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_record.h"


#define NGX_HTTP_IDEMPOTENCY_HEX(n)   (sizeof("X''") - 1 + 2 * (n))


static ngx_http_idempotency_op_t *ngx_http_idempotency_sql_text(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, const char *name,
    ngx_uint_t kind);
static ngx_http_idempotency_op_t *ngx_http_idempotency_sql_sized(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, const char *name,
    size_t size);
static ngx_http_idempotency_op_t *ngx_http_idempotency_admin_text(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, size_t extra);
static u_char *ngx_http_idempotency_owned(u_char *p, u_char *key_hash,
    u_char *owner);
static u_char *ngx_http_idempotency_hex(u_char *p, u_char *src, size_t len);


/*
 * The claim's statements, prepared once per connection (mysql.c) and
 * executed with the key, owner and fingerprint bound as bytes.  None
 * uses VALUES() in ON DUPLICATE KEY UPDATE or a user variable, which
 * MySQL 8 deprecates; docs/design.md, "Servers".
 *
 * A first request is one INSERT IGNORE: a new row is ours (one affected
 * row), and nothing is read.  A key that exists is read by a point
 * SELECT on the primary key, without a row lock or undo; its row tells
 * (claim.c) who holds the key, whether the key may be taken over (past
 * retention and not held by a live lease: a new operation; or in
 * progress with a dead lease and the same fingerprint: the owner died),
 * and, for a completed key, the stored response (never read for a key in
 * progress or an expired key).  A takeover is an UPDATE conditional on
 * the same tests, so of two requests taking the same row over only one
 * changes it.
 *
 * A fingerprint bound as NULL compares as equal: the location does not
 * compare fingerprints (and stores zeros).
 */

/* free for a new operation: released (4, ROW_RELEASED), or past retention
 * and not held by a live lease */
#define NGX_HTTP_IDEMPOTENCY_SQL_EXPIRED                                     \
    "(state = 4 OR expires_at <= UTC_TIMESTAMP(3) "                          \
    "AND (state <> 0 OR lease_until <= UTC_TIMESTAMP(3)))"

/* a TAKE of a free row starts a new operation, and its retention */
#define NGX_HTTP_IDEMPOTENCY_SQL_NEW                                         \
    "state = 4 OR expires_at <= UTC_TIMESTAMP(3)"

/*
 * Retention ends on a whole second, up to one second after
 * idempotency_ttl: the keys claimed in one second then lie in key_hash
 * order among themselves (the primary key is (expires_at, key_hash)),
 * so that concurrent claims and their completions write across that
 * second's pages rather than all on the table's last one, whose latch
 * they would take in turn (bench/sqlcost.sh: half the context switches
 * of MariaDB per first request; docs/benchmarks.md).
 */
#define NGX_HTTP_IDEMPOTENCY_SQL_RETAIN                                      \
    "UTC_TIMESTAMP() + INTERVAL 1 SECOND + INTERVAL ? SECOND"

/*
 * A completion that lands after the key's retention has ended (the
 * request outlived idempotency_ttl) keeps the answer for a retry: its
 * retention starts again from now, as long as the claim's was
 * (expires_at - created_at is the claim's idempotency_ttl).  Within
 * retention, expires_at is left as it is, and its index untouched.
 */
#define NGX_HTTP_IDEMPOTENCY_SQL_KEEP                                        \
    "expires_at = IF(expires_at <= UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) "      \
    "+ INTERVAL TIMESTAMPDIFF(MICROSECOND, created_at, expires_at) "         \
    "MICROSECOND, expires_at)"

#define NGX_HTTP_IDEMPOTENCY_SQL_DEAD                                        \
    "state = 0 AND lease_until <= UTC_TIMESTAMP(3) "                         \
    "AND IFNULL(fingerprint = ?, 1)"


/*
 * A piece of a statement's text: once, or n times joined by sep; always
 * (ALWAYS), or only for a store whose keys have a life (LIFE: the
 * column of the fence's marker, NGX_HTTP_IDEMPOTENCY_F_LIFE) or only for
 * one whose keys have none (NO_LIFE)
 */
typedef struct {
    const char                    *text;
    const char                    *sep;
    ngx_uint_t                     life;
} ngx_http_idempotency_part_t;

#define NGX_HTTP_IDEMPOTENCY_ALWAYS   0
#define NGX_HTTP_IDEMPOTENCY_LIFE     1
#define NGX_HTTP_IDEMPOTENCY_NO_LIFE  2


static ngx_uint_t ngx_http_idempotency_part_skip(
    ngx_http_idempotency_store_t *store, ngx_http_idempotency_part_t *part);


typedef struct {
    ngx_http_idempotency_part_t   *one;      /* the statement of one op */
    ngx_http_idempotency_part_t   *many;     /* of n ops; NULL: never */
    ngx_http_idempotency_batch_pt  batch;
    const char                    *layout;   /* of many's markers */
    ngx_uint_t                     rerun;    /* mysql.h */
    ngx_uint_t                     kind;     /* metrics.h */
} ngx_http_idempotency_stmt_def_t;


/*
 * CLAIM: key, owner, fingerprint (zeros: not compared), lease us, ttl.  A
 * key's life is its first owner's token: the row's own owner column, set
 * earlier in the same VALUES list, so that nothing more is sent.
 */

static ngx_http_idempotency_part_t  ngx_http_idempotency_claim_parts[] = {
    { "INSERT IGNORE INTO `%V` (key_hash, state, owner, fingerprint, "
      "created_at, lease_until, expires_at", NULL, 0 },
    { ", life", NULL, NGX_HTTP_IDEMPOTENCY_LIFE },
    { ") VALUES ", NULL, 0 },
    { "(?, 0, ?, ?, UTC_TIMESTAMP(3), "
      "UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, "
      NGX_HTTP_IDEMPOTENCY_SQL_RETAIN ")", ", ",
      NGX_HTTP_IDEMPOTENCY_NO_LIFE },
    { "(?, 0, ?, ?, UTC_TIMESTAMP(3), "
      "UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, "
      NGX_HTTP_IDEMPOTENCY_SQL_RETAIN ", owner)", ", ",
      NGX_HTTP_IDEMPOTENCY_LIFE },
    { NULL, NULL, 0 }
};


/*
 * READ: fingerprints (NULL: not compared), then keys; the columns of
 * sql.h's F_*, a row for each key that exists.  The row is compared with
 * the request's owner and fingerprint in claim.c, so that the READs of
 * many requests can share a statement; the stored response is read only
 * for a fingerprint of one of them (or when one of them compares none).
 * A key that ran by its backend's marker (5, ROW_EXECUTED) keeps the
 * backend's short reference to its result where the response would be.
 */

static ngx_http_idempotency_part_t  ngx_http_idempotency_read_parts[] = {
    { "SELECT key_hash, state, owner, fingerprint, "
      "GREATEST(TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(3), expires_at), 0), "
      NGX_HTTP_IDEMPOTENCY_SQL_EXPIRED ", "
      "state IN (0, 5) AND lease_until <= UTC_TIMESTAMP(3), status, epoch, "
      "IF(state = 5 OR state = 1 AND expires_at > UTC_TIMESTAMP(3) "
      "AND IFNULL(fingerprint IN (", NULL, 0 },
    { "?", ", ", 0 },
    { "), 1), response, NULL)", NULL, 0 },
    { ", life", NULL, NGX_HTTP_IDEMPOTENCY_LIFE },
    { " FROM `%V` WHERE key_hash IN (", NULL, 0 },
    { "?", ", ", 0 },
    { ")", NULL, 0 },
    { NULL, NULL, 0 }
};


/*
 * TAKE: owner, fingerprint to store, ttl, lease us, key, the epoch the
 * READ saw, fingerprint; assignments run left to right, so created_at and
 * expires_at are tested before expires_at and state change.  Conditional
 * on the epoch too, so that the claim knows its own: one more than it
 * read.  The last marker is 3 (ROW_UNKNOWN) when the epoch read was
 * fenced (fence.c) or is driven again (idempotency_on_unknown_outcome
 * redrive), and NULL otherwise: a key of unknown outcome is taken over
 * only once nobody can commit that epoch, or on its backend's own say.
 * A new operation starts a new life (the owner, bound once more), set
 * before state and expires_at change, which NEW reads.
 */

static ngx_http_idempotency_part_t  ngx_http_idempotency_take_parts[] = {
    { "UPDATE `%V` SET owner = ?, fingerprint = ?, ", NULL, 0 },
    { "life = IF(" NGX_HTTP_IDEMPOTENCY_SQL_NEW ", ?, life), ", NULL,
      NGX_HTTP_IDEMPOTENCY_LIFE },
    { "created_at = IF(" NGX_HTTP_IDEMPOTENCY_SQL_NEW ", "
      "UTC_TIMESTAMP(3), created_at), "
      "expires_at = IF(" NGX_HTTP_IDEMPOTENCY_SQL_NEW ", "
      NGX_HTTP_IDEMPOTENCY_SQL_RETAIN ", expires_at), "
      "state = 0, epoch = epoch + 1, "
      "lease_until = UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, "
      "status = NULL, response = NULL "
      "WHERE key_hash = ? AND epoch = ? AND ("
      NGX_HTTP_IDEMPOTENCY_SQL_EXPIRED " OR "
      NGX_HTTP_IDEMPOTENCY_SQL_DEAD " OR state = ?)", NULL, 0 },
    { NULL, NULL, 0 }
};


/*
 * COMPLETE: state, status, record (NULL: not stored), key, owner.  A
 * release made the row nobody's: the owner it had changes nothing.
 */

static ngx_http_idempotency_part_t  ngx_http_idempotency_complete_parts[] = {
    { "UPDATE `%V` SET state = ?, status = ?, "
      "lease_until = UTC_TIMESTAMP(3), " NGX_HTTP_IDEMPOTENCY_SQL_KEEP ", "
      "response = ? "
      "WHERE key_hash = ? AND owner = ?", NULL, 0 },
    { NULL, NULL, 0 }
};


/*
 * n completions: each row changes only while its owner holds it; the
 * markers are bound by the layout "30,31,32,3,34" (mysql.h)
 */

static ngx_http_idempotency_part_t  ngx_http_idempotency_completes_parts[] = {
    { "UPDATE `%V` SET lease_until = UTC_TIMESTAMP(3), "
      NGX_HTTP_IDEMPOTENCY_SQL_KEEP ", state = CASE key_hash", NULL, 0 },
    { " WHEN ? THEN ?", "", 0 },
    { " END, status = CASE key_hash", NULL, 0 },
    { " WHEN ? THEN ?", "", 0 },
    { " END, response = CASE key_hash", NULL, 0 },
    { " WHEN ? THEN ?", "", 0 },
    { " END WHERE key_hash IN (", NULL, 0 },
    { "?", ", ", 0 },
    { ") AND CASE key_hash", NULL, 0 },
    { " WHEN ? THEN owner = ?", "", 0 },
    { " END", NULL, 0 },
    { NULL, NULL, 0 }
};


static ngx_str_t *ngx_http_idempotency_claim_rows(
    ngx_http_idempotency_shard_t *shard, ngx_uint_t n);
static ngx_str_t *ngx_http_idempotency_read_rows(
    ngx_http_idempotency_shard_t *shard, ngx_uint_t n);
static ngx_str_t *ngx_http_idempotency_complete_rows(
    ngx_http_idempotency_shard_t *shard, ngx_uint_t n);


static ngx_http_idempotency_stmt_def_t
    ngx_http_idempotency_stmts[NGX_HTTP_IDEMPOTENCY_STMTS] =
{
    { NULL, NULL, NULL, NULL, 0, 0 },

    /* a claim of a batch that did not make every row reads its own */
    { ngx_http_idempotency_claim_parts, ngx_http_idempotency_claim_parts,
      ngx_http_idempotency_claim_rows, "01234", 0,
      NGX_HTTP_IDEMPOTENCY_OP_CLAIM },

    { ngx_http_idempotency_read_parts, ngx_http_idempotency_read_parts,
      ngx_http_idempotency_read_rows, "0,1", 0,
      NGX_HTTP_IDEMPOTENCY_OP_READ },
    { ngx_http_idempotency_take_parts, NULL, NULL, NULL, 0,
      NGX_HTTP_IDEMPOTENCY_OP_TAKEOVER },

    /* 0 rows would say "lease lost": a completion runs again instead */
    { ngx_http_idempotency_complete_parts,
      ngx_http_idempotency_completes_parts,
      ngx_http_idempotency_complete_rows, "30,31,32,3,34", 1,
      NGX_HTTP_IDEMPOTENCY_OP_COMPLETE }
};


static u_char  ngx_http_idempotency_zero_fp[NGX_HTTP_IDEMPOTENCY_HASH_LEN];


/* a part that is not for this store: its keys have a life or none */

static ngx_uint_t
ngx_http_idempotency_part_skip(ngx_http_idempotency_store_t *store,
    ngx_http_idempotency_part_t *part)
{
    return part->life == (store->life ? NGX_HTTP_IDEMPOTENCY_NO_LIFE
                                      : NGX_HTTP_IDEMPOTENCY_LIFE);
}


/* a statement's text for n ops, made once per worker and store */

static ngx_str_t *
ngx_http_idempotency_stmt_text(ngx_http_idempotency_store_t *store,
    ngx_uint_t stmt, ngx_uint_t n)
{
    u_char                       *p, *last;
    size_t                        size;
    ngx_uint_t                    i;
    ngx_str_t                    *text;
    ngx_http_idempotency_part_t  *part;

    if (store->stmts == NULL) {
        store->stmts = ngx_pcalloc(ngx_cycle->pool,
                                   NGX_HTTP_IDEMPOTENCY_STMTS
                                   * NGX_HTTP_IDEMPOTENCY_BATCH_MAX
                                   * sizeof(ngx_str_t));
        if (store->stmts == NULL) {
            return NULL;
        }
    }

    text = &store->stmts[stmt * NGX_HTTP_IDEMPOTENCY_BATCH_MAX + n - 1];

    if (text->len) {
        return text;
    }

    part = (n == 1) ? ngx_http_idempotency_stmts[stmt].one
                    : ngx_http_idempotency_stmts[stmt].many;

    size = 0;

    for (i = 0; part[i].text; i++) {
        if (ngx_http_idempotency_part_skip(store, &part[i])) {
            continue;
        }

        size += part[i].sep ? n * (ngx_strlen(part[i].text)
                                   + ngx_strlen(part[i].sep))
                            : ngx_strlen(part[i].text) + store->table.len;
    }

    p = ngx_pnalloc(ngx_cycle->pool, size);
    if (p == NULL) {
        return NULL;
    }

    text->data = p;
    last = p + size;

    for ( /* void */ ; part->text; part++) {

        if (ngx_http_idempotency_part_skip(store, part)) {
            continue;
        }

        if (part->sep == NULL) {
            /* "%V": the table */
            p = ngx_slprintf(p, last, part->text, &store->table);
            continue;
        }

        for (i = 0; i < n; i++) {
            if (i) {
                p = ngx_cpymem(p, part->sep, ngx_strlen(part->sep));
            }

            p = ngx_cpymem(p, part->text, ngx_strlen(part->text));
        }
    }

    text->len = p - text->data;

    return text;
}


static ngx_str_t *
ngx_http_idempotency_claim_rows(ngx_http_idempotency_shard_t *shard,
    ngx_uint_t n)
{
    return ngx_http_idempotency_stmt_text(shard->store,
                                          NGX_HTTP_IDEMPOTENCY_STMT_CLAIM, n);
}


static ngx_str_t *
ngx_http_idempotency_read_rows(ngx_http_idempotency_shard_t *shard,
    ngx_uint_t n)
{
    return ngx_http_idempotency_stmt_text(shard->store,
                                          NGX_HTTP_IDEMPOTENCY_STMT_READ, n);
}


static ngx_str_t *
ngx_http_idempotency_complete_rows(ngx_http_idempotency_shard_t *shard,
    ngx_uint_t n)
{
    return ngx_http_idempotency_stmt_text(shard->store,
                                          NGX_HTTP_IDEMPOTENCY_STMT_COMPLETE,
                                          n);
}


/* an op of a prepared statement */

static ngx_http_idempotency_op_t *
ngx_http_idempotency_stmt_op(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, ngx_uint_t stmt)
{
    ngx_str_t                  *text;
    ngx_http_idempotency_op_t  *op;

    text = ngx_http_idempotency_stmt_text(shard->store, stmt, 1);
    if (text == NULL) {
        return NULL;
    }

    op = ngx_http_idempotency_op_create(shard, log, 0);
    if (op == NULL) {
        return NULL;
    }

    op->stmt = stmt;
    op->sql = *text;
    op->batch = ngx_http_idempotency_stmts[stmt].batch;
    op->layout = ngx_http_idempotency_stmts[stmt].layout;
    op->rerun = ngx_http_idempotency_stmts[stmt].rerun;
    op->kind = ngx_http_idempotency_stmts[stmt].kind;

    return op;
}


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_claim(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, ngx_uint_t stmt, ngx_http_idempotency_claim_t *cl)
{
    u_char                     *fp, *stored;
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_stmt_op(shard, log, stmt);
    if (op == NULL) {
        return NULL;
    }

    op->name = (stmt == NGX_HTTP_IDEMPOTENCY_STMT_READ) ? "claim read"
               : (stmt == NGX_HTTP_IDEMPOTENCY_STMT_TAKE) ? "claim takeover"
               : "claim";

    fp = cl->fingerprint;
    stored = fp ? fp : ngx_http_idempotency_zero_fp;

    /*
     * The request may end while the op waits: its values are copied.
     * The markers are bound in the order they are added.
     */

    switch (stmt) {

    case NGX_HTTP_IDEMPOTENCY_STMT_CLAIM:
        if (ngx_http_idempotency_op_bytes(op, cl->key_hash, 32) != NGX_OK
            || ngx_http_idempotency_op_bytes(op, cl->owner, 16) != NGX_OK
            || ngx_http_idempotency_op_bytes(op, stored, 32) != NGX_OK)
        {
            goto failed;
        }

        ngx_http_idempotency_op_num(op, (long long) cl->lease * 1000);
        ngx_http_idempotency_op_num(op, cl->ttl);
        break;

    case NGX_HTTP_IDEMPOTENCY_STMT_READ:
        if (ngx_http_idempotency_op_bytes(op, fp, 32) != NGX_OK
            || ngx_http_idempotency_op_bytes(op, cl->key_hash, 32) != NGX_OK)
        {
            goto failed;
        }

        /* in a batch, the row whose key_hash is this op's key */
        op->match = 2;
        break;

    default: /* NGX_HTTP_IDEMPOTENCY_STMT_TAKE */
        if (ngx_http_idempotency_op_bytes(op, cl->owner, 16) != NGX_OK
            || ngx_http_idempotency_op_bytes(op, stored, 32) != NGX_OK
            || (shard->store->life
                && ngx_http_idempotency_op_bytes(op, cl->owner, 16)
                   != NGX_OK))
        {
            goto failed;
        }

        ngx_http_idempotency_op_num(op, cl->ttl);
        ngx_http_idempotency_op_num(op, (long long) cl->lease * 1000);

        if (ngx_http_idempotency_op_bytes(op, cl->key_hash, 32) != NGX_OK) {
            goto failed;
        }

        ngx_http_idempotency_op_num(op, cl->epoch);

        if (ngx_http_idempotency_op_bytes(op, fp, 32) != NGX_OK) {
            goto failed;
        }

        if (cl->fenced) {
            ngx_http_idempotency_op_num(op, NGX_HTTP_IDEMPOTENCY_ROW_UNKNOWN);

        } else if (ngx_http_idempotency_op_bytes(op, NULL, 0) != NGX_OK) {
            goto failed;
        }

        break;
    }

    return op;

failed:

    ngx_destroy_pool(op->pool);

    return NULL;
}


/*
 * The record is bound as bytes: no byte of the response is ever read as
 * SQL text, whatever the session's character set and sql_mode.  It stays
 * in the caller's memory until the op's handler runs.
 */

ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_complete(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *key_hash, u_char *owner, ngx_uint_t state,
    ngx_uint_t status, ngx_str_t *record)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_stmt_op(shard, log,
                                      NGX_HTTP_IDEMPOTENCY_STMT_COMPLETE);
    if (op == NULL) {
        return NULL;
    }

    op->name = "complete";

    if (record == NULL && state == NGX_HTTP_IDEMPOTENCY_ROW_DONE) {
        state = NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED;
    }

    ngx_http_idempotency_op_num(op, state);
    ngx_http_idempotency_op_num(op, status);
    ngx_http_idempotency_op_ref(op, record ? record->data : NULL,
                                record ? record->len : 0);

    if (ngx_http_idempotency_op_bytes(op, key_hash, 32) != NGX_OK
        || ngx_http_idempotency_op_bytes(op, owner, 16) != NGX_OK)
    {
        ngx_destroy_pool(op->pool);
        return NULL;
    }

    return op;
}


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_renew(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *key_hash, u_char *owner, ngx_msec_t lease)
{
    u_char                     *p;
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_text(shard, log, "renew",
                                       NGX_HTTP_IDEMPOTENCY_OP_RENEW);
    if (op == NULL) {
        return NULL;
    }

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

    op = ngx_http_idempotency_op_create(shard, log,
                                        sizeof(NGX_HTTP_IDEMPOTENCY_SQL_RELEASE)
                                        + 256 + shard->store->table.len);
    if (op == NULL) {
        return NULL;
    }

    op->name = "release";
    op->kind = NGX_HTTP_IDEMPOTENCY_OP_RELEASE;

    /*
     * The row is not deleted but made free and nobody's (sql.h): the
     * next claim takes it as a new operation, and its epoch goes on from
     * this one's, so that a backend that fences by the highest epoch of
     * a key never sees it fall back to 1, even after the purge.
     */

    p = ngx_sprintf(op->sql.data, "UPDATE `%V` SET "
                    NGX_HTTP_IDEMPOTENCY_SQL_RELEASE " WHERE key_hash = ",
                    &shard->store->table);
    p = ngx_http_idempotency_owned(p, key_hash, owner);

    op->sql.len = p - op->sql.data;

    return op;
}


/*
 * The server's connection thread that ran a statement whose outcome is
 * unknown: KILL ends it (a statement still waiting, for a lock or on a
 * lost client, is rolled back), and PROCESSLIST says once it is gone; a
 * user may do both to its own threads.  With query, the statement of a
 * thread that runs one given up on (an operator's read or change past
 * query_timeout): KILL QUERY ends it, and the thread then finds its
 * client gone.
 */

ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_kill(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, ngx_uint_t thread, ngx_uint_t query)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_text(shard, log,
                                       query ? "kill query" : "kill",
                                       NGX_HTTP_IDEMPOTENCY_OP_OTHER);
    if (op == NULL) {
        return NULL;
    }

    op->sql.len = ngx_sprintf(op->sql.data, "KILL %s%ui",
                              query ? "QUERY " : "", thread)
                  - op->sql.data;

    return op;
}


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_running(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, ngx_uint_t thread)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_text(shard, log, "processlist",
                                       NGX_HTTP_IDEMPOTENCY_OP_OTHER);
    if (op == NULL) {
        return NULL;
    }

    op->sql.len = ngx_sprintf(op->sql.data, "SELECT COUNT(*) FROM "
                              "information_schema.PROCESSLIST WHERE ID = %ui",
                              thread)
                  - op->sql.data;

    return op;
}


/*
 * The fence (fence.c): the module's marker of an epoch, fenced (2), then
 * the marker as it is, by whichever writer got there first: 2, or 1 and
 * the backend's result when the backend's transaction committed first.
 * A backend's uncommitted marker makes the INSERT wait for its row lock:
 * the wait is bounded below query_timeout (a lock wait timeout is an
 * error, not ignored), and a wait cut short commits nothing or a fence
 * that the next retry finds.  In the same round trip, as one text.
 */

ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_fence(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, ngx_str_t *table, u_char *marker, ngx_uint_t epoch,
    ngx_uint_t lock_wait)
{
    u_char                     *p;
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_sized(shard, log, "fence",
                                        512 + 2 * table->len);
    if (op == NULL) {
        return NULL;
    }

    /* SET STATEMENT: the session's own lock wait is left as it was */

    p = ngx_sprintf(op->sql.data, "SET STATEMENT innodb_lock_wait_timeout "
                    "= %ui FOR INSERT IGNORE INTO `%V` (marker, epoch, "
                    "state, created_at) VALUES (", lock_wait, table);
    p = ngx_http_idempotency_hex(p, marker, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    p = ngx_sprintf(p, ", %ui, 2, UTC_TIMESTAMP(3)); SELECT state, result "
                    "FROM `%V` WHERE marker = ", epoch, table);
    p = ngx_http_idempotency_hex(p, marker, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    p = ngx_sprintf(p, " AND epoch = %ui", epoch);

    op->sql.len = p - op->sql.data;

    return op;
}


/*
 * The key ran, by its backend's marker: state 5 (ROW_EXECUTED) with the
 * backend's result, while the row is still of that epoch and nobody's
 * (unknown, released, or in progress with a dead lease).  The owner
 * stays: a late completion of an owner that was only cut off still
 * stores its answer, which is then replayed; its renewals (state 0)
 * change nothing.  Until then, for live ms, retries are told the key is
 * in progress, not that its answer is lost.
 */

ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_executed(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *key_hash, ngx_uint_t epoch, ngx_str_t *result,
    ngx_msec_t live)
{
    u_char                     *p;
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_sized(shard, log, "executed",
                                        512 + shard->store->table.len
                                        + 2 * result->len);
    if (op == NULL) {
        return NULL;
    }

    p = ngx_sprintf(op->sql.data, "UPDATE `%V` SET state = 5, "
                    "lease_until = UTC_TIMESTAMP(3) + INTERVAL %M "
                    "MICROSECOND, status = NULL, response = ",
                    &shard->store->table, live * 1000);

    if (result->len) {
        p = ngx_http_idempotency_hex(p, result->data, result->len);

    } else {
        p = ngx_cpymem(p, "NULL", 4);
    }

    p = ngx_cpymem(p, " WHERE key_hash = ", 18);
    p = ngx_http_idempotency_hex(p, key_hash, 32);
    p = ngx_sprintf(p, " AND epoch = %ui AND (state IN (3, 4) OR state = 0 "
                    "AND lease_until <= UTC_TIMESTAMP(3))", epoch);

    op->sql.len = p - op->sql.data;

    return op;
}


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_find(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *key_hash, u_char *owner, ngx_uint_t epoch,
    ngx_msec_t lease)
{
    u_char                     *p;
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_sized(shard, log, "find",
                                        512 + shard->store->table.len);
    if (op == NULL) {
        return NULL;
    }

    op->kind = NGX_HTTP_IDEMPOTENCY_OP_TAKEOVER;

    p = ngx_sprintf(op->sql.data, "UPDATE `%V` SET owner = ",
                    &shard->store->table);
    p = ngx_http_idempotency_hex(p, owner, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);
    p = ngx_sprintf(p, ", state = 0, lease_until = UTC_TIMESTAMP(3) + "
                    "INTERVAL %M MICROSECOND, status = NULL, response = "
                    "NULL WHERE key_hash = ", lease * 1000);
    p = ngx_http_idempotency_hex(p, key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    p = ngx_sprintf(p, " AND epoch = %ui AND (state IN (3, 4) OR state = 0 "
                    "AND lease_until <= UTC_TIMESTAMP(3))", epoch);

    op->sql.len = p - op->sql.data;

    return op;
}


/* the key's state, and whether owner holds it: "1" or "0" */

ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_owner(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *key_hash, u_char *owner)
{
    u_char                     *p;
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_text(shard, log, "owner",
                                       NGX_HTTP_IDEMPOTENCY_OP_OTHER);
    if (op == NULL) {
        return NULL;
    }

    p = ngx_cpymem(op->sql.data, "SELECT state, owner = ",
                   sizeof("SELECT state, owner = ") - 1);
    p = ngx_http_idempotency_hex(p, owner, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);
    p = ngx_sprintf(p, " FROM `%V` WHERE key_hash = ", &shard->store->table);
    p = ngx_http_idempotency_hex(p, key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);

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
 * GET_LOCK() is refused.  The row is made if it is missing, then taken
 * over when its lease has ended or renewed when it is ours already; the
 * SELECT tells whether it is ours.  One round trip every purge interval:
 * sent as text.
 */

static const char  ngx_http_idempotency_purge_lease_sql[] =
    "INSERT IGNORE INTO `%V` (key_hash, state, owner, fingerprint, "
    "created_at, lease_until, expires_at) VALUES (%s, 0, %s, %s, "
    "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), '9999-12-31'); "
    "UPDATE `%V` SET owner = %s, "
    "lease_until = UTC_TIMESTAMP(3) + INTERVAL %M000 MICROSECOND "
    "WHERE key_hash = %s "
    "AND (owner = %s OR lease_until <= UTC_TIMESTAMP(3)); "
    "SELECT owner = %s FROM `%V` WHERE key_hash = %s";


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
           + 3 * shard->store->table.len + 4 * sizeof(zero) + 4 * sizeof(ow)
           + NGX_INT64_LEN;

    op = ngx_http_idempotency_op_create(shard, log, size);
    if (op == NULL) {
        return NULL;
    }

    op->name = "purge lease";
    op->sql.len = ngx_sprintf(op->sql.data,
                              ngx_http_idempotency_purge_lease_sql,
                              &shard->store->table, zero, ow, zero,
                              &shard->store->table, ow, lease, zero, ow,
                              ow, &shard->store->table, zero)
                  - op->sql.data;

    return op;
}


/*
 * One batch: the oldest expired rows, never a key whose owner still holds
 * a live lease.  A released row keeps its expires_at: it stays, with its
 * epoch, until the key's retention ends.  InnoDB re-reads each row it
 * locks, so a row reclaimed by a claim in the meantime no longer matches
 * and stays.
 */

ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_purge(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, ngx_uint_t batch)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_text(shard, log, "purge",
                                       NGX_HTTP_IDEMPOTENCY_OP_PURGE);
    if (op == NULL) {
        return NULL;
    }

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
 * The operator API's statements (admin.c), sent as text.  The row as an
 * operator sees it, times as ISO 8601 (UTC, the database's own), and its
 * version: every change of a row (a renewal, a completion, a takeover, a
 * new claim) changes its state, epoch, owner or lease.
 */

#define NGX_HTTP_IDEMPOTENCY_SQL_VERSION                                     \
    "CONCAT(state, '-', epoch, '-', HEX(owner), '-', "                       \
    "DATE_FORMAT(lease_until, '%Y%m%d%H%i%s%f'))"

#define NGX_HTTP_IDEMPOTENCY_SQL_TIME(column)                                \
    "LEFT(DATE_FORMAT(" column ", '%Y-%m-%dT%H:%i:%s.%f'), 23)"

/* the columns of sql.h's ADMIN_F_* */
static const char  ngx_http_idempotency_admin_columns[] =
    "LOWER(HEX(key_hash)), state, epoch, "
    NGX_HTTP_IDEMPOTENCY_SQL_TIME("created_at") ", "
    NGX_HTTP_IDEMPOTENCY_SQL_TIME("lease_until") ", "
    NGX_HTTP_IDEMPOTENCY_SQL_TIME("expires_at") ", "
    "status, IFNULL(OCTET_LENGTH(response), 0), "
    "state = 0 AND lease_until > UTC_TIMESTAMP(3), "
    "expires_at <= UTC_TIMESTAMP(3), "
    NGX_HTTP_IDEMPOTENCY_SQL_VERSION;

/* the purge lease's row is no key: never listed */
static const char  ngx_http_idempotency_admin_zero[] =
    "X'0000000000000000000000000000000000000000000000000000000000000000'";


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_admin_show(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *key_hash)
{
    u_char                     *p;
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_admin_text(shard, log, 0);
    if (op == NULL) {
        return NULL;
    }

    p = ngx_sprintf(op->sql.data, "SELECT %s FROM `%V` WHERE key_hash = ",
                    ngx_http_idempotency_admin_columns, &shard->store->table);
    p = ngx_http_idempotency_hex(p, key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);

    op->sql.len = p - op->sql.data;

    return op;
}


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_admin_list(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, ngx_uint_t state, ngx_uint_t rows)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_admin_text(shard, log, 0);
    if (op == NULL) {
        return NULL;
    }

    /*
     * ix_state_created (state, created_at, key_hash; mysql/schema.sql)
     * serves it: the rows of one state in the order asked, read until
     * the limit, without a sort
     */

    op->all_rows = 1;

    /* a key given back, by a release or an operator, is expired */

    op->sql.len = ngx_sprintf(op->sql.data, "SELECT %s FROM `%V` "
                              "WHERE state = %ui "
                              "AND expires_at > UTC_TIMESTAMP(3) "
                              "AND key_hash <> %s "
                              "ORDER BY created_at, key_hash LIMIT %ui",
                              ngx_http_idempotency_admin_columns,
                              &shard->store->table, state,
                              ngx_http_idempotency_admin_zero, rows)
                  - op->sql.data;

    return op;
}


ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_admin_change(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, u_char *key_hash, ngx_uint_t completed,
    ngx_str_t *version)
{
    u_char                     *p;
    ngx_str_t                  *table;
    ngx_http_idempotency_op_t  *op;

    table = &shard->store->table;

    op = ngx_http_idempotency_admin_text(shard, log, version->len);
    if (op == NULL) {
        return NULL;
    }

    /*
     * The UPDATE releases the row (sql.h) only while it is the version
     * the operator saw, and the SELECT after it tells, when it did not,
     * whether the row is gone or what it is now.
     */

    p = ngx_sprintf(op->sql.data, "UPDATE `%V` SET "
                    NGX_HTTP_IDEMPOTENCY_SQL_RELEASE " WHERE key_hash = ",
                    table);
    p = ngx_http_idempotency_hex(p, key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    p = ngx_sprintf(p, " AND state IN (%s) AND %s = '%V'; "
                    "SELECT %s FROM `%V` WHERE key_hash = ",
                    completed ? "1, 2, 5" : "0, 3",
                    NGX_HTTP_IDEMPOTENCY_SQL_VERSION, version,
                    ngx_http_idempotency_admin_columns, table);
    p = ngx_http_idempotency_hex(p, key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);

    op->sql.len = p - op->sql.data;

    return op;
}


/* an op for an operator's statement, with room for it and extra bytes */

static ngx_http_idempotency_op_t *
ngx_http_idempotency_admin_text(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, size_t extra)
{
    return ngx_http_idempotency_op_create(shard, log,
                                     sizeof(ngx_http_idempotency_admin_columns)
                                     + sizeof(NGX_HTTP_IDEMPOTENCY_SQL_VERSION)
                                     + sizeof(NGX_HTTP_IDEMPOTENCY_SQL_RELEASE)
                                     + 2 * shard->store->table.len + 512
                                     + extra);
}


/* an op for a short statement sent as text, with room for it */

static ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_text(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, const char *name, ngx_uint_t kind)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_sized(shard, log, name,
                                        256 + shard->store->table.len);
    if (op == NULL) {
        return NULL;
    }

    op->kind = kind;

    return op;
}


/* a text op with room for size bytes of statement, not counted */

static ngx_http_idempotency_op_t *
ngx_http_idempotency_sql_sized(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, const char *name, size_t size)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_op_create(shard, log, size);
    if (op == NULL) {
        return NULL;
    }

    op->name = name;
    op->kind = NGX_HTTP_IDEMPOTENCY_OP_OTHER;

    return op;
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


ngx_uint_t
ngx_http_idempotency_field_is(ngx_str_t *f, u_char *data, size_t len)
{
    return f->data != NULL && f->len == len
           && ngx_memcmp(f->data, data, len) == 0;
}


ngx_int_t
ngx_http_idempotency_field_int(ngx_str_t *f)
{
    if (f->data == NULL || f->len == 0) {
        return -1;
    }

    return ngx_atoi(f->data, f->len);
}


ngx_uint_t
ngx_http_idempotency_sql_row_owned(ngx_http_idempotency_op_t *op,
    u_char *token)
{
    return op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK
           && op->nrows == 1
           && op->nfields >= NGX_HTTP_IDEMPOTENCY_F_COUNT
           && ngx_http_idempotency_field_is(
                  &op->fields[NGX_HTTP_IDEMPOTENCY_F_OWNER], token,
                  NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);
}

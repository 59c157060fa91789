
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: non-blocking MySQL connections.
 *
 * An "op" is one round trip on a kept-alive connection of one shard:
 * either a statement string (several statements separated by ';' are
 * allowed and sent as one COM_QUERY), or one execution of a prepared
 * statement (op->stmt), which the connection prepares the first time it
 * runs one of that slot and keeps for its life.  The op owns its memory
 * (op->pool) so that it may outlive the request that started it.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_MYSQL_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_MYSQL_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


#define NGX_HTTP_IDEMPOTENCY_MAX_FIELDS   16
#define NGX_HTTP_IDEMPOTENCY_MAX_PARAMS   10

/* prepared statement slots of a connection, 1 .. STMTS - 1 (sql.h) */
#define NGX_HTTP_IDEMPOTENCY_STMTS        5

/* ops of one kind that may share a statement, and its markers at most */
#define NGX_HTTP_IDEMPOTENCY_BATCH_MAX    16
#define NGX_HTTP_IDEMPOTENCY_MAX_BINDS    (16 * 9)

/* op->rc */
#define NGX_HTTP_IDEMPOTENCY_OP_OK          0
#define NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR   1   /* server said no: op->err */
#define NGX_HTTP_IDEMPOTENCY_OP_DOWN        2   /* connect failed, backoff */
#define NGX_HTTP_IDEMPOTENCY_OP_TIMEOUT     3
#define NGX_HTTP_IDEMPOTENCY_OP_BUSY        4   /* wait queue full/expired */


/*
 * op->cause: what an op's failure means to the lifecycle, whatever the
 * store; the driver sets it with op->err, so that the server's codes
 * stay in the driver (mysql.c) and the request path reads outcomes.
 * Whether a failed op may still have run: op_unsure() below.
 */
typedef enum {
    NGX_HTTP_IDEMPOTENCY_CAUSE_NONE = 0,  /* none, or none of these */
    NGX_HTTP_IDEMPOTENCY_CAUSE_RACE,      /* lost a race: run it again */
    NGX_HTTP_IDEMPOTENCY_CAUSE_NO_SCHEMA, /* no table, or wrong columns */
    NGX_HTTP_IDEMPOTENCY_CAUSE_TOO_LARGE, /* the values exceed the store's
                                             limits: refused again */
    NGX_HTTP_IDEMPOTENCY_CAUSE_LOST,      /* the connection went away */
    NGX_HTTP_IDEMPOTENCY_CAUSE_NO_THREAD  /* KILL: the thread has ended */
} ngx_http_idempotency_cause_e;


typedef struct ngx_http_idempotency_op_s  ngx_http_idempotency_op_t;

typedef void (*ngx_http_idempotency_op_handler_pt)(
    ngx_http_idempotency_op_t *op);

/* the text of the statement that n ops of one kind share (sql.c) */
typedef ngx_str_t *(*ngx_http_idempotency_batch_pt)(
    ngx_http_idempotency_shard_t *shard, ngx_uint_t n);


/* a value bound to a marker: bytes, SQL NULL (data NULL, len 0), or num */
typedef struct {
    u_char                               *data;
    unsigned long                         len;
    long long                             num;
    unsigned                              is_num:1;
} ngx_http_idempotency_param_t;


struct ngx_http_idempotency_op_s {
    ngx_pool_t                           *pool;
    ngx_log_t                            *log;
    ngx_http_idempotency_shard_t         *shard;
    const char                           *name;     /* "claim", for logs */
    ngx_uint_t                            kind;     /* for metrics.h */
    ngx_msec_t                            started;  /* op_run() */

    ngx_str_t                             sql;      /* in op->pool, or
                                                       the text of stmt */

    /* prepared: the slot (0: sql is sent as text), and its values */
    ngx_uint_t                            stmt;
    ngx_uint_t                            nparams;
    ngx_http_idempotency_param_t  params[NGX_HTTP_IDEMPOTENCY_MAX_PARAMS];

    /*
     * Batchable (batch is not NULL): the ops of this slot that wait at
     * the same time run as one statement of n rows.  Its markers are
     * bound group by group (groups separated by ',' in layout); within a
     * group, op by op, the params whose indexes the group lists.  When
     * the statement changes fewer rows than it has ops, which ones it
     * changed is unknown: each op runs again on its own (rerun), or gets
     * affected_rows 0 and learns the rest from its next statement.
     */
    ngx_http_idempotency_batch_pt         batch;
    const char                           *layout;
    unsigned                              rerun:1;

    /* a batch's result rows go to the ops whose param match - 1 is
     * equal to the row's first column; the others get no row */
    ngx_uint_t                            match;

    /* called once, never from inside ngx_http_idempotency_op_run() */
    ngx_http_idempotency_op_handler_pt    handler;
    void                                 *data;

    /* results */
    ngx_uint_t                            rc;
    ngx_uint_t                            err;      /* mysql_errno() */
    ngx_str_t                             err_text; /* mysql_error() */
    ngx_http_idempotency_cause_e          cause;    /* of err */
    uint64_t                              affected_rows; /* 1st statement */
    ngx_uint_t                            nrows;    /* last result set */
    ngx_uint_t                            nfields;

    /* the first row; data is NULL for an SQL NULL */
    ngx_str_t                    fields[NGX_HTTP_IDEMPOTENCY_MAX_FIELDS];

    /* with all_rows (a statement sent as text): every row of the last
     * result set, nrows times nfields fields */
    ngx_str_t                            *rows;
    unsigned                              all_rows:1;

    /* set by ngx_http_idempotency_op_take_pool() */
    unsigned                              keep_pool:1;

    /* a lease renewal or a completion: queued ahead of claims and polls
     * and never refused for a full wait queue, so that busy connections do
     * not let a live owner's lease end */
    unsigned                              urgent:1;

    /* private to mysql.c, but for thread (the server's, KILLed by
     * owner.c) */
    ngx_queue_t                           queue;
    ngx_event_t                           timer;
    void                                 *conn;
    ngx_uint_t                            thread;
    ngx_http_idempotency_op_t            *batch_next;  /* the others */
    unsigned                              single:1;    /* not again */
    unsigned                              sent:1;      /* it ran */
    unsigned                              again:1;     /* once more */
};


/*
 * Allocates a pool (log as given), the op in it and op->sql.data with
 * room for sql_size bytes (op->sql.len = 0).
 */
ngx_http_idempotency_op_t *ngx_http_idempotency_op_create(
    ngx_http_idempotency_shard_t *shard, ngx_log_t *log, size_t sql_size);

/*
 * The next marker's value: bytes copied into op->pool (data NULL: SQL
 * NULL), bytes that stay where they are until the op's handler runs
 * (op_ref), or a number.
 */
ngx_int_t ngx_http_idempotency_op_bytes(ngx_http_idempotency_op_t *op,
    u_char *data, size_t len);
void ngx_http_idempotency_op_ref(ngx_http_idempotency_op_t *op,
    u_char *data, size_t len);
void ngx_http_idempotency_op_num(ngx_http_idempotency_op_t *op,
    long long num);

/* queues or starts the op; the handler (if any) is always called later */
void ngx_http_idempotency_op_run(ngx_http_idempotency_op_t *op);

/*
 * The op failed in a way that leaves its statement's effect unknown: it
 * timed out, or its connection was lost or killed while it ran.
 */
ngx_uint_t ngx_http_idempotency_op_unsure(ngx_http_idempotency_op_t *op);

/* the requester is gone: the op finishes silently and frees itself */
void ngx_http_idempotency_op_detach(ngx_http_idempotency_op_t *op);

/*
 * From the op's handler: the op's pool, with the op and its result
 * fields in it, now belongs to the caller, who destroys it.
 */
ngx_pool_t *ngx_http_idempotency_op_take_pool(ngx_http_idempotency_op_t *op);

typedef struct {
    ngx_uint_t                            up;
    ngx_uint_t                            idle;
    ngx_uint_t                            busy;
    ngx_uint_t                            queued;
} ngx_http_idempotency_conns_stats_t;


/* this worker's connections to a server, for metrics */
void ngx_http_idempotency_mysql_stats(ngx_http_idempotency_shard_t *shard,
    ngx_http_idempotency_conns_stats_t *st);

/* worker exit: close every connection of every store */
void ngx_http_idempotency_mysql_exit(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_IDEMPOTENCY_MYSQL_H_INCLUDED_ */

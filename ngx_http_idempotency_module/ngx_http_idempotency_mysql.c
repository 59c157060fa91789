
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: per-worker non-blocking MySQL connections.
 *
 * MariaDB Connector/C's non-blocking API (mysql_*_start/_cont) driven by
 * nginx events on the driver's socket.  Nothing here blocks the worker:
 * the driver only returns to us when it would block, and tells us what
 * to wait for (read, write, a timeout); we wait for that with nginx
 * events and timers and then resume it with _cont.  The one exception
 * is the server's part of a TLS handshake (ssl=), which the driver waits
 * for itself; see ngx_http_idempotency_mysql_ssl().
 *
 * Each shard of a store gets, per worker and on first use, its "conns"
 * (a connection pool; in this file a pool is an ngx_pool_t, op->pool):
 *
 *   idle     connected, nothing to do; the read event stays armed so
 *            that a server that goes away is noticed (EOF) and the
 *            connection closed; no timers, so an idle connection never
 *            holds a gracefully exiting worker;
 *   busy     connecting or running an op;
 *   waiting  ops queued for a connection (at most store->wait_queue
 *            beyond the connections that are being made for them).
 *
 * The driver owns the socket and closes it: our ngx_connection_t only
 * wraps the fd for the event loop and is given back with
 * ngx_free_connection(), never ngx_close_connection().  The driver
 * leaves the socket in blocking mode (with TLS, we make it non-blocking)
 * and reads/writes it with MSG_DONTWAIT, so any I/O of our own on it
 * must use MSG_DONTWAIT too.
 *
 * A connection in an unknown state (op timed out, lost) is aborted:
 * shutdown() makes every further read/write of the driver fail at once,
 * the interrupted call is run to its (failed) end so that the driver
 * releases what it holds, and mysql_close_start() then finishes at once
 * because there is nothing left to wait for.  At worker exit an idle
 * connection is sent a COM_QUIT first, if its socket takes it at once.
 *
 * The file, top down: the op (its API: made, given values, run,
 * detached); conns (a shard's connections in the worker: connect, TLS,
 * the session); a connection's calls (an op's statement started, driven
 * by the driver's wait masks, its failure, the connection parked or
 * discarded); batches (the ops of a kind that share one statement, what
 * each learns, one statement of a kind at a time); the end of an op (its
 * deadline, its handler called from a posted event).  result.c reads a
 * statement's result into its op.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include <poll.h>
#include <mysql.h>
#include <errmsg.h>
#include <mysqld_error.h>

#include "ngx_http_idempotency_conn.h"
#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_mysql.h"
#include "ngx_http_idempotency_result.h"


#define NGX_HTTP_IDEMPOTENCY_MYSQL_CONNECT      0
#define NGX_HTTP_IDEMPOTENCY_MYSQL_IDLE         1
#define NGX_HTTP_IDEMPOTENCY_MYSQL_QUERY        2
#define NGX_HTTP_IDEMPOTENCY_MYSQL_STORE        3
#define NGX_HTTP_IDEMPOTENCY_MYSQL_NEXT         4
#define NGX_HTTP_IDEMPOTENCY_MYSQL_PREPARE      5
#define NGX_HTTP_IDEMPOTENCY_MYSQL_EXECUTE      6
#define NGX_HTTP_IDEMPOTENCY_MYSQL_STMT_STORE   7

/*
 * Statements of one batchable kind that a worker runs at a time on one
 * server: the ops that come meanwhile wait and share the next statement
 * (one round trip at most), instead of taking more connections for
 * statements of one row each.  One that has run for BATCH_SLOW ms no
 * longer counts: a stalled statement (a lost connection, a lock wait)
 * must not hold up every claim of the worker until it times out.
 */
#define NGX_HTTP_IDEMPOTENCY_MYSQL_BATCH_RUNNING  1
#define NGX_HTTP_IDEMPOTENCY_MYSQL_BATCH_SLOW     10

/*
 * The values a batch binds, at most (an op alone may bind more): a
 * statement of many records must stay below max_allowed_packet when each
 * record alone does (complete.c checks a record over 1 MB against it)
 */
#define NGX_HTTP_IDEMPOTENCY_MYSQL_BATCH_BYTES  (512 * 1024)

/* _cont calls allowed to let an interrupted call fail on a dead socket */
#define NGX_HTTP_IDEMPOTENCY_MYSQL_ABORT_STEPS  16

#define NGX_HTTP_IDEMPOTENCY_MYSQL_ERRLEN       256

/*
 * Sent on every new connection, after the server's init_connect: nothing
 * of the session is left to the server's defaults.  Every statement must
 * commit on its own (a claim held in an open transaction would block its
 * duplicates), and the character set and sql_mode are known.
 */
#define NGX_HTTP_IDEMPOTENCY_MYSQL_INIT_COMMAND                               \
    "SET SESSION autocommit = 1, character_set_client = utf8mb4, "           \
    "character_set_connection = utf8mb4, character_set_results = utf8mb4, "  \
    "sql_mode = 'NO_ENGINE_SUBSTITUTION', time_zone = '+00:00'"


typedef struct {
    ngx_http_idempotency_shard_t      *shard;
    ngx_http_idempotency_store_t      *store;
    ngx_log_t                         *log;

    ngx_queue_t                        idle;      /* of ..._conn_t */
    ngx_queue_t                        busy;      /* of ..._conn_t */
    ngx_queue_t                        waiting;   /* of ..._op_t */
    ngx_queue_t                        spare;     /* unused ..._conn_t */

    ngx_uint_t                         nconns;    /* idle + busy */
    ngx_uint_t                         nconnect;  /* in CONNECT state */
    ngx_uint_t                         nunbound;  /* connects for the
                                                     queue, not for an op */
    ngx_uint_t                         nwaiting;

    /* starts batchable ops at the end of the event loop iteration */
    ngx_event_t                        flush;

    /* and when a running statement of their kind turns slow */
    ngx_event_t                        slow;

    /* connect failures: backoff, and the error handed to OP_DOWN ops */
    ngx_http_idempotency_outage_t      outage;
    ngx_uint_t                         last_err;
    size_t                             last_error_len;
    u_char                             last_error[
                                           NGX_HTTP_IDEMPOTENCY_MYSQL_ERRLEN];
} ngx_http_idempotency_mysql_conns_t;


typedef struct {
    ngx_queue_t                         queue;
    ngx_http_idempotency_mysql_conns_t *conns;
    ngx_http_idempotency_op_t          *op;

    MYSQL                             *mysql;
    ngx_connection_t                  *c;

    /* results of the interrupted calls */
    MYSQL                             *connected;
    MYSQL_RES                         *res;
    int                                ret;
    MYSQL_STMT                        *stmt;      /* of the call */

    /* prepared statements, by slot and by rows (ops in a batch) */
    MYSQL_STMT     *stmts[NGX_HTTP_IDEMPOTENCY_STMTS]
                         [NGX_HTTP_IDEMPOTENCY_BATCH_MAX];
    u_char          ready[NGX_HTTP_IDEMPOTENCY_STMTS]
                         [NGX_HTTP_IDEMPOTENCY_BATCH_MAX];
    ngx_uint_t                         nbatch;    /* rows of conn->op's */
    MYSQL_BIND                         bind[NGX_HTTP_IDEMPOTENCY_MAX_BINDS];

    int                                events;    /* the driver's mask */
    ngx_uint_t                         state;
    ngx_uint_t                         nresults;
    ngx_msec_t                         started;   /* its connect */
    ngx_msec_t                         running;   /* since: conn->op */

    ngx_event_t                        timer;     /* connect_timeout */
    ngx_event_t                        wait;      /* MYSQL_WAIT_TIMEOUT */

    unsigned                           reused:1;
    unsigned                           unbound:1; /* counted in nunbound */
    unsigned                           nonblocking:1; /* TLS, see ..._ssl */
} ngx_http_idempotency_mysql_conn_t;


static void ngx_http_idempotency_mysql_enqueue(
    ngx_http_idempotency_mysql_conns_t *conns, ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_mysql_dequeue(ngx_http_idempotency_op_t *op);
static ngx_http_idempotency_mysql_conns_t *ngx_http_idempotency_mysql_conns(
    ngx_http_idempotency_shard_t *shard);
static void ngx_http_idempotency_mysql_kick(
    ngx_http_idempotency_mysql_conns_t *conns);
static void ngx_http_idempotency_mysql_fail_waiting(
    ngx_http_idempotency_mysql_conns_t *conns);
static ngx_int_t ngx_http_idempotency_mysql_open(
    ngx_http_idempotency_mysql_conns_t *conns, ngx_http_idempotency_op_t *op);
static MYSQL *ngx_http_idempotency_mysql_handle(
    ngx_http_idempotency_shard_t *shard);
static ngx_int_t ngx_http_idempotency_mysql_ssl(MYSQL *mysql,
    ngx_http_idempotency_store_t *store);
static int ngx_http_idempotency_mysql_handshake_wait(my_socket s,
    my_bool is_read, int timeout);
static ngx_int_t ngx_http_idempotency_mysql_nonblocking(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_socket_t s);
static ngx_int_t ngx_http_idempotency_mysql_connected(
    ngx_http_idempotency_mysql_conn_t *conn);
static ngx_int_t ngx_http_idempotency_mysql_connect_failed(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t err, u_char *text,
    size_t len);
static void ngx_http_idempotency_mysql_connect_timeout(ngx_event_t *ev);
static ngx_int_t ngx_http_idempotency_mysql_start(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_http_idempotency_op_t *op);
static int ngx_http_idempotency_mysql_prepare(
    ngx_http_idempotency_mysql_conn_t *conn);
static int ngx_http_idempotency_mysql_execute(
    ngx_http_idempotency_mysql_conn_t *conn);
static void ngx_http_idempotency_mysql_bind(MYSQL_BIND *b,
    ngx_http_idempotency_param_t *pm);
static ngx_int_t ngx_http_idempotency_mysql_process(
    ngx_http_idempotency_mysql_conn_t *conn, int status);
static ngx_int_t ngx_http_idempotency_mysql_suspend(
    ngx_http_idempotency_mysql_conn_t *conn, int status);
static ngx_int_t ngx_http_idempotency_mysql_query_step(
    ngx_http_idempotency_mysql_conn_t *conn, int *status);
static ngx_int_t ngx_http_idempotency_mysql_stmt_step(
    ngx_http_idempotency_mysql_conn_t *conn, int *status);
static int ngx_http_idempotency_mysql_cont(
    ngx_http_idempotency_mysql_conn_t *conn, int ready);
static ngx_int_t ngx_http_idempotency_mysql_result(
    ngx_http_idempotency_mysql_conn_t *conn);
static void ngx_http_idempotency_mysql_stmts_free(
    ngx_http_idempotency_mysql_conn_t *conn);
static ngx_int_t ngx_http_idempotency_mysql_failed(
    ngx_http_idempotency_mysql_conn_t *conn);
static ngx_int_t ngx_http_idempotency_mysql_prepare_again(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t err,
    const char *text);
static ngx_int_t ngx_http_idempotency_mysql_rerun(
    ngx_http_idempotency_mysql_conn_t *conn);
static ngx_int_t ngx_http_idempotency_mysql_lost_idle(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t err,
    const char *text);
static ngx_int_t ngx_http_idempotency_mysql_done(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t rc);
static ngx_int_t ngx_http_idempotency_mysql_abort_op(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t rc, char *text);
static void ngx_http_idempotency_mysql_next(
    ngx_http_idempotency_mysql_conn_t *conn);
static void ngx_http_idempotency_mysql_park(
    ngx_http_idempotency_mysql_conn_t *conn);
static ngx_int_t ngx_http_idempotency_mysql_wait(
    ngx_http_idempotency_mysql_conn_t *conn, int status);
static void ngx_http_idempotency_mysql_resume(
    ngx_http_idempotency_mysql_conn_t *conn, int ready);
static void ngx_http_idempotency_mysql_event_handler(ngx_event_t *ev);
static void ngx_http_idempotency_mysql_wait_handler(ngx_event_t *ev);
static void ngx_http_idempotency_mysql_idle_check(
    ngx_http_idempotency_mysql_conn_t *conn);
static ngx_socket_t ngx_http_idempotency_mysql_socket(
    ngx_http_idempotency_mysql_conn_t *conn);
static ngx_int_t ngx_http_idempotency_mysql_wrap(
    ngx_http_idempotency_mysql_conn_t *conn);
static void ngx_http_idempotency_mysql_unwrap(
    ngx_http_idempotency_mysql_conn_t *conn);
static void ngx_http_idempotency_mysql_close(
    ngx_http_idempotency_mysql_conn_t *conn);
static void ngx_http_idempotency_mysql_discard(
    ngx_http_idempotency_mysql_conn_t *conn);
static void ngx_http_idempotency_mysql_gather(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_http_idempotency_op_t *op);
static size_t ngx_http_idempotency_mysql_op_size(
    ngx_http_idempotency_op_t *op);
static ngx_int_t ngx_http_idempotency_mysql_executed(
    ngx_http_idempotency_mysql_conn_t *conn);
static ngx_int_t ngx_http_idempotency_mysql_unbatch(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t single);
static ngx_int_t ngx_http_idempotency_mysql_requeue(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t single);
static ngx_int_t ngx_http_idempotency_mysql_batch_failed(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t err,
    const char *text);
static ngx_uint_t ngx_http_idempotency_mysql_batch_error(ngx_uint_t err);
static void ngx_http_idempotency_mysql_unsent(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_mysql_finish_all(
    ngx_http_idempotency_op_t *op, ngx_uint_t rc);
static void ngx_http_idempotency_mysql_flush(ngx_event_t *ev);
static void ngx_http_idempotency_mysql_rescue(
    ngx_http_idempotency_mysql_conns_t *conns);
static ngx_http_idempotency_op_t *ngx_http_idempotency_mysql_startable(
    ngx_http_idempotency_mysql_conns_t *conns);
static void ngx_http_idempotency_mysql_op_timeout(ngx_event_t *ev);
static void ngx_http_idempotency_mysql_timed_out(
    ngx_http_idempotency_op_t *op, ngx_uint_t waiting);
static void ngx_http_idempotency_mysql_op_finish(
    ngx_http_idempotency_op_t *op, ngx_uint_t rc);
static void ngx_http_idempotency_mysql_op_posted(ngx_event_t *ev);
static void ngx_http_idempotency_mysql_op_down(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_mysql_op_error(
    ngx_http_idempotency_op_t *op, ngx_uint_t err, u_char *text, size_t len);
static ngx_http_idempotency_cause_e ngx_http_idempotency_mysql_cause(
    ngx_uint_t err);
static void ngx_http_idempotency_mysql_op_drop(ngx_http_idempotency_op_t *op);


/* what is left of the connect_timeout of the connect being resumed */
static ngx_msec_t  ngx_http_idempotency_mysql_handshake_left;


ngx_http_idempotency_op_t *
ngx_http_idempotency_op_create(ngx_http_idempotency_shard_t *shard,
    ngx_log_t *log, size_t sql_size)
{
    ngx_pool_t                 *pool;
    ngx_http_idempotency_op_t  *op;

    pool = ngx_create_pool(4096, log);
    if (pool == NULL) {
        return NULL;
    }

    op = ngx_pcalloc(pool, sizeof(ngx_http_idempotency_op_t));
    if (op == NULL) {
        ngx_destroy_pool(pool);
        return NULL;
    }

    op->sql.data = ngx_pnalloc(pool, sql_size ? sql_size : 1);
    if (op->sql.data == NULL) {
        ngx_destroy_pool(pool);
        return NULL;
    }

    op->pool = pool;
    op->log = log;
    op->shard = shard;
    op->name = "query";

    /*
     * op->timer.handler stays NULL until ngx_http_idempotency_op_run():
     * ngx_http_idempotency_op_detach() uses that to tell an op that
     * never ran
     */

    op->timer.data = op;
    op->timer.log = log;

    return op;
}


void
ngx_http_idempotency_op_run(ngx_http_idempotency_op_t *op)
{
    ngx_queue_t                         *q;
    ngx_http_idempotency_store_t        *store;
    ngx_http_idempotency_mysql_conn_t   *conn;
    ngx_http_idempotency_mysql_conns_t  *conns;

    op->timer.handler = ngx_http_idempotency_mysql_op_timeout;
    op->timer.data = op;
    op->timer.log = op->log;
    op->started = ngx_current_msec;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, op->log, 0,
                   "idempotency mysql %s start: mysql=%V, %uz bytes",
                   op->name, &op->shard->name, op->sql.len);

    conns = ngx_http_idempotency_mysql_conns(op->shard);
    if (conns == NULL) {
        ngx_http_idempotency_mysql_op_error(op, CR_OUT_OF_MEMORY,
                                            (u_char *) "out of memory", 13);
        ngx_http_idempotency_mysql_op_finish(op,
                                             NGX_HTTP_IDEMPOTENCY_OP_DOWN);
        return;
    }

    store = conns->store;

    /* the deadline covers the wait for a connection and the execution */

    if (store->query_timeout) {
        ngx_add_timer(&op->timer, store->query_timeout);
    }

    if (op->batch && !ngx_queue_empty(&conns->idle)) {

        /*
         * started at the end of this event loop iteration, with the ops
         * of its kind that the iteration adds meanwhile: under load, one
         * statement for many requests, and never a wait without load
         */

        ngx_http_idempotency_mysql_enqueue(conns, op);

        if (!conns->flush.posted) {
            ngx_post_event(&conns->flush, &ngx_posted_events);
        }

        return;
    }

    if (!ngx_queue_empty(&conns->idle)) {
        q = ngx_queue_head(&conns->idle);
        ngx_queue_remove(q);
        ngx_queue_insert_tail(&conns->busy, q);

        conn = ngx_queue_data(q, ngx_http_idempotency_mysql_conn_t, queue);

        /* _start right away: it returns a wait mask if it has to wait */

        if (ngx_http_idempotency_mysql_start(conn, op) == NGX_OK) {
            ngx_http_idempotency_mysql_next(conn);
        }

        return;
    }

    if (ngx_http_idempotency_outage_backoff(&conns->outage)) {

        /* no new connection for a while: a busy one may serve it */

        if (conns->nconns == 0) {
            ngx_http_idempotency_mysql_op_down(op);
            return;
        }

    } else if (conns->nconns < store->conns_max
               && !(conns->outage.down && conns->nconnect))
    {
        /* a new connection will be made for it */

        ngx_http_idempotency_mysql_enqueue(conns, op);
        ngx_http_idempotency_mysql_kick(conns);
        return;
    }

    if (!op->urgent
        && conns->nwaiting >= store->wait_queue + conns->nunbound)
    {
        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, op->log, 0,
                       "idempotency mysql %s: connections busy, "
                       "%ui connections, %ui waiting",
                       op->name, conns->nconns, conns->nwaiting);

        ngx_http_idempotency_mysql_op_finish(op,
                                             NGX_HTTP_IDEMPOTENCY_OP_BUSY);
        return;
    }

    ngx_http_idempotency_mysql_enqueue(conns, op);
}


/* urgent ops wait behind urgent ones only, the others in arrival order */

static void
ngx_http_idempotency_mysql_enqueue(ngx_http_idempotency_mysql_conns_t *conns,
    ngx_http_idempotency_op_t *op)
{
    ngx_queue_t                *q;
    ngx_http_idempotency_op_t  *w;

    conns->nwaiting++;

    if (!op->urgent) {
        ngx_queue_insert_tail(&conns->waiting, &op->queue);
        return;
    }

    for (q = ngx_queue_head(&conns->waiting);
         q != ngx_queue_sentinel(&conns->waiting);
         q = ngx_queue_next(q))
    {
        w = ngx_queue_data(q, ngx_http_idempotency_op_t, queue);

        if (!w->urgent) {
            break;
        }
    }

    /* before q: the first non-urgent op, or the sentinel (the tail) */
    ngx_queue_insert_tail(q, &op->queue);
}


/* out of the wait queue, if in it: op->queue.next is NULL when not */

static void
ngx_http_idempotency_mysql_dequeue(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_mysql_conns_t  *conns;

    if (op->queue.next) {
        conns = op->shard->conns;

        ngx_queue_remove(&op->queue);
        op->queue.prev = NULL;
        op->queue.next = NULL;
        conns->nwaiting--;
    }
}


ngx_int_t
ngx_http_idempotency_op_bytes(ngx_http_idempotency_op_t *op, u_char *data,
    size_t len)
{
    u_char  *p;

    p = NULL;

    if (data) {
        p = ngx_pnalloc(op->pool, len ? len : 1);
        if (p == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(p, data, len);
    }

    ngx_http_idempotency_op_ref(op, p, len);

    return NGX_OK;
}


void
ngx_http_idempotency_op_ref(ngx_http_idempotency_op_t *op, u_char *data,
    size_t len)
{
    ngx_http_idempotency_param_t  *pm;

    pm = &op->params[op->nparams++];

    pm->data = data;
    pm->len = data ? len : 0;
    pm->is_num = 0;
}


void
ngx_http_idempotency_op_num(ngx_http_idempotency_op_t *op, long long num)
{
    ngx_http_idempotency_param_t  *pm;

    pm = &op->params[op->nparams++];

    pm->data = NULL;
    pm->len = 0;
    pm->num = num;
    pm->is_num = 1;
}


ngx_pool_t *
ngx_http_idempotency_op_take_pool(ngx_http_idempotency_op_t *op)
{
    op->keep_pool = 1;

    return op->pool;
}


ngx_uint_t
ngx_http_idempotency_op_unsure(ngx_http_idempotency_op_t *op)
{
    switch (op->rc) {

    case NGX_HTTP_IDEMPOTENCY_OP_TIMEOUT:
        return op->sent;

    case NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR:
        return (op->sent && op->err >= CR_MIN_ERROR
                && op->err <= CR_MAX_ERROR)
               || op->err == ER_CONNECTION_KILLED
               || op->err == ER_SERVER_SHUTDOWN;

    default:
        return 0;
    }
}


void
ngx_http_idempotency_op_detach(ngx_http_idempotency_op_t *op)
{
    op->handler = NULL;
    op->data = NULL;

    /* the requester's log may go away with its connection */

    op->log = ngx_cycle->log;
    op->pool->log = ngx_cycle->log;
    op->timer.log = ngx_cycle->log;

    if (op->timer.handler == NULL) {
        /* never ran */
        ngx_destroy_pool(op->pool);
    }
}


void
ngx_http_idempotency_mysql_stats(ngx_http_idempotency_shard_t *shard,
    ngx_http_idempotency_conns_stats_t *st)
{
    ngx_queue_t                         *q;
    ngx_http_idempotency_mysql_conns_t  *conns;

    ngx_memzero(st, sizeof(ngx_http_idempotency_conns_stats_t));
    st->up = 1;

    conns = shard->conns;

    if (conns == NULL) {
        return;
    }

    st->up = !conns->outage.down;
    st->queued = conns->nwaiting;

    for (q = ngx_queue_head(&conns->idle);
         q != ngx_queue_sentinel(&conns->idle);
         q = ngx_queue_next(q))
    {
        st->idle++;
    }

    for (q = ngx_queue_head(&conns->busy);
         q != ngx_queue_sentinel(&conns->busy);
         q = ngx_queue_next(q))
    {
        st->busy++;
    }
}


void
ngx_http_idempotency_mysql_exit(ngx_cycle_t *cycle)
{
    ngx_uint_t                           i, j;
    ngx_queue_t                         *q;
    ngx_http_idempotency_shard_t        *shard;
    ngx_http_idempotency_store_t       **stores;
    ngx_http_idempotency_main_conf_t    *imcf;
    ngx_http_idempotency_mysql_conn_t   *conn;
    ngx_http_idempotency_mysql_conns_t  *conns;

    imcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_idempotency_module);
    if (imcf == NULL || imcf->stores.nelts == 0) {
        return;
    }

    stores = imcf->stores.elts;

    for (i = 0; i < imcf->stores.nelts; i++) {

        shard = stores[i]->shards.elts;

        for (j = 0; j < stores[i]->shards.nelts; j++) {

            conns = shard[j].conns;
            if (conns == NULL) {
                continue;
            }

            /* the process is going away: ops are dropped, not answered */

            if (conns->flush.posted) {
                ngx_delete_posted_event(&conns->flush);
            }

            if (conns->slow.timer_set) {
                ngx_del_timer(&conns->slow);
            }

            while (!ngx_queue_empty(&conns->waiting)) {
                q = ngx_queue_head(&conns->waiting);
                ngx_http_idempotency_mysql_op_drop(
                    ngx_queue_data(q, ngx_http_idempotency_op_t, queue));
            }

            while (!ngx_queue_empty(&conns->busy)) {
                q = ngx_queue_head(&conns->busy);
                conn = ngx_queue_data(q, ngx_http_idempotency_mysql_conn_t,
                                      queue);

                if (conn->op) {
                    ngx_http_idempotency_mysql_op_drop(conn->op);
                    conn->op = NULL;
                }

                /* state unknown: aborted without waiting, as at run time */
                ngx_http_idempotency_mysql_discard(conn);
            }

            while (!ngx_queue_empty(&conns->idle)) {
                q = ngx_queue_head(&conns->idle);
                conn = ngx_queue_data(q, ngx_http_idempotency_mysql_conn_t,
                                      queue);

                ngx_queue_remove(q);
                conns->nconns--;

                /* a polite COM_QUIT, never waited for, even at exit */
                ngx_http_idempotency_mysql_close(conn);
            }

            shard[j].conns = NULL;
        }
    }

    /* the driver's global state (plugins, charsets) */
    mysql_library_end();
}


/*
 * Conns: a shard's connections in this worker, and making one (connect,
 * TLS, the session).
 */


static ngx_http_idempotency_mysql_conns_t *
ngx_http_idempotency_mysql_conns(ngx_http_idempotency_shard_t *shard)
{
    ngx_http_idempotency_mysql_conns_t  *conns;

    if (shard->conns) {
        return shard->conns;
    }

    /* per worker: the configuration is private to the process after fork */

    conns = ngx_pcalloc(ngx_cycle->pool,
                        sizeof(ngx_http_idempotency_mysql_conns_t));
    if (conns == NULL) {
        return NULL;
    }

    conns->shard = shard;
    conns->store = shard->store;
    conns->log = ngx_cycle->log;

    ngx_queue_init(&conns->idle);
    ngx_queue_init(&conns->busy);
    ngx_queue_init(&conns->waiting);
    ngx_queue_init(&conns->spare);

    conns->flush.handler = ngx_http_idempotency_mysql_flush;
    conns->flush.data = conns;
    conns->flush.log = conns->log;

    conns->slow.handler = ngx_http_idempotency_mysql_flush;
    conns->slow.data = conns;
    conns->slow.log = conns->log;
    conns->slow.cancelable = 1;

    ngx_http_idempotency_outage_init(&conns->outage, conns->log,
                                     &shard->store->name, "mysql",
                                     &shard->name);

    shard->conns = conns;

    return conns;
}


/* make connections for queued ops while there may be more */

static void
ngx_http_idempotency_mysql_kick(ngx_http_idempotency_mysql_conns_t *conns)
{
    while (conns->nwaiting > conns->nunbound
           && conns->nconns < conns->store->conns_max)
    {
        if (ngx_http_idempotency_outage_backoff(&conns->outage)) {
            if (conns->nconns == 0) {
                ngx_http_idempotency_mysql_fail_waiting(conns);
            }

            return;
        }

        if (conns->outage.down && conns->nconnect) {
            /* one probe at a time while the server is down */
            return;
        }

        if (ngx_http_idempotency_mysql_open(conns, NULL) != NGX_OK) {
            if (conns->nconns == 0) {
                ngx_http_idempotency_mysql_fail_waiting(conns);
            }

            return;
        }
    }
}


static void
ngx_http_idempotency_mysql_fail_waiting(
    ngx_http_idempotency_mysql_conns_t *conns)
{
    ngx_queue_t  *q;

    while (!ngx_queue_empty(&conns->waiting)) {
        q = ngx_queue_head(&conns->waiting);
        ngx_http_idempotency_mysql_op_down(
            ngx_queue_data(q, ngx_http_idempotency_op_t, queue));
    }
}


/*
 * Starts a connection; with "op" the connection is made for that op
 * (a retry), otherwise it serves the head of the queue when ready.
 */

static ngx_int_t
ngx_http_idempotency_mysql_open(ngx_http_idempotency_mysql_conns_t *conns,
    ngx_http_idempotency_op_t *op)
{
    int                                 status;
    char                               *host, *sock;
    MYSQL                              *mysql;
    ngx_int_t                           rc;
    ngx_queue_t                        *q;
    ngx_http_idempotency_shard_t       *shard;
    ngx_http_idempotency_store_t       *store;
    ngx_http_idempotency_mysql_conn_t  *conn;

    shard = conns->shard;
    store = conns->store;

    if (!ngx_queue_empty(&conns->spare)) {
        q = ngx_queue_head(&conns->spare);
        ngx_queue_remove(q);
        conn = ngx_queue_data(q, ngx_http_idempotency_mysql_conn_t, queue);
        ngx_memzero(conn, sizeof(ngx_http_idempotency_mysql_conn_t));

    } else {
        conn = ngx_pcalloc(ngx_cycle->pool,
                           sizeof(ngx_http_idempotency_mysql_conn_t));
        if (conn == NULL) {
            goto failed;
        }
    }

    mysql = ngx_http_idempotency_mysql_handle(shard);
    if (mysql == NULL) {
        ngx_queue_insert_head(&conns->spare, &conn->queue);
        goto failed;
    }

    host = shard->socket.len ? NULL : (char *) shard->host.data;
    sock = shard->socket.len ? (char *) shard->socket.data : NULL;

    conn->conns = conns;
    conn->mysql = mysql;
    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_CONNECT;
    conn->started = ngx_current_msec;

    conn->op = op;

    if (op) {
        op->conn = conn;

    } else {
        conn->unbound = 1;
        conns->nunbound++;
    }

    ngx_queue_insert_tail(&conns->busy, &conn->queue);
    conns->nconns++;
    conns->nconnect++;

    /* conn timers never hold a worker: an op's own timer does */

    conn->timer.handler = ngx_http_idempotency_mysql_connect_timeout;
    conn->timer.data = conn;
    conn->timer.log = conns->log;
    conn->timer.cancelable = 1;

    conn->wait.handler = ngx_http_idempotency_mysql_wait_handler;
    conn->wait.data = conn;
    conn->wait.log = conns->log;
    conn->wait.cancelable = 1;

    if (store->connect_timeout) {
        ngx_add_timer(&conn->timer, store->connect_timeout);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, conns->log, 0,
                   "idempotency mysql connect: store \"%V\" mysql=%V",
                   &store->name, &shard->name);

    ngx_http_idempotency_mysql_handshake_left = store->connect_timeout;

    status = mysql_real_connect_start(&conn->connected, mysql, host,
                                      (char *) store->user.data,
                                      (char *) store->password.data,
                                      (char *) store->database.data,
                                      shard->port, sock,
                                      CLIENT_MULTI_STATEMENTS
                                      |CLIENT_MULTI_RESULTS);

    rc = ngx_http_idempotency_mysql_process(conn, status);

    if (rc == NGX_OK) {
        ngx_http_idempotency_mysql_next(conn);
    }

    return NGX_OK;

failed:

    ngx_log_error(NGX_LOG_ALERT, conns->log, 0,
                  "idempotency store \"%V\" mysql=%V: "
                  "could not allocate a connection",
                  &store->name, &shard->name);

    if (op) {
        ngx_http_idempotency_mysql_op_error(op, CR_OUT_OF_MEMORY,
                                            (u_char *) "out of memory", 13);
        ngx_http_idempotency_mysql_op_finish(op,
                                             NGX_HTTP_IDEMPOTENCY_OP_DOWN);
    }

    return NGX_ERROR;
}


/*
 * A client handle with every option the module relies on: non-blocking,
 * no LOCAL INFILE, the session set on connect, TLS as configured; NULL
 * on failure.
 */

static MYSQL *
ngx_http_idempotency_mysql_handle(ngx_http_idempotency_shard_t *shard)
{
    MYSQL         *mysql;
    unsigned int   protocol, off;

    mysql = mysql_init(NULL);
    if (mysql == NULL) {
        return NULL;
    }

    protocol = shard->socket.len ? MYSQL_PROTOCOL_SOCKET
                                 : MYSQL_PROTOCOL_TCP;
    off = 0;

    if (mysql_options(mysql, MYSQL_OPT_NONBLOCK, 0) != 0
        || mysql_options(mysql, MYSQL_OPT_PROTOCOL, &protocol) != 0
        || mysql_options(mysql, MYSQL_OPT_LOCAL_INFILE, &off) != 0
        || mysql_options(mysql, MYSQL_SET_CHARSET_NAME, "utf8mb4") != 0
        || mysql_options(mysql, MYSQL_INIT_COMMAND,
                         NGX_HTTP_IDEMPOTENCY_MYSQL_INIT_COMMAND) != 0
        || ngx_http_idempotency_mysql_ssl(mysql, shard->store) != NGX_OK)
    {
        /* never connected: returns at once, only frees memory */
        (void) mysql_close_start(mysql);
        return NULL;
    }

    return mysql;
}


/*
 * TLS is a step of mysql_real_connect_start/_cont, between the server's
 * greeting and the authentication; a failed handshake (a bad certificate,
 * a server without TLS) fails the connect with its reason.
 *
 * Connector/C 3.3 is not fully non-blocking with TLS (CONC-594): it puts
 * its socket back in blocking mode once TCP is connected, where
 * SSL_read() and SSL_write(), which cannot pass MSG_DONTWAIT, would hold
 * the worker for every answer of the server; and inside SSL_connect() it
 * waits with poll() instead of suspending.  So the socket is made
 * non-blocking again (..._nonblocking(): SSL_read() and SSL_write() then
 * suspend as they should), and the one wait left, the server's part of
 * the handshake, is bounded by the connect_timeout.
 */

static ngx_int_t
ngx_http_idempotency_mysql_ssl(MYSQL *mysql,
    ngx_http_idempotency_store_t *store)
{
    my_bool  on, verify;

    if (store->ssl == NGX_HTTP_IDEMPOTENCY_SSL_OFF) {
        return NGX_OK;
    }

    on = 1;
    verify = (store->ssl == NGX_HTTP_IDEMPOTENCY_SSL_VERIFY);

    if (mysql_optionsv(mysql, MYSQL_OPT_SSL_ENFORCE, &on) != 0
        || mysql_optionsv(mysql, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify)
           != 0
        || mysql_optionsv(mysql, MARIADB_OPT_IO_WAIT,
                          ngx_http_idempotency_mysql_handshake_wait)
           != 0)
    {
        return NGX_ERROR;
    }

    if (store->ssl_ca.len
        && mysql_optionsv(mysql, MYSQL_OPT_SSL_CA, store->ssl_ca.data) != 0)
    {
        return NGX_ERROR;
    }

    if (store->ssl_cert.len
        && (mysql_optionsv(mysql, MYSQL_OPT_SSL_CERT, store->ssl_cert.data)
            != 0
            || mysql_optionsv(mysql, MYSQL_OPT_SSL_KEY, store->ssl_key.data)
               != 0))
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* the driver's wait for a socket, which it uses in the TLS handshake */

static int
ngx_http_idempotency_mysql_handshake_wait(my_socket s, my_bool is_read,
    int timeout)
{
    int            n;
    struct pollfd  pfd;

    pfd.fd = s;
    pfd.events = is_read ? POLLIN : POLLOUT;
    pfd.revents = 0;

    do {
        n = poll(&pfd, 1, (int) ngx_http_idempotency_mysql_handshake_left);
    } while (n == -1 && ngx_errno == NGX_EINTR);

    return n;
}


static ngx_int_t
ngx_http_idempotency_mysql_nonblocking(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_socket_t s)
{
    if (conn->nonblocking
        || conn->conns->store->ssl == NGX_HTTP_IDEMPOTENCY_SSL_OFF)
    {
        return NGX_OK;
    }

    /* the driver keeps the mode it set in a copy: it never resets ours */

    if (ngx_nonblocking(s) == -1) {
        ngx_log_error(NGX_LOG_ALERT, conn->conns->log, ngx_socket_errno,
                      ngx_nonblocking_n " failed");
        return NGX_ERROR;
    }

    conn->nonblocking = 1;

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_mysql_connected(ngx_http_idempotency_mysql_conn_t *conn)
{
    const char                          *text;
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = conn->conns;

    if (conn->connected == NULL) {
        text = mysql_error(conn->mysql);

        return ngx_http_idempotency_mysql_connect_failed(conn,
                                  mysql_errno(conn->mysql),
                                  (u_char *) text, ngx_strlen(text));
    }

    /*
     * Connector/C 3.3 goes on in clear text when a server does not
     * offer TLS, unless the certificate is verified
     */

    if (conns->store->ssl != NGX_HTTP_IDEMPOTENCY_SSL_OFF
        && mysql_get_ssl_cipher(conn->mysql) == NULL)
    {
        text = "TLS is required (\"ssl=\"), but the server does not "
               "offer it";

        return ngx_http_idempotency_mysql_connect_failed(conn,
                                  CR_SSL_CONNECTION_ERROR,
                                  (u_char *) text, ngx_strlen(text));
    }

    /* if the connect never had to wait for a read */

    if (ngx_http_idempotency_mysql_nonblocking(conn,
                                  (ngx_socket_t) mysql_get_socket(conn->mysql))
        != NGX_OK)
    {
        text = ngx_nonblocking_n " failed";

        return ngx_http_idempotency_mysql_connect_failed(conn,
                                  CR_UNKNOWN_ERROR,
                                  (u_char *) text, ngx_strlen(text));
    }

    if (conn->timer.timer_set) {
        ngx_del_timer(&conn->timer);
    }

    conns->nconnect--;

    if (conn->unbound) {
        conn->unbound = 0;
        conns->nunbound--;
    }

    ngx_http_idempotency_outage_over(&conns->outage);

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, conns->log, 0,
                   "idempotency mysql connected: mysql=%V, "
                   "thread id %ui, %ui connections",
                   &conns->shard->name,
                   (ngx_uint_t) mysql_thread_id(conn->mysql), conns->nconns);

    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_IDLE;
    conn->events = 0;
    conn->reused = 0;

    op = conn->op;

    if (op) {
        conn->op = NULL;
        op->conn = NULL;
        return ngx_http_idempotency_mysql_start(conn, op);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_mysql_connect_failed(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t err, u_char *text,
    size_t len)
{
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = conn->conns;

    len = ngx_min(len, NGX_HTTP_IDEMPOTENCY_MYSQL_ERRLEN);
    ngx_memcpy(conns->last_error, text, len);
    conns->last_error_len = len;
    conns->last_err = err;

    /* the driver's text never has the password */

    if (err) {
        ngx_http_idempotency_outage_failed(&conns->outage, conn->started,
                                           "connect failed: (%ui) %*s",
                                           err, len, text);
    } else {
        ngx_http_idempotency_outage_failed(&conns->outage, conn->started,
                                           "connect failed: %*s", len, text);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, conns->log, 0,
                   "idempotency mysql connect failed: mysql=%V, (%ui), "
                   "backoff %M",
                   &conns->shard->name, err, conns->outage.backoff);

    op = conn->op;

    if (op) {
        conn->op = NULL;
        op->conn = NULL;
    }

    ngx_http_idempotency_mysql_discard(conn);

    if (op) {
        ngx_http_idempotency_mysql_op_down(op);
    }

    /*
     * The ops that wait are another connection's to serve, when there is
     * one: a failed connect fails only the op it was made for.  With no
     * connection left, none of them will be served during the backoff.
     */

    if (conns->nconns == 0) {
        ngx_http_idempotency_mysql_fail_waiting(conns);
    }

    return NGX_DONE;
}


static void
ngx_http_idempotency_mysql_connect_timeout(ngx_event_t *ev)
{
    u_char                             *p;
    u_char                              text[64];
    ngx_http_idempotency_mysql_conn_t  *conn;

    conn = ev->data;

    p = ngx_snprintf(text, sizeof(text), "timed out (%M ms)",
                     conn->conns->store->connect_timeout);

    (void) ngx_http_idempotency_mysql_connect_failed(conn, 0, text,
                                                     p - text);
}


/*
 * A connection's calls: an op's statement started and driven by the
 * driver's wait masks through nginx events, its result or its failure,
 * and the connection parked, watched while idle, or discarded.
 */


/*
 * The ..._start/_process/_done/_failed family returns:
 *   NGX_AGAIN  the connection waits for the driver's socket;
 *   NGX_OK     the connection is free (the caller gives it work or
 *              parks it, see ngx_http_idempotency_mysql_next());
 *   NGX_DONE   the connection is gone; do not touch it.
 */

static ngx_int_t
ngx_http_idempotency_mysql_start(ngx_http_idempotency_mysql_conn_t *conn,
    ngx_http_idempotency_op_t *op)
{
    int  status;

    conn->op = op;
    op->conn = conn;
    op->sent = 1;
    op->thread = (ngx_uint_t) mysql_thread_id(conn->mysql);

    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_QUERY;
    conn->nresults = 0;
    conn->running = ngx_current_msec;

    op->err = 0;
    op->cause = NGX_HTTP_IDEMPOTENCY_CAUSE_NONE;
    ngx_str_null(&op->err_text);
    op->affected_rows = 0;
    op->nrows = 0;
    op->nfields = 0;

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, op->log, 0,
                   "idempotency mysql %s: %s on mysql=%V thread id %ui%s",
                   op->name, op->stmt ? "execute" : "query",
                   &op->shard->name,
                   (ngx_uint_t) mysql_thread_id(conn->mysql),
                   conn->reused ? " (reused)" : "");

    conn->nbatch = 1;

    if (op->stmt == 0) {
        status = mysql_real_query_start(&conn->ret, conn->mysql,
                                        (const char *) op->sql.data,
                                        op->sql.len);

    } else {
        if (op->batch && !op->single) {
            ngx_http_idempotency_mysql_gather(conn, op);
        }

        status = conn->ready[op->stmt][conn->nbatch - 1]
                 ? ngx_http_idempotency_mysql_execute(conn)
                 : ngx_http_idempotency_mysql_prepare(conn);
    }

    if (status < 0) {
        return ngx_http_idempotency_mysql_abort_op(conn,
                                  NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR,
                                  "could not set up a prepared statement");
    }

    return ngx_http_idempotency_mysql_process(conn, status);
}


/*
 * The first op of a slot (and of a number of rows) on this connection
 * prepares its statement: the server parses it once per connection
 * instead of once per request.  Returns the driver's wait mask, or -1
 * when nothing could be sent.
 */

static int
ngx_http_idempotency_mysql_prepare(ngx_http_idempotency_mysql_conn_t *conn)
{
    my_bool                     on;
    ngx_str_t                  *text;
    MYSQL_STMT                 *stmt;
    ngx_http_idempotency_op_t  *op;

    op = conn->op;
    stmt = conn->stmts[op->stmt][conn->nbatch - 1];

    text = (conn->nbatch == 1) ? &op->sql
                               : op->batch(op->shard, conn->nbatch);
    if (text == NULL) {
        return -1;
    }

    if (stmt == NULL) {
        stmt = mysql_stmt_init(conn->mysql);
        if (stmt == NULL) {
            return -1;
        }

        /* a stored result then tells the longest value of each column */
        on = 1;
        (void) mysql_stmt_attr_set(stmt, STMT_ATTR_UPDATE_MAX_LENGTH, &on);

        conn->stmts[op->stmt][conn->nbatch - 1] = stmt;
    }

    conn->stmt = stmt;
    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_PREPARE;

    return mysql_stmt_prepare_start(&conn->ret, stmt,
                                    (const char *) text->data, text->len);
}


static int
ngx_http_idempotency_mysql_execute(ngx_http_idempotency_mysql_conn_t *conn)
{
    ngx_uint_t                  i, nb;
    const char                 *g, *c;
    MYSQL_STMT                 *stmt;
    ngx_http_idempotency_op_t  *op, *m;

    op = conn->op;
    stmt = conn->stmts[op->stmt][conn->nbatch - 1];
    nb = 0;

    if (conn->nbatch == 1) {
        for (i = 0; i < op->nparams; i++) {
            ngx_http_idempotency_mysql_bind(&conn->bind[nb++],
                                            &op->params[i]);
        }

    } else {
        for (g = op->layout; *g; g = (*c == ',') ? c + 1 : c) {

            for (m = op; m; m = m->batch_next) {
                for (c = g; *c && *c != ','; c++) {
                    if (nb == NGX_HTTP_IDEMPOTENCY_MAX_BINDS
                        || (ngx_uint_t) (*c - '0') >= m->nparams)
                    {
                        return -1;
                    }

                    ngx_http_idempotency_mysql_bind(&conn->bind[nb++],
                                                    &m->params[*c - '0']);
                }
            }

            for (c = g; *c && *c != ','; c++) { /* void */ }
        }
    }

    if (nb != mysql_stmt_param_count(stmt)) {
        return -1;
    }

    if (mysql_stmt_bind_param(stmt, conn->bind) != 0) {
        return -1;
    }

    conn->stmt = stmt;
    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_EXECUTE;

    return mysql_stmt_execute_start(&conn->ret, stmt);
}


static void
ngx_http_idempotency_mysql_bind(MYSQL_BIND *b,
    ngx_http_idempotency_param_t *pm)
{
    ngx_memzero(b, sizeof(MYSQL_BIND));

    if (pm->is_num) {
        b->buffer_type = MYSQL_TYPE_LONGLONG;
        b->buffer = &pm->num;

    } else if (pm->data == NULL) {
        b->buffer_type = MYSQL_TYPE_NULL;

    } else {
        /* sent as it is: no byte of it is ever read as SQL */
        b->buffer_type = MYSQL_TYPE_BLOB;
        b->buffer = pm->data;
        b->buffer_length = pm->len;
        b->length = &pm->len;
    }
}


/*
 * Drives the connection's call until the driver waits for its socket or
 * the call ends: status is the wait mask of the call just made.
 */

static ngx_int_t
ngx_http_idempotency_mysql_process(ngx_http_idempotency_mysql_conn_t *conn,
    int status)
{
    ngx_int_t  rc;

    for ( ;; ) {

        if (status) {
            return ngx_http_idempotency_mysql_suspend(conn, status);
        }

        switch (conn->state) {

        case NGX_HTTP_IDEMPOTENCY_MYSQL_CONNECT:
            return ngx_http_idempotency_mysql_connected(conn);

        case NGX_HTTP_IDEMPOTENCY_MYSQL_QUERY:
        case NGX_HTTP_IDEMPOTENCY_MYSQL_STORE:
        case NGX_HTTP_IDEMPOTENCY_MYSQL_NEXT:
            rc = ngx_http_idempotency_mysql_query_step(conn, &status);
            break;

        case NGX_HTTP_IDEMPOTENCY_MYSQL_PREPARE:
        case NGX_HTTP_IDEMPOTENCY_MYSQL_EXECUTE:
        case NGX_HTTP_IDEMPOTENCY_MYSQL_STMT_STORE:
            rc = ngx_http_idempotency_mysql_stmt_step(conn, &status);
            break;

        default: /* NGX_HTTP_IDEMPOTENCY_MYSQL_IDLE */
            return NGX_OK;
        }

        if (rc != NGX_DECLINED) {
            return rc;
        }
    }
}


/* the driver waits: so does the connection, for the events it asked */

static ngx_int_t
ngx_http_idempotency_mysql_suspend(ngx_http_idempotency_mysql_conn_t *conn,
    int status)
{
    if (ngx_http_idempotency_mysql_wait(conn, status) == NGX_OK) {
        return NGX_AGAIN;
    }

    if (conn->state == NGX_HTTP_IDEMPOTENCY_MYSQL_CONNECT) {
        return ngx_http_idempotency_mysql_connect_failed(conn,
                                  CR_UNKNOWN_ERROR,
                                  (u_char *) "could not add socket events",
                                  27);
    }

    return ngx_http_idempotency_mysql_abort_op(conn,
                                  NGX_HTTP_IDEMPOTENCY_OP_DOWN,
                                  "could not add socket events");
}


/*
 * The next call of a statement sent as text (query, result sets): its
 * wait mask in *status and NGX_DECLINED, or how the op ended (as for
 * ngx_http_idempotency_mysql_start()).
 */

static ngx_int_t
ngx_http_idempotency_mysql_query_step(ngx_http_idempotency_mysql_conn_t *conn,
    int *status)
{
    switch (conn->state) {

    case NGX_HTTP_IDEMPOTENCY_MYSQL_QUERY:

        if (conn->ret != 0) {
            return ngx_http_idempotency_mysql_failed(conn);
        }

        break;

    case NGX_HTTP_IDEMPOTENCY_MYSQL_STORE:

        if (conn->res == NULL && mysql_errno(conn->mysql)) {
            return ngx_http_idempotency_mysql_failed(conn);
        }

        if (ngx_http_idempotency_mysql_result(conn) != NGX_OK) {
            return ngx_http_idempotency_mysql_abort_op(conn,
                                  NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR,
                                  "out of memory");
        }

        if (!mysql_more_results(conn->mysql)) {
            return ngx_http_idempotency_mysql_done(conn,
                                                NGX_HTTP_IDEMPOTENCY_OP_OK);
        }

        conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_NEXT;
        *status = mysql_next_result_start(&conn->ret, conn->mysql);
        return NGX_DECLINED;

    default: /* NGX_HTTP_IDEMPOTENCY_MYSQL_NEXT */

        if (conn->ret > 0) {
            return ngx_http_idempotency_mysql_failed(conn);
        }

        if (conn->ret < 0) {
            return ngx_http_idempotency_mysql_done(conn,
                                                NGX_HTTP_IDEMPOTENCY_OP_OK);
        }

        break;
    }

    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_STORE;
    *status = mysql_store_result_start(&conn->res, conn->mysql);

    return NGX_DECLINED;
}


/* the next call of a prepared statement: as for query_step() */

static ngx_int_t
ngx_http_idempotency_mysql_stmt_step(ngx_http_idempotency_mysql_conn_t *conn,
    int *status)
{
    if (conn->ret != 0) {
        return ngx_http_idempotency_mysql_failed(conn);
    }

    switch (conn->state) {

    case NGX_HTTP_IDEMPOTENCY_MYSQL_PREPARE:

        conn->ready[conn->op->stmt][conn->nbatch - 1] = 1;

        *status = ngx_http_idempotency_mysql_execute(conn);

        if (*status < 0) {
            return ngx_http_idempotency_mysql_abort_op(conn,
                                  NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR,
                                  "could not bind a prepared statement");
        }

        return NGX_DECLINED;

    case NGX_HTTP_IDEMPOTENCY_MYSQL_EXECUTE:

        if (mysql_stmt_field_count(conn->stmt) == 0) {
            return ngx_http_idempotency_mysql_executed(conn);
        }

        conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_STMT_STORE;
        *status = mysql_stmt_store_result_start(&conn->ret, conn->stmt);
        return NGX_DECLINED;

    default: /* NGX_HTTP_IDEMPOTENCY_MYSQL_STMT_STORE */

        if (ngx_http_idempotency_result_stmt(conn->op, conn->stmt,
                                             conn->bind, conn->nbatch > 1)
            != NGX_OK)
        {
            return ngx_http_idempotency_mysql_abort_op(conn,
                                  NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR,
                                  "could not read a result row");
        }

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, conn->op->log, 0,
                       "idempotency mysql %s: %ui rows",
                       conn->op->name, conn->op->nrows);

        return ngx_http_idempotency_mysql_done(conn,
                                                NGX_HTTP_IDEMPOTENCY_OP_OK);
    }
}


/* calls _cont of the interrupted call, with events its mask asked for */

static int
ngx_http_idempotency_mysql_cont(ngx_http_idempotency_mysql_conn_t *conn,
    int ready)
{
    ngx_msec_int_t  left;

    switch (conn->state) {

    case NGX_HTTP_IDEMPOTENCY_MYSQL_CONNECT:
        left = conn->started + conn->conns->store->connect_timeout
               - ngx_current_msec;
        ngx_http_idempotency_mysql_handshake_left = ngx_max(left, 1);

        return mysql_real_connect_cont(&conn->connected, conn->mysql, ready);

    case NGX_HTTP_IDEMPOTENCY_MYSQL_QUERY:
        return mysql_real_query_cont(&conn->ret, conn->mysql, ready);

    case NGX_HTTP_IDEMPOTENCY_MYSQL_STORE:
        return mysql_store_result_cont(&conn->res, conn->mysql, ready);

    case NGX_HTTP_IDEMPOTENCY_MYSQL_NEXT:
        return mysql_next_result_cont(&conn->ret, conn->mysql, ready);

    case NGX_HTTP_IDEMPOTENCY_MYSQL_PREPARE:
        return mysql_stmt_prepare_cont(&conn->ret, conn->stmt, ready);

    case NGX_HTTP_IDEMPOTENCY_MYSQL_EXECUTE:
        return mysql_stmt_execute_cont(&conn->ret, conn->stmt, ready);

    case NGX_HTTP_IDEMPOTENCY_MYSQL_STMT_STORE:
        return mysql_stmt_store_result_cont(&conn->ret, conn->stmt, ready);

    default:
        return 0;
    }
}


/* one statement's result: copied into op->pool, then freed */

static ngx_int_t
ngx_http_idempotency_mysql_result(ngx_http_idempotency_mysql_conn_t *conn)
{
    MYSQL_RES                  *res;
    ngx_http_idempotency_op_t  *op;

    op = conn->op;
    res = conn->res;
    conn->res = NULL;

    if (conn->nresults++ == 0) {
        op->affected_rows = (uint64_t) mysql_affected_rows(conn->mysql);
    }

    if (res == NULL) {
        /* a statement without a result set */
        return NGX_OK;
    }

    if (ngx_http_idempotency_result_text(op, res) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, op->log, 0,
                   "idempotency mysql %s: result set %ui: %ui rows",
                   op->name, conn->nresults, op->nrows);

    return NGX_OK;
}


/*
 * After the connection is closed: the driver detached its statements
 * then, so closing them frees memory and sends nothing.
 */

static void
ngx_http_idempotency_mysql_stmts_free(ngx_http_idempotency_mysql_conn_t *conn)
{
    ngx_uint_t  i, n;

    for (i = 0; i < NGX_HTTP_IDEMPOTENCY_STMTS; i++) {
        for (n = 0; n < NGX_HTTP_IDEMPOTENCY_BATCH_MAX; n++) {
            if (conn->stmts[i][n]) {
                (void) mysql_stmt_close(conn->stmts[i][n]);
                conn->stmts[i][n] = NULL;
            }

            conn->ready[i][n] = 0;
        }
    }

    conn->stmt = NULL;
}


static ngx_int_t
ngx_http_idempotency_mysql_failed(ngx_http_idempotency_mysql_conn_t *conn)
{
    ngx_uint_t                           err;
    const char                          *text;
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conns_t  *conns;

    op = conn->op;
    conns = conn->conns;

    err = 0;
    text = "";

    if (op->stmt && conn->stmt) {
        err = mysql_stmt_errno(conn->stmt);
        text = mysql_stmt_error(conn->stmt);
    }

    if (err == 0) {
        err = mysql_errno(conn->mysql);
        text = mysql_error(conn->mysql);
    }

    if (err == 0) {
        err = CR_UNKNOWN_ERROR;
    }

    if (err == ER_UNKNOWN_STMT_HANDLER && op->stmt) {
        /* prepared again by the next op of its slot */
        conn->ready[op->stmt][conn->nbatch - 1] = 0;
    }

    if ((err == ER_UNKNOWN_STMT_HANDLER
         || err == ER_MAX_PREPARED_STMT_COUNT_REACHED)
        && op->stmt && op->batch_next == NULL && !op->again)
    {
        return ngx_http_idempotency_mysql_prepare_again(conn, err, text);
    }

    if ((err == CR_SERVER_GONE_ERROR || err == CR_SERVER_LOST)
        && conn->reused)
    {
        return ngx_http_idempotency_mysql_lost_idle(conn, err, text);
    }

    if (op->batch_next && ngx_http_idempotency_mysql_batch_error(err)) {
        return ngx_http_idempotency_mysql_batch_failed(conn, err, text);
    }

    ngx_http_idempotency_mysql_op_error(op, err, (u_char *) text,
                                        ngx_strlen(text));

    if ((err >= CR_MIN_ERROR && err <= CR_MAX_ERROR)
        || err == ER_CONNECTION_KILLED
        || err == ER_SERVER_SHUTDOWN
        || mysql_more_results(conn->mysql))
    {
        /* the connection is lost or in an unknown state */

        if (err >= CR_MIN_ERROR && err <= CR_MAX_ERROR) {
            ngx_log_error(NGX_LOG_WARN, conns->log, 0,
                          "idempotency store \"%V\" mysql=%V: %s failed: "
                          "(%ui) %s",
                          &conns->store->name, &conns->shard->name,
                          op->name, err, text);
        }

        conn->op = NULL;
        op->conn = NULL;

        ngx_http_idempotency_mysql_discard(conn);
        ngx_http_idempotency_mysql_finish_all(op,
                                        NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR);
        ngx_http_idempotency_mysql_kick(conns);

        return NGX_DONE;
    }

    /* the server said no; the connection stays usable */

    return ngx_http_idempotency_mysql_done(conn,
                                          NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR);
}


/*
 * The server no longer knows the op's statement (1243), or will not
 * prepare another one (1461): the op is prepared again and runs once
 * more, within its own deadline; after 1461 on a new connection, whose
 * statements the server has not counted yet (closing this one frees
 * this one's).
 */

static ngx_int_t
ngx_http_idempotency_mysql_prepare_again(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t err,
    const char *text)
{
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conns_t  *conns;

    op = conn->op;
    conns = conn->conns;
    op->again = 1;

    ngx_log_error(NGX_LOG_INFO, conns->log, 0,
                  "idempotency store \"%V\" mysql=%V: %s failed: "
                  "(%ui) %s, preparing it again",
                  &conns->store->name, &conns->shard->name,
                  op->name, err, text);

    if (err == ER_UNKNOWN_STMT_HANDLER) {
        return ngx_http_idempotency_mysql_start(conn, op);
    }

    return ngx_http_idempotency_mysql_rerun(conn);
}


/* the op runs once more on a new connection; this one is closed */

static ngx_int_t
ngx_http_idempotency_mysql_rerun(ngx_http_idempotency_mysql_conn_t *conn)
{
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conns_t  *conns;

    op = conn->op;
    conns = conn->conns;

    conn->op = NULL;
    op->conn = NULL;

    ngx_http_idempotency_mysql_discard(conn);

    if (ngx_http_idempotency_outage_backoff(&conns->outage)) {
        ngx_http_idempotency_mysql_op_down(op);

    } else {
        (void) ngx_http_idempotency_mysql_open(conns, op);
    }

    return NGX_DONE;
}


/*
 * The server closed a connection that had been idle: the op runs once
 * more on a new connection, within its own deadline (a batch waits for
 * one, as it was).
 */

static ngx_int_t
ngx_http_idempotency_mysql_lost_idle(ngx_http_idempotency_mysql_conn_t *conn,
    ngx_uint_t err, const char *text)
{
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conns_t  *conns;

    op = conn->op;
    conns = conn->conns;

    ngx_log_error(NGX_LOG_INFO, conns->log, 0,
                  "idempotency store \"%V\" mysql=%V: %s failed: "
                  "(%ui) %s, retrying on a new connection",
                  &conns->store->name, &conns->shard->name,
                  op->name, err, text);

    if (op->batch_next) {
        return ngx_http_idempotency_mysql_requeue(conn, 0);
    }

    return ngx_http_idempotency_mysql_rerun(conn);
}


static ngx_int_t
ngx_http_idempotency_mysql_done(ngx_http_idempotency_mysql_conn_t *conn,
    ngx_uint_t rc)
{
    ngx_http_idempotency_op_t  *op;

    op = conn->op;

    conn->op = NULL;
    op->conn = NULL;

    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_IDLE;
    conn->events = 0;
    conn->reused = 1;

    ngx_http_idempotency_mysql_finish_all(op, rc);

    return NGX_OK;
}


/* the op fails for a local reason; its connection is in an unknown state */

static ngx_int_t
ngx_http_idempotency_mysql_abort_op(ngx_http_idempotency_mysql_conn_t *conn,
    ngx_uint_t rc, char *text)
{
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conns_t  *conns;

    op = conn->op;
    conns = conn->conns;

    ngx_log_error(NGX_LOG_ALERT, conns->log, 0,
                  "idempotency store \"%V\" mysql=%V: %s failed: %s",
                  &conns->store->name, &conns->shard->name, op->name, text);

    conn->op = NULL;
    op->conn = NULL;

    ngx_http_idempotency_mysql_discard(conn);

    ngx_http_idempotency_mysql_op_error(op, CR_UNKNOWN_ERROR, (u_char *) text,
                                        ngx_strlen(text));
    ngx_http_idempotency_mysql_finish_all(op, rc);
    ngx_http_idempotency_mysql_kick(conns);

    return NGX_DONE;
}


/* a free connection: serve the queue, or park it */

static void
ngx_http_idempotency_mysql_next(ngx_http_idempotency_mysql_conn_t *conn)
{
    ngx_http_idempotency_op_t  *op;

    for ( ;; ) {

        op = ngx_http_idempotency_mysql_startable(conn->conns);

        if (op == NULL) {
            ngx_http_idempotency_mysql_park(conn);
            return;
        }

        ngx_http_idempotency_mysql_dequeue(op);

        if (ngx_http_idempotency_mysql_start(conn, op) != NGX_OK) {
            return;
        }
    }
}


static void
ngx_http_idempotency_mysql_park(ngx_http_idempotency_mysql_conn_t *conn)
{
    ngx_connection_t                    *c;
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = conn->conns;

    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_IDLE;
    conn->events = 0;

    ngx_queue_remove(&conn->queue);
    ngx_queue_insert_head(&conns->idle, &conn->queue);

    /* if everything so far completed without waiting, there is no c yet */

    if (ngx_http_idempotency_mysql_wrap(conn) != NGX_OK) {
        ngx_http_idempotency_mysql_discard(conn);
        return;
    }

    c = conn->c;

    /*
     * the read event stays armed: a server that goes away while the
     * connection is idle is noticed and the connection closed; whatever
     * arrived already is checked now, as no new edge may come for it
     */

    if (ngx_http_idempotency_conn_watch(c->write, 0) != NGX_OK
        || ngx_http_idempotency_conn_watch(c->read, 1) != NGX_OK)
    {
        ngx_http_idempotency_mysql_discard(conn);
        return;
    }

    ngx_http_idempotency_mysql_idle_check(conn);
}


static ngx_int_t
ngx_http_idempotency_mysql_wait(ngx_http_idempotency_mysql_conn_t *conn,
    int status)
{
    ngx_connection_t  *c;

    conn->events = status;

    if (ngx_http_idempotency_mysql_wrap(conn) != NGX_OK) {
        return NGX_ERROR;
    }

    c = conn->c;

    /* a read is waited for only after the TCP connect made it blocking */

    if ((status & MYSQL_WAIT_READ)
        && ngx_http_idempotency_mysql_nonblocking(conn, c->fd) != NGX_OK)
    {
        return NGX_ERROR;
    }

    /*
     * the driver asks to wait only after a read or write returned EAGAIN,
     * so an edge-triggered event cannot have been missed
     */

    if (ngx_http_idempotency_conn_watch(c->read, status & MYSQL_WAIT_READ)
        != NGX_OK
        || ngx_http_idempotency_conn_watch(c->write,
                                           status & MYSQL_WAIT_WRITE)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (status & MYSQL_WAIT_TIMEOUT) {
        ngx_add_timer(&conn->wait, mysql_get_timeout_value_ms(conn->mysql));

    } else if (conn->wait.timer_set) {
        ngx_del_timer(&conn->wait);
    }

    return NGX_OK;
}


static void
ngx_http_idempotency_mysql_resume(ngx_http_idempotency_mysql_conn_t *conn,
    int ready)
{
    int  status;

    if (conn->wait.timer_set) {
        ngx_del_timer(&conn->wait);
    }

    conn->events = 0;

    status = ngx_http_idempotency_mysql_cont(conn, ready);

    if (ngx_http_idempotency_mysql_process(conn, status) == NGX_OK) {
        ngx_http_idempotency_mysql_next(conn);
    }
}


/* a read or write event of the driver's socket */

static void
ngx_http_idempotency_mysql_event_handler(ngx_event_t *ev)
{
    int                                 wait;
    ngx_connection_t                   *c;
    ngx_http_idempotency_mysql_conn_t  *conn;

    c = ev->data;
    conn = c->data;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "idempotency mysql %s event: fd:%d mask:%d",
                   ev->write ? "write" : "read", c->fd, conn->events);

    if (conn->state == NGX_HTTP_IDEMPOTENCY_MYSQL_IDLE) {
        if (!ev->write) {
            ngx_http_idempotency_mysql_idle_check(conn);
        }

        return;
    }

    wait = ev->write ? MYSQL_WAIT_WRITE : MYSQL_WAIT_READ;

    if (conn->events & wait) {
        ngx_http_idempotency_mysql_resume(conn, wait);
    }
}


static void
ngx_http_idempotency_mysql_wait_handler(ngx_event_t *ev)
{
    ngx_http_idempotency_mysql_conn_t  *conn;

    conn = ev->data;

    if (conn->events & MYSQL_WAIT_TIMEOUT) {
        ngx_http_idempotency_mysql_resume(conn, MYSQL_WAIT_TIMEOUT);
    }
}


/* an idle connection must have nothing to read: EOF, an error, or data */

static void
ngx_http_idempotency_mysql_idle_check(ngx_http_idempotency_mysql_conn_t *conn)
{
    ngx_int_t                            rc;
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = conn->conns;

    rc = ngx_http_idempotency_conn_peek(conn->c);

    if (rc == NGX_AGAIN) {
        return;
    }

    if (rc == NGX_ERROR) {
        ngx_log_error(NGX_LOG_INFO, conns->log, ngx_socket_errno,
                      "idempotency store \"%V\" mysql=%V: "
                      "idle connection failed",
                      &conns->store->name, &conns->shard->name);

    } else {
        ngx_log_error(NGX_LOG_INFO, conns->log, 0,
                      "idempotency store \"%V\" mysql=%V: idle connection "
                      "closed by the server%s",
                      &conns->store->name, &conns->shard->name,
                      (rc == NGX_OK) ? " (unexpected data)" : "");
    }

    ngx_http_idempotency_mysql_discard(conn);
    ngx_http_idempotency_mysql_rescue(conns);
}


/* the driver's socket, or -1 if it has none (any more) */

static ngx_socket_t
ngx_http_idempotency_mysql_socket(ngx_http_idempotency_mysql_conn_t *conn)
{
    /*
     * while a connect is suspended the driver has the socket in its async
     * context; after a failed connect that pointer may be stale, and
     * net.pvio is NULL whenever the driver closed the connection
     */

    if (conn->mysql->net.pvio != NULL
        || (conn->state == NGX_HTTP_IDEMPOTENCY_MYSQL_CONNECT
            && conn->events != 0))
    {
        return (ngx_socket_t) mysql_get_socket(conn->mysql);
    }

    return (ngx_socket_t) -1;
}


/*
 * Wraps the driver's socket for the event loop, unless it is wrapped
 * already; a socket the driver closed and made again is wrapped anew.
 */

static ngx_int_t
ngx_http_idempotency_mysql_wrap(ngx_http_idempotency_mysql_conn_t *conn)
{
    ngx_socket_t  s;

    s = ngx_http_idempotency_mysql_socket(conn);

    if (conn->c && conn->c->fd != s) {
        ngx_http_idempotency_mysql_unwrap(conn);
    }

    if (conn->c) {
        return NGX_OK;
    }

    if (s == (ngx_socket_t) -1) {
        return NGX_ERROR;
    }

    conn->c = ngx_http_idempotency_conn_wrap(s, conn,
                                     ngx_http_idempotency_mysql_event_handler,
                                     ngx_http_idempotency_mysql_event_handler,
                                     conn->conns->log);

    return conn->c ? NGX_OK : NGX_ERROR;
}


/* the driver owns the fd; if it closed it already, epoll forgot it */

static void
ngx_http_idempotency_mysql_unwrap(ngx_http_idempotency_mysql_conn_t *conn)
{
    if (conn->c) {
        ngx_http_idempotency_conn_unwrap(conn->c,
                      ngx_http_idempotency_mysql_socket(conn) != conn->c->fd);
        conn->c = NULL;
    }
}


/*
 * Frees the driver's handle and its statements without ever waiting:
 * COM_QUIT goes out if the socket takes it at once (at worker exit; a
 * discarded connection's socket is shut down already), else the socket
 * is shut down so that every step of the close fails at once.
 */

static void
ngx_http_idempotency_mysql_close(ngx_http_idempotency_mysql_conn_t *conn)
{
    int                                  status;
    ngx_uint_t                           n;
    ngx_socket_t                         s;
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = conn->conns;

    ngx_http_idempotency_mysql_unwrap(conn);

    status = mysql_close_start(conn->mysql);

    if (status) {
        s = ngx_http_idempotency_mysql_socket(conn);

        if (s != (ngx_socket_t) -1) {
            (void) shutdown(s, SHUT_RDWR);
        }
    }

    for (n = 0; status && n < NGX_HTTP_IDEMPOTENCY_MYSQL_ABORT_STEPS; n++) {
        status = mysql_close_cont(conn->mysql, status);
    }

    if (status) {
        ngx_log_error(NGX_LOG_ALERT, conns->log, 0,
                      "idempotency store \"%V\" mysql=%V: "
                      "mysql_close_start() did not end",
                      &conns->store->name, &conns->shard->name);
    }

    conn->mysql = NULL;

    ngx_http_idempotency_mysql_stmts_free(conn);
}


/*
 * Closes a connection without waiting for anything (see the top of the
 * file) and puts its struct on the spare list.
 */

static void
ngx_http_idempotency_mysql_discard(ngx_http_idempotency_mysql_conn_t *conn)
{
    ngx_uint_t                           n;
    ngx_socket_t                         s;
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = conn->conns;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, conns->log, 0,
                   "idempotency mysql close: mysql=%V, state %ui",
                   &conns->shard->name, conn->state);

    s = ngx_http_idempotency_mysql_socket(conn);

    if (s != (ngx_socket_t) -1) {
        (void) shutdown(s, SHUT_RDWR);
    }

    /* every read/write now fails at once: let the call end and clean up */

    for (n = 0;
         conn->events && n < NGX_HTTP_IDEMPOTENCY_MYSQL_ABORT_STEPS;
         n++)
    {
        conn->events = ngx_http_idempotency_mysql_cont(conn, conn->events);
    }

    if (conn->events) {
        ngx_log_error(NGX_LOG_ALERT, conns->log, 0,
                      "idempotency store \"%V\" mysql=%V: "
                      "interrupted call did not end",
                      &conns->store->name, &conns->shard->name);
    }

    if (conn->res) {
        /* mysql_store_result() did finish: no I/O */
        mysql_free_result(conn->res);
        conn->res = NULL;
    }

    if (conn->timer.timer_set) {
        ngx_del_timer(&conn->timer);
    }

    if (conn->wait.timer_set) {
        ngx_del_timer(&conn->wait);
    }

    ngx_http_idempotency_mysql_close(conn);

    if (conn->state == NGX_HTTP_IDEMPOTENCY_MYSQL_CONNECT) {
        conns->nconnect--;
    }

    if (conn->unbound) {
        conn->unbound = 0;
        conns->nunbound--;
    }

    conn->op = NULL;
    conn->events = 0;
    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_IDLE;

    ngx_queue_remove(&conn->queue);
    conns->nconns--;

    ngx_queue_insert_head(&conns->spare, &conn->queue);
}


/*
 * Batches: batchable ops that wait at the same time share one statement
 * of n rows; what each op of it learns; one statement of a kind at a
 * time, and the rest once it has ended or turned slow.
 */


/*
 * The waiting ops of the same slot join the op: one statement with a row
 * for each, in the order they came.  A statement has 1, 2, 4, 8 or 16
 * rows, so that a connection prepares at most five of each kind (the
 * server's max_prepared_stmt_count counts them over all its clients).
 */

static void
ngx_http_idempotency_mysql_gather(ngx_http_idempotency_mysql_conn_t *conn,
    ngx_http_idempotency_op_t *op)
{
    size_t                               size;
    ngx_uint_t                           n;
    ngx_queue_t                         *q, *next;
    ngx_http_idempotency_op_t           *w, **tail;
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = conn->conns;
    tail = &op->batch_next;

    n = 1;
    size = ngx_http_idempotency_mysql_op_size(op);

    for (q = ngx_queue_head(&conns->waiting);
         q != ngx_queue_sentinel(&conns->waiting)
         && n < NGX_HTTP_IDEMPOTENCY_BATCH_MAX;
         q = ngx_queue_next(q))
    {
        w = ngx_queue_data(q, ngx_http_idempotency_op_t, queue);

        if (w->stmt != op->stmt || w->single) {
            continue;
        }

        /* the ops are taken in this order below: stop at one too many */

        size += ngx_http_idempotency_mysql_op_size(w);

        if (size > NGX_HTTP_IDEMPOTENCY_MYSQL_BATCH_BYTES) {
            break;
        }

        n++;
    }

    while (n & (n - 1)) {
        n &= n - 1;
    }

    for (q = ngx_queue_head(&conns->waiting);
         q != ngx_queue_sentinel(&conns->waiting) && conn->nbatch < n;
         q = next)
    {
        next = ngx_queue_next(q);
        w = ngx_queue_data(q, ngx_http_idempotency_op_t, queue);

        if (w->stmt != op->stmt || w->single) {
            continue;
        }

        ngx_http_idempotency_mysql_dequeue(w);

        w->conn = conn;
        w->sent = 1;
        w->thread = op->thread;
        *tail = w;
        tail = &w->batch_next;

        conn->nbatch++;
    }

    *tail = NULL;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, op->log, 0,
                   "idempotency mysql %s: %ui ops in one statement",
                   op->name, conn->nbatch);
}


static size_t
ngx_http_idempotency_mysql_op_size(ngx_http_idempotency_op_t *op)
{
    size_t      size;
    ngx_uint_t  i;

    size = 0;

    for (i = 0; i < op->nparams; i++) {
        size += op->params[i].len;
    }

    return size;
}


/*
 * A statement without a result set ran: each op of a batch gets "1 row"
 * when it changed a row for every op; otherwise which ones it changed is
 * unknown: ops that must know run again alone (rerun), the others get 0.
 */

static ngx_int_t
ngx_http_idempotency_mysql_executed(ngx_http_idempotency_mysql_conn_t *conn)
{
    uint64_t                    rows;
    ngx_http_idempotency_op_t  *op;

    rows = (uint64_t) mysql_stmt_affected_rows(conn->stmt);

    if (conn->nbatch > 1) {
        if (rows == conn->nbatch) {
            rows = 1;

        } else if (conn->op->rerun) {
            return ngx_http_idempotency_mysql_unbatch(conn, 1);

        } else {
            rows = 0;
        }
    }

    for (op = conn->op; op; op = op->batch_next) {
        op->affected_rows = rows;
    }

    return ngx_http_idempotency_mysql_done(conn, NGX_HTTP_IDEMPOTENCY_OP_OK);
}


/*
 * The ops of a batch go back to the head of the queue, in their order:
 * to run again on their own (single: the batch did not change a row for
 * each, and which ones it did is unknown), or as they were.  The
 * connection is free.
 */

static ngx_int_t
ngx_http_idempotency_mysql_unbatch(ngx_http_idempotency_mysql_conn_t *conn,
    ngx_uint_t single)
{
    ngx_queue_t                         *q;
    ngx_http_idempotency_op_t           *op, *next;
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = conn->conns;
    q = ngx_queue_sentinel(&conns->waiting);

    for (op = conn->op; op; op = next) {
        next = op->batch_next;

        op->batch_next = NULL;
        op->conn = NULL;
        op->single = single;

        if (conns->store->query_timeout && !op->timer.timer_set) {
            /* its deadline passed while it waited for the batch */
            ngx_http_idempotency_mysql_timed_out(op, 0);
            ngx_http_idempotency_mysql_op_finish(op,
                                           NGX_HTTP_IDEMPOTENCY_OP_TIMEOUT);
            continue;
        }

        ngx_queue_insert_after(q, &op->queue);
        q = &op->queue;
        conns->nwaiting++;
    }

    conn->op = NULL;
    conn->state = NGX_HTTP_IDEMPOTENCY_MYSQL_IDLE;
    conn->events = 0;
    conn->reused = 1;

    return NGX_OK;
}


/* the batch goes back to the queue, and its connection is closed */

static ngx_int_t
ngx_http_idempotency_mysql_requeue(ngx_http_idempotency_mysql_conn_t *conn,
    ngx_uint_t single)
{
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = conn->conns;

    (void) ngx_http_idempotency_mysql_unbatch(conn, single);
    ngx_http_idempotency_mysql_discard(conn);
    ngx_http_idempotency_mysql_kick(conns);

    return NGX_DONE;
}


/*
 * A failure that may be the batch's own (its size, a deadlock or a lock
 * wait among its rows, its statement gone, its connection lost): each op
 * runs again alone, within its own deadline, and its own result counts.
 */

static ngx_int_t
ngx_http_idempotency_mysql_batch_failed(
    ngx_http_idempotency_mysql_conn_t *conn, ngx_uint_t err,
    const char *text)
{
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conns_t  *conns;

    op = conn->op;
    conns = conn->conns;

    ngx_log_error(NGX_LOG_INFO, conns->log, 0,
                  "idempotency store \"%V\" mysql=%V: %s of %ui "
                  "failed: (%ui) %s, running each alone",
                  &conns->store->name, &conns->shard->name,
                  op->name, conn->nbatch, err, text);

    if (err >= CR_MIN_ERROR && err <= CR_MAX_ERROR) {
        return ngx_http_idempotency_mysql_requeue(conn, 1);
    }

    /* the server refused the statement, or rolled it back: the ops have
     * not written anything yet */

    ngx_http_idempotency_mysql_unsent(op);

    if (err == ER_MAX_PREPARED_STMT_COUNT_REACHED) {
        /* a new connection has none of this one's statements */
        return ngx_http_idempotency_mysql_requeue(conn, 1);
    }

    return ngx_http_idempotency_mysql_unbatch(conn, 1);
}


/* the ops of a statement that did not run: none has written anything */

static void
ngx_http_idempotency_mysql_unsent(ngx_http_idempotency_op_t *op)
{
    for ( /* void */ ; op; op = op->batch_next) {
        op->sent = 0;
        op->thread = 0;
    }
}


static ngx_uint_t
ngx_http_idempotency_mysql_batch_error(ngx_uint_t err)
{
    switch (err) {

    case ER_NET_PACKET_TOO_LARGE:
    case CR_NET_PACKET_TOO_LARGE:
    case ER_LOCK_DEADLOCK:
    case ER_LOCK_WAIT_TIMEOUT:
    case ER_UNKNOWN_STMT_HANDLER:
    case ER_MAX_PREPARED_STMT_COUNT_REACHED:
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
        return 1;

    default:
        return 0;
    }
}


/* the op the connection ran and the others of its batch end alike */

static void
ngx_http_idempotency_mysql_finish_all(ngx_http_idempotency_op_t *op,
    ngx_uint_t rc)
{
    ngx_http_idempotency_op_t  *m, *next;

    for (m = op->batch_next; m; m = next) {
        next = m->batch_next;
        m->batch_next = NULL;

        if (op->err) {
            ngx_http_idempotency_mysql_op_error(m, op->err,
                                                op->err_text.data,
                                                op->err_text.len);
        }

        ngx_http_idempotency_mysql_op_finish(m, rc);
    }

    op->batch_next = NULL;

    ngx_http_idempotency_mysql_op_finish(op, rc);
}


/* batchable ops that this event loop iteration queued */

static void
ngx_http_idempotency_mysql_flush(ngx_event_t *ev)
{
    ngx_queue_t                         *q;
    ngx_http_idempotency_mysql_conn_t   *conn;
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = ev->data;

    while (!ngx_queue_empty(&conns->idle)
           && ngx_http_idempotency_mysql_startable(conns) != NULL)
    {
        q = ngx_queue_head(&conns->idle);
        ngx_queue_remove(q);
        ngx_queue_insert_tail(&conns->busy, q);

        conn = ngx_queue_data(q, ngx_http_idempotency_mysql_conn_t, queue);

        ngx_http_idempotency_mysql_next(conn);
    }

    ngx_http_idempotency_mysql_rescue(conns);
}


/*
 * Waiting ops that no connection will serve (the idle one they were
 * queued for closed meanwhile, and none is busy) get a new one.
 */

static void
ngx_http_idempotency_mysql_rescue(ngx_http_idempotency_mysql_conns_t *conns)
{
    if (conns->nwaiting
        && ngx_queue_empty(&conns->idle)
        && ngx_queue_empty(&conns->busy))
    {
        ngx_http_idempotency_mysql_kick(conns);
    }
}


/*
 * The first waiting op that may start: any op but a batchable one of a
 * kind that has BATCH_RUNNING statements running for less than BATCH_SLOW
 * ms (it waits for one of them to end, and then goes with the others of
 * its kind, or for it to turn slow).
 */

static ngx_http_idempotency_op_t *
ngx_http_idempotency_mysql_startable(ngx_http_idempotency_mysql_conns_t *conns)
{
    ngx_uint_t                           n;
    ngx_msec_t                           age, wake;
    ngx_queue_t                         *q, *b;
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conn_t   *c;

    wake = NGX_HTTP_IDEMPOTENCY_MYSQL_BATCH_SLOW;

    for (q = ngx_queue_head(&conns->waiting);
         q != ngx_queue_sentinel(&conns->waiting);
         q = ngx_queue_next(q))
    {
        op = ngx_queue_data(q, ngx_http_idempotency_op_t, queue);

        if (op->batch == NULL || op->single) {
            return op;
        }

        n = 0;

        for (b = ngx_queue_head(&conns->busy);
             b != ngx_queue_sentinel(&conns->busy);
             b = ngx_queue_next(b))
        {
            c = ngx_queue_data(b, ngx_http_idempotency_mysql_conn_t, queue);

            if (c->op == NULL || c->op->stmt != op->stmt
                || c->state == NGX_HTTP_IDEMPOTENCY_MYSQL_CONNECT)
            {
                continue;
            }

            age = ngx_current_msec - c->running;

            if (age < NGX_HTTP_IDEMPOTENCY_MYSQL_BATCH_SLOW) {
                n++;
                wake = ngx_min(wake,
                               NGX_HTTP_IDEMPOTENCY_MYSQL_BATCH_SLOW - age);
            }
        }

        if (n < NGX_HTTP_IDEMPOTENCY_MYSQL_BATCH_RUNNING) {
            return op;
        }
    }

    /* waiting ops look again when the first running statement turns slow */

    if (!ngx_queue_empty(&conns->waiting)
        && (!conns->slow.timer_set
            || (ngx_msec_int_t) (conns->slow.timer.key - ngx_current_msec
                                 - wake) > 0))
    {
        if (conns->slow.timer_set) {
            ngx_del_timer(&conns->slow);
        }

        ngx_add_timer(&conns->slow, wake);
    }

    return NULL;
}


/*
 * The end of an op: its deadline, and its handler, always called from a
 * posted event.
 */


static void
ngx_http_idempotency_mysql_op_timeout(ngx_event_t *ev)
{
    ngx_http_idempotency_op_t           *op;
    ngx_http_idempotency_mysql_conn_t   *conn;
    ngx_http_idempotency_mysql_conns_t  *conns;

    op = ev->data;
    conn = op->conn;
    conns = op->shard->conns;

    if (conn && conn->op != op) {

        /*
         * One of the others of a batch whose statement runs: it ends with
         * the statement, whose own deadline (the first op's) bounds it.
         * Leaving now would leave its write unknown on a connection that
         * lives on, and nobody to tell when that write is settled.
         */

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, op->log, 0,
                       "idempotency mysql %s: deadline, waits for the "
                       "statement of its batch", op->name);
        return;
    }

    ngx_http_idempotency_mysql_timed_out(op, conn == NULL);

    ngx_http_idempotency_mysql_finish_all(op, NGX_HTTP_IDEMPOTENCY_OP_TIMEOUT);

    if (conn == NULL) {
        return;
    }

    conn->op = NULL;

    if (conn->state == NGX_HTTP_IDEMPOTENCY_MYSQL_CONNECT) {
        /* a connect made for this op goes on for the queue */
        conn->unbound = 1;
        conns->nunbound++;
        return;
    }

    /* the connection was running the op: its state is unknown */

    ngx_http_idempotency_mysql_discard(conn);
    ngx_http_idempotency_mysql_kick(conns);
}


static void
ngx_http_idempotency_mysql_timed_out(ngx_http_idempotency_op_t *op,
    ngx_uint_t waiting)
{
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = op->shard->conns;

    ngx_log_error(NGX_LOG_WARN, op->log, 0,
                  "idempotency store \"%V\" mysql=%V: %s timed out (%M ms)%s",
                  &conns->store->name, &conns->shard->name, op->name,
                  conns->store->query_timeout,
                  waiting ? " waiting for a connection" : "");
}


/*
 * Every op ends here: the handler is called from a posted event, so
 * never from inside ngx_http_idempotency_op_run() nor from inside the
 * connections' own code.
 */

static void
ngx_http_idempotency_mysql_op_finish(ngx_http_idempotency_op_t *op,
    ngx_uint_t rc)
{
    op->rc = rc;

    ngx_http_idempotency_metrics_op(op->shard->store, op->kind,
                                    rc == NGX_HTTP_IDEMPOTENCY_OP_OK,
                                    ngx_current_msec - op->started);

    if (op->timer.timer_set) {
        ngx_del_timer(&op->timer);
    }

    ngx_http_idempotency_mysql_dequeue(op);

    op->conn = NULL;

    op->timer.handler = ngx_http_idempotency_mysql_op_posted;
    ngx_post_event(&op->timer, &ngx_posted_events);
}


static void
ngx_http_idempotency_mysql_op_posted(ngx_event_t *ev)
{
    ngx_http_idempotency_op_t  *op;

    op = ev->data;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, op->log, 0,
                   "idempotency mysql %s finished: rc=%ui err=%ui%s",
                   op->name, op->rc, op->err,
                   op->handler ? "" : " (detached)");

    if (op->handler) {
        op->handler(op);

        if (op->keep_pool) {
            return;
        }
    }

    /* the handler may have freed the request, and the log with it */

    op->pool->log = ngx_cycle->log;

    ngx_destroy_pool(op->pool);
}


static void
ngx_http_idempotency_mysql_op_down(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_mysql_conns_t  *conns;

    conns = op->shard->conns;

    ngx_http_idempotency_mysql_op_error(op, conns->last_err, conns->last_error,
                                        conns->last_error_len);
    ngx_http_idempotency_mysql_op_finish(op, NGX_HTTP_IDEMPOTENCY_OP_DOWN);
}


static void
ngx_http_idempotency_mysql_op_error(ngx_http_idempotency_op_t *op,
    ngx_uint_t err, u_char *text, size_t len)
{
    op->err = err;
    op->cause = ngx_http_idempotency_mysql_cause(err);

    op->err_text.data = ngx_pnalloc(op->pool, len ? len : 1);
    if (op->err_text.data == NULL) {
        op->err_text.len = 0;
        return;
    }

    ngx_memcpy(op->err_text.data, text, len);
    op->err_text.len = len;
}


/* the server's code, as the outcome the lifecycle reads (mysql.h) */

static ngx_http_idempotency_cause_e
ngx_http_idempotency_mysql_cause(ngx_uint_t err)
{
    switch (err) {

    case ER_LOCK_DEADLOCK:
        return NGX_HTTP_IDEMPOTENCY_CAUSE_RACE;

    case ER_NO_SUCH_TABLE:
    case ER_BAD_FIELD_ERROR:
        return NGX_HTTP_IDEMPOTENCY_CAUSE_NO_SCHEMA;

    case ER_NET_PACKET_TOO_LARGE:
    case ER_WARN_ALLOWED_PACKET_OVERFLOWED:
    case ER_DATA_TOO_LONG:
    case CR_NET_PACKET_TOO_LARGE:
        return NGX_HTTP_IDEMPOTENCY_CAUSE_TOO_LARGE;

    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
        return NGX_HTTP_IDEMPOTENCY_CAUSE_LOST;

    case ER_NO_SUCH_THREAD:
        return NGX_HTTP_IDEMPOTENCY_CAUSE_NO_THREAD;

    default:
        return NGX_HTTP_IDEMPOTENCY_CAUSE_NONE;
    }
}


/* worker exit */

static void
ngx_http_idempotency_mysql_op_drop(ngx_http_idempotency_op_t *op)
{
    if (op->batch_next) {
        ngx_http_idempotency_mysql_op_drop(op->batch_next);
        op->batch_next = NULL;
    }

    if (op->timer.timer_set) {
        ngx_del_timer(&op->timer);
    }

    if (op->timer.posted) {
        ngx_delete_posted_event(&op->timer);
    }

    ngx_http_idempotency_mysql_dequeue(op);

    op->pool->log = ngx_cycle->log;

    ngx_destroy_pool(op->pool);
}


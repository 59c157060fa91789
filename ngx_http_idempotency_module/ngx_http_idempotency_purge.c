
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: background purge of expired rows.
 *
 * Correctness never depends on it: a claim reclaims an expired row anyway.
 * The purge only keeps the table at its steady-state size.  One worker of
 * each nginx runs it, for every shard of every store.  Among several nginx
 * instances sharing a shard, the one holding the purge lease (a reserved
 * row, see sql.c) deletes and the others skip their turn, so they never
 * delete the same rows at the same time.  Each batch is one bounded
 * DELETE; while they come back full, the next follows after a rest of
 * nine times the last one's duration (at least 100 ms, at most the
 * interval), so that the purge keeps a server busy a tenth of the time
 * at most: draining a backlog must not slow the claims down
 * (docs/benchmarks.md, "The store at scale").  Then the worker sleeps
 * for the interval.
 */


#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_purge.h"
#include "ngx_http_idempotency_mysql.h"
#include "ngx_http_idempotency_sql.h"
#include <ngx_md5.h>


/* at most ten batches a second while a backlog lasts */
#define NGX_HTTP_IDEMPOTENCY_PURGE_PACE  100

/* the rest after a full batch, in multiples of its duration */
#define NGX_HTTP_IDEMPOTENCY_PURGE_REST  9


typedef struct {
    ngx_http_idempotency_shard_t  *shard;
    ngx_event_t                    timer;
    ngx_uint_t                     deleted;     /* in this run */
    ngx_uint_t                     batches;     /* in this run */
    ngx_msec_t                     sent;        /* the batch's start */
} ngx_http_idempotency_purge_t;


static void ngx_http_idempotency_purge_owner(ngx_cycle_t *cycle);
static void ngx_http_idempotency_purge_start(ngx_event_t *ev);
static void ngx_http_idempotency_purge_leased(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_purge_done(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_purge_next(ngx_http_idempotency_purge_t *pg,
    ngx_msec_t delay);


/* who holds the lease: one nginx instance, stable across reloads */
static u_char  ngx_http_idempotency_purge_token[16];


ngx_int_t
ngx_http_idempotency_purge_init(ngx_cycle_t *cycle)
{
    ngx_uint_t                          i, j;
    ngx_msec_t                          first;
    ngx_http_idempotency_shard_t       *shard;
    ngx_http_idempotency_purge_t       *pg;
    ngx_http_idempotency_store_t      **stores;
    ngx_http_idempotency_main_conf_t   *imcf;

    if (!(ngx_process == NGX_PROCESS_SINGLE
          || (ngx_process == NGX_PROCESS_WORKER && ngx_worker == 0)))
    {
        return NGX_OK;
    }

    imcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_idempotency_module);
    if (imcf == NULL) {
        return NGX_OK;
    }

    ngx_http_idempotency_purge_owner(cycle);

    stores = imcf->stores.elts;

    for (i = 0; i < imcf->stores.nelts; i++) {

        /* a store that only holds fence markers has no keys to purge */

        if (stores[i]->purge == 0 || (stores[i]->fence && !stores[i]->keys)) {
            continue;
        }

        shard = stores[i]->shards.elts;

        for (j = 0; j < stores[i]->shards.nelts; j++) {

            pg = ngx_pcalloc(cycle->pool,
                             sizeof(ngx_http_idempotency_purge_t));
            if (pg == NULL) {
                return NGX_ERROR;
            }

            pg->shard = &shard[j];
            pg->timer.handler = ngx_http_idempotency_purge_start;
            pg->timer.data = pg;
            pg->timer.log = cycle->log;
            pg->timer.cancelable = 1;

            /* up to a tenth more, so that instances started together
             * spread out */
            first = stores[i]->purge
                    + (ngx_msec_t) ngx_random() % (stores[i]->purge / 10 + 1);

            ngx_add_timer(&pg->timer, first);
        }
    }

    return NGX_OK;
}


/*
 * The master's pid, host name and prefix: the same for every worker
 * generation of one nginx (a reload keeps the lease), different between
 * instances.
 */

static void
ngx_http_idempotency_purge_owner(ngx_cycle_t *cycle)
{
    ngx_md5_t  md5;
    ngx_pid_t  master;

    master = (ngx_process == NGX_PROCESS_WORKER) ? getppid() : ngx_pid;

    ngx_md5_init(&md5);
    ngx_md5_update(&md5, "idempotency-purge/1", sizeof("idempotency-purge/1"));
    ngx_md5_update(&md5, &master, sizeof(master));
    ngx_md5_update(&md5, cycle->hostname.data, cycle->hostname.len);
    ngx_md5_update(&md5, cycle->prefix.data, cycle->prefix.len);
    ngx_md5_update(&md5, cycle->conf_file.data, cycle->conf_file.len);
    ngx_md5_final(ngx_http_idempotency_purge_token, &md5);
}


static void
ngx_http_idempotency_purge_start(ngx_event_t *ev)
{
    ngx_http_idempotency_purge_t  *pg = ev->data;

    ngx_http_idempotency_op_t     *op;
    ngx_http_idempotency_store_t  *store;

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    store = pg->shard->store;

    /* the lease outlives two missed runs before another instance may
     * take it over */
    op = ngx_http_idempotency_sql_purge_lease(pg->shard, ngx_cycle->log,
                                              ngx_http_idempotency_purge_token,
                                              3 * store->purge);
    if (op == NULL) {
        ngx_http_idempotency_purge_next(pg, store->purge);
        return;
    }

    op->handler = ngx_http_idempotency_purge_leased;
    op->data = pg;

    ngx_http_idempotency_op_run(op);
}


static void
ngx_http_idempotency_purge_leased(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_purge_t  *pg = op->data;

    ngx_http_idempotency_store_t  *store;

    store = pg->shard->store;

    /* a failed op was logged by the pool; try again next interval */

    if (op->rc != NGX_HTTP_IDEMPOTENCY_OP_OK || op->nrows == 0
        || op->fields[0].len != 1 || op->fields[0].data[0] != '1')
    {
        if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK) {
            ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                           "idempotency purge: %V mysql=%V: "
                           "another nginx holds the lease",
                           &store->name, &pg->shard->name);
        }

        ngx_http_idempotency_purge_next(pg, store->purge);
        return;
    }

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    op = ngx_http_idempotency_sql_purge(pg->shard, ngx_cycle->log,
                                        store->purge_batch);
    if (op == NULL) {
        ngx_http_idempotency_purge_next(pg, store->purge);
        return;
    }

    op->handler = ngx_http_idempotency_purge_done;
    op->data = pg;

    pg->sent = ngx_current_msec;

    ngx_http_idempotency_op_run(op);
}


static void
ngx_http_idempotency_purge_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_purge_t  *pg = op->data;

    ngx_msec_t                     rest;
    ngx_http_idempotency_store_t  *store;

    store = pg->shard->store;

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK) {
        pg->deleted += (ngx_uint_t) op->affected_rows;

        ngx_http_idempotency_metric_add(store, purged_rows,
                                        (ngx_atomic_int_t) op->affected_rows);
        pg->batches++;

        if (op->affected_rows >= store->purge_batch) {
            /* a backlog: the next batch after a rest, lease renewed first */

            rest = (ngx_current_msec - pg->sent)
                   * NGX_HTTP_IDEMPOTENCY_PURGE_REST;
            rest = ngx_max(rest, NGX_HTTP_IDEMPOTENCY_PURGE_PACE);
            rest = ngx_min(rest, store->purge);

            ngx_http_idempotency_purge_next(pg, rest);
            return;
        }
    }

    if (pg->deleted) {
        ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                      "idempotency store \"%V\" mysql=%V: purged %ui "
                      "expired rows (%ui statements)",
                      &store->name, &pg->shard->name, pg->deleted,
                      pg->batches);
    }

    pg->deleted = 0;
    pg->batches = 0;

    ngx_http_idempotency_purge_next(pg, store->purge);
}


static void
ngx_http_idempotency_purge_next(ngx_http_idempotency_purge_t *pg,
    ngx_msec_t delay)
{
    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    ngx_add_timer(&pg->timer, delay);
}

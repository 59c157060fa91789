
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: lease renewal.
 *
 *     UPDATE t SET lease_until = now + lease
 *      WHERE key_hash = :kh AND state = 0 AND owner = :me
 *
 * runs every lease / 3, at most one at a time.  A renewal that changes no
 * row means the key was taken over; renewals that keep failing are an
 * error-log line per key once the lease may have ended, since a
 * duplicate could then take the key over and run it again.
 */


#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_lease.h"
#include "ngx_http_idempotency_sql.h"


static void ngx_http_idempotency_lease_handler(ngx_event_t *ev);
static void ngx_http_idempotency_lease_done(ngx_http_idempotency_op_t *op);


void
ngx_http_idempotency_lease_start(ngx_http_idempotency_lease_t *lease)
{
    lease->ev.handler = ngx_http_idempotency_lease_handler;
    lease->ev.data = lease;
    lease->ev.log = lease->log;
    lease->ev.cancelable = 1;

    ngx_add_timer(&lease->ev, ngx_max(lease->lease / 3, 1));

    if (!lease->counted) {
        lease->counted = 1;
        lease->shard->store->in_progress++;
    }
}


void
ngx_http_idempotency_lease_stop(ngx_http_idempotency_lease_t *lease)
{
    if (lease->ev.timer_set) {
        ngx_del_timer(&lease->ev);
    }

    if (lease->op) {
        ngx_http_idempotency_op_detach(lease->op);
        lease->op = NULL;
    }

    if (lease->counted) {
        lease->counted = 0;
        lease->shard->store->in_progress--;
    }
}


static void
ngx_http_idempotency_lease_handler(ngx_event_t *ev)
{
    ngx_http_idempotency_op_t     *op;
    ngx_http_idempotency_lease_t  *lease;

    lease = ev->data;

    if (lease->lost) {
        /* taken over: nothing left to renew */
        return;
    }

    ngx_add_timer(ev, ngx_max(lease->lease / 3, 1));

    if (lease->op) {
        return;
    }

    op = ngx_http_idempotency_sql_renew(lease->shard, lease->log,
                                        lease->key_hash, lease->token,
                                        lease->lease);
    if (op == NULL) {
        return;
    }

    op->handler = ngx_http_idempotency_lease_done;
    op->data = lease;
    op->urgent = 1;
    lease->op = op;
    lease->sent = ngx_current_msec;

    ngx_http_idempotency_op_run(op);
}


static void
ngx_http_idempotency_lease_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_lease_t  *lease;

    lease = op->data;
    lease->op = NULL;

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK) {

        if (op->affected_rows == 0) {
            lease->lost = 1;

            /* a completion's lease: a renewal that lands after the write
             * committed changes no row; the write's result tells */

            if (lease->quiet) {
                return;
            }

            ngx_log_error(NGX_LOG_WARN, lease->log, 0,
                          "idempotency: key %V is no longer held by "
                          "its request (lease lost)", lease->key);

            ngx_http_idempotency_metric(lease->shard->store, lease_losses);
            return;
        }

        /* the new lease counts from when the statement was sent */
        lease->renewed = lease->sent;

        if (lease->failing) {
            ngx_log_error(NGX_LOG_NOTICE, lease->log, 0,
                          "idempotency store \"%V\" mysql=%V: lease of key "
                          "\"%V\" renewed again",
                          &lease->shard->store->name, &lease->shard->name,
                          lease->key);
            lease->failing = 0;
        }

        return;
    }

    if ((ngx_msec_int_t) (ngx_current_msec - lease->renewed)
        < (ngx_msec_int_t) (lease->lease - lease->lease / 3))
    {
        ngx_log_error(NGX_LOG_WARN, lease->log, 0,
                      "idempotency store \"%V\" mysql=%V: lease renewal of "
                      "key %V failed (%ui%s%V), will try again",
                      &lease->shard->store->name, &lease->shard->name,
                      lease->key, op->rc, op->err_text.len ? ": " : "",
                      &op->err_text);
        return;
    }

    if (!lease->failing) {
        ngx_log_error(NGX_LOG_ERR, lease->log, 0,
                      "idempotency store \"%V\" mysql=%V: lease renewals of "
                      "key %V keep failing (%ui%s%V): its lease may "
                      "end, and a duplicate may then run it again",
                      &lease->shard->store->name, &lease->shard->name,
                      lease->key, op->rc, op->err_text.len ? ": " : "",
                      &op->err_text);
        lease->failing = 1;
    }
}

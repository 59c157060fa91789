
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: what a request is known by.
 *
 * The handler hands a selected request here and hears back through the
 * known() it gave.  In order: the signature's headers (a missing or
 * stale one is refused before the body is read); the key, from the
 * header as it always was, or from "idempotency_key"'s sources (complex
 * values now, the body's fields once it is read); then, when the
 * fingerprint, a body source or the signature needs it, the body, read
 * as the mirror module does and walked once (body.c), each piece to the
 * fingerprint, the scan of the key's fields (keyscan.c) and the HMACs
 * (signature.c), a temp file a slice per event; the signature's verdict,
 * the body's fields, and last the hash of scope and key.  Nothing is
 * claimed before all of it holds.
 */


#include "ngx_http_idempotency_keysrc.h"
#include "ngx_http_idempotency_issue.h"
#include "ngx_http_idempotency_problem.h"
#include "ngx_http_idempotency_ctx.h"


static ngx_int_t ngx_http_idempotency_header_key(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_values(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_composed(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_identity(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t composed);
static ngx_int_t ngx_http_idempotency_read_body(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t body);
static void ngx_http_idempotency_body_handler(ngx_http_request_t *r);
static void ngx_http_idempotency_slice_handler(ngx_event_t *ev);
static void ngx_http_idempotency_pass(ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_piece(void *data, u_char *p,
    size_t len);
static ngx_int_t ngx_http_idempotency_body_done(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_key_fail(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t part, ngx_str_t *name,
    ngx_str_t *why);
static ngx_int_t ngx_http_idempotency_unsigned(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_str_t *why);
static void ngx_http_idempotency_source_cleanup(void *data);


char *
ngx_http_idempotency_key_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idempotency_loc_conf_t  *ilcf = conf;

    ngx_int_t                            rc;
    ngx_str_t                           *value, s;
    ngx_uint_t                           i;
    const char                          *err;
    ngx_http_complex_value_t            *cv;
    ngx_http_idempotency_keysrc_t       *ks;
    ngx_http_idempotency_source_t       *src;
    ngx_http_compile_complex_value_t     ccv;

    if (ilcf->keysrc != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2
        && value[1].len == 6 && ngx_strncmp(value[1].data, "header", 6) == 0)
    {
        ilcf->keysrc = NULL;
        return NGX_CONF_OK;
    }

    ks = ngx_pcalloc(cf->pool, sizeof(ngx_http_idempotency_keysrc_t));
    if (ks == NULL) {
        return NGX_CONF_ERROR;
    }

    ks->max_body = NGX_CONF_UNSET_SIZE;
    err = NULL;

    for (i = 1; i < cf->args->nelts; i++) {

        if (value[i].len > 9
            && ngx_strncmp(value[i].data, "max_body=", 9) == 0)
        {
            s.data = value[i].data + 9;
            s.len = value[i].len - 9;

            ks->max_body = ngx_parse_size(&s);

            /* the parse of a body is bounded by it (keyscan.c) */

            if (ks->max_body == (size_t) NGX_ERROR || ks->max_body == 0
                || ks->max_body > 8 * 1024 * 1024)
            {
                err = "max_body= must be a size up to 8m, such as 64k or 1m";
                goto invalid;
            }

            ks->max_body_text = s;
            continue;
        }

        rc = ngx_http_idempotency_source_parse(cf->pool, ks, &value[i], &err);

        if (rc == NGX_ERROR) {
            return NGX_CONF_ERROR;
        }

        if (rc == NGX_ABORT) {
            goto invalid;
        }

        if (rc == NGX_OK) {
            continue;
        }

        /* a complex value: headers, arguments, map, auth_request, ... */

        if (ks->nsources == NGX_HTTP_IDEMPOTENCY_SOURCES) {
            err = "more than 8 sources";
            goto invalid;
        }

        if (ngx_http_script_variables_count(&value[i]) == 0) {
            err = "it has no variable, and the same key for every request "
                  "would run one of them";
            goto invalid;
        }

        cv = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
        if (cv == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

        ccv.cf = cf;
        ccv.value = &value[i];
        ccv.complex_value = cv;

        if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        src = &ks->sources[ks->nsources++];
        src->type = NGX_HTTP_IDEMPOTENCY_SRC_VALUE;
        src->name = value[i];
        src->value = cv;
    }

    if (ks->nsources == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" needs a source", &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (ks->max_body == NGX_CONF_UNSET_SIZE) {
        ks->max_body = 1024 * 1024;
        ngx_str_set(&ks->max_body_text, "1m");
    }

    ilcf->keysrc = ks;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid source \"%V\" in \"%V\" directive: %s",
                       &value[i], &cmd->name, err);

    return NGX_CONF_ERROR;
}


ngx_int_t
ngx_http_idempotency_identify(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_known_pt known)
{
    ngx_int_t                           rc;
    ngx_str_t                           why;
    ngx_uint_t                          body;
    ngx_http_idempotency_keysrc_t      *ks;
    ngx_http_idempotency_loc_conf_t    *ilcf;
    ngx_http_idempotency_source_ctx_t  *src;

    ilcf = ctx->conf;
    ks = ilcf->keysrc;
    src = &ctx->source;

    src->known = known;
    ctx->wait_until = ngx_current_msec + ilcf->wait;

    /* a forged delivery is refused before anything else is looked at */

    if (ilcf->signer) {
        rc = ngx_http_idempotency_verify_start(r, ilcf->signer,
                                               &src->verify, &why);
        if (rc == NGX_DECLINED) {
            return ngx_http_idempotency_unsigned(r, ctx, &why);
        }

        if (rc != NGX_OK) {
            return NGX_ERROR;
        }
    }

    body = 0;

    if (ks == NULL) {
        rc = ngx_http_idempotency_header_key(r, ctx);

        if (rc == NGX_OK) {
            rc = ngx_http_idempotency_identity(r, ctx, 0);
        }

    } else {
        rc = ngx_http_idempotency_values(r, ctx);
        body = ks->npaths + ks->nfields;

        if (rc == NGX_OK && !body) {
            rc = ngx_http_idempotency_composed(r, ctx);
        }
    }

    if (rc == NGX_DECLINED && src->verify) {
        /* unprotected, but never unchecked */
        src->unkeyed = 1;
        body = 0;
        rc = NGX_OK;
    }

    if (rc != NGX_OK) {
        return rc;
    }

    if (!body && !ilcf->fingerprint && src->verify == NULL) {
        known(r, ctx);
        return NGX_DONE;
    }

    return ngx_http_idempotency_read_body(r, ctx, body);
}


/*
 * The key header, parsed: NGX_OK; NGX_DECLINED: no header, and none is
 * required; NGX_ABORT: a problem response is resolved (missing,
 * invalid, not issued); NGX_ERROR.
 */

static ngx_int_t
ngx_http_idempotency_header_key(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t                         rc;
    ngx_str_t                         raw;
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

        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_MISSING);
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

        if (rc == NGX_ABORT) {
            /* the expiry bounds the key's first use only: a retry of a
             * key that has a row is answered from it (claim.c) */
            ctx->expired_key = 1;
            reason = NULL;
            rc = NGX_OK;
        }

        if (rc == NGX_DECLINED) {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "idempotency: \"%V\" header: %s", &ilcf->header,
                          reason);

            ngx_http_idempotency_refuse(r, ctx,
                                        NGX_HTTP_IDEMPOTENCY_P_NOT_ISSUED);
            return NGX_ABORT;
        }
    }

    if (reason) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idempotency: invalid \"%V\" header: %s",
                      &ilcf->header, reason);

        ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_INVALID);
        return NGX_ABORT;
    }

    return NGX_OK;
}


/* the complex values among the sources, before the body is read */

static ngx_int_t
ngx_http_idempotency_values(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_str_t                       why, *parts;
    ngx_uint_t                      i;
    ngx_http_idempotency_keysrc_t  *ks;
    ngx_http_idempotency_source_t  *s;

    ks = ctx->conf->keysrc;

    parts = ngx_pcalloc(r->pool, ks->nsources * sizeof(ngx_str_t));
    if (parts == NULL) {
        return NGX_ERROR;
    }

    ctx->source.parts = parts;

    for (i = 0; i < ks->nsources; i++) {
        s = &ks->sources[i];

        if (s->type != NGX_HTTP_IDEMPOTENCY_SRC_VALUE) {
            continue;
        }

        if (ngx_http_complex_value(r, s->value, &parts[i]) != NGX_OK) {
            return NGX_ERROR;
        }

        if (parts[i].len == 0) {
            ngx_str_set(&why, "is empty");
            return ngx_http_idempotency_key_fail(r, ctx,
                                          NGX_HTTP_IDEMPOTENCY_PART_MISSING,
                                          &s->name, &why);
        }
    }

    return NGX_OK;
}


/* every part is known: the key composed of them, and its hash */

static ngx_int_t
ngx_http_idempotency_composed(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t                       rc;
    ngx_str_t                       why;
    ngx_uint_t                      bad;
    const char                     *reason;
    ngx_http_idempotency_keysrc_t  *ks;

    ks = ctx->conf->keysrc;

    rc = ngx_http_idempotency_key_compose(r->pool, ctx->source.parts,
                                          ks->nsources, &ctx->key, &bad,
                                          &reason);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc != NGX_OK) {
        why.data = (u_char *) reason;
        why.len = ngx_strlen(reason);

        return ngx_http_idempotency_key_fail(r, ctx, rc,
                                             &ks->sources[bad].name, &why);
    }

    return ngx_http_idempotency_identity(r, ctx, 1);
}


/*
 * The hash of scope and key, in the header's domain or in the sources'
 * (key.c), the key's id for the error log, and its shard: NGX_OK;
 * NGX_ABORT (no scope for this request); NGX_ERROR.
 */

static ngx_int_t
ngx_http_idempotency_identity(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t composed)
{
    ngx_int_t                         rc;
    ngx_str_t                         scope;
    ngx_http_idempotency_loc_conf_t  *ilcf;

    ilcf = ctx->conf;

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

            ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_SCOPE);
            return NGX_ABORT;
        }
    }

    rc = composed
         ? ngx_http_idempotency_source_hash(&scope, &ctx->key, ctx->key_hash)
         : ngx_http_idempotency_key_hash(&scope, &ctx->key, ctx->key_hash);

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    /* the error log names a key by its hash: the key may be a secret */

    ngx_hex_dump(ctx->key_id_data, ctx->key_hash,
                 NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN / 2);
    ctx->key_id.data = ctx->key_id_data;
    ctx->key_id.len = NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN;

    ctx->shard = ngx_http_idempotency_shard(ilcf->store, ctx->key_hash);

    return NGX_OK;
}


/*
 * The body, read as the mirror module does (a temp file kept for the
 * upstream), then walked.  A body that says it is over max_body is
 * refused before it is read.
 */

static ngx_int_t
ngx_http_idempotency_read_body(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t body)
{
    ngx_int_t                           rc;
    ngx_str_t                           why;
    ngx_uint_t                          i;
    ngx_http_idempotency_keysrc_t      *ks;
    ngx_http_idempotency_source_ctx_t  *src;

    ks = ctx->conf->keysrc;
    src = &ctx->source;

    if (body && r->headers_in.content_length_n > (off_t) ks->max_body) {
        for (i = 0; ks->sources[i].type == NGX_HTTP_IDEMPOTENCY_SRC_VALUE;
             i++)
        {
            /* void */
        }

        why.len = sizeof("the request body is larger than max_body=") - 1
                  + ks->max_body_text.len;
        why.data = ngx_pnalloc(r->pool, why.len);
        if (why.data == NULL) {
            return NGX_ERROR;
        }

        (void) ngx_sprintf(why.data,
                           "the request body is larger than max_body=%V",
                           &ks->max_body_text);

        rc = ngx_http_idempotency_key_fail(r, ctx,
                                        NGX_HTTP_IDEMPOTENCY_PART_BODY,
                                        &ks->sources[i].name, &why);

        if (rc != NGX_DECLINED || src->verify == NULL) {
            return rc;
        }

        src->unkeyed = 1;
        body = 0;
    }

    if (body) {
        src->scan = ngx_http_idempotency_keyscan_create(r->pool, ks);
        if (src->scan == NULL) {
            return NGX_ERROR;
        }
    }

    ctx->state = NGX_HTTP_IDEMPOTENCY_S_BODY;
    r->preserve_body = 1;

    rc = ngx_http_read_client_request_body(r,
                                           ngx_http_idempotency_body_handler);
    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        ctx->state = NGX_HTTP_IDEMPOTENCY_S_DONE;
        return rc;
    }

    ngx_http_finalize_request(r, NGX_DONE);
    return NGX_DONE;
}


static void
ngx_http_idempotency_body_handler(ngx_http_request_t *r)
{
    ngx_http_idempotency_ctx_t         *ctx;
    ngx_http_idempotency_source_ctx_t  *src;

    ctx = ngx_http_idempotency_get_ctx(r);

    r->write_event_handler = ngx_http_core_run_phases;

    if (ctx == NULL || ctx->state != NGX_HTTP_IDEMPOTENCY_S_BODY) {
        return;
    }

    src = &ctx->source;

    if (ctx->conf->fingerprint
        && ngx_http_idempotency_fp_start(r, &src->fp) != NGX_OK)
    {
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
        ngx_http_idempotency_resume(r);
        return;
    }

    /* the buffers of a body in memory (a chunked one's chunks) reach
     * the parser as one piece */

    if (src->scan) {
        ngx_http_idempotency_keyscan_expect(src->scan,
                                         ngx_http_idempotency_body_memory(r));
    }

    ngx_http_idempotency_walk_init(&src->walk, r, ngx_http_idempotency_piece,
                                   ctx);

    ngx_http_idempotency_pass(ctx);
}


static void
ngx_http_idempotency_slice_handler(ngx_event_t *ev)
{
    ngx_connection_t            *c;
    ngx_http_request_t          *r;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ev->data;
    r = ctx->request;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    ngx_http_idempotency_pass(ctx);
    ngx_http_run_posted_requests(c);
}


/* the walk goes on; at its end, the verdicts */

static void
ngx_http_idempotency_pass(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t                           rc;
    ngx_pool_cleanup_t                 *cln;
    ngx_http_request_t                 *r;
    ngx_http_idempotency_source_ctx_t  *src;

    r = ctx->request;
    src = &ctx->source;

    rc = ngx_http_idempotency_walk(&src->walk);

    if (rc == NGX_AGAIN) {

        /* the next slice of a temp file after the events that are ready
         * now: other connections are served in between; the event goes
         * with the request (a body in memory never posts one) */

        if (src->ev.handler == NULL) {
            cln = ngx_pool_cleanup_add(r->pool, 0);
            if (cln == NULL) {
                ngx_http_idempotency_resolve(r, ctx,
                                             NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                             NGX_HTTP_IDEMPOTENCY_ERROR);
                ngx_http_idempotency_resume(r);
                return;
            }

            cln->handler = ngx_http_idempotency_source_cleanup;
            cln->data = ctx;
        }

        src->ev.handler = ngx_http_idempotency_slice_handler;
        src->ev.data = ctx;
        src->ev.log = r->connection->log;

        ngx_post_event(&src->ev, &ngx_posted_next_events);
        return;
    }

    if (rc == NGX_OK) {
        rc = ngx_http_idempotency_body_done(r, ctx);
    }

    switch (rc) {

    case NGX_OK:
        src->known(r, ctx);
        return;

    case NGX_DECLINED:
        /* no key, and none required: forwarded unprotected */
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_FORWARD,
                                     NGX_HTTP_IDEMPOTENCY_BYPASS);
        break;

    case NGX_ABORT:
        /* a problem response, resolved */
        break;

    default:
        ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_ERROR,
                                     NGX_HTTP_IDEMPOTENCY_ERROR);
    }

    ngx_http_idempotency_resume(r);
}


/* a piece of the body, to whoever reads it */

static ngx_int_t
ngx_http_idempotency_piece(void *data, u_char *p, size_t len)
{
    ngx_http_idempotency_ctx_t  *ctx = data;

    ngx_http_idempotency_source_ctx_t  *src;

    src = &ctx->source;

    if (ctx->conf->fingerprint
        && ngx_http_idempotency_fp_update(&src->fp, p, len) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (src->scan
        && ngx_http_idempotency_keyscan_feed(src->scan, p, len) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (src->verify
        && ngx_http_idempotency_verify_update(src->verify, p, len) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The whole body was walked: the fingerprint, the signature's verdict,
 * then the body's parts of the key.  NGX_OK, or as
 * ngx_http_idempotency_key_fail().
 */

static ngx_int_t
ngx_http_idempotency_body_done(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx)
{
    ngx_int_t                           rc;
    ngx_str_t                           why;
    ngx_uint_t                          i;
    ngx_http_idempotency_keysrc_t      *ks;
    ngx_http_idempotency_source_t      *s;
    ngx_http_idempotency_source_ctx_t  *src;

    src = &ctx->source;
    ks = ctx->conf->keysrc;

    if (ctx->conf->fingerprint
        && ngx_http_idempotency_fp_finish(&src->fp, ctx->fingerprint)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (src->verify) {
        rc = ngx_http_idempotency_verify_finish(src->verify, &why);

        if (rc == NGX_DECLINED) {
            return ngx_http_idempotency_unsigned(r, ctx, &why);
        }

        if (rc != NGX_OK) {
            return NGX_ERROR;
        }
    }

    if (src->unkeyed) {
        return NGX_DECLINED;
    }

    if (src->scan == NULL) {
        return NGX_OK;
    }

    if (ngx_http_idempotency_keyscan_end(src->scan) != NGX_OK) {
        return NGX_ERROR;
    }

    for (i = 0; i < ks->nsources; i++) {
        s = &ks->sources[i];

        if (s->type == NGX_HTTP_IDEMPOTENCY_SRC_VALUE) {
            continue;
        }

        rc = ngx_http_idempotency_keyscan_part(src->scan, s, &src->parts[i],
                                               &why);

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc != NGX_HTTP_IDEMPOTENCY_PART_OK) {
            return ngx_http_idempotency_key_fail(r, ctx, rc, &s->name, &why);
        }
    }

    return ngx_http_idempotency_composed(r, ctx);
}


/*
 * A part of the key is missing or unusable: with "idempotency_required
 * on", 400 whose detail names the source ("json=data.object.id: not in
 * the request body"), NGX_ABORT; otherwise NGX_DECLINED, the request
 * passes unprotected.  Nothing is claimed either way.
 */

static ngx_int_t
ngx_http_idempotency_key_fail(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t part, ngx_str_t *name,
    ngx_str_t *why)
{
    u_char      *p;
    ngx_uint_t   problem;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idempotency: key source %V: %V%s", name, why,
                  ctx->conf->required ? "" : ", passed unprotected");

    if (!ctx->conf->required) {
        return NGX_DECLINED;
    }

    p = ngx_pnalloc(r->pool, name->len + why->len + 3);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ctx->detail.data = p;
    ctx->detail.len = ngx_sprintf(p, "%V: %V.", name, why) - p;

    problem = (part == NGX_HTTP_IDEMPOTENCY_PART_MISSING)
              ? NGX_HTTP_IDEMPOTENCY_P_MISSING
              : (part == NGX_HTTP_IDEMPOTENCY_PART_INVALID)
                ? NGX_HTTP_IDEMPOTENCY_P_INVALID
                : NGX_HTTP_IDEMPOTENCY_P_BODY;

    ngx_http_idempotency_refuse(r, ctx, problem);

    return NGX_ABORT;
}


/* 401: the delivery's signature does not hold; nothing is claimed */

static ngx_int_t
ngx_http_idempotency_unsigned(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_str_t *why)
{
    u_char  *p;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idempotency: signature refused: %V", why);

    p = ngx_pnalloc(r->pool, why->len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ctx->detail.data = p;
    ctx->detail.len = ngx_sprintf(p, "%V.", why) - p;

    ngx_http_idempotency_refuse(r, ctx, NGX_HTTP_IDEMPOTENCY_P_SIGNATURE);

    return NGX_ABORT;
}


static void
ngx_http_idempotency_source_cleanup(void *data)
{
    ngx_http_idempotency_ctx_t  *ctx = data;

    if (ctx->source.ev.posted) {
        ngx_delete_posted_event(&ctx->source.ev);
    }
}


/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: webhook signatures checked before a claim.
 *
 * Four HMAC-SHA256 schemes, as the providers sign:
 *
 *   standard  Standard Webhooks (Svix): webhook-signature "v1,<base64>"
 *             (several, space-separated) over "<webhook-id>.
 *             <webhook-timestamp>.<body>", under the base64-decoded
 *             secret "whsec_<base64>"; svix-* headers too
 *   stripe    Stripe-Signature "t=<unix>,v1=<hex>[,v1=<hex>]" over
 *             "<t>.<body>", under the secret as it is ("whsec_...")
 *   github    X-Hub-Signature-256 "sha256=<hex>" over the body
 *   shopify   X-Shopify-Hmac-Sha256 "<base64>" over the body
 *
 * The headers are read before the body (a missing or malformed one, or
 * a timestamp out of tolerance, is refused without reading it); the
 * HMACs, one per secret, are fed the body as it is walked (body.c), and
 * any secret may match any signature (rotation).  Tags are compared with
 * CRYPTO_memcmp().
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <openssl/crypto.h>

#include "ngx_http_idempotency_signature.h"
#include "ngx_http_idempotency_hmac.h"
#include "ngx_http_idempotency_key.h"
#include "ngx_http_idempotency_store.h"


#define NGX_HTTP_IDEMPOTENCY_SIG_STANDARD  0
#define NGX_HTTP_IDEMPOTENCY_SIG_STRIPE    1
#define NGX_HTTP_IDEMPOTENCY_SIG_GITHUB    2
#define NGX_HTTP_IDEMPOTENCY_SIG_SHOPIFY   3

/* signatures of a header that are looked at */
#define NGX_HTTP_IDEMPOTENCY_SIG_MAX       8


struct ngx_http_idempotency_signer_s {
    ngx_uint_t                    scheme;
    ngx_array_t                   keys;        /* keyed HMACs, void * */
    time_t                        tolerance;   /* 0: no timestamp */
};


struct ngx_http_idempotency_verify_s {
    ngx_http_idempotency_signer_t  *conf;
    void                             **hmac;       /* by key */
    ngx_uint_t                         nsigs;
    u_char                             sigs[NGX_HTTP_IDEMPOTENCY_SIG_MAX]
                                           [NGX_HTTP_IDEMPOTENCY_HMAC_LEN];
};


typedef struct {
    ngx_str_t                     name;
    ngx_str_t                     header;
} ngx_http_idempotency_scheme_t;


static ngx_http_idempotency_scheme_t  ngx_http_idempotency_schemes[] = {
    [NGX_HTTP_IDEMPOTENCY_SIG_STANDARD] = { ngx_string("standard"),
                                            ngx_string("webhook-signature") },
    [NGX_HTTP_IDEMPOTENCY_SIG_STRIPE] = { ngx_string("stripe"),
                                          ngx_string("Stripe-Signature") },
    [NGX_HTTP_IDEMPOTENCY_SIG_GITHUB] = { ngx_string("github"),
                                          ngx_string("X-Hub-Signature-256") },
    [NGX_HTTP_IDEMPOTENCY_SIG_SHOPIFY] = {
        ngx_string("shopify"), ngx_string("X-Shopify-Hmac-Sha256") }
};


static ngx_int_t ngx_http_idempotency_signer_secret(ngx_conf_t *cf,
    ngx_http_idempotency_signer_t *sig, ngx_str_t *file);
static ngx_int_t ngx_http_idempotency_verify_standard(ngx_http_request_t *r,
    ngx_http_idempotency_verify_t *v, ngx_str_t *prefix, ngx_str_t *why);
static ngx_int_t ngx_http_idempotency_verify_stripe(ngx_http_request_t *r,
    ngx_http_idempotency_verify_t *v, ngx_str_t *prefix, ngx_str_t *why);
static ngx_int_t ngx_http_idempotency_verify_header(ngx_http_request_t *r,
    ngx_str_t *name, ngx_str_t *value, ngx_str_t *why);
static ngx_int_t ngx_http_idempotency_verify_time(ngx_http_request_t *r,
    ngx_http_idempotency_verify_t *v, ngx_str_t *ts, ngx_str_t *why);
static ngx_int_t ngx_http_idempotency_verify_add(
    ngx_http_idempotency_verify_t *v, ngx_str_t *sig, ngx_uint_t hex);
static ngx_int_t ngx_http_idempotency_verify_why(ngx_http_request_t *r,
    ngx_str_t *why, const char *fmt, ngx_str_t *name, time_t n);
static void ngx_http_idempotency_verify_cleanup(void *data);


char *
ngx_http_idempotency_signature_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idempotency_loc_conf_t  *ilcf = conf;

    ngx_str_t                         *value, s;
    ngx_uint_t                         i, n;
    ngx_http_idempotency_signer_t  *sig;

    if (ilcf->signer != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2
        && value[1].len == 3 && ngx_strncmp(value[1].data, "off", 3) == 0)
    {
        ilcf->signer = NULL;
        return NGX_CONF_OK;
    }

    sig = ngx_pcalloc(cf->pool, sizeof(ngx_http_idempotency_signer_t));
    if (sig == NULL
        || ngx_array_init(&sig->keys, cf->pool, 2, sizeof(void *)) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    n = sizeof(ngx_http_idempotency_schemes)
        / sizeof(ngx_http_idempotency_schemes[0]);

    for (sig->scheme = 0; sig->scheme < n; sig->scheme++) {
        s = ngx_http_idempotency_schemes[sig->scheme].name;

        if (s.len == value[1].len
            && ngx_strncmp(s.data, value[1].data, s.len) == 0)
        {
            break;
        }
    }

    if (sig->scheme == n) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid scheme \"%V\" in \"%V\" directive, it "
                           "must be \"standard\", \"stripe\", \"github\", "
                           "\"shopify\" or \"off\"", &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    sig->tolerance = NGX_CONF_UNSET;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "secret_file=", 12) == 0) {
            s.data = value[i].data + 12;
            s.len = value[i].len - 12;

            if (ngx_http_idempotency_signer_secret(cf, sig, &s) != NGX_OK) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "tolerance=", 10) == 0
            && sig->scheme <= NGX_HTTP_IDEMPOTENCY_SIG_STRIPE)
        {
            s.data = value[i].data + 10;
            s.len = value[i].len - 10;

            sig->tolerance = ngx_parse_time(&s, 1);

            if (sig->tolerance == (time_t) NGX_ERROR || sig->tolerance == 0) {
                goto invalid;
            }

            continue;
        }

        goto invalid;
    }

    if (sig->keys.nelts == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" needs \"secret_file=\"", &cmd->name);
        return NGX_CONF_ERROR;
    }

    /* stripe-node's and the Standard Webhooks libraries' 5 minutes */

    if (sig->scheme <= NGX_HTTP_IDEMPOTENCY_SIG_STRIPE) {
        ngx_conf_init_value(sig->tolerance, 300);

    } else {
        sig->tolerance = 0;
    }

    ilcf->signer = sig;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"%V\" directive%s",
                       &value[i], &cmd->name,
                       ngx_strncmp(value[i].data, "tolerance=", 10) == 0
                       && sig->scheme > NGX_HTTP_IDEMPOTENCY_SIG_STRIPE
                       ? ": the scheme signs no timestamp" : "");

    return NGX_CONF_ERROR;
}


/* a secret from its file (the first line): "whsec_<base64>" decoded for
 * Standard Webhooks, as it is for the others */

static ngx_int_t
ngx_http_idempotency_signer_secret(ngx_conf_t *cf,
    ngx_http_idempotency_signer_t *sig, ngx_str_t *file)
{
    void       **key;
    ngx_str_t    secret, b64;

    if (ngx_http_idempotency_read_secret(cf, file, &secret) != NGX_OK) {
        return NGX_ERROR;
    }

    if (sig->scheme == NGX_HTTP_IDEMPOTENCY_SIG_STANDARD) {
        b64 = secret;

        if (b64.len > 6 && ngx_strncmp(b64.data, "whsec_", 6) == 0) {
            b64.data += 6;
            b64.len -= 6;
        }

        secret.data = ngx_pnalloc(cf->pool, ngx_base64_decoded_length(b64.len));
        if (secret.data == NULL) {
            return NGX_ERROR;
        }

        if (ngx_decode_base64(&secret, &b64) != NGX_OK || secret.len == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "the secret in \"%V\" is not \"whsec_\" and "
                               "base64, as Standard Webhooks secrets are",
                               file);
            return NGX_ERROR;
        }
    }

    key = ngx_array_push(&sig->keys);
    if (key == NULL) {
        return NGX_ERROR;
    }

    *key = ngx_http_idempotency_hmac_key(cf->pool, &secret);

    if (*key == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "HMAC-SHA256 is not available from OpenSSL");
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_verify_start(ngx_http_request_t *r,
    ngx_http_idempotency_signer_t *conf,
    ngx_http_idempotency_verify_t **vp, ngx_str_t *why)
{
    ngx_int_t                       rc;
    ngx_str_t                       value, prefix;
    ngx_uint_t                      i, github;
    ngx_pool_cleanup_t             *cln;
    ngx_http_idempotency_verify_t  *v;

    v = ngx_pcalloc(r->pool, sizeof(ngx_http_idempotency_verify_t));
    if (v == NULL) {
        return NGX_ERROR;
    }

    v->conf = conf;
    ngx_str_null(&prefix);

    switch (conf->scheme) {

    case NGX_HTTP_IDEMPOTENCY_SIG_STANDARD:
        rc = ngx_http_idempotency_verify_standard(r, v, &prefix, why);
        break;

    case NGX_HTTP_IDEMPOTENCY_SIG_STRIPE:
        rc = ngx_http_idempotency_verify_stripe(r, v, &prefix, why);
        break;

    default: /* github, shopify: one signature of the body alone */

        rc = ngx_http_idempotency_verify_header(r,
                         &ngx_http_idempotency_schemes[conf->scheme].header,
                         &value, why);
        if (rc != NGX_OK) {
            break;
        }

        github = (conf->scheme == NGX_HTTP_IDEMPOTENCY_SIG_GITHUB);

        if (github) {
            if (value.len < 7 || ngx_strncmp(value.data, "sha256=", 7) != 0)
            {
                value.len = 0;

            } else {
                value.data += 7;
                value.len -= 7;
            }
        }

        if (ngx_http_idempotency_verify_add(v, &value, github) != NGX_OK) {
            rc = ngx_http_idempotency_verify_why(r, why, github
                     ? "\"%V\" is not \"sha256=\" and an HMAC-SHA256 in hex"
                     : "\"%V\" is not an HMAC-SHA256 in base64",
                     &ngx_http_idempotency_schemes[conf->scheme].header, 0);
        }

        break;
    }

    if (rc != NGX_OK) {
        return rc;
    }

    /* a running HMAC per secret, from the signed prefix on */

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    v->hmac = ngx_pcalloc(r->pool, conf->keys.nelts * sizeof(void *));
    if (v->hmac == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_idempotency_verify_cleanup;
    cln->data = v;

    for (i = 0; i < conf->keys.nelts; i++) {
        v->hmac[i] = ngx_http_idempotency_hmac_start(
                                              ((void **) conf->keys.elts)[i]);
        if (v->hmac[i] == NULL) {
            return NGX_ERROR;
        }

        if (prefix.len
            && ngx_http_idempotency_hmac_update(v->hmac[i], prefix.data,
                                                prefix.len)
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    *vp = v;

    return NGX_OK;
}


/* webhook-id, webhook-timestamp, webhook-signature (or svix-*) */

static ngx_int_t
ngx_http_idempotency_verify_standard(ngx_http_request_t *r,
    ngx_http_idempotency_verify_t *v, ngx_str_t *prefix, ngx_str_t *why)
{
    u_char      *p, *last, *start;
    ngx_int_t    rc;
    ngx_str_t    id, ts, sig, one;
    ngx_uint_t   i;

    static ngx_str_t  names[2][3] = {
        { ngx_string("webhook-id"), ngx_string("webhook-timestamp"),
          ngx_string("webhook-signature") },
        { ngx_string("svix-id"), ngx_string("svix-timestamp"),
          ngx_string("svix-signature") }
    };

    i = (ngx_http_idempotency_find_header(r, &names[0][0], &id)
         == NGX_DECLINED
         && ngx_http_idempotency_find_header(r, &names[1][0], &id)
            != NGX_DECLINED);

    rc = ngx_http_idempotency_verify_header(r, &names[i][0], &id, why);

    if (rc == NGX_OK) {
        rc = ngx_http_idempotency_verify_header(r, &names[i][1], &ts, why);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_idempotency_verify_header(r, &names[i][2], &sig, why);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_idempotency_verify_time(r, v, &ts, why);
    }

    if (rc != NGX_OK) {
        return rc;
    }

    /* "v1,<base64> v1,<base64> ...": other versions are not ours */

    p = sig.data;
    last = p + sig.len;

    while (p < last) {
        for (start = p; p < last && *p != ' '; p++) { /* void */ }

        if (p - start > 3 && ngx_strncmp(start, "v1,", 3) == 0) {
            one.data = start + 3;
            one.len = p - start - 3;

            if (ngx_http_idempotency_verify_add(v, &one, 0) != NGX_OK) {
                return ngx_http_idempotency_verify_why(r, why,
                                    "\"%V\" has a v1 signature that is not "
                                    "an HMAC-SHA256 in base64",
                                    &names[i][2], 0);
            }
        }

        while (p < last && *p == ' ') {
            p++;
        }
    }

    if (v->nsigs == 0) {
        return ngx_http_idempotency_verify_why(r, why,
                                    "\"%V\" has no \"v1,\" signature",
                                    &names[i][2], 0);
    }

    prefix->len = id.len + ts.len + 2;
    prefix->data = ngx_pnalloc(r->pool, prefix->len);
    if (prefix->data == NULL) {
        return NGX_ERROR;
    }

    (void) ngx_sprintf(prefix->data, "%V.%V.", &id, &ts);

    return NGX_OK;
}


/* Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>][,v0=...] */

static ngx_int_t
ngx_http_idempotency_verify_stripe(ngx_http_request_t *r,
    ngx_http_idempotency_verify_t *v, ngx_str_t *prefix, ngx_str_t *why)
{
    u_char     *p, *last, *start;
    ngx_int_t   rc;
    ngx_str_t   value, item, ts, *name;

    name = &ngx_http_idempotency_schemes[NGX_HTTP_IDEMPOTENCY_SIG_STRIPE]
                                                                    .header;

    rc = ngx_http_idempotency_verify_header(r, name, &value, why);
    if (rc != NGX_OK) {
        return rc;
    }

    ngx_str_null(&ts);

    p = value.data;
    last = p + value.len;

    while (p < last) {
        for (start = p; p < last && *p != ','; p++) { /* void */ }

        item.data = start;
        item.len = p - start;

        if (item.len > 2 && ngx_strncmp(item.data, "t=", 2) == 0) {
            ts.data = item.data + 2;
            ts.len = item.len - 2;

        } else if (item.len > 3 && ngx_strncmp(item.data, "v1=", 3) == 0) {
            item.data += 3;
            item.len -= 3;

            if (ngx_http_idempotency_verify_add(v, &item, 1) != NGX_OK) {
                return ngx_http_idempotency_verify_why(r, why,
                                    "\"%V\" has a v1 signature that is not "
                                    "an HMAC-SHA256 in hex", name, 0);
            }
        }

        if (p < last) {
            p++;
        }
    }

    if (ts.len == 0) {
        return ngx_http_idempotency_verify_why(r, why,
                                    "\"%V\" has no \"t=\" timestamp",
                                    name, 0);
    }

    if (v->nsigs == 0) {
        return ngx_http_idempotency_verify_why(r, why,
                                    "\"%V\" has no \"v1=\" signature",
                                    name, 0);
    }

    rc = ngx_http_idempotency_verify_time(r, v, &ts, why);
    if (rc != NGX_OK) {
        return rc;
    }

    prefix->len = ts.len + 1;
    prefix->data = ngx_pnalloc(r->pool, prefix->len);
    if (prefix->data == NULL) {
        return NGX_ERROR;
    }

    (void) ngx_sprintf(prefix->data, "%V.", &ts);

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_verify_header(ngx_http_request_t *r, ngx_str_t *name,
    ngx_str_t *value, ngx_str_t *why)
{
    ngx_int_t  rc;

    rc = ngx_http_idempotency_find_header(r, name, value);

    if (rc == NGX_DECLINED) {
        return ngx_http_idempotency_verify_why(r, why, "no \"%V\" header",
                                               name, 0);
    }

    if (rc == NGX_ERROR) {
        return ngx_http_idempotency_verify_why(r, why,
                                               "the \"%V\" header is "
                                               "repeated", name, 0);
    }

    if (value->len == 0) {
        return ngx_http_idempotency_verify_why(r, why,
                                               "the \"%V\" header is empty",
                                               name, 0);
    }

    return NGX_OK;
}


/* a signed timestamp: the delivery is refused outside the tolerance */

static ngx_int_t
ngx_http_idempotency_verify_time(ngx_http_request_t *r,
    ngx_http_idempotency_verify_t *v, ngx_str_t *ts, ngx_str_t *why)
{
    time_t  t, now;

    t = ngx_atotm(ts->data, ts->len);

    if (t == NGX_ERROR) {
        return ngx_http_idempotency_verify_why(r, why,
                                               "the timestamp \"%V\" is not "
                                               "a number of seconds", ts, 0);
    }

    now = ngx_time();

    if (t < now - v->conf->tolerance) {
        return ngx_http_idempotency_verify_why(r, why,
                                               "the timestamp %V is %T s "
                                               "old, over the tolerance",
                                               ts, now - t);
    }

    if (t > now + v->conf->tolerance) {
        return ngx_http_idempotency_verify_why(r, why,
                                               "the timestamp %V is %T s "
                                               "ahead, over the tolerance",
                                               ts, t - now);
    }

    return NGX_OK;
}


/* a signature of the header, hex or base64, as 32 bytes */

static ngx_int_t
ngx_http_idempotency_verify_add(ngx_http_idempotency_verify_t *v,
    ngx_str_t *sig, ngx_uint_t hex)
{
    u_char      *d, c, h;
    ngx_str_t    dst;
    ngx_uint_t   i;
    u_char       buf[NGX_HTTP_IDEMPOTENCY_HMAC_LEN + 3];

    if (v->nsigs == NGX_HTTP_IDEMPOTENCY_SIG_MAX) {
        return NGX_OK;
    }

    d = v->sigs[v->nsigs];

    if (hex) {
        if (sig->len != 2 * NGX_HTTP_IDEMPOTENCY_HMAC_LEN) {
            return NGX_DECLINED;
        }

        for (i = 0; i < sig->len; i++) {
            c = (u_char) (sig->data[i] | 0x20);

            if (c >= '0' && c <= '9') {
                h = c - '0';

            } else if (c >= 'a' && c <= 'f') {
                h = c - 'a' + 10;

            } else {
                return NGX_DECLINED;
            }

            d[i / 2] = (i % 2) ? (d[i / 2] | h) : (u_char) (h << 4);
        }

    } else {
        if (ngx_base64_decoded_length(sig->len) > sizeof(buf)) {
            return NGX_DECLINED;
        }

        dst.data = buf;

        if (ngx_decode_base64(&dst, sig) != NGX_OK
            || dst.len != NGX_HTTP_IDEMPOTENCY_HMAC_LEN)
        {
            return NGX_DECLINED;
        }

        ngx_memcpy(d, buf, NGX_HTTP_IDEMPOTENCY_HMAC_LEN);
    }

    v->nsigs++;

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_verify_update(void *data, u_char *p, size_t len)
{
    ngx_http_idempotency_verify_t  *v = data;

    ngx_uint_t  i;

    for (i = 0; i < v->conf->keys.nelts; i++) {
        if (ngx_http_idempotency_hmac_update(v->hmac[i], p, len) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_verify_finish(ngx_http_idempotency_verify_t *v,
    ngx_str_t *why)
{
    void        *h;
    ngx_int_t    rc;
    ngx_uint_t   i, j;
    u_char       tag[NGX_HTTP_IDEMPOTENCY_HMAC_LEN];

    rc = NGX_DECLINED;

    for (i = 0; i < v->conf->keys.nelts; i++) {
        h = v->hmac[i];
        v->hmac[i] = NULL;

        if (ngx_http_idempotency_hmac_finish(h, tag) != NGX_OK) {
            return NGX_ERROR;
        }

        for (j = 0; j < v->nsigs; j++) {
            if (CRYPTO_memcmp(tag, v->sigs[j], NGX_HTTP_IDEMPOTENCY_HMAC_LEN)
                == 0)
            {
                rc = NGX_OK;
            }
        }
    }

    if (rc == NGX_DECLINED) {
        ngx_str_set(why, "no signature matches the body under any secret");
    }

    return rc;
}


static ngx_int_t
ngx_http_idempotency_verify_why(ngx_http_request_t *r, ngx_str_t *why,
    const char *fmt, ngx_str_t *name, time_t n)
{
    u_char  *p;

    p = ngx_pnalloc(r->pool, ngx_strlen(fmt) + name->len + NGX_TIME_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    why->data = p;
    why->len = ngx_sprintf(p, fmt, name, n) - p;

    return NGX_DECLINED;
}


static void
ngx_http_idempotency_verify_cleanup(void *data)
{
    ngx_http_idempotency_verify_t  *v = data;

    ngx_uint_t  i;

    for (i = 0; i < v->conf->keys.nelts; i++) {
        if (v->hmac[i]) {
            ngx_http_idempotency_hmac_free(v->hmac[i]);
            v->hmac[i] = NULL;
        }
    }
}

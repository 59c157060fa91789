
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the replay tier entry.
 *
 * What the shared-memory cache and Redis hold for a completed key, the
 * same bytes in both.  Format 2, all integers big-endian:
 *
 *     "IDE"  u8 version (2)         magic and format version
 *     u8     flags                  ENTRY_FP: the fingerprint is the row's;
 *                                   ENTRY_FORGOTTEN: a mark, see below
 *     u8[3]  reserved, zero
 *     u64    expires                end of retention, Unix time, seconds
 *     u32    epoch                  the row's claim epoch, 1 or more
 *     u8[32] fingerprint            zeros without ENTRY_FP
 *     u32    record length
 *     record                        the stored response (record.h)
 *
 * An entry of format 1 (no epoch, a tag over less) is of another
 * version: a miss, never replayed.
 *
 * Without ENTRY_FP the row's fingerprint is not known (the entry was made
 * from a replay that did not compare fingerprints): such an entry only
 * serves requests that do not compare them either.  A row claimed with
 * fingerprinting off has a fingerprint of zeros, and the entry says so
 * with ENTRY_FP and zeros, exactly as MySQL would compare it.
 *
 * In Redis, which others can write to, an entry is followed by a tag:
 *
 *     u8[32] HMAC-SHA256 under the store's secret, over
 *            "idempotency-entry/2", the lengths (u16 each) of the store's
 *            name, database and table, those names, the key hash and the
 *            entry
 *
 * so that a value is only ever replayed for the key and the store it was
 * written for, with the epoch it was written with, by an nginx that
 * holds the secret.  The shared-memory zone, written by nginx alone,
 * holds entries without it.
 *
 * A forgotten mark (ENTRY_FORGOTTEN, no fingerprint, no record) is held
 * by the zone alone: an operator forgot the key at that epoch here, and
 * an entry of that epoch or an older one, put back in Redis, is refused
 * (docs/design.md, "Redis entries and forget").
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_ENTRY_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_ENTRY_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_record.h"


#define NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC     "IDE"
#define NGX_HTTP_IDEMPOTENCY_ENTRY_VERSION   2
#define NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN  56

#define NGX_HTTP_IDEMPOTENCY_ENTRY_FP        0x01
#define NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN 0x02

#define NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN   32


typedef struct {
    ngx_uint_t                      flags;
    time_t                          expires;
    ngx_uint_t                      epoch;
    u_char                         *fingerprint;  /* into the entry */
    ngx_http_idempotency_record_t   record;
} ngx_http_idempotency_entry_t;


/*
 * Writes the fixed part of an entry whose record is record_len bytes;
 * p needs NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN bytes.  The record follows.
 */
u_char *ngx_http_idempotency_entry_head(u_char *p, ngx_uint_t flags,
    u_char *fingerprint, ngx_uint_t epoch, time_t expires,
    size_t record_len);

/*
 * Parses an entry and its record in place (data is not copied): NGX_OK
 * (a forgotten mark too: ENTRY_FORGOTTEN, no record); NGX_DECLINED for
 * an entry of another format version; NGX_ERROR for anything malformed.
 * *why says what was wrong.
 */
ngx_int_t ngx_http_idempotency_entry_parse(ngx_pool_t *pool, u_char *data,
    size_t len, ngx_http_idempotency_entry_t *e, const char **why);

/* NGX_DECLINED: data does not start as an entry of this format version */
ngx_int_t ngx_http_idempotency_entry_version(u_char *data, size_t len);

/*
 * The epoch and flags of an entry of this format version without its
 * record parsed (the zone's own bytes): NGX_OK, or NGX_DECLINED.
 */
ngx_int_t ngx_http_idempotency_entry_peek(u_char *data, size_t len,
    ngx_uint_t *epoch, ngx_uint_t *flags);

/*
 * A keyed HMAC-SHA256 for secret, made once at configuration time and
 * freed with pool; NULL on error.
 */
void *ngx_http_idempotency_entry_key(ngx_pool_t *pool, ngx_str_t *secret);

/*
 * HMAC-SHA256 under key of head and then data, into tag (32 bytes): the
 * entries' tags and the issued keys' (issue.h) are made with it, each
 * with a head of its own length, so that neither passes for the other.
 */
ngx_int_t ngx_http_idempotency_mac(void *key, u_char *head, size_t hlen,
    u_char *data, size_t len, u_char *tag);

/* writes the tag of store's entry (data, len) under key into tag */
ngx_int_t ngx_http_idempotency_entry_sign(void *key,
    ngx_http_idempotency_store_t *store, u_char *key_hash, u_char *data,
    size_t len, u_char *tag);

/*
 * Checks the tag that ends a tagged entry (data, len) against each of the
 * store's secrets: NGX_OK if one of them made it, NGX_DECLINED if none
 * did, NGX_ERROR if the library failed.
 */
ngx_int_t ngx_http_idempotency_entry_verify(
    ngx_http_idempotency_store_t *store, u_char *key_hash, u_char *data,
    size_t len);


#endif /* _NGX_HTTP_IDEMPOTENCY_ENTRY_H_INCLUDED_ */

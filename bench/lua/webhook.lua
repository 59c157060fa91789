-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- wrk script: a webhook delivery per request, as Stripe sends one: a JSON
-- event of SIZE bytes whose key is a nested member (data.object.id, a
-- fresh id per request), signed with Stripe-Signature (HMAC-SHA256 of
-- "t.body" under the bench's secret, through libcrypto with LuaJIT's
-- FFI), and the same id as Idempotency-Key, so that one request serves
-- every server: plain proxy_pass, the header-keyed module, the key from
-- the body with and without idempotency_signature.
--   wrk ... -s bench/lua/webhook.lua URL -- SIZE
local dir = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
dofile(dir .. "common.lua")

local ffi = require("ffi")

ffi.cdef [[
typedef struct evp_md_st EVP_MD;
const EVP_MD *EVP_sha256(void);
unsigned char *HMAC(const EVP_MD *md, const void *key, int key_len,
                    const unsigned char *d, size_t n, unsigned char *out,
                    unsigned int *out_len);
]]

local crypto = ffi.load("crypto")

-- as bench/nginx.conf.in's secret file holds it
SECRET = "whsec_bench_0123456789abcdef0123456789"

local prefix
local n = 0
local head, mid, tail
local mac = ffi.new("unsigned char[32]")
local maclen = ffi.new("unsigned int[1]")

function init(args)
    prefix = unique_prefix()
    local size = tonumber(args[1] or "2048")
    head = '{"id":"evt_'
    mid = '","object":"event","api_version":"2024-06-20",' ..
          '"type":"charge.succeeded","data":{"object":{"id":"ch_'
    local rest = '","object":"charge","amount":1099,"currency":"eur",' ..
                 '"description":"'
    -- the id is about 30 bytes, twice; the padding makes SIZE
    local pad = size - (#head + #mid + #rest + 2 * 30 + 4)
    tail = rest .. string.rep("x", math.max(pad, 0)) .. '"}}}'
end

local function hex(buf, len)
    local t = {}
    for i = 0, len - 1 do
        t[#t + 1] = string.format("%02x", buf[i])
    end
    return table.concat(t)
end

function request()
    n = n + 1
    local id = prefix .. "-" .. n
    local body = head .. id .. mid .. id .. tail
    local ts = tostring(os.time())
    local signed = ts .. "." .. body
    crypto.HMAC(crypto.EVP_sha256(), SECRET, #SECRET, signed, #signed, mac,
                maclen)
    local h = {
        ["Idempotency-Key"] = id,
        ["Content-Type"] = "application/json",
        ["Stripe-Signature"] = "t=" .. ts .. ",v1=" .. hex(mac, maclen[0]),
    }
    return wrk.format("POST", nil, h, body)
end

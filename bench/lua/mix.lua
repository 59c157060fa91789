-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- wrk script: the retry mix.  PCT_NEW % of the requests (default 10)
-- carry a fresh key, the rest repeat one of the pre-sent keys
-- PREFIX-1 .. PREFIX-N.
--   wrk ... -s bench/lua/mix.lua URL -- PREFIX N [PCT_NEW]
local dir = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
dofile(dir .. "common.lua")

local reqs = {}
local count, i, pct_new, prefix
local n = 0

function init(args)
    local p = args[1] or "k"
    count = tonumber(args[2] or "1000")
    pct_new = tonumber(args[3] or "10")
    for k = 1, count do
        reqs[k] = keyed_request(p .. "-" .. k)
    end
    prefix = unique_prefix()
    i = ((thread_id or 1) * 7919) % count
end

function request()
    if math.random(1, 100) <= pct_new then
        n = n + 1
        return keyed_request(prefix .. "-" .. n)
    end
    i = i % count + 1
    return reqs[i]
end

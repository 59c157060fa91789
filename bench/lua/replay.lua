-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- wrk script: cycle over a fixed set of keys PREFIX-1 .. PREFIX-N that
-- bench/run.py has already sent once (so every request is a duplicate).
--   wrk ... -s bench/lua/replay.lua URL -- PREFIX N
local dir = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
dofile(dir .. "common.lua")

local reqs = {}
local count, i

function init(args)
    local prefix = args[1] or "k"
    count = tonumber(args[2] or "1000")
    for k = 1, count do
        reqs[k] = keyed_request(prefix .. "-" .. k)
    end
    -- threads start at different places in the set
    i = ((thread_id or 1) * 7919) % count
end

function request()
    i = i % count + 1
    return reqs[i]
end

#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# The demo requests of `make run`.
#
#   demo/try.sh --print   print them (with what to expect)
#   demo/try.sh           run them one after the other
#
# NGINX_PORT [8080] and BACKEND_PORT [8081] select the ports.

set -uo pipefail

N=${NGINX_PORT:-8080}
B=${BACKEND_PORT:-8081}

steps=(
    "# 1. create an order with a key: 201 from the backend, order ord-1"
    "curl -i -X POST http://127.0.0.1:$N/orders -H 'Idempotency-Key: order-42' -d '{\"item\":\"book\"}'"
    "# 2. retry it: the stored response, same order id, Idempotent-Replayed: true"
    "curl -i -X POST http://127.0.0.1:$N/orders -H 'Idempotency-Key: order-42' -d '{\"item\":\"book\"}'"
    "# 3. another key: a new order (ord-2)"
    "curl -i -X POST http://127.0.0.1:$N/orders -H 'Idempotency-Key: order-43' -d '{\"item\":\"pen\"}'"
    "# 4. no key: 400 application/problem+json (idempotency_required on)"
    "curl -i -X POST http://127.0.0.1:$N/orders -d '{\"item\":\"book\"}'"
    "# 5. the same key with another body: 422 (fingerprint mismatch)"
    "curl -i -X POST http://127.0.0.1:$N/orders -H 'Idempotency-Key: order-42' -d '{\"item\":\"car\"}'"
    "# 6. how often did the backend execute order-42?  1"
    "curl 'http://127.0.0.1:$B/__count?key=order-42'"
    "# 7. a withdrawal that takes 3 s to start: nginx's 504 after 2 s, its outcome unknown"
    "curl -i -X POST 'http://127.0.0.1:$N/withdraw?account=alice&amount=10' -H 'Idempotency-Key: w-1' -H 'X-Withdraw-Hook: pause=3000'"
    "# 8. retry at once: the fence wins epoch 1, the withdrawal runs at epoch 2 (201)"
    "curl -i -X POST 'http://127.0.0.1:$N/withdraw?account=alice&amount=10' -H 'Idempotency-Key: w-1'"
    "# 9. a withdrawal that commits 6 s late: 504 again"
    "curl -i -X POST 'http://127.0.0.1:$N/withdraw?account=alice&amount=10' -H 'Idempotency-Key: w-2' -H 'X-Withdraw-Hook: pause=6000&pause_at=marker'"
    "# 10. retry while its transaction is open: 502 outcome-unknown, Retry-After: 1, X-Should-Retry: true"
    "curl -i -X POST 'http://127.0.0.1:$N/withdraw?account=alice&amount=10' -H 'Idempotency-Key: w-2'"
    "# 11. once it has committed: the withdrawal's own 201 (found: the bank answers from its record)"
    "sleep 4; curl -i -X POST 'http://127.0.0.1:$N/withdraw?account=alice&amount=10' -H 'Idempotency-Key: w-2'"
    "# 12. and every retry after it: that 201 again, replayed"
    "curl -i -X POST 'http://127.0.0.1:$N/withdraw?account=alice&amount=10' -H 'Idempotency-Key: w-2'"
    "# 13. alice's account: one withdrawal per key (the epoch-1 run of w-1 was refused by its marker)"
    "curl http://127.0.0.1:$N/accounts/alice"
)

if [ "${1:-}" = --print ]; then
    printf '%s\n' "${steps[@]}"
    exit 0
fi

for s in "${steps[@]}"; do
    case $s in
        '#'*) printf '\n\033[1m%s\033[0m\n' "$s" ;;
        *)    printf '$ %s\n' "$s"; eval "${s//curl /curl -sS }"; echo ;;
    esac
done

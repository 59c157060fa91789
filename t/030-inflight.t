# A duplicate that arrives while the first request is still upstream.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: in flight: 409 with Retry-After, never a second execution
--- config eval
IdemTest::orders_location(idempotency_lease => '6s', add_header => 'X-Idem') . q{
    # the same key, held until the first request has ended: the count is
    # read only once no execution can still be on its way
    location /held/ {
        idempotency main;
        idempotency_lease 6s;
        idempotency_wait 10s;
        idempotency_fingerprint off;
        proxy_pass http://backend/;
        add_header X-Idem $idempotency_status always;
    }
    location = /count { proxy_pass http://backend/__count; }
}
--- init
bg_request('POST', '/orders?delay=1500', 't030-1', 'x', 0.5);
--- more_headers
Idempotency-Key: t030-1
--- request eval
["POST /orders?delay=1500\nx", "POST /held/orders?delay=1500\nx", "GET /count?key=t030-1"]
--- error_code eval
[409, 201, 200]
--- response_headers_like eval
["Retry-After: ^1\$\nContent-Type: application/problem\\+json\nX-Idem: conflict",
 "Idempotent-Replayed: true\nX-Idem: replay", ""]
--- response_body_like eval
['"type":"urn:ngx-idempotency:problem:request-in-progress".*"status":409',
 '"execution":1,', '^1$']
--- timeout: 15
--- no_error_log
[error]



=== TEST 2: afterwards the result is replayed and it ran once
--- config eval
IdemTest::orders_location(count => 1)
--- init
bg_request('POST', '/orders?delay=1000', 't030-2', 'x', 0.3);
sleep 2;
--- more_headers
Idempotency-Key: t030-2
--- request eval
["POST /orders?delay=1000\nx", "GET /count?key=t030-2"]
--- error_code eval
[201, 200]
--- response_body_like eval
['"execution":1', '^1$']
--- response_headers eval
["Idempotent-Replayed: true", ""]



=== TEST 3: idempotency_wait holds the duplicate and replays the result
--- config eval
IdemTest::orders_location(idempotency_wait => '5s', add_header => 'X-Idem',
    count => 1)
--- init
bg_request('POST', '/orders?delay=1000', 't030-3', 'x', 0.3);
--- more_headers
Idempotency-Key: t030-3
--- request eval
["POST /orders?delay=1000\nx", "GET /count?key=t030-3"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true\nX-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '^1$']
--- no_error_log
[error]



=== TEST 4: idempotency_wait ends before the first request: 409
--- config eval
IdemTest::orders_location(idempotency_wait => '300ms')
--- init
bg_request('POST', '/orders?delay=2000', 't030-4', 'x', 0.3);
--- more_headers
Idempotency-Key: t030-4
--- request
POST /orders?delay=2000
x
--- error_code: 409
--- response_headers_like
Retry-After: ^\d+$

# What happens to a key on the ways a forwarded request can fail: a 5xx
# gives it back, and so does an upstream that never got the request (a
# retry executes again); a request that was sent and got no complete
# response has an unknown outcome (never executed again, retries get 502
# outcome-unknown); a response that is too large to keep is executed once
# and never again.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();

block_defaults(config => orders_location(proxy_read_timeout => '1s',
    add_header => 'X-Idem', count => 1) . <<'CONF');
    location /down {
        idempotency main;
        proxy_pass http://127.0.0.1:1;
    }
CONF

run_tests();

__DATA__

=== TEST 1: a 5xx releases the key: the retry executes again
--- more_headers
Idempotency-Key: t040-1
--- request eval
["POST /orders?status=503\nx", "POST /orders?status=503\nx", "GET /count?key=t040-1"]
--- error_code eval
[503, 503, 200]
--- response_body_like eval
['"execution":1', '"execution":2', '^2$']
--- response_headers eval
["X-Idem: new", "X-Idem: new", ""]
--- no_error_log
[error]



=== TEST 2: idempotency_store_5xx on keeps the 5xx
--- config eval
IdemTest::orders_location(idempotency_store_5xx => 'on', count => 1)
--- more_headers
Idempotency-Key: t040-2
--- request eval
["POST /orders?status=500\nx", "POST /orders?status=500\nx", "GET /count?key=t040-2"]
--- error_code eval
[500, 500, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 3: a 4xx is an answer: it is kept
--- more_headers
Idempotency-Key: t040-3
--- request eval
["POST /orders?status=409\nx", "POST /orders?status=409\nx", "GET /count?key=t040-3"]
--- error_code eval
[409, 409, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 4: upstream refused: 502, the key is free again
--- config eval
IdemTest::orders_location(proxy_pass => 'http://127.0.0.1:1',
    add_header => 'X-Idem')
--- more_headers
Idempotency-Key: t040-4
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[502, 502]
--- response_headers eval
["X-Idem: new", "X-Idem: new"]



=== TEST 5: upstream timeout: 504 for the first, outcome-unknown for the retry, executed once
--- more_headers
Idempotency-Key: t040-5
--- request eval
["POST /orders?delay=2000\nx", "POST /orders?delay=2000\nx", "GET /count?key=t040-5"]
--- error_code eval
[504, 502, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: unknown\nContent-Type: application/problem+json", ""]
--- response_body_like eval
['', '"type":"urn:ngx-idempotency:problem:outcome-unknown"', '^1$']
--- timeout: 6



=== TEST 6: upstream reset mid-body: the outcome is unknown, a retry does not execute
--- init
curl_post('/orders?reset=1', 't040-6');
wait_state('t040-6', 3);
--- more_headers
Idempotency-Key: t040-6
--- request eval
["POST /orders?reset=1\nx", "GET /count?key=t040-6"]
--- error_code eval
[502, 200]
--- response_body_like eval
['"type":"urn:ngx-idempotency:problem:outcome-unknown"', '^1$']



=== TEST 7: a response shorter than its Content-Length is not stored, and not executed again
--- config eval
IdemTest::orders_location(proxy_buffering => 'off', count => 1)
--- init
curl_post('/orders?reset=1', 't040-7');
wait_state('t040-7', 3);
--- more_headers
Idempotency-Key: t040-7
--- request eval
["POST /orders?reset=1\nx", "GET /count?key=t040-7"]
--- error_code eval
[502, 200]
--- response_body_like eval
['"type":"urn:ngx-idempotency:problem:outcome-unknown"', '^1$']



=== TEST 8: too large to store: streamed in full, never executed again
--- config eval
IdemTest::orders_location(idempotency_max_response_size => '10k',
    add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t040-8
--- request eval
["POST /orders?size=50000\nx", "POST /orders?size=50000\nx", "GET /count?key=t040-8"]
--- error_code eval
[201, 410, 200]
--- response_body_like eval
['^\x00\x01\x02', '"type":"urn:ngx-idempotency:problem:response-not-stored"', '^1$']
--- response_headers eval
["X-Idem: new\nContent-Length: 50000", "X-Idem: unstored\nContent-Type: application/problem+json", ""]
--- no_error_log
[error]



=== TEST 9: too large to store: the log says so
--- config eval
IdemTest::orders_location(idempotency_max_response_size => '1k')
--- more_headers
Idempotency-Key: t040-9
--- request
POST /orders?size=5000
x
--- error_code: 201
--- error_log
exceeds idempotency_max_response_size, not stored



=== TEST 10: client gone while the upstream works: the exchange runs to its end, the retry replays it
--- config eval
IdemTest::orders_location(idempotency_lease => '10s', count => 1)
--- init
curl_post('/orders?delay=1500', 't040-10', '--max-time', '0.5');
sleep 2;
--- more_headers
Idempotency-Key: t040-10
--- request eval
["POST /orders?delay=1500\nx", "GET /count?key=t040-10"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t040-10","execution":1', '^1$']



=== TEST 11: client gone mid-response (proxy_buffering off): the rest is still read and stored, the retry replays all of it
--- config eval
IdemTest::orders_location(proxy_buffering => 'off', count => 1)
--- init
curl_post('/orders?size=4000&slow_body=2000', 't040-11', '--max-time', '0.7');
sleep 2.5;
--- more_headers
Idempotency-Key: t040-11
--- request eval
["POST /orders?size=4000&slow_body=2000\nx", "GET /count?key=t040-11"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true\nContent-Length: 4000", ""]
--- response_body eval
[CORE::join('', map { chr($_ % 251) } 0 .. 3999), "1"]

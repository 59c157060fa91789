# Which answers are kept (idempotency_store_status).  A transient refusal
# (429, 408, 425: the operation did not run) passes to the client as it
# is, Retry-After included, and the key is given back, so that the retry
# after Retry-After runs it; by default every other 2xx, 3xx and 4xx is
# the operation's answer and is replayed.  A location may keep less (a
# webhook keeps only 2xx, so that the provider's own retry runs what the
# backend refused) or name a transient status to keep it.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();

block_defaults(config => orders_location(add_header => 'X-Idem', count => 1));

run_tests();

__DATA__

=== TEST 1: a backend's 429 passes with its Retry-After, and the retry after it runs the operation
--- more_headers
Idempotency-Key: t041-1
--- request eval
["POST /orders?status=429&retry_after=7\nx", "POST /orders\nx",
 "POST /orders\nx", "GET /count?key=t041-1"]
--- error_code eval
[429, 201, 201, 200]
--- response_headers eval
["Retry-After: 7\nX-Idem: new\n!Idempotent-Replayed",
 "X-Idem: new\n!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"execution":1', '"execution":2', '"execution":2', '^2$']
--- no_error_log
[error]



=== TEST 2: 408 and 425 are transient too: released, never replayed
--- request eval
["POST /orders?status=408\nx", "POST /orders?status=408\nx",
 "POST /orders?status=425\ny", "POST /orders?status=425\ny",
 "GET /count?key=t041-2"]
--- more_headers eval
["Idempotency-Key: t041-2", "Idempotency-Key: t041-2",
 "Idempotency-Key: t041-2b", "Idempotency-Key: t041-2b", ""]
--- error_code eval
[408, 408, 425, 425, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: new", "X-Idem: new", "X-Idem: new", ""]
--- response_body_like eval
['"execution":1', '"execution":2', '"execution":1', '"execution":2', '^2$']



=== TEST 3: another 4xx is the operation's answer by default: replayed
--- more_headers
Idempotency-Key: t041-3
--- request eval
["POST /orders?status=402\nx", "POST /orders?status=402\nx", "GET /count?key=t041-3"]
--- error_code eval
[402, 402, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]



=== TEST 4: idempotency_store_status 2xx: a refused delivery (400) is released and runs again, a 2xx is replayed
--- config eval
IdemTest::orders_location(idempotency_store_status => '2xx',
    add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t041-4
--- request eval
["POST /orders?status=400\nx", "POST /orders?status=400\nx",
 "POST /orders?status=200\nx", "POST /orders?status=200\nx",
 "GET /count?key=t041-4"]
--- error_code eval
[400, 400, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: new", "X-Idem: new",
 "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"execution":1', '"execution":2', '"execution":3', '"execution":3', '^3$']



=== TEST 5: a transient status named on its own is kept
--- config eval
IdemTest::orders_location(idempotency_store_status => '2xx 3xx 4xx 429',
    add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t041-5
--- request eval
["POST /orders?status=429&retry_after=3\nx",
 "POST /orders?status=429&retry_after=3\nx", "GET /count?key=t041-5"]
--- error_code eval
[429, 429, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true\nRetry-After: 3", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 6: a 429 that error_page replaces is released too
--- config eval
IdemTest::orders_location(proxy_intercept_errors => 'on',
    error_page => '429 /busy', add_header => 'X-Idem', count => 1)
. q{
    location = /busy { return 429 "busy\n"; }
}
--- more_headers
Idempotency-Key: t041-6
--- request eval
["POST /orders?status=429\nx", "POST /orders\nx", "GET /count?key=t041-6"]
--- error_code eval
[429, 201, 200]
--- response_body_like eval
['busy', '"execution":2', '^2$']



=== TEST 7: a class or status nginx cannot keep fails nginx -t, naming it
--- config
    location /t { idempotency main; idempotency_store_status 2xx 6xx; }
--- must_die
--- error_log
invalid value "6xx" in "idempotency_store_status": expected a status from 200 to 599, or one of 2xx, 3xx, 4xx, 5xx



=== TEST 8: interim statuses are never kept
--- config
    location /t { idempotency main; idempotency_store_status 101; }
--- must_die
--- error_log
invalid value "101" in "idempotency_store_status"



=== TEST 9: with idempotency_fence, a kept 5xx fails nginx -t (a backend refuses a fenced epoch with one)
--- config
    location /t {
        idempotency main;
        idempotency_fence main;
        idempotency_store_status 2xx 4xx 503;
        proxy_pass http://backend;
    }
--- must_die
--- error_log
"idempotency_fence" cannot keep a 5xx (503, "idempotency_store_status" or "idempotency_store_5xx")



=== TEST 10: and so does idempotency_store_5xx on
--- config
    location /t {
        idempotency main;
        idempotency_fence main;
        idempotency_store_5xx on;
        proxy_pass http://backend;
    }
--- must_die
--- error_log
"idempotency_fence" cannot keep a 5xx (500,



=== TEST 11: idempotency_on_unknown_outcome release with a fence: a warning, the marker decides
--- config
    location /t {
        idempotency main;
        idempotency_fence main;
        idempotency_on_unknown_outcome release;
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- error_log
"idempotency_on_unknown_outcome release" changes nothing with "idempotency_fence"

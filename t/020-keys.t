# Key syntax, fingerprints and scopes.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();

block_defaults(config => orders_location(add_header => 'X-Idem', count => 1));

run_tests();

__DATA__

=== TEST 1: the header twice: 400
--- more_headers
Idempotency-Key: t020-1a
Idempotency-Key: t020-1b
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- response_body_like: "type":"urn:ngx-idempotency:problem:key-invalid".*"status":400
--- error_log
invalid "Idempotency-Key" header: the header is repeated
--- no_error_log
[error]



=== TEST 2: an empty quoted key: 400
--- more_headers
Idempotency-Key: ""
--- request
POST /orders
x
--- error_code: 400
--- error_log
the key is empty



=== TEST 3: 256 bytes: 400
--- more_headers eval
"Idempotency-Key: " . ("k" x 256)
--- request
POST /orders
x
--- error_code: 400
--- error_log
the key is longer than 255 bytes



=== TEST 4: 255 bytes: accepted, whole, and replayed
--- more_headers eval
"Idempotency-Key: " . substr("t020-4" . ("k" x 255), 0, 255)
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]
--- response_body_like eval
['"key":"t020-4k{249}","execution":1,', '"key":"t020-4k{249}","execution":1,']
--- no_error_log
[error]



=== TEST 5: a bare value with spaces inside is the key itself, and is replayed
--- more_headers
Idempotency-Key: order 42 for alice
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=order%2042%20for%20alice"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"key":"order 42 for alice","execution":1', '"execution":1', '^1$']



=== TEST 5b: the quoted spelling of the same characters is the same key
--- more_headers
Idempotency-Key: "order 42 for alice"
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: replay



=== TEST 5c: a bare value with an odd number of quotes: 400
--- more_headers
Idempotency-Key: order "42 for alice
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has an unbalanced quote



=== TEST 6: a non-ASCII byte: 400
--- raw_request eval
"POST /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 1\r\nIdempotency-Key: \"caf\xc3\xa9\"\r\n\r\nx"
--- error_code: 400
--- error_log
the key has a byte that is not printable ASCII



=== TEST 7: an unterminated quote: 400
--- more_headers
Idempotency-Key: "abc
--- request
POST /orders
x
--- error_code: 400
--- error_log
the quoted key has no closing quote



=== TEST 8: a bad escape: 400
--- more_headers
Idempotency-Key: "a\nb"
--- request
POST /orders
x
--- error_code: 400
--- error_log
the quoted key has an escape other than



=== TEST 9: escapes unquote into the key
--- more_headers
Idempotency-Key: "t020-9 \"q\" \\"
--- config eval
IdemTest::orders_location(add_header => 'X-Key')
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Key: t020-9 "q" \



=== TEST 10: SQL metacharacters are just bytes of the key
--- more_headers
Idempotency-Key: "t020-10'; DROP TABLE idempotency_keys; --"
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]
--- no_error_log
[error]



=== TEST 11: same key, other body: 422
--- more_headers
Idempotency-Key: t020-11
--- request eval
["POST /orders\n{\"a\":1}", "POST /orders\n{\"a\":2}", "GET /count?key=t020-11"]
--- error_code eval
[201, 422, 200]
--- response_body_like eval
['"execution":1', '"type":"urn:ngx-idempotency:problem:key-reused","title":"Idempotency key reused","status":422', '^1$']
--- response_headers eval
["X-Idem: new", "X-Idem: mismatch\nContent-Type: application/problem+json", ""]
--- no_error_log
[error]



=== TEST 12: same key, other URI: 422
--- more_headers
Idempotency-Key: t020-12
--- request eval
["POST /orders/a\nx", "POST /orders/b\nx"]
--- error_code eval
[201, 422]



=== TEST 13: same key, other query: 422
--- more_headers
Idempotency-Key: t020-13
--- request eval
["POST /orders?x=1\nx", "POST /orders?x=2\nx"]
--- error_code eval
[201, 422]



=== TEST 14: same key, other method: 422
--- more_headers
Idempotency-Key: t020-14
--- request eval
["POST /orders\nx", "PATCH /orders\nx"]
--- error_code eval
[201, 422]



=== TEST 15: fingerprint off: another body is replayed
--- config eval
IdemTest::orders_location(idempotency_fingerprint => 'off')
--- more_headers
Idempotency-Key: t020-15
--- request eval
["POST /orders\n{\"a\":1}", "POST /orders\n{\"a\":2}"]
--- error_code eval
[201, 201]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true"]
--- response_body_like eval
['"body_bytes":7', '"body_bytes":7']



=== TEST 16: one key under two scopes is two operations
--- config eval
IdemTest::orders_location(idempotency_scope => '$arg_tenant',
    idempotency_fingerprint => 'off', add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t020-16
--- request eval
["POST /orders?tenant=acme\nx", "POST /orders?tenant=globex\nx", "POST /orders?tenant=acme\nx", "GET /count?key=t020-16"]
--- error_code eval
[201, 201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":2', '"execution":1', '^2$']
--- no_error_log
[error]



=== TEST 16b: a configured scope that is empty for a request: 400 scope-missing, nothing runs
--- config eval
IdemTest::orders_location(idempotency_scope => '$arg_tenant',
    add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t020-16b
--- request eval
["POST /orders\nx", "POST /orders?tenant=\nx", "GET /count?key=t020-16b"]
--- error_code eval
[400, 400, 200]
--- response_headers eval
["X-Idem: noscope\nContent-Type: application/problem+json", "X-Idem: noscope", ""]
--- response_body_like eval
['"type":"urn:ngx-idempotency:problem:scope-missing".*"status":400', 'scope-missing', '^0$']



=== TEST 17: a custom header name
--- config eval
IdemTest::orders_location(idempotency_header => 'X-Request-Id',
    add_header => 'X-Idem')
--- more_headers
X-Request-Id: t020-17
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]

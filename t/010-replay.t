# The core promise: the first request with a key goes upstream once, every
# duplicate gets its stored response replayed byte for byte.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: methods outside idempotency_methods pass through untouched
--- config eval
IdemTest::orders_location(count => 1)
--- more_headers
Idempotency-Key: t010-get
--- request eval
["GET /orders", "GET /orders", "GET /count?key=t010-get"]
--- error_code eval
[200, 200, 200]
--- response_body_like eval
['"execution":1', '"execution":2', '^2$']
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- no_error_log
[error]



=== TEST 2: a POST without the key passes through when it is not required
--- config eval
IdemTest::orders_location(add_header => 'X-Idem')
--- request
POST /orders
{}
--- error_code: 201
--- response_headers
X-Idem: bypass
!Idempotent-Replayed
--- no_error_log
[error]



=== TEST 3: required and missing: 400 problem+json
--- config eval
IdemTest::orders_location(idempotency_required => 'on')
--- request
POST /orders
{}
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
--- response_body
{"type":"urn:ngx-idempotency:problem:key-missing","title":"Idempotency key missing","status":400,"detail":"This resource requires an idempotency key header."}
--- no_error_log
[error]



=== TEST 4: first request executes, the duplicate is replayed
--- config eval
IdemTest::orders_location(add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t010-4
--- request eval
["POST /orders\n{\"item\":1}", "POST /orders\n{\"item\":1}", "GET /count?key=t010-4"]
--- error_code eval
[201, 201, 200]
--- response_body_like eval
['^\{"order_id":"ord-\d+","key":"t010-4","execution":1,', '^\{"order_id":"ord-\d+","key":"t010-4","execution":1,', '^1$']
--- response_headers eval
["X-Idem: new\n!Idempotent-Replayed", "X-Idem: replay\nIdempotent-Replayed: true", ""]
--- no_error_log
[error]



=== TEST 5: the replay is byte-identical: status, headers, body
--- config eval
IdemTest::orders_location()
--- init
my $r1 = curl_post('/orders?cookies=2', 't010-5', '-i');
my $r2 = curl_post('/orders?cookies=2', 't010-5', '-i');
for ($r1, $r2) { s/^Date: .*\r\n//mg; }
$r2 =~ s/^Idempotent-Replayed: true\r\n//m or die "no replay header in:\n$r2";
$r1 eq $r2 or die "replay differs:\n$r1\n---\n$r2";
--- request
POST /orders?cookies=2
x
--- more_headers
Idempotency-Key: t010-5
--- error_code: 201
--- raw_response_headers_like: Set-Cookie: c1=v1; Path=/\r\nSet-Cookie: c2=v2; Path=/\r\n
--- response_headers
Idempotent-Replayed: true
Content-Type: application/json
--- no_error_log
[error]



=== TEST 6: 201 with Location is replayed with its Location, not executed again
--- config eval
IdemTest::orders_location(count => 1)
--- init
# every execution gets a new Location (/orders/ord-<n>, n counts all
# executions): the replay must carry the first response's own
my @r = map { curl_post('/orders', 't010-6', '-i') } 1 .. 2;
my @loc = map { m{^Location: (\S+)\r$}mi ? $1 : '' } @r;
like($loc[0], qr{^/orders/ord-\d+$}, 'TEST 6: the first response has a Location');
unlike($r[0], qr/^Idempotent-Replayed:/mi, 'TEST 6: the first request is executed');
like($r[1], qr/^Idempotent-Replayed: true\r$/mi, 'TEST 6: the duplicate is a replay');
is($loc[1], $loc[0], "TEST 6: the replay's Location is the first response's");
--- more_headers
Idempotency-Key: t010-6
--- request eval
["POST /orders\nx", "GET /count?key=t010-6"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- raw_response_headers_like eval
["Location: /orders/ord-\\d+\r\n", ""]
--- response_body_like eval
['"execution":1', '^1$']
--- no_error_log
[error]



=== TEST 6b: idempotency_replay_skip_header keeps headers out of the stored record
--- config eval
IdemTest::orders_location(idempotency_replay_skip_header => 'Set-Cookie x-order-id',
    count => 1)
--- more_headers
Idempotency-Key: t010-6b
--- request eval
["POST /orders?cookies=1\nx", "POST /orders?cookies=1\nx", "GET /count?key=t010-6b"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["Set-Cookie: c1=v1; Path=/\n!Idempotent-Replayed",
 "Idempotent-Replayed: true\n!Set-Cookie\n!X-Order-Id", ""]
--- raw_response_headers_like eval
["X-Order-Id: ord-\\d+\r\n", "Location: /orders/ord-\\d+\r\n", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 6c: off cancels an inherited list
--- config eval
IdemTest::orders_location(idempotency_replay_skip_header => 'off') . q{
    idempotency_replay_skip_header Set-Cookie;
}
--- more_headers
Idempotency-Key: t010-6c
--- request eval
["POST /orders?cookies=1\nx", "POST /orders?cookies=1\nx"]
--- error_code eval
[201, 201]
--- raw_response_headers_like eval
["Set-Cookie: c1=v1; Path=/\r\n", "Set-Cookie: c1=v1; Path=/\r\n(.*\r\n)*Idempotent-Replayed: true\r\n"]



=== TEST 7: binary body replayed byte for byte
--- config eval
IdemTest::orders_location()
--- more_headers
Idempotency-Key: t010-7
--- request eval
["POST /orders?binary=1\nx", "POST /orders?binary=1\nx"]
--- error_code eval
[201, 201]
--- response_body eval
[CORE::join('', map { chr($_) } 0..255, CORE::reverse(0..255)) . ("\0" x 64),
 CORE::join('', map { chr($_) } 0..255, CORE::reverse(0..255)) . ("\0" x 64)]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true\nContent-Type: application/octet-stream"]
--- no_error_log
[error]



=== TEST 8: a chunked upstream response is replayed whole
--- config eval
IdemTest::orders_location()
--- more_headers
Idempotency-Key: t010-8
--- request eval
["POST /orders?chunked=1&size=70000\nx", "POST /orders?chunked=1&size=70000\nx"]
--- error_code eval
[201, 201]
--- response_body eval
[CORE::join('', map { chr($_ % 251) } 0..69999), CORE::join('', map { chr($_ % 251) } 0..69999)]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true"]
--- no_error_log
[error]



=== TEST 9: a gzip'ed body keeps its Content-Encoding and bytes
--- config eval
IdemTest::orders_location()
--- init
my $a = curl_post('/orders?gzip=1', 't010-9');
my $b = curl_post('/orders?gzip=1', 't010-9');
length($a) > 20 && $a eq $b && substr($a, 0, 2) eq "\x1f\x8b" or die "gzip replay differs";
--- request
POST /orders?gzip=1
x
--- more_headers
Idempotency-Key: t010-9
--- error_code: 201
--- response_headers
Content-Encoding: gzip
Idempotent-Replayed: true
--- no_error_log
[error]



=== TEST 10: an empty body is replayed as empty
--- config eval
IdemTest::orders_location()
--- more_headers
Idempotency-Key: t010-10
--- request eval
["POST /orders?empty=1&status=200\nx", "POST /orders?empty=1&status=200\nx"]
--- error_code eval
[200, 200]
--- response_body eval
["", ""]
--- response_headers eval
["Content-Length: 0", "Content-Length: 0\nIdempotent-Replayed: true"]
--- no_error_log
[error]



=== TEST 11: 204 No Content is replayed
--- config eval
IdemTest::orders_location(count => 1)
--- more_headers
Idempotency-Key: t010-11
--- request eval
["POST /orders?status=204\nx", "POST /orders?status=204\nx", "GET /count?key=t010-11"]
--- error_code eval
[204, 204, 200]
--- response_body eval
["", "", "1"]
--- no_error_log
[error]



=== TEST 12: the key header reaches the upstream
--- config eval
IdemTest::orders_location()
--- more_headers
Idempotency-Key: "t010 12"
--- request
POST /orders
x
--- error_code: 201
--- response_body_like: "key":"\\"t010 12\\""
--- no_error_log
[error]



=== TEST 13: quoted and bare spellings are one key
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Key')
--- init
curl_post('/orders', 't010-13');
$? == 0 or die "curl failed";
--- more_headers
Idempotency-Key: "t010-13"
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Key: t010-13
Idempotent-Replayed: true
--- no_error_log
[error]



=== TEST 14: a PATCH is protected too
--- config eval
IdemTest::orders_location()
--- more_headers
Idempotency-Key: t010-14
--- request eval
["PATCH /orders/1\nx", "PATCH /orders/1\nx"]
--- error_code eval
[200, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true"]
--- no_error_log
[error]



=== TEST 15: a body that spills to a temp file is fingerprinted and forwarded
--- config eval
IdemTest::orders_location() . q{
    client_body_buffer_size 1k;
}
--- more_headers
Idempotency-Key: t010-15
--- request eval
["POST /orders\n" . ("a" x 50000), "POST /orders\n" . ("a" x 50000), "POST /orders\n" . ("a" x 49999) . "b"]
--- error_code eval
[201, 201, 422]
--- response_body_like eval
['"body_bytes":50000', '"body_bytes":50000', 'key-reused']
--- no_error_log
[error]



=== TEST 16: a first request costs two store round trips: claim, complete
--- config eval
IdemTest::orders_location()
--- more_headers
Idempotency-Key: t010-16
--- request
POST /orders
x
--- error_code: 201
--- grep_error_log eval
qr/idempotency mysql \w+ start/
--- grep_error_log_out
idempotency mysql claim start
idempotency mysql complete start



=== TEST 17: a duplicate costs one, and replays a record stored by others
--- config eval
IdemTest::orders_location()
--- init
my $kh = key_hash_hex('t010-17');
my $fp = fingerprint('POST', '/orders', 'x');
my $rec = unpack('H*', record(202, [['Content-Type', 'text/x-seeded'],
                                    ['X-Seed', 'a'], ['X-Seed', 'b']],
                              "seeded\0body\n"));
sql("INSERT INTO idempotency_keys (key_hash, state, owner, fingerprint,"
    . " created_at, lease_until, expires_at, status, response) VALUES"
    . " (X'$kh', 1, X'00000000000000000000000000000002', X'$fp',"
    . " UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL 1 HOUR,"
    . " 202, X'$rec')");
--- more_headers
Idempotency-Key: t010-17
--- request
POST /orders
x
--- error_code: 202
--- response_headers
Content-Type: text/x-seeded
Idempotent-Replayed: true
Content-Length: 12
--- raw_response_headers_like: X-Seed: a\r\nX-Seed: b\r\n
--- response_body eval
"seeded\0body\n"
--- grep_error_log eval
qr/idempotency mysql \w+ start/
--- grep_error_log_out
idempotency mysql claim start
--- no_error_log
[error]



=== TEST 18: a malformed stored record is never replayed nor re-executed
--- config eval
IdemTest::orders_location(count => 1)
--- init
my $kh = key_hash_hex('t010-18');
my $fp = fingerprint('POST', '/orders', 'x');
sql("INSERT INTO idempotency_keys (key_hash, state, owner, fingerprint,"
    . " created_at, lease_until, expires_at, status, response) VALUES"
    . " (X'$kh', 1, X'00000000000000000000000000000002', X'$fp',"
    . " UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL 1 HOUR,"
    . " 200, 'IDR2garbage')");
--- more_headers
Idempotency-Key: t010-18
--- request
POST /orders
x
--- error_code: 503
--- response_body_like: store-unavailable
--- error_log eval
"stored response of key " . IdemStress::key_id('t010-18') . " is malformed"



=== TEST 18a: ... and its operation is not run again
--- config
    location = /count { proxy_pass http://backend/__count; }
--- request
GET /count?key=t010-18
--- response_body_like: ^0$



=== TEST 18b: a stored record that would inject a header is never replayed
--- config eval
IdemTest::orders_location(count => 1)
--- init
my $kh = key_hash_hex('t010-18b');
my $fp = fingerprint('POST', '/orders', 'x');
my $rec = unpack('H*', record(200, [['X-A', "v\r\nSet-Cookie: planted=1"]],
                              "poisoned"));
sql("INSERT INTO idempotency_keys (key_hash, state, owner, fingerprint,"
    . " created_at, lease_until, expires_at, status, response) VALUES"
    . " (X'$kh', 1, X'00000000000000000000000000000002', X'$fp',"
    . " UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL 1 HOUR,"
    . " 200, X'$rec')");
--- more_headers
Idempotency-Key: t010-18b
--- request
POST /orders
x
--- error_code: 503
--- response_headers
!Set-Cookie
--- response_body_like: store-unavailable
--- error_log
a header value with CR, LF or NUL), not replayed



=== TEST 18c: ... and its operation is not run again
--- config
    location = /count { proxy_pass http://backend/__count; }
--- request
GET /count?key=t010-18b
--- response_body_like: ^0$



=== TEST 19: the upstream's own status line is replayed too
--- config eval
IdemTest::orders_location()
--- more_headers
Idempotency-Key: t010-19
--- request eval
["POST /orders?status=422\nx", "POST /orders?status=422\nx"]
--- error_code eval
[422, 422]
--- raw_response_headers_like eval
["^HTTP/1.1 422 Unprocessable Entity\r\n", "^HTTP/1.1 422 Unprocessable Entity\r\n"]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true"]
--- no_error_log
[error]

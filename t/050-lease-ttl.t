# Owner death, lease renewal and retention, against rows seeded straight
# into the table with the database's own clock.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();

sub seed {
    my ($key, $state, $lease, $expires, $body) = @_;

    my $kh = key_hash_hex($key);
    my $fp = fingerprint('POST', '/orders', $body // 'x');

    sql("DELETE FROM idempotency_keys WHERE key_hash = X'$kh'");
    sql("INSERT INTO idempotency_keys (key_hash, state, owner, fingerprint,"
        . " created_at, lease_until, expires_at) VALUES (X'$kh', $state,"
        . " X'00000000000000000000000000000001', X'$fp', UTC_TIMESTAMP(3),"
        . " UTC_TIMESTAMP(3) + INTERVAL $lease SECOND,"
        . " UTC_TIMESTAMP(3) + INTERVAL $expires SECOND)");
}

# leases down to 600ms: a query_timeout a third of that
block_defaults(http_config => store_config(query_timeout => '200ms'),
               config => orders_location(idempotency_lease => '2s',
                                         add_header => 'X-Idem', count => 1));

run_tests();

__DATA__

=== TEST 1: an in-progress row whose lease is alive: 409
--- init
main::seed('t050-1', 0, 30, 3600);
--- more_headers
Idempotency-Key: t050-1
--- request
POST /orders
x
--- error_code: 409
--- response_headers_like
Retry-After: ^1$



=== TEST 2: an owner that died: taken over after its lease, executed once
--- init
main::seed('t050-2', 0, -1, 3600);
--- more_headers
Idempotency-Key: t050-2
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=t050-2"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: takeover", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 2b: a takeover is logged
--- init
main::seed('t050-2b', 0, -1, 3600);
--- more_headers
Idempotency-Key: t050-2b
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: takeover
--- error_log
taken over from an owner whose lease ended



=== TEST 3: a dead owner's key with another body is not taken over: 422
--- init
main::seed('t050-3', 0, -1, 3600, 'other');
--- more_headers
Idempotency-Key: t050-3
--- request
POST /orders
x
--- error_code: 422



=== TEST 4: past retention the key is free again
--- init
main::seed('t050-4', 1, -100, -1, 'other');
--- more_headers
Idempotency-Key: t050-4
--- request eval
["POST /orders\nx", "GET /count?key=t050-4"]
--- error_code eval
[201, 200]
--- response_headers eval
["X-Idem: new", ""]
--- response_body_like eval
['"execution":1', '^1$']



=== TEST 5: retention follows idempotency_ttl
--- config eval
IdemTest::orders_location(idempotency_ttl => '1s',
    idempotency_lease => '600ms', add_header => 'X-Idem', count => 1)
--- init
curl_post('/orders', 't050-5');
$? == 0 or die "curl failed";
sleep 2;
--- more_headers
Idempotency-Key: t050-5
--- request eval
["POST /orders\nx", "GET /count?key=t050-5"]
--- error_code eval
[201, 200]
--- response_headers eval
["X-Idem: new", ""]
--- response_body_like eval
['"execution":2', '^2$']



=== TEST 6: a slow upstream keeps its lease by renewal, never taken over
--- config eval
IdemTest::orders_location(idempotency_lease => '600ms',
    add_header => 'X-Idem', count => 1)
--- init
bg_request('POST', '/orders?delay=2500', 't050-6', 'x', 1.5);
--- more_headers
Idempotency-Key: t050-6
--- request eval
["POST /orders?delay=2500\nx", "GET /count?key=t050-6"]
--- error_code eval
[409, 200]
--- response_body_like eval
['request-in-progress', '^1$']
--- timeout: 6



=== TEST 7: expiry uses the database clock (the row says expired, nginx agrees)
--- init
main::seed('t050-7', 1, -10, -5);
sql("UPDATE idempotency_keys SET response = NULL, status = 200 WHERE key_hash = X'" . key_hash_hex('t050-7') . "'");
--- more_headers
Idempotency-Key: t050-7
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: new

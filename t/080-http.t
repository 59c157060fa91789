# Keepalive, pipelining and HTTP/2.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();

block_defaults(config => orders_location(add_header => 'X-Idem', count => 1));

run_tests();

__DATA__

=== TEST 1: pipelined first request and duplicate on one connection
--- more_headers
Idempotency-Key: t080-1
--- pipelined_requests eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=t080-1"]
--- error_code eval
[201, 201, 200]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true", ""]
--- no_error_log
[error]



=== TEST 2: keepalive: requests without a key pass through, one connection
--- pipelined_requests eval
["POST /orders?k=1\nx", "POST /orders?k=2\nx", "POST /orders?k=3\nx"]
--- error_code eval
[201, 201, 201]
--- response_headers eval
["X-Idem: bypass", "X-Idem: bypass", "X-Idem: bypass"]
--- no_error_log
[error]



=== TEST 2b: keepalive: several keys over one connection, each executed once
--- more_headers eval
[(map { "Idempotency-Key: t080-2b-$_" } 1, 2, 3, 1, 2, 3), ("") x 3]
--- pipelined_requests eval
[("POST /orders\nx") x 6, map { "GET /count?key=t080-2b-$_" } 1, 2, 3]
--- error_code eval
[(201) x 6, (200) x 3]
--- response_headers eval
[("X-Idem: new") x 3, ("X-Idem: replay\nIdempotent-Replayed: true") x 3,
 ("") x 3]
--- response_body_like eval
[(map { "\"key\":\"t080-2b-$_\",\"execution\":1," } 1, 2, 3, 1, 2, 3),
 ('^1$') x 3]
--- no_error_log
[error]



=== TEST 3: HTTP/2: first request and a byte-identical replay
--- http_config eval
IdemTest::store_config() . "server {\n    "
. IdemStress::listen_http2('127.0.0.1:' . (IdemTest::port() + 1), '    ')
. "\n" . IdemTest::orders_location() . "}\n"
--- init
my $port = port() + 1;
my $o1 = `curl -s --http2-prior-knowledge -X POST -H 'Idempotency-Key: t080-3' --data-binary x -D - http://127.0.0.1:$port/orders`;
my $o2 = `curl -s --http2-prior-knowledge -X POST -H 'Idempotency-Key: t080-3' --data-binary x -D - http://127.0.0.1:$port/orders`;
$o1 =~ m{^HTTP/2 201} or die "h2 first: $o1";
$o2 =~ m{^HTTP/2 201} && $o2 =~ /idempotent-replayed: true/i or die "h2 replay: $o2";
(my $b1 = $o1) =~ s/.*?\r\n\r\n//s;
(my $b2 = $o2) =~ s/.*?\r\n\r\n//s;
$b1 eq $b2 && length $b1 or die "h2 bodies differ";
--- request
GET /count?key=t080-3
--- error_code: 200
--- response_body eval
"1"
--- no_error_log
[error]

# A response the store cannot take is still recorded as executed: a
# record larger than the server's max_allowed_packet falls back at once to
# the small "executed, not stored" update, so retries get 410 and the
# operation never runs twice.  Both ways are covered: the record checked
# against max_allowed_packet before it is sent (over 1 MiB of statement),
# and the server's refusal of a smaller one (the record is sent as it is,
# bound to a prepared statement, so 600 kB is over the 512 kB limit).

use lib 't';
use Test::Nginx::Socket;
use IdemTest;

IdemStress::begin_file('MYSQL_SOCKET');
plan 'no_plan';

sub root_sql {
    chomp(my $out = sql_root($ENV{TEST_NGINX_MYSQL_SOCKET}, @_));
    return $out;
}

# the body of size=N: byte i is i % 251
sub pattern { CORE::join('', map { chr($_ % 251) } 0 .. $_[0] - 1) }

# the module's connections are all made after this (nginx starts for
# each block); the server's own value is back when the file ends
our $OWNER = $$;
our $SAVED = root_sql('SELECT @@global.max_allowed_packet');
root_sql('SET GLOBAL max_allowed_packet = 524288');
END { root_sql("SET GLOBAL max_allowed_packet = $SAVED") if $$ == $OWNER }

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(pool => 4),
    config => IdemTest::orders_location(idempotency_max_response_size => '8m',
                                        add_header => 'X-Idem', count => 1),
    no_error_log => [qr/storing the response of key .* retrying|could not be stored/,
                     '[alert]', '[crit]']);
run_tests();

__DATA__

=== TEST 1: a 1048576-byte response over max_allowed_packet (checked before it is sent): the client gets all of it, and the record is written at once as executed, not stored
--- more_headers
Idempotency-Key: t160-1048576
--- request
POST /orders?size=1048576
x
--- error_code: 201
--- response_headers
X-Idem: new
--- response_body eval
main::pattern(1048576)
--- error_log
cannot be stored: larger than the server's max_allowed_packet; recorded as executed
--- timeout: 10



=== TEST 2: ... its retries get 410 response-not-stored, and it was executed once
--- more_headers
Idempotency-Key: t160-1048576
--- request eval
["POST /orders?size=1048576\nx", "POST /orders?size=1048576\nx",
 "GET /count?key=t160-1048576"]
--- error_code eval
[410, 410, 200]
--- response_body_like eval
['response-not-stored', 'response-not-stored', '^1$']



=== TEST 3: a 600000-byte response over max_allowed_packet (refused by the server): the client gets all of it, and the record is written at once as executed, not stored
--- more_headers
Idempotency-Key: t160-600000
--- request
POST /orders?size=600000
x
--- error_code: 201
--- response_headers
X-Idem: new
--- response_body eval
main::pattern(600000)
--- error_log eval
qr/cannot be stored: .*(max_allowed_packet|packet).*; recorded as executed/i
--- timeout: 10



=== TEST 4: ... its retries get 410 response-not-stored, and it was executed once
--- more_headers
Idempotency-Key: t160-600000
--- request eval
["POST /orders?size=600000\nx", "POST /orders?size=600000\nx",
 "GET /count?key=t160-600000"]
--- error_code eval
[410, 410, 200]
--- response_body_like eval
['response-not-stored', 'response-not-stored', '^1$']



=== TEST 5: responses that each fit under the limit, completed at about the same moment: completions that share a statement do not add up to more than the limit (design.md, "Batches"), so every one is stored, replayed and executed once
--- init
my @many = map { "t160-many$_" } 1 .. 8;
my $upd0 = main::root_sql("SHOW GLOBAL STATUS LIKE 'Com_update'");
my @res = IdemStress::http_many([ map { post_key('/orders?size=200000&delay=300',
                                                 $_, spec => 1) } @many ],
                                timeout => 60);
my $upd1 = main::root_sql("SHOW GLOBAL STATUS LIKE 'Com_update'");
s/.*\t// for $upd0, $upd1;
note('8 completions of 200000-byte records: ' . ($upd1 - $upd0)
     . ' UPDATE statements');
is(scalar(grep { $_->{status} == 201
                 && length($_->{body} // '') == 200000 } @res), 8,
   '8 concurrent 200000-byte responses: each client gets all of it');
--- more_headers eval
[(map { "Idempotency-Key: t160-many$_" } 1 .. 8), ("") x 8]
--- request eval
[("POST /orders?size=200000&delay=300\nx") x 8,
 map { "GET /count?key=t160-many$_" } 1 .. 8]
--- error_code eval
[(201) x 8, (200) x 8]
--- response_headers eval
[("X-Idem: replay") x 8, ("") x 8]
--- response_body eval
[(main::pattern(200000)) x 8, ("1") x 8]
--- timeout: 10

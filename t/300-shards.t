# Sharded stores: two independent MariaDB servers (the suite's own and the
# second one of scripts/services.sh).  Each key lives on the shard its
# hash names; a shard that is down fails only its own keys, and the error
# log names it.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

our (@S0, @S1);

# keys that land on the first and on the second of two shards
for my $i (1 .. 100) {
    my $k = "t300-$i";
    push @{ shard_of('', $k, 2) ? \@S1 : \@S0 }, $k;
}

die "no keys for both shards\n" unless @S0 >= 6 && @S1 >= 6;

our $M1 = $ENV{TEST_NGINX_MYSQL_PORT};
our $M2 = $ENV{TEST_NGINX_MYSQL2_PORT}
    or die "TEST_NGINX_MYSQL2_PORT is not set: run with 'make test'\n";

# the store "main" on the shards at addresses $a and $b
sub shards_config {
    my ($a, $b) = @_;

    return store_config(mysql => [$a, $b], purge => 'off');
}

block_defaults(config => orders_location(add_header => 'X-Idem', count => 1));

no_shuffle();
run_tests();

# where the rows of TEST 1 and 2 went: each on its own shard only
sub row_state {
    my ($port, $key) = @_;

    my $kh = key_hash_hex($key);
    my $out = sql_at($port, "SELECT state FROM idempotency_keys"
                            . " WHERE key_hash = X'$kh'");
    chomp $out;
    return $out eq '' ? 'none' : $out;
}

for my $k (@S0[0 .. 1]) {
    is(row_state($M1, $k), 1, "$k: completed on shard 0 (port $M1)");
    is(row_state($M2, $k), 'none', "$k: not on shard 1");
}

for my $k (@S1[0 .. 1]) {
    is(row_state($M2, $k), 1, "$k: completed on shard 1 (port $M2)");
    is(row_state($M1, $k), 'none', "$k: not on shard 0");
}

is(row_state($M1, $S0[2]), 1, "$S0[2]: stored on shard 0 while 1 was down");
is(row_state($M1, $S1[2]), 'none', "$S1[2]: never reached shard 0");
is(row_state($M2, $S1[3]), 1, "$S1[3]: stored on shard 1 while 0 was down");
is(row_state($M2, $S0[3]), 'none', "$S0[3]: never reached shard 1");

__DATA__

=== TEST 1: two shards: keys of both execute once and replay
--- http_config eval
main::shards_config("127.0.0.1:$main::M1", "127.0.0.1:$main::M2")
--- more_headers eval
[(map { "Idempotency-Key: $_" } @main::S0[0, 1], @main::S1[0, 1],
                                 @main::S0[0, 1], @main::S1[0, 1]),
 ("") x 4]
--- request eval
[("POST /orders\nx") x 8,
 map { "GET /count?key=$_" } @main::S0[0, 1], @main::S1[0, 1]]
--- error_code eval
[(201) x 8, (200) x 4]
--- response_headers eval
[("X-Idem: new") x 4, ("X-Idem: replay") x 4, ("") x 4]
--- response_body_like eval
[(map { "\"key\":\"$_\",\"execution\":1," } @main::S0[0, 1], @main::S1[0, 1],
                                                @main::S0[0, 1], @main::S1[0, 1]),
 ('^1$') x 4]
--- no_error_log
[error]



=== TEST 2: the second shard down: its key fails, and the log names it
--- http_config eval
main::shards_config("127.0.0.1:$main::M1", "127.0.0.1:1")
--- more_headers eval
"Idempotency-Key: $main::S1[2]"
--- request
POST /orders
x
--- error_code: 503
--- response_headers
X-Idem: error
--- error_log eval
qr/idempotency store "main" mysql=127\.0\.0\.1:1: connect failed/



=== TEST 2b: the second shard down: the first shard's keys work
--- http_config eval
main::shards_config("127.0.0.1:$main::M1", "127.0.0.1:1")
--- more_headers eval
["Idempotency-Key: $main::S0[2]", "Idempotency-Key: $main::S0[2]"]
--- request eval
[("POST /orders\nx") x 2]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]
--- no_error_log
[error]



=== TEST 3: the first shard down: its key fails, and the log names it
--- http_config eval
main::shards_config("127.0.0.1:1", "127.0.0.1:$main::M2")
--- more_headers eval
"Idempotency-Key: $main::S0[3]"
--- request
POST /orders
x
--- error_code: 503
--- response_headers
X-Idem: error
--- error_log eval
qr/idempotency store "main" mysql=127\.0\.0\.1:1: connect failed/



=== TEST 3b: the first shard down: the second shard's keys work
--- http_config eval
main::shards_config("127.0.0.1:1", "127.0.0.1:$main::M2")
--- more_headers eval
["Idempotency-Key: $main::S1[3]", "Idempotency-Key: $main::S1[3]"]
--- request eval
[("POST /orders\nx") x 2]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]
--- no_error_log
[error]



=== TEST 4: a shard over a unix socket, the other over TCP
--- http_config eval
main::shards_config("127.0.0.1:$main::M1", "unix:$ENV{TEST_NGINX_MYSQL2_SOCKET}")
--- more_headers eval
["Idempotency-Key: $main::S1[4]", "Idempotency-Key: $main::S1[4]"]
--- request eval
[("POST /orders\nx") x 2]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]
--- no_error_log
[error]

# Failure edges and what leaks: the client's epoch header never reaches
# the upstream except as the module sets it for an owner; the error log
# names a key by its id, never by the key (a key may be a secret); and
# out of memory after the request was sent records the key as executed,
# never gives it back to run again.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;

# the first 8 hex digits of the key hash: how the error log names a key
# (for the blocks' eval sections too)
sub key_id { substr(IdemTest::key_hash_hex($_[0]), 0, 8) }
*Test::Base::Filter::key_id = \&key_id;

# a request of many headers (two parts of nginx's header list), with the
# epoch header at the start, at the end, side by side, and in between
my $many = join("\n", 'Idempotency-Epoch: 99',
                (map { "X-F$_: f$_" } 1 .. 12),
                'Idempotency-Epoch: 98', 'X-F13: f13',
                'Idempotency-Epoch: 97', 'idempotency-epoch: 96', 'X-F14: f14',
                'Idempotency-Epoch: 95', 'X-F15: f15',
                'Idempotency-Epoch: 94', 'X-F16: f16',
                (map { "X-F$_: f$_" } 17 .. 25), 'Idempotency-Epoch: 93');

$ENV{TEST_NGINX_T065_MANY} = $many;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: a client's epoch header reaches no upstream: an unprotected method, no key, a location without the module
--- config
    location /orders {
        idempotency main;
        idempotency_epoch_header Idempotency-Epoch;
        proxy_pass http://127.0.0.1:$server_port/echo;
    }
    location /plain {
        idempotency_epoch_header Idempotency-Epoch;
        proxy_pass http://127.0.0.1:$server_port/echo;
    }
    location = /echo {
        return 200 "epoch=$http_idempotency_epoch\n";
    }
--- request eval
["PUT /orders\nx", "POST /orders\nx", "POST /plain\nx", "DELETE /orders"]
--- more_headers eval
["Idempotency-Key: t065-1a\nIdempotency-Epoch: 99",
 "Idempotency-Epoch: 99",
 "Idempotency-Key: t065-1c\nIdempotency-Epoch: 99",
 "Idempotency-Epoch: 99\nIdempotency-Epoch: 98"]
--- error_code eval
[200, 200, 200, 200]
--- response_body eval
["epoch=\n", "epoch=\n", "epoch=\n", "epoch=\n"]



=== TEST 2: on_store_error pass: the request is forwarded unprotected, without the client's epoch header
--- http_config
    idempotency_store down mysql=127.0.0.1:1 user=u password=p database=d
                      connect_timeout=200ms query_timeout=500ms;
--- config
    location /orders {
        idempotency down;
        idempotency_on_store_error pass;
        idempotency_epoch_header Idempotency-Epoch;
        add_header X-Idem $idempotency_status always;
        proxy_pass http://127.0.0.1:$server_port/echo;
    }
    location = /echo {
        return 200 "epoch=$http_idempotency_epoch\n";
    }
--- more_headers
Idempotency-Key: t065-2
Idempotency-Epoch: 99
--- request
POST /orders
x
--- error_code: 200
--- response_headers
X-Idem: error
--- response_body
epoch=



=== TEST 3: many headers, the epoch header among them several times: an owner's upstream gets the module's epoch alone, and every other header intact; so does an unprotected request, without it
--- config
    location /orders {
        idempotency main;
        idempotency_epoch_header Idempotency-Epoch;
        proxy_pass http://127.0.0.1:$server_port/echo;
    }
    location = /echo {
        return 200 "epoch=$http_idempotency_epoch $http_x_f1 $http_x_f12 $http_x_f13 $http_x_f14 $http_x_f15 $http_x_f16 $http_x_f17 $http_x_f25 key=$http_idempotency_key\n";
    }
--- request eval
["POST /orders\nx", "PUT /orders\nx"]
--- more_headers eval
["Idempotency-Key: t065-3\n$ENV{TEST_NGINX_T065_MANY}",
 "$ENV{TEST_NGINX_T065_MANY}\nIdempotency-Key: t065-3b"]
--- error_code eval
[200, 200]
--- response_body eval
["epoch=1 f1 f12 f13 f14 f15 f16 f17 f25 key=t065-3\n",
 "epoch= f1 f12 f13 f14 f15 f16 f17 f25 key=t065-3b\n"]



=== TEST 4: the error log names a key by its id, the cache zone's lines too
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t065:1m')
--- config
    location /orders {
        idempotency main;
        add_header X-Tier $idempotency_tier always;
        proxy_pass http://backend;
    }
--- init
my $r = http_req(key => 't065-Secret-Key-4', body => 'x');
is($r->{status}, 201, 'executed');
wait_state('t065-Secret-Key-4', 1);
--- more_headers
Idempotency-Key: t065-Secret-Key-4
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Tier: shm
--- error_log eval
"idempotency: key " . key_id('t065-Secret-Key-4') . " found in the cache zone"
--- no_error_log eval
qr/idempotency(?: store "[^"]*"[^:]*)?: [^\n]*Secret-Key/



=== TEST 5: the Redis tier's lines name a key by its id
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}")
--- config
    location /orders {
        idempotency main;
        add_header X-Tier $idempotency_tier always;
        proxy_pass http://backend;
    }
--- init
my $r = http_req(key => 't065-Secret-Key-5', body => 'x');
is($r->{status}, 201, 'executed');
wait_state('t065-Secret-Key-5', 1);
--- more_headers
Idempotency-Key: t065-Secret-Key-5
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Tier: redis
--- error_log eval
["idempotency: key " . key_id('t065-Secret-Key-5') . " not in redis",
 "idempotency: key " . key_id('t065-Secret-Key-5') . " found in redis"]
--- no_error_log eval
qr/idempotency(?: store "[^"]*"[^:]*)?: [^\n]*Secret-Key/



=== TEST 6: out of memory for the record after the backend answered (the worker's address space limited, RLIMIT_AS): the key is recorded as executed, not stored; a retry gets 410 and the backend ran once
# not under valgrind or ASan: their allocators own the address space
--- skip_eval: 6: $ENV{TEST_NGINX_USE_VALGRIND} || defined $ENV{ASAN_OPTIONS}
--- config eval
IdemTest::orders_location(idempotency_max_response_size => '64m',
                          count => 1, add_header => 'X-Idem')
--- init
# the worker (no master) may map 40 MB more than it does now: the
# capture of a 24 MB response fits, the record of it in one piece does not
open my $f, '<', $Test::Nginx::Util::PidFile or die "pid file: $!";
chomp(my $pid = <$f>);
open my $st, '<', "/proc/$pid/status" or die "status: $!";
my ($vm) = join('', <$st>) =~ /^VmSize:\s+(\d+) kB/m or die "no VmSize";
my $limit = $vm * 1024 + 40 * 1024 * 1024;
system('prlimit', "--pid=$pid", "--as=$limit:") == 0 or die "prlimit failed";
--- more_headers
Idempotency-Key: t065-6
--- request
POST /orders?size=24000000
x
--- error_code: 201
--- response_headers
X-Idem: new
Content-Length: 24000000
--- response_body_like: ^\x00\x01\x02
--- error_log
no memory for the record; recorded as executed, not stored
--- timeout: 60



=== TEST 6b: ... and a retry gets 410, the backend having run once
--- skip_eval: 6: $ENV{TEST_NGINX_USE_VALGRIND} || defined $ENV{ASAN_OPTIONS}
--- config eval
IdemTest::orders_location(idempotency_max_response_size => '64m',
                          count => 1, add_header => 'X-Idem')
--- request eval
["POST /orders?size=24000000\nx", "GET /count?key=t065-6"]
--- more_headers eval
["Idempotency-Key: t065-6", ""]
--- error_code eval
[410, 200]
--- response_headers eval
["X-Idem: unstored", ""]
--- response_body_like eval
["response-not-stored", "^1\$"]



=== TEST 7: $idempotency_key_id is the key's id in the error log, for an access log
--- config
    location /orders {
        idempotency main;
        add_header X-Key-Id $idempotency_key_id always;
        proxy_pass http://backend;
    }
--- more_headers
Idempotency-Key: t065-7
--- request
POST /orders
x
--- error_code: 201
--- response_headers eval
"X-Key-Id: " . key_id('t065-7')

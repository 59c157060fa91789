# The first part of docs/cookbook.md, run as it is written: the Stripe-
# style API, PHP-FPM, gRPC, the Galera store line and a backend that
# takes part in the fence.  Each block is read from the page; the test
# only points its addresses, paths and store names at the suite's own
# (the backend, PHP-FPM's port and app, the gRPC server, the MariaDB of
# the suite for the Galera node, the bank of t/Bank.pm).

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use JSON::PP ();
use Bank '540';

our $ROOT = $Bank::ROOT;
our $GRPC_LISTEN = TierTest::free_port();

# the page's first part, and its blocks by heading
our %RECIPE;
{
    open my $fh, '<', "$ROOT/docs/cookbook.md" or die "docs/cookbook.md: $!";
    local $/;
    my $md = <$fh>;
    $md =~ s/^# Webhooks\n.*//ms;
    for my $part (split /^## /m, $md) {
        my ($title) = $part =~ /\A(.*)\n/ or next;
        my @code = $part =~ /((?:^    .*\n|^\n(?=    ))+)/mg;
        $RECIPE{$title} = $code[0] // '';
        $RECIPE{$title} =~ s/^    //mg;
    }
}

sub recipe {
    my ($title, @subst) = @_;
    my $b = $RECIPE{$title} // die "docs/cookbook.md: no '## $title'\n";
    while (my ($from, $to) = splice @subst, 0, 2) {
        $b =~ s/\Q$from\E/$to/g or die "'$title': no '$from' in its block\n";
    }
    return $b;
}

sub grpc_call {
    my ($key, $req) = @_;
    my $json = JSON::PP->new->canonical->encode($req);
    local $ENV{IDEM_NODE_DIR} = "$ROOT/build/node";
    my $out = `node $ROOT/t/tools/grpc-call.js $GRPC_LISTEN Charge '$key' '$json' 1`;
    my $res = eval { JSON::PP::decode_json($out) } or die "grpc-call.js: $out\n";
    return $res->[0];
}

no_shuffle();
run_tests();

__DATA__

=== TEST 1: a Stripe-style API: a key per caller, replayed; another caller's same key is its own; no key is a 400
--- config eval
main::recipe('A Stripe-style API')
. "location = /count { proxy_pass http://backend/__count; }\n"
--- request eval
["POST /v1/charges\nx", "POST /v1/charges\nx", "POST /v1/charges\nx",
 "GET /count?key=t540-1", "POST /v1/charges\nx"]
--- more_headers eval
["X-Api-Key: acct-1\nIdempotency-Key: t540-1",
 "X-Api-Key: acct-1\nIdempotency-Key: t540-1",
 "X-Api-Key: acct-2\nIdempotency-Key: t540-1", "",
 "X-Api-Key: acct-1"]
--- error_code eval
[201, 201, 201, 200, 400]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", "!Idempotent-Replayed",
 "", "Content-Type: application/problem+json"]
--- response_body_like eval
['"execution":1', '"execution":1', '"execution":2', '^2$', 'key-missing']



=== TEST 2: PHP-FPM: the front controller's answer replayed; it ran once
--- config eval
main::recipe('PHP-FPM',
             'include                 fastcgi_params;' =>
                 'include                 /etc/nginx/fastcgi_params;',
             '/srv/app/index.php' => "$main::ROOT/backend/app.php",
             '127.0.0.1:9000' => "127.0.0.1:$ENV{TEST_NGINX_PHPFPM_PORT}")
--- more_headers
Idempotency-Key: t540-2
--- request eval
["POST /php/orders\nx", "POST /php/orders\nx", "GET /php/__count?key=t540-2"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 3: gRPC: the call's key in its metadata; the retry gets the first answer and its trailers; it ran once
--- http_config eval
IdemTest::store_config()
. main::recipe('gRPC', 'listen 50051 http2;' =>
                  IdemStress::listen_http2("127.0.0.1:$main::GRPC_LISTEN", ''),
               '/payments.Payments/' => '/idem.Payments/',
               '127.0.0.1:50052' => "127.0.0.1:$ENV{TEST_NGINX_GRPC_PORT}")
--- init
my $first = main::grpc_call('t540-3', { amount => 5 });
is($first->{code}, 0, 'TEST 3: the call succeeds');
my $again = main::grpc_call('t540-3', { amount => 5 });
is($again->{code}, 0, 'TEST 3: the retry succeeds');
is($again->{initial}{'idempotent-replayed'}, 'true', 'TEST 3: ... replayed');
is($again->{trailing}{'x-charge-id'}, $first->{trailing}{'x-charge-id'},
   'TEST 3: ... with the first call\'s trailers');
is_deeply($again->{response}, $first->{response}, 'TEST 3: ... its message');
my $none = main::grpc_call('-', { amount => 5 });
is($none->{code}, 3, 'TEST 3: no key: INVALID_ARGUMENT');
--- request
GET /t
--- config
location = /t { return 200 "checked\n"; }
--- response_body
checked



=== TEST 4: the Galera store line works as it is written, against a server
--- http_config eval
main::recipe('Galera', '10.0.0.11:3306' => "127.0.0.1:$ENV{TEST_NGINX_MYSQL_PORT}",
             'password_file=/etc/nginx/idem.password' =>
                 "password=$ENV{TEST_NGINX_MYSQL_PASSWORD}",
             'user=idem' => "user=$ENV{TEST_NGINX_MYSQL_USER}",
             'database=idempotency' => "database=$ENV{TEST_NGINX_MYSQL_DB}")
. "upstream backend { server 127.0.0.1:\$TEST_NGINX_BACKEND_PORT; }\n"
--- config eval
IdemTest::orders_location(add_header => 'X-Idem')
--- more_headers
Idempotency-Key: t540-4
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]



=== TEST 5: a backend that takes part: killed after its COMMIT, the retry gets the withdrawal's own answer, once
--- http_config eval
IdemTest::store_config()
. "idempotency_store bank mysql=127.0.0.1:\$TEST_NGINX_MYSQL_PORT user=\$TEST_NGINX_MYSQL_USER password=\$TEST_NGINX_MYSQL_PASSWORD database=\$TEST_NGINX_MYSQL_DB;\n"
--- config eval
main::recipe('A backend that takes part',
             'proxy_read_timeout       10s;' => 'proxy_read_timeout       2s;',
             'http://backend' => "http://127.0.0.1:$Bank::PORT")
. "location = /t { return 200 \"checked\\n\"; }\n"
--- init
my $k = 't540-5';
main::killed($k, 'commit');
my $r = main::withdraw($k);
is($r->{status}, 201, 'TEST 5: the retry: the withdrawal\'s 201');
like($r->{body}, qr/"balance":90,"epoch":1\}$/, 'TEST 5: ... its first answer');
$r = main::withdraw($k);
is(main::hdr($r, 'Idempotent-Replayed'), 'true', 'TEST 5: then replayed');
is(main::ledger($k), '90 1', 'TEST 5: one withdrawal');
--- request
GET /t
--- response_body
checked
--- timeout: 30

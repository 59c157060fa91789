# The official Stripe Node library (stripe-node) as the client: its own
# Idempotency-Key, a 1 s timeout and up to 8 retries, against an operation
# that takes 2.5 s.  The first attempt times out; the upstream still runs
# to its end; the library's retries get 409 until the response is stored
# and then its replay: the client ends with the created object, and the
# operation ran once.

use strict;
use warnings;

use JSON::PP ();
use Test::More;
use Time::HiRes qw(time);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file();
plan skip_all => 'stripe-node is not installed (scripts/node-deps.sh)'
    unless -d "$BUILD/node/node_modules/stripe";

my $P = port(171);
my $ngx;

END { $ngx->stop if $ngx }

$ngx = IdemStress::Nginx->start(name => 'stripe', port => $P,
    http => store_line('main', $ENV{TEST_NGINX_MYSQL_PORT})
          . server_block($P, <<"SERVER"));
        location /v1/ {
            idempotency main;
            proxy_pass http://backend;
            add_header X-Idem \$idempotency_status always;
        }
SERVER

{
    my $out = `node t/tools/stripe-retry.js $P '/v1/orders?delay=2500' 1000 8`;
    my $res = eval { JSON::PP::decode_json($out) } // {};
    note("stripe-node: $out");

    ok($res->{ok}, 'stripe-node ends with a result, not an error');
    is($res->{status}, 201, '... the created object (201)');
    is(ref $res->{body} eq 'HASH' ? $res->{body}{execution} : undef, 1,
       '... of the first execution');
    is($res->{replayed}, 'true', '... replayed to a retry');

    my @attempts = @{ $res->{attempts} || [] };
    ok(@attempts >= 2 && ($attempts[0]{error} // '') =~ /TIMEDOUT|timeout/i,
       'its first attempt timed out and it retried');

    my $key = $res->{idempotencyKey} // '';
    like($key, qr/^stripe-node-retry-/, 'the library chose the key');
    is(backend_count($key), 1, 'the operation ran once');
}

is_deeply([ $ngx->crashes ], [], 'no worker crashed');

done_testing();

# The official Stripe Node library (stripe-node) as the client: its own
# Idempotency-Key, a 1 s timeout and up to 8 retries, against an operation
# that takes 2.5 s.  The first attempt times out; the upstream still runs
# to its end; the library's retries get 409 until the response is stored
# and then its replay: the client ends with the created object, and the
# operation ran once.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use JSON::PP ();

plan skip_all => 'stripe-node is not installed (scripts/node-deps.sh)'
    unless -d 'build/node/node_modules/stripe';
plan 'no_plan';

no_shuffle();
run_tests();

__DATA__

=== TEST 1: stripe-node's retries end with the created object of the only execution
--- config eval
IdemTest::location('/v1/', add_header => 'X-Idem')
--- init
my $port = port();
my $out = `node t/tools/stripe-retry.js $port '/v1/orders?delay=2500' 1000 8`;
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
is(IdemStress::backend_count($key), 1, 'the operation ran once');
--- request
POST /v1/orders
x
--- error_code: 201
--- response_headers
X-Idem: bypass

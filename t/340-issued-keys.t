# Server-issued keys: idempotency_key_issuer answers a fresh key (JSON
# body and the key header) with an expiry and an HMAC under the store's
# secret; in a location with "idempotency_keys issued", a key that this
# deployment did not issue, that was changed, or whose expiry has passed
# gets 400 key-not-issued without a store round trip, and an issued key
# works like any other (executed once, replayed).  Any nginx that holds
# the secret accepts the key; rotation keeps old keys valid.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use Time::HiRes ();

sub issue {
    my ($uri) = @_;
    my $r = http_req(method => 'GET', uri => $uri // '/keys');
    my ($key) = $r->{body} =~ /"key":"([^"]+)"/;
    return ($key, $r);
}

sub claims {
    my $m = http_req(method => 'GET', uri => '/metrics')->{body};
    my ($n) = $m =~ /^nginx_idempotency_store_operations_total\{store="main",operation="claim",result="ok"\} (\d+)$/m;
    return $n // 0;
}

no_shuffle();
run_tests();

__DATA__

=== TEST 1: an issued key: executed once, replayed; others get 400 key-not-issued without a claim
--- http_config eval
TierTest::tier_stores(main => 'secret=t340-secret-0123456789abcdef',
                      other => 'secret=t340-other-secret-0123456789')
--- config eval
IdemTest::orders_location(idempotency_keys => 'issued',
    add_header => 'X-Idem') . q{
    location = /keys { idempotency main; idempotency_key_issuer 1h; }
    location = /other-keys {
        idempotency other;
        idempotency_key_issuer;
    }
    location = /short-keys { idempotency main; idempotency_key_issuer 1s; }
    location /open {
        idempotency main;
        proxy_pass http://backend;
    }
    location = /metrics { idempotency_metrics; }
    location = /count { proxy_pass http://backend/__count; }
}
--- init
my ($key, $r) = main::issue();
like($key, qr/^ik1\.[A-Za-z0-9_-]{32}\.[A-Za-z0-9_-]{43}$/, 'a key: ik1.<24 bytes>.<tag>');
is($r->{status}, 200, 'the issuer answers 200');
is($r->{headers}{'idempotency-key'}[0], $key, '... with the key in its header');
like($r->{body}, qr/"header":"Idempotency-Key","expires_at":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"/,
     '... and the header name and expiry in the body');
is($r->{headers}{'cache-control'}[0], 'no-store', 'never cached');
my ($key2) = main::issue();
isnt($key2, $key, 'each key is new');

my $c0 = main::claims();
$r = http_req(key => $key, body => 'x');
is("$r->{status} $r->{idem}", '201 new', 'the issued key: executed');
$r = http_req(key => $key, body => 'x');
is("$r->{status} $r->{idem}", '201 replay', '... and replayed');
my $c1 = main::claims();
is($c1 - $c0, 2, 'two claims');

my @bad = (
    ['order-42', 'a key the client chose'],
    ['ik1.' . ('A' x 32) . '.' . ('A' x 43), 'a made-up key of the right shape'],
    [substr($key, 0, 10) . (substr($key, 10, 1) eq 'A' ? 'B' : 'A')
     . substr($key, 11), 'the issued key with its random part changed'],
    [substr($key, 0, -1) . (substr($key, -1) eq 'A' ? 'B' : 'A'),
     'the issued key with its tag changed'],
    [(main::issue('/other-keys'))[0], 'a key issued under another secret'],
);
for my $b (@bad) {
    $r = http_req(key => $b->[0], body => 'x');
    is("$r->{status} $r->{idem}", '400 invalid', "$b->[1]: 400");
    like($r->{body}, qr/"type":"urn:ngx-idempotency:problem:key-not-issued"/,
         "$b->[1]: key-not-issued");
}
is(main::claims(), $c1, 'none of them cost a claim');
is(http_req(key => 'order-42', uri => '/open', body => 'x')->{status}, 201,
   'a location without "idempotency_keys issued" takes any key');

my ($short) = main::issue('/short-keys');
Time::HiRes::sleep(2.1);
$r = http_req(key => $short, body => 'x');
is("$r->{status} $r->{idem}", '400 invalid', 'an expired key: 400');
--- request
GET /count
--- response_body_like: ^\d+$
--- error_log
"Idempotency-Key" header: the key has expired
--- no_error_log
[error]



=== TEST 2: another nginx with the same secrets accepts the key; an old secret still checks
--- http_config eval
TierTest::tier_stores(old => 'secret=t340-old-secret-0123456789abc',
                      new => 'secret=t340-new-secret-0123456789abc'
                             . ' secret=t340-old-secret-0123456789abc')
--- config eval
IdemTest::orders_location(idempotency => 'new', idempotency_keys => 'issued',
    add_header => 'X-Idem') . q{
    location = /old-keys { idempotency old; idempotency_key_issuer; }
}
--- init
my ($key) = main::issue('/old-keys');
my $r = http_req(key => $key, body => 'x');
is("$r->{status} $r->{idem}", '201 new',
   'issued under the old secret, accepted where it is listed second');
--- request
GET /old-keys
--- error_code: 200
--- response_body_like: "key":"ik1\.



=== TEST 3: an issuer without a secret
--- http_config eval
TierTest::tier_stores(main => '')
--- config
    location = /keys { idempotency main; idempotency_key_issuer; }
--- must_die
--- error_log
idempotency store "main" needs "secret=" or "secret_file=": a location issues or checks keys with it



=== TEST 4: "idempotency_keys issued" without a store
--- config
    location /orders { idempotency_keys issued; proxy_pass http://backend; }
--- must_die
--- error_log
"idempotency_keys issued" needs "idempotency" with a store



=== TEST 5: a bad issuer lifetime
--- http_config eval
TierTest::tier_stores(main => 'secret=t340-secret-0123456789abcdef')
--- config
    location = /keys { idempotency main; idempotency_key_issuer forever; }
--- must_die
--- error_log
invalid value "forever" in "idempotency_key_issuer" directive

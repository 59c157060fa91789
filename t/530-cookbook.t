# Every location block of docs/cookbook.md's webhooks (the part after
# "# Webhooks"; t/540 runs the part before it), run as it is written: the
# test points its secret files, its htpasswd and the business key's
# upstream path at its own, adds an X-Idem header, and sends each
# provider's delivery (signed by the provider's library where nginx
# checks the signature) and two resends.  Each delivery runs once at the
# backend's receiver (backend/webhooks.py), and each resend gets the
# receiver's acknowledgement replayed byte for byte.
#
# The blocks are read from the page when the file starts and make the
# config of every block here; a provider's block sends its three
# deliveries (each signed anew when the block starts, as the providers
# do) and reads the receiver's count of it.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use WebhookTest;
use MIME::Base64 ();

IdemStress::begin_file();
plan skip_all => 'the signing libraries are not installed '
                 . '(scripts/node-deps.sh)' unless have_signers();
plan 'no_plan';

our $TAG = "t530-$$-" . int(time);

our %SECRET = (stripe => 'whsec_t530' . ('s' x 26),
               github => 't530 github secret',
               shopify => 'shpss_t530' . ('h' x 22),
               standard => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
my $dir;
for (sort keys %SECRET) {
    my $f = secret_file("$_.secret", $SECRET{$_});
    ($dir = $f) =~ s{/[^/]+$}{/};
}

# alice:secret
my $htpasswd = "$IdemStress::DIR/t530-htpasswd";
IdemStress::write_file($htpasswd, 'alice:' . `openssl passwd -apr1 secret`);

# the blocks, as docs/cookbook.md has them: its webhooks' part
my $md = IdemStress::read_file("$IdemStress::ROOT/docs/cookbook.md");
$md =~ s/\A.*?^# Webhooks\n//ms or die "docs/cookbook.md has no '# Webhooks'\n";
my %block;
while ($md =~ m{^(    location (\S+) \{\n.*?^    \}\n)}msg) {
    $block{$2} = $1;
}

my @want = map { "/hooks/$_" } qw(stripe square paypal adyen wechat alipay
                                  github shopify twilio standard gitlab);
is_deeply([ sort keys %block ], [ sort @want, '/orders' ],
          'the cookbook has a block for each provider and the business key');

# each block as written but for the test's paths, and an X-Idem header
our $CONF = '';
for my $loc (sort keys %block) {
    my $b = $block{$loc};
    $b =~ s{/etc/nginx/webhooks/}{$dir}g;
    $b =~ s{/etc/nginx/htpasswd}{$htpasswd}g;
    $b =~ s{proxy_pass(\s+)http://backend;}{proxy_pass$1http://backend/hooks/orders;}
        if $loc eq '/orders';
    $b =~ s/\n    \}\n\z/\n        add_header X-Idem \$idempotency_status always;\n    }\n/;
    $CONF .= $b;
}

my $json = 'Content-Type: application/json';
my $form = 'Content-Type: application/x-www-form-urlencoded';

my $adyen = qq({"live":"false","notificationItems":[{"NotificationRequestItem":)
          . qq({"eventCode":"AUTHORISATION","pspReference":"$TAG",)
          . qq("success":"true","amount":{"value":1000,"currency":"EUR"}}}]});

# provider => [ body, [header lines], the scheme nginx checks or undef,
# the id the receiver counts ]
our %CASE = (
    stripe => [ qq({"id":"evt_$TAG","object":"event","type":"charge.succeeded"}),
                [ $json ], 'stripe', "evt_$TAG" ],
    square => [ qq({"merchant_id":"M1","type":"payment.updated","event_id":"sq-$TAG"}),
                [ $json ], undef, "sq-$TAG" ],
    paypal => [ qq({"id":"WH-$TAG","event_type":"PAYMENT.CAPTURE.COMPLETED"}),
                [ $json ], undef, "WH-$TAG" ],
    adyen => [ $adyen, [ $json ], undef, "AUTHORISATION:$TAG" ],
    wechat => [ qq({"id":"wx-$TAG","event_type":"TRANSACTION.SUCCESS",)
                . qq("resource":{"algorithm":"AEAD_AES_256_GCM","ciphertext":"x"}}),
                [ $json ], undef, "wx-$TAG" ],
    alipay => [ "notify_time=2026-12-03+10%3A00%3A00&notify_id=ali-$TAG"
                . "&trade_status=TRADE_SUCCESS", [ $form ], undef, "ali-$TAG" ],
    github => [ '{"action":"opened"}', [ $json, "X-GitHub-Delivery: gh-$TAG" ],
                'github', "gh-$TAG" ],
    shopify => [ '{"id":820982911946154508}',
                 [ $json, "X-Shopify-Event-Id: sh-$TAG" ], 'shopify',
                 "sh-$TAG" ],
    twilio => [ 'MessageSid=SM1&Body=hello',
                [ $form, "I-Twilio-Idempotency-Token: tw-$TAG" ], undef,
                "tw-$TAG" ],
    standard => [ '{"type":"user.created"}', [ $json ], 'standard',
                  "msg-$TAG" ],
    gitlab => [ '{"object_kind":"push"}', [ $json, "Idempotency-Key: gl-$TAG" ],
                undef, "gl-$TAG" ],
);

# the business key: alice's order
our $NUM = 100000 + $$ % 100000;
our $ORDER = qq({"order":{"number":$NUM,"items":["$TAG"]}});
our $AUTH = 'Authorization: Basic '
            . MIME::Base64::encode_base64('alice:secret', '');

# the request that reads the receiver's count of a delivery
sub count {
    my ($provider, $id) = @_;
    return 'GET /count?key=' . IdemStress::pct_encode("hook:$provider:$id");
}

# a provider's delivery sent three times, then its count
sub deliveries {
    my ($p) = @_;
    my ($body, $headers, $scheme, $id) = @{ $CASE{$p} };
    return [ ("POST /hooks/$p\n$body") x 3, count($p, $id) ];
}

# their headers: each attempt signed anew, as the providers do
sub delivery_headers {
    my ($p) = @_;
    my ($body, $headers, $scheme, $id) = @{ $CASE{$p} };
    my @sig = $scheme ? sign(map { +{ scheme => $scheme, secret => $SECRET{$p},
                                       body => $body, id => $id } } 1 .. 3)
                      : ({}) x 3;
    return [ (map { my $s = $_;
                    join "\n", @$headers,
                               map { "$_: $s->{$_}" } sort keys %$s } @sig),
             "" ];
}

no_shuffle();
block_defaults(
    config => $CONF
        . "    location = /count { proxy_pass http://backend/__count; }\n",
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: Adyen: the delivery runs once, its resends get "[accepted]" replayed
--- request eval
main::deliveries('adyen')
--- more_headers eval
main::delivery_headers('adyen')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
["[accepted]", "[accepted]", "[accepted]", "1"]



=== TEST 2: Alipay: the delivery runs once, its resends get "success" replayed
--- request eval
main::deliveries('alipay')
--- more_headers eval
main::delivery_headers('alipay')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
["success", "success", "success", "1"]



=== TEST 3: GitHub, its signature checked by nginx: the delivery runs once, its resends get {"ok":true} replayed
--- request eval
main::deliveries('github')
--- more_headers eval
main::delivery_headers('github')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
['{"ok":true}', '{"ok":true}', '{"ok":true}', "1"]



=== TEST 4: GitLab, its own Idempotency-Key: the delivery runs once, its resends get {"ok":true} replayed
--- request eval
main::deliveries('gitlab')
--- more_headers eval
main::delivery_headers('gitlab')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
['{"ok":true}', '{"ok":true}', '{"ok":true}', "1"]



=== TEST 5: PayPal: the delivery runs once, its resends get the empty 200 replayed
--- request eval
main::deliveries('paypal')
--- more_headers eval
main::delivery_headers('paypal')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
["", "", "", "1"]



=== TEST 6: Shopify, its signature checked by nginx: the delivery runs once, its resends get the empty 200 replayed
--- request eval
main::deliveries('shopify')
--- more_headers eval
main::delivery_headers('shopify')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
["", "", "", "1"]



=== TEST 7: Square: the delivery runs once, its resends get the empty 200 replayed
--- request eval
main::deliveries('square')
--- more_headers eval
main::delivery_headers('square')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
["", "", "", "1"]



=== TEST 8: Standard Webhooks, the signature checked by nginx: the delivery runs once, its resends get the empty 200 replayed
--- request eval
main::deliveries('standard')
--- more_headers eval
main::delivery_headers('standard')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
["", "", "", "1"]



=== TEST 9: Stripe, its signature checked by nginx: the delivery runs once, its resends get {"received":true} replayed
--- request eval
main::deliveries('stripe')
--- more_headers eval
main::delivery_headers('stripe')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
['{"received":true}', '{"received":true}', '{"received":true}', "1"]



=== TEST 10: Twilio: the delivery runs once, its resends get the empty TwiML replayed
--- request eval
main::deliveries('twilio')
--- more_headers eval
main::delivery_headers('twilio')
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
[('<?xml version="1.0" encoding="UTF-8"?><Response></Response>') x 3, "1"]



=== TEST 11: WeChat Pay: the delivery runs once, its resends get the 204 replayed
--- request eval
main::deliveries('wechat')
--- more_headers eval
main::delivery_headers('wechat')
--- error_code eval
[204, 204, 204, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: replay", ""]
--- response_body eval
["", "", "", "1"]



=== TEST 12: the business key (the user and the order number): the order runs once, its retry is replayed with the same answer, the same order number with another body is 422; no user: auth_basic refuses it first
--- init
my @r = map { IdemStress::http_one(port => port(), method => 'POST',
                  uri => '/orders', body => $main::ORDER,
                  headers => [ [ 'Content-Type', 'application/json' ],
                               [ split /: /, $main::AUTH, 2 ] ]) } 1, 2;
is(join(' ', map { "$_->{status}:" . (IdemStress::hdr($_, 'X-Idem') // '-') } @r),
   '201:new 201:replay',
   'the business key: the order runs once, its retry is replayed');
is($r[0]{body}, $r[1]{body}, '... the same answer');
--- request eval
["POST /orders\n" . qq({"order":{"number":$main::NUM,"items":[]}}),
 main::count('orders', "alice:$main::NUM"), "POST /orders\n$main::ORDER"]
--- more_headers eval
["Content-Type: application/json\n$main::AUTH", "",
 "Content-Type: application/json"]
--- error_code eval
[422, 200, 401]
--- response_headers eval
["X-Idem: mismatch", "", ""]
--- response_body_like eval
['', '^1$', '']

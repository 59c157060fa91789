# Every location block of docs/cookbook.md, run as it is written: the
# test points its secret files, its htpasswd and the business key's
# upstream path at its own, adds an X-Idem header, and sends each
# provider's delivery (signed by the provider's library where nginx
# checks the signature) and two resends.  Each delivery runs once at the
# backend's receiver (backend/webhooks.py), and each resend gets the
# receiver's acknowledgement replayed byte for byte.

use strict;
use warnings;

use MIME::Base64 ();
use Test::More;
use Time::HiRes qw(time);

use lib 't', 't/stress';
use IdemStress;
use WebhookTest;

IdemStress::begin_file();
plan skip_all => 'the signing libraries are not installed '
                 . '(scripts/node-deps.sh)' unless have_signers();

my $P = port(530);
my $tag = "t530-$$-" . int(time);
my $ngx;

END { $ngx->stop if $ngx }

my %secret = (stripe => 'whsec_t530' . ('s' x 26),
              github => 't530 github secret',
              shopify => 'shpss_t530' . ('h' x 22),
              standard => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
my $dir;
for (keys %secret) {
    my $f = secret_file("$_.secret", $secret{$_});
    ($dir = $f) =~ s{/[^/]+$}{/};
}

# alice:secret
my $htpasswd = "$IdemStress::DIR/t530-htpasswd";
IdemStress::write_file($htpasswd,
    'alice:' . `openssl passwd -apr1 secret` );

# the blocks, as docs/cookbook.md has them
my $md = IdemStress::read_file('docs/cookbook.md');
# the webhooks' part (t/540 runs the part before it)
$md =~ s/\A.*?^# Webhooks\n//ms or die "docs/cookbook.md has no '# Webhooks'\n";
my %block;
while ($md =~ m{^(    location (\S+) \{\n.*?^    \}\n)}msg) {
    $block{$2} = $1;
}

my @want = map { "/hooks/$_" } qw(stripe square paypal adyen wechat alipay
                                  github shopify twilio standard gitlab);
is_deeply([ sort keys %block ], [ sort @want, '/orders' ],
          'the cookbook has a block for each provider and the business key');

my $conf = '';
for my $loc (sort keys %block) {
    my $b = $block{$loc};
    $b =~ s{/etc/nginx/webhooks/}{$dir}g;
    $b =~ s{/etc/nginx/htpasswd}{$htpasswd}g;
    $b =~ s{proxy_pass(\s+)http://backend;}{proxy_pass$1http://backend/hooks/orders;}
        if $loc eq '/orders';
    $b =~ s/\n    \}\n\z/\n        add_header X-Idem \$idempotency_status always;\n    }\n/;
    $conf .= $b;
}

$ngx = IdemStress::Nginx->start(name => 'cookbook', port => $P,
    http => store_line('main', $ENV{TEST_NGINX_MYSQL_PORT})
          . server_block($P, $conf));

sub json_h { [ 'Content-Type', 'application/json' ] }
sub form_h { [ 'Content-Type', 'application/x-www-form-urlencoded' ] }

# provider => [ body, [headers], signature job or undef, ack status, ack
# body, the id the receiver counts ]
my $adyen = qq({"live":"false","notificationItems":[{"NotificationRequestItem":)
          . qq({"eventCode":"AUTHORISATION","pspReference":"$tag",)
          . qq("success":"true","amount":{"value":1000,"currency":"EUR"}}}]});

my %case = (
    stripe => [ qq({"id":"evt_$tag","object":"event","type":"charge.succeeded"}),
                [ json_h() ], 'stripe', 200, '{"received":true}', "evt_$tag" ],
    square => [ qq({"merchant_id":"M1","type":"payment.updated","event_id":"sq-$tag"}),
                [ json_h() ], undef, 200, '', "sq-$tag" ],
    paypal => [ qq({"id":"WH-$tag","event_type":"PAYMENT.CAPTURE.COMPLETED"}),
                [ json_h() ], undef, 200, '', "WH-$tag" ],
    adyen => [ $adyen, [ json_h() ], undef, 200, '[accepted]',
               "AUTHORISATION:$tag" ],
    wechat => [ qq({"id":"wx-$tag","event_type":"TRANSACTION.SUCCESS",)
                . qq("resource":{"algorithm":"AEAD_AES_256_GCM","ciphertext":"x"}}),
                [ json_h() ], undef, 204, '', "wx-$tag" ],
    alipay => [ "notify_time=2026-12-03+10%3A00%3A00&notify_id=ali-$tag"
                . "&trade_status=TRADE_SUCCESS",
                [ form_h() ], undef, 200, 'success', "ali-$tag" ],
    github => [ '{"action":"opened"}', [ json_h(),
                [ 'X-GitHub-Delivery', "gh-$tag" ] ],
                'github', 200, '{"ok":true}', "gh-$tag" ],
    shopify => [ '{"id":820982911946154508}', [ json_h(),
                 [ 'X-Shopify-Event-Id', "sh-$tag" ] ],
                 'shopify', 200, '', "sh-$tag" ],
    twilio => [ 'MessageSid=SM1&Body=hello', [ form_h(),
                [ 'I-Twilio-Idempotency-Token', "tw-$tag" ] ], undef, 200,
                '<?xml version="1.0" encoding="UTF-8"?><Response></Response>',
                "tw-$tag" ],
    standard => [ '{"type":"user.created"}', [ json_h() ], 'standard', 200, '',
                  "msg-$tag" ],
    gitlab => [ '{"object_kind":"push"}', [ json_h(),
                [ 'Idempotency-Key', "gl-$tag" ] ], undef, 200, '{"ok":true}',
                "gl-$tag" ],
);

for my $p (sort keys %case) {
    my ($body, $headers, $scheme, $status, $ack, $id) = @{ $case{$p} };
    my @r;

    for my $i (1 .. 3) {
        my @h = @$headers;

        if ($scheme) {
            # each attempt signed anew, as the providers do
            my ($s) = sign({ scheme => $scheme, secret => $secret{$p},
                             body => $body, id => $id });
            push @h, map { [ $_, $s->{$_} ] } sort keys %$s;
        }

        push @r, http_one(port => $P, method => 'POST', uri => "/hooks/$p",
                          body => $body, headers => \@h);
    }

    is(join(' ', map { ($_->{status} // $_->{error}) . ':'
                       . (IdemStress::hdr($_, 'X-Idem') // '-') } @r),
       "$status:new $status:replay $status:replay",
       "$p: the delivery runs, its resends are replayed");
    is(join('|', map { $_->{body} // '?' } @r), join('|', ($ack) x 3),
       "$p: every answer is the receiver's acknowledgement"
       . ($ack eq '' ? ' (empty)' : " ($ack)"));
    is(hook_count($p, $id), 1, "$p: once");
}

# the business key
{
    my $auth = [ 'Authorization', 'Basic ' . MIME::Base64::encode_base64(
                                                 'alice:secret', '') ];
    my $num = 100000 + $$ % 100000;
    my $body = qq({"order":{"number":$num,"items":["$tag"]}});
    my @r = map { http_one(port => $P, method => 'POST', uri => '/orders',
                           body => $_, headers => [ json_h(), $auth ]) }
                $body, $body, qq({"order":{"number":$num,"items":[]}});

    is(join(' ', map { "$_->{status}:" . IdemStress::hdr($_, 'X-Idem') } @r),
       '201:new 201:replay 422:mismatch',
       'the business key: the order runs once, its retry is replayed, '
       . 'the same order number with another body is 422');
    is($r[0]{body}, $r[1]{body}, '... the same answer');
    is(hook_count('orders', "alice:$num"), 1, '... once');

    my $r = http_one(port => $P, method => 'POST', uri => '/orders',
                     body => $body, headers => [ json_h() ]);
    is($r->{status}, 401, 'no user: auth_basic refuses it first');
}

is_deeply([ $ngx->health ], [], 'no worker crashed, no alert');

done_testing();

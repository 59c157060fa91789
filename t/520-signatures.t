# idempotency_signature: a delivery's HMAC-SHA256 checked before the
# claim, signed by the providers' own libraries (stripe-node, the
# standardwebhooks package, @octokit/webhooks-methods; Shopify's with
# Node's crypto).  A good signature runs and its resends are replayed; a
# forged delivery with a real id gets 401 signature-invalid, claims
# nothing, sends nothing upstream, and never blocks the real one; a
# missing, malformed or stale header says so; secrets rotate; bodies in
# temp files; a delivery without a key is still checked.

use strict;
use warnings;

use JSON::PP ();
use Test::More;
use Time::HiRes qw(time);

use lib 't', 't/stress';
use IdemStress;
use WebhookTest;

IdemStress::begin_file();
plan skip_all => 'the signing libraries are not installed '
                 . '(scripts/node-deps.sh)' unless have_signers();

my $P = port(520);
my $tag = "t520-$$-" . int(time);
my $ngx;

END { $ngx->stop if $ngx }

my %secret = (
    stripe   => 'whsec_t520stripe' . ('a' x 20),
    stripe2  => 'whsec_t520stripe_rotated' . ('b' x 12),
    standard => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    github   => "It's a Secret to Everybody",
    shopify  => 'shpss_t520' . ('c' x 22),
);
my %file = map { $_ => secret_file("t520-$_", $secret{$_}) } keys %secret;

sub loc {
    my ($name, $key, $sig, @more) = @_;
    return "        location /hooks/$name {\n"
         . "            idempotency main;\n"
         . "            idempotency_scope $name;\n"
         . "            idempotency_key $key;\n"
         . "            idempotency_signature $sig;\n"
         . "            idempotency_required on;\n"
         . "            idempotency_fingerprint off;\n"
         . "            idempotency_store_status 2xx;\n"
         . join('', map { "            $_;\n" } @more)
         . "            proxy_pass http://backend;\n"
         . "            add_header X-Idem \$idempotency_status always;\n"
         . "        }\n";
}

$ngx = IdemStress::Nginx->start(name => 'signatures', port => $P,
    http => store_line('main', $ENV{TEST_NGINX_MYSQL_PORT})
          . server_block($P, join '',
    loc('stripe', 'json=id',
        "stripe secret_file=$file{stripe} secret_file=$file{stripe2}",
        'client_body_buffer_size 1k', 'client_max_body_size 4m'),
    loc('standard', '$http_webhook_id$http_svix_id',
        "standard secret_file=$file{standard} tolerance=1m"),
    loc('github', '$http_x_github_delivery', "github secret_file=$file{github}"),
    loc('shopify', '$http_x_shopify_event_id',
        "shopify secret_file=$file{shopify}"),
    "        location /hooks/optional {\n"
    . "            idempotency main;\n"
    . "            idempotency_key json=id;\n"
    . "            idempotency_signature github secret_file=$file{github};\n"
    . "            proxy_pass http://backend/hooks/github;\n"
    . "            add_header X-Idem \$idempotency_status always;\n"
    . "        }\n"));

sub idem { IdemStress::hdr($_[0], 'X-Idem') // '-' }

sub post_signed {
    my ($uri, $body, $h, @more) = @_;
    return http_one(port => $P, method => 'POST', uri => $uri, body => $body,
                    headers => [ [ 'Content-Type', 'application/json' ],
                                 (map { [ $_, $h->{$_} ] } sort keys %$h),
                                 @more ]);
}

sub problem {
    my ($r) = @_;
    return eval { JSON::PP::decode_json($r->{body}) } // {};
}

# the 401 and what it says, and that nothing was claimed or run
sub refused {
    my ($r, $provider, $parts, $detail, $what) = @_;
    my $p = problem($r);
    is($r->{status} . ' ' . idem($r), '401 unverified', "$what: 401");
    is($p->{type}, 'urn:ngx-idempotency:problem:signature-invalid',
       '... signature-invalid');
    like($p->{detail} // '', $detail, '... saying why');
    is(IdemStress::hdr($r, 'Content-Type'), 'application/problem+json',
       '... as problem+json');
    is(source_state($parts, $provider), '', '... nothing claimed');
    is(hook_count($provider, $parts->[0]), 0, '... nothing sent upstream');
}

# ------------------------------------------------------------ Stripe

{
    my $id = "evt_${tag}";
    my $body = qq({"id":"$id","type":"invoice.paid","data":{"object":{}}});

    # the forger knows the event id, not the secret
    my ($forged) = sign({ scheme => 'stripe', secret => 'whsec_forger',
                          body => $body });
    refused(post_signed('/hooks/stripe', $body, $forged), 'stripe', [$id],
            qr/^no signature matches the body under any secret\.$/,
            'Stripe, a forged delivery with a real event id');

    my ($h1, $h2, $h3) = sign(
        { scheme => 'stripe', secret => $secret{stripe}, body => $body },
        { scheme => 'stripe', secret => $secret{stripe}, body => $body },
        { scheme => 'stripe', secret => $secret{stripe2}, body => $body });

    my $r = post_signed('/hooks/stripe', $body, $h1);
    is("$r->{status} " . idem($r) . " $r->{body}", '200 new {"received":true}',
       'the real delivery, after the forged one, runs');

    $r = post_signed('/hooks/stripe', $body, $h2);
    is(idem($r) . " $r->{body}", 'replay {"received":true}',
       'its resend, signed anew, is replayed');

    $r = post_signed('/hooks/stripe', $body, $h3);
    is(idem($r), 'replay', 'one signed under the second secret passes too '
                           . '(rotation)');
    is(hook_count('stripe', $id), 1, 'it ran once');

    # another delivery, refused for its header each time
    my $id2 = "${id}-2";
    my $body2 = qq({"id":"$id2","type":"invoice.paid"});

    my ($old) = sign({ scheme => 'stripe', secret => $secret{stripe},
                       body => $body2, timestamp => int(time) - 600 });
    refused(post_signed('/hooks/stripe', $body2, $old), 'stripe', [$id2],
            qr/^the timestamp \d+ is 6\d\d s old, over the tolerance\.$/,
            'Stripe, a timestamp of 10 minutes ago');

    refused(post_signed('/hooks/stripe', $body2, {}), 'stripe', [$id2],
            qr/^no "Stripe-Signature" header\.$/, 'Stripe, no header');

    refused(post_signed('/hooks/stripe', $body2,
                        { 'Stripe-Signature' => 't=1,v1=abc' }),
            'stripe', [$id2], qr/^"Stripe-Signature" has a v1 signature /,
            'Stripe, a malformed header');

    # a body in a temp file, HMAC'd in the same walk
    my $big = qq({"id":"${id}big","pad":") . ('p' x 300000) . '"}';
    my ($hb, $fb) = sign(
        { scheme => 'stripe', secret => $secret{stripe}, body => $big },
        { scheme => 'stripe', secret => 'whsec_forger', body => $big });
    refused(post_signed('/hooks/stripe', $big, $fb), 'stripe', ["${id}big"],
            qr/^no signature matches/, 'Stripe, a forged 300 KB body');
    $r = post_signed('/hooks/stripe', $big, $hb);
    is("$r->{status} " . idem($r), '200 new',
       'the real 300 KB body (a temp file) runs');
    like($ngx->error_log, qr/a client request body is buffered to a temporary file/,
         '... it was in a temp file');
}

# ---------------------------------------------------- Standard Webhooks

{
    my $id = "msg_${tag}";
    my $body = qq({"type":"invoice.paid","data":{"id":"$id"}});
    my ($forged, $good, $svix, $stale) = sign(
        { scheme => 'standard', secret => 'whsec_' . ('A' x 32), id => $id,
          body => $body },
        { scheme => 'standard', secret => $secret{standard}, id => $id,
          body => $body },
        { scheme => 'standard', secret => $secret{standard}, id => $id,
          body => $body, svix => 1 },
        { scheme => 'standard', secret => $secret{standard}, id => "${id}s",
          body => $body, timestamp => int(time) - 120 });

    refused(post_signed('/hooks/standard', $body, $forged), 'standard', [$id],
            qr/^no signature matches/, 'Standard Webhooks, forged');

    my $r = post_signed('/hooks/standard', $body, $good);
    is("$r->{status} " . idem($r) . " [$r->{body}]", '200 new []',
       'Standard Webhooks (the standardwebhooks package): runs, an empty 200');

    $r = post_signed('/hooks/standard', $body, $svix);
    is(idem($r), 'replay', '... the same message with svix-* headers: '
                           . 'replayed');
    is(hook_count('standard', $id), 1, '... once');

    refused(post_signed('/hooks/standard', $body, $stale), 'standard',
            ["${id}s"], qr/s old, over the tolerance\.$/,
            'Standard Webhooks, two minutes old with tolerance=1m');

    my %bad = (%$good, 'webhook-signature' => 'v1a,' . ('x' x 43));
    refused(post_signed('/hooks/standard', $body, \%bad), 'standard', [$id . 'b'],
            qr/^"webhook-signature" has no "v1," signature\.$/,
            'Standard Webhooks, no v1 signature');
}

# ---------------------------------------------------- GitHub, Shopify

{
    my $id = "gh-${tag}";
    my $body = qq({"action":"opened","number":520});
    my ($good) = sign({ scheme => 'github', secret => $secret{github},
                        body => $body });

    refused(post_signed('/hooks/github', $body . ' ', $good,
                        [ 'X-GitHub-Delivery', $id ]),
            'github', [$id], qr/^no signature matches/,
            'GitHub, the body changed after signing');

    my $r = post_signed('/hooks/github', $body, $good,
                        [ 'X-GitHub-Delivery', $id ]);
    is("$r->{status} " . idem($r), '200 new',
       'GitHub (@octokit/webhooks-methods): runs');
    $r = post_signed('/hooks/github', $body, $good,
                     [ 'X-GitHub-Delivery', $id ]);
    is(idem($r), 'replay', '... redelivered: replayed');
    is(hook_count('github', $id), 1, '... once');

    $id = "sh-${tag}";
    my ($sh) = sign({ scheme => 'shopify', secret => $secret{shopify},
                      body => $body });
    refused(post_signed('/hooks/shopify', $body, {},
                        [ 'X-Shopify-Event-Id', $id ]),
            'shopify', [$id], qr/^no "X-Shopify-Hmac-Sha256" header\.$/,
            'Shopify, no signature header');
    $r = post_signed('/hooks/shopify', $body, $sh,
                     [ 'X-Shopify-Event-Id', $id ]);
    is("$r->{status} " . idem($r), '200 new', 'Shopify: runs');
    $r = post_signed('/hooks/shopify', $body, $sh,
                     [ 'X-Shopify-Event-Id', $id ]);
    is(idem($r), 'replay', '... resent: replayed');
    is(hook_count('shopify', $id), 1, '... once');
}

# ------------------------- a delivery without a key is checked all the same

{
    my $body = '{"zen":"Keep it logically awesome."}';
    my ($good, $bad) = sign(
        { scheme => 'github', secret => $secret{github}, body => $body },
        { scheme => 'github', secret => 'forger', body => $body });

    my $r = post_signed('/hooks/optional', $body, $bad,
                        [ 'X-GitHub-Delivery', "ping-$tag" ]);
    is("$r->{status} " . idem($r), '401 unverified',
       'no key, not required, a bad signature: 401 all the same');
    is(hook_count('github', "ping-$tag"), 0, '... not sent upstream');

    $r = post_signed('/hooks/optional', $body, $good,
                     [ 'X-GitHub-Delivery', "ping-$tag" ]);
    is("$r->{status} " . idem($r), '200 bypass',
       'with a good one it passes, unprotected');
}

like($ngx->error_log, qr/\[info\] .*idempotency: signature refused: no signature matches/,
     'a refusal is an info line in the error log');

is_deeply([ $ngx->health ], [], 'no worker crashed, no alert');

done_testing();

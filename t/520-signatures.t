# idempotency_signature: a delivery's HMAC-SHA256 checked before the
# claim, signed by the providers' own libraries (stripe-node, the
# standardwebhooks package, @octokit/webhooks-methods; Shopify's with
# Node's crypto).  A good signature runs and its resends are replayed; a
# forged delivery with a real id gets 401 signature-invalid, claims
# nothing, sends nothing upstream, and never blocks the real one; a
# missing, malformed or stale header says so; secrets rotate; bodies in
# temp files; a delivery without a key is still checked.
#
# The deliveries are signed when their block starts (main::headers, one
# run of WebhookTest::sign for the block) and carry their Content-Length,
# so that a body is sent byte for byte.  After a refusal the block reads
# the key's row through the operator API (404: nothing claimed) and the
# receiver's count of the delivery (0: nothing sent upstream).

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use WebhookTest;

IdemStress::begin_file();
plan skip_all => 'the signing libraries are not installed '
                 . '(scripts/node-deps.sh)' unless have_signers();
plan 'no_plan';

our $TAG = "t520-$$-" . int(time);

our %SECRET = (
    stripe   => 'whsec_t520stripe' . ('a' x 20),
    stripe2  => 'whsec_t520stripe_rotated' . ('b' x 12),
    standard => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    github   => "It's a Secret to Everybody",
    shopify  => 'shpss_t520' . ('c' x 22),
);
my %file = map { $_ => secret_file("t520-$_", $SECRET{$_}) } keys %SECRET;

# the deliveries' ids and bodies
our %ID = (stripe => "evt_${TAG}", stripe2 => "evt_${TAG}-2",
           big => "evt_${TAG}big", standard => "msg_${TAG}",
           github => "gh-${TAG}", shopify => "sh-${TAG}",
           ping => "ping-${TAG}");
our %BODY = (
    stripe => qq({"id":"$ID{stripe}","type":"invoice.paid","data":{"object":{}}}),
    stripe2 => qq({"id":"$ID{stripe2}","type":"invoice.paid"}),
    big => qq({"id":"$ID{big}","pad":") . ('p' x 300000) . '"}',
    standard => qq({"type":"invoice.paid","data":{"id":"$ID{standard}"}}),
    github => qq({"action":"opened","number":520}),
    ping => '{"zen":"Keep it logically awesome."}',
);

# the response headers of a refusal
our $UNVERIFIED = "X-Idem: unverified\nContent-Type: application/problem+json";

sub loc {
    my ($name, $key, $sig, @more) = @_;
    return "    location /hooks/$name {\n"
         . "        idempotency main;\n"
         . "        idempotency_scope $name;\n"
         . "        idempotency_key $key;\n"
         . "        idempotency_signature $sig;\n"
         . "        idempotency_required on;\n"
         . "        idempotency_fingerprint off;\n"
         . "        idempotency_store_status 2xx;\n"
         . join('', map { "        $_;\n" } @more)
         . "        proxy_pass http://backend;\n"
         . "        add_header X-Idem \$idempotency_status always;\n"
         . "    }\n";
}

# the headers of a POST of each job's body: its Content-Type and
# Content-Length, the job's own "headers" (lines), and where the job has
# a scheme the signature's headers, signed by the provider's library
# (WebhookTest::sign: scheme, secret, body, id, timestamp, svix), with
# "replace" set over them; "sent" is a body sent instead of the one signed
sub headers {
    my (@jobs) = @_;
    my @signing = grep { $_->{scheme} } @jobs;
    my @sig = @signing ? sign(map { my $j = $_; +{
        map { exists $j->{$_} ? ($_ => $j->{$_}) : () }
            qw(scheme secret body id timestamp svix) } } @signing) : ();

    return map {
        my $j = $_;
        my %h = ($j->{scheme} ? %{ shift @sig } : (),
                 %{ $j->{replace} // {} });
        join "\n", 'Content-Type: application/json',
                   'Content-Length: ' . length($j->{sent} // $j->{body}),
                   @{ $j->{headers} // [] },
                   map { "$_: $h{$_}" } sort keys %h;
    } @jobs;
}

# a POST of a body to /hooks/$name
sub post {
    my ($name, $body) = @_;
    return "POST /hooks/$name\n$body";
}

# the pattern of a 401 signature-invalid problem whose detail, decoded,
# matches all of $detail (a pattern)
sub refused {
    my ($detail) = @_;
    (my $json = $detail) =~ s/"/\\\\"/g;
    return '^\{"type":"urn:ngx-idempotency:problem:signature-invalid",'
         . '"title":"[^"]*","status":401,"detail":"' . $json . '"\}$';
}

# the request that reads the row of a key made of @$parts under $scope
sub row {
    my ($parts, $scope) = @_;
    return 'GET /admin?hash=' . source_hash_hex($parts, $scope);
}

# the request that reads the receiver's count of a delivery
sub count {
    my ($provider, $id) = @_;
    return 'GET /count?key=' . IdemStress::pct_encode("hook:$provider:$id");
}

# a block's --- error_log is looked for in all its log, not in what each
# of its requests added
check_accum_error_log();

no_shuffle();
block_defaults(
    config => join('',
        loc('stripe', 'json=id',
            "stripe secret_file=$file{stripe} secret_file=$file{stripe2}",
            'client_body_buffer_size 1k', 'client_max_body_size 4m'),
        loc('standard', '$http_webhook_id$http_svix_id',
            "standard secret_file=$file{standard} tolerance=1m"),
        loc('github', '$http_x_github_delivery',
            "github secret_file=$file{github}"),
        loc('shopify', '$http_x_shopify_event_id',
            "shopify secret_file=$file{shopify}"))
        . "    location /hooks/optional {\n"
        . "        idempotency main;\n"
        . "        idempotency_key json=id;\n"
        . "        idempotency_signature github secret_file=$file{github};\n"
        . "        proxy_pass http://backend/hooks/github;\n"
        . "        add_header X-Idem \$idempotency_status always;\n"
        . "    }\n"
        . "    location = /count { proxy_pass http://backend/__count; }\n"
        . "    location = /admin { idempotency_admin main; }\n",
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: Stripe: a forged delivery with a real event id gets 401 signature-invalid, claims nothing, sends nothing upstream, and is an info line in the error log; the real one after it runs, its resend signed anew is replayed, and one signed under the second secret too (rotation); it ran once
--- request eval
my $post = main::post('stripe', $main::BODY{stripe});
[$post, main::row([$main::ID{stripe}], 'stripe'),
 main::count('stripe', $main::ID{stripe}),
 $post, $post, $post, main::count('stripe', $main::ID{stripe})]
--- more_headers eval
my $body = $main::BODY{stripe};
# the forger knows the event id, not the secret
my @h = main::headers(
    { scheme => 'stripe', secret => 'whsec_forger', body => $body },
    { scheme => 'stripe', secret => $main::SECRET{stripe}, body => $body },
    { scheme => 'stripe', secret => $main::SECRET{stripe}, body => $body },
    { scheme => 'stripe', secret => $main::SECRET{stripe2}, body => $body });
[$h[0], "", "", @h[1 .. 3], ""]
--- error_code eval
[401, 404, 200, 200, 200, 200, 200]
--- response_headers eval
[$main::UNVERIFIED, "", "", "X-Idem: new", "X-Idem: replay", "X-Idem: replay",
 ""]
--- response_body_like eval
[main::refused('no signature matches the body under any secret\.'),
 'key-not-found', '^0$', '^\{"received":true\}$', '^\{"received":true\}$',
 '', '^1$']
--- error_log eval
[qr/\[info\] .*idempotency: signature refused: no signature matches/]
--- no_error_log
[emerg]
[alert]
[crit]



=== TEST 2: Stripe: another delivery refused for its header each time (a timestamp of 10 minutes ago, no header, a malformed header): 401 saying why, nothing claimed, nothing sent upstream
--- request eval
my $post = main::post('stripe', $main::BODY{stripe2});
my @read = (main::row([$main::ID{stripe2}], 'stripe'),
            main::count('stripe', $main::ID{stripe2}));
[($post, @read) x 3]
--- more_headers eval
my $body = $main::BODY{stripe2};
my @h = main::headers(
    { scheme => 'stripe', secret => $main::SECRET{stripe}, body => $body,
      timestamp => int(time) - 600 },
    { body => $body },
    { body => $body, headers => ['Stripe-Signature: t=1,v1=abc'] });
[map { ($_, "", "") } @h]
--- error_code eval
[(401, 404, 200) x 3]
--- response_headers eval
[($main::UNVERIFIED, "", "") x 3]
--- response_body_like eval
[main::refused('the timestamp \d+ is 6\d\d s old, over the tolerance\.'),
 'key-not-found', '^0$',
 main::refused('no "Stripe-Signature" header\.'), 'key-not-found', '^0$',
 main::refused('"Stripe-Signature" has a v1 signature .*'), 'key-not-found',
 '^0$']



=== TEST 3: Stripe: a forged 300 KB body, in a temp file, is refused; the real one runs, HMAC'd in the same walk
--- request eval
my $post = main::post('stripe', $main::BODY{big});
[$post, main::row([$main::ID{big}], 'stripe'),
 main::count('stripe', $main::ID{big}), $post]
--- more_headers eval
my $body = $main::BODY{big};
my ($good, $forged) = main::headers(
    { scheme => 'stripe', secret => $main::SECRET{stripe}, body => $body },
    { scheme => 'stripe', secret => 'whsec_forger', body => $body });
[$forged, "", "", $good]
--- error_code eval
[401, 404, 200, 200]
--- response_headers eval
[$main::UNVERIFIED, "", "", "X-Idem: new"]
--- response_body_like eval
[main::refused('no signature matches.*'), 'key-not-found', '^0$', '']
--- error_log
a client request body is buffered to a temporary file



=== TEST 4: Standard Webhooks (the standardwebhooks package): a forged message is refused; the real one runs with an empty 200; the same message with svix-* headers is replayed; once
--- request eval
my $post = main::post('standard', $main::BODY{standard});
[$post, main::row([$main::ID{standard}], 'standard'),
 main::count('standard', $main::ID{standard}), $post, $post,
 main::count('standard', $main::ID{standard})]
--- more_headers eval
my ($body, $id) = ($main::BODY{standard}, $main::ID{standard});
my ($forged, $good, $svix) = main::headers(
    { scheme => 'standard', secret => 'whsec_' . ('A' x 32), id => $id,
      body => $body },
    { scheme => 'standard', secret => $main::SECRET{standard}, id => $id,
      body => $body },
    { scheme => 'standard', secret => $main::SECRET{standard}, id => $id,
      body => $body, svix => 1 });
[$forged, "", "", $good, $svix, ""]
--- error_code eval
[401, 404, 200, 200, 200, 200]
--- response_headers eval
[$main::UNVERIFIED, "", "", "X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
[main::refused('no signature matches.*'), 'key-not-found', '^0$', '\A\z', '',
 '^1$']



=== TEST 5: Standard Webhooks: a message two minutes old with tolerance=1m, and one with no v1 signature, are refused saying why
--- request eval
my ($body, $id) = ($main::BODY{standard}, $main::ID{standard});
[main::post('standard', $body), main::row(["${id}s"], 'standard'),
 main::count('standard', "${id}s"),
 main::post('standard', $body), main::row(["${id}b"], 'standard'),
 main::count('standard', "${id}b")]
--- more_headers eval
my ($body, $id) = ($main::BODY{standard}, $main::ID{standard});
my ($stale, $bad) = main::headers(
    { scheme => 'standard', secret => $main::SECRET{standard}, id => "${id}s",
      body => $body, timestamp => int(time) - 120 },
    { scheme => 'standard', secret => $main::SECRET{standard}, id => $id,
      body => $body,
      replace => { 'webhook-signature' => 'v1a,' . ('x' x 43) } });
[$stale, "", "", $bad, "", ""]
--- error_code eval
[401, 404, 200, 401, 404, 200]
--- response_headers eval
[$main::UNVERIFIED, "", "", $main::UNVERIFIED, "", ""]
--- response_body_like eval
[main::refused('.*s old, over the tolerance\.'), 'key-not-found', '^0$',
 main::refused('"webhook-signature" has no "v1," signature\.'),
 'key-not-found', '^0$']



=== TEST 6: GitHub (@octokit/webhooks-methods): the body changed after signing is refused; the delivery runs, and redelivered is replayed; once
--- request eval
my ($body, $id) = ($main::BODY{github}, $main::ID{github});
[main::post('github', "$body "), main::row([$id], 'github'),
 main::count('github', $id), (main::post('github', $body)) x 2,
 main::count('github', $id)]
--- more_headers eval
my ($body, $id) = ($main::BODY{github}, $main::ID{github});
my @job = (scheme => 'github', secret => $main::SECRET{github}, body => $body,
           headers => ["X-GitHub-Delivery: $id"]);
my ($changed, $good) = main::headers({ @job, sent => "$body " }, { @job });
[$changed, "", "", $good, $good, ""]
--- error_code eval
[401, 404, 200, 200, 200, 200]
--- response_headers eval
[$main::UNVERIFIED, "", "", "X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
[main::refused('no signature matches.*'), 'key-not-found', '^0$', '', '',
 '^1$']



=== TEST 7: Shopify: a delivery with no signature header is refused; the delivery runs, and resent is replayed; once
--- request eval
my ($body, $id) = ($main::BODY{github}, $main::ID{shopify});
[main::post('shopify', $body), main::row([$id], 'shopify'),
 main::count('shopify', $id), (main::post('shopify', $body)) x 2,
 main::count('shopify', $id)]
--- more_headers eval
my ($body, $id) = ($main::BODY{github}, $main::ID{shopify});
my ($none, $good) = main::headers(
    { body => $body, headers => ["X-Shopify-Event-Id: $id"] },
    { scheme => 'shopify', secret => $main::SECRET{shopify}, body => $body,
      headers => ["X-Shopify-Event-Id: $id"] });
[$none, "", "", $good, $good, ""]
--- error_code eval
[401, 404, 200, 200, 200, 200]
--- response_headers eval
[$main::UNVERIFIED, "", "", "X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
[main::refused('no "X-Shopify-Hmac-Sha256" header\.'), 'key-not-found', '^0$',
 '', '', '^1$']



=== TEST 8: a delivery without a key, not required, is checked all the same: a bad signature is 401 and not sent upstream; with a good one it passes, unprotected
--- request eval
my $post = "POST /hooks/optional\n$main::BODY{ping}";
[$post, main::count('github', $main::ID{ping}), $post]
--- more_headers eval
my @job = (scheme => 'github', body => $main::BODY{ping},
           headers => ["X-GitHub-Delivery: $main::ID{ping}"]);
my ($good, $bad) = main::headers({ @job, secret => $main::SECRET{github} },
                                 { @job, secret => 'forger' });
[$bad, "", $good]
--- error_code eval
[401, 200, 200]
--- response_headers eval
["X-Idem: unverified", "", "X-Idem: bypass"]
--- response_body_like eval
['', '^0$', '']

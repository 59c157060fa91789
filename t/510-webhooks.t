# Webhook deliveries keyed by their own id, with the webhook policy
# (idempotency_store_status 2xx): deliveries signed by stripe-node as
# Stripe signs them, a backend that checks the signature itself
# (backend/webhooks.py).  A delivery resent 10 times at once and 10 times
# one after the other runs once and every resend gets the first answer;
# a delivery the backend refused runs when it is resent; a forged
# delivery that carries a real event id is refused by the backend and
# never blocks the real one; Alipay's form delivery is acknowledged by a
# replayed "success"; HTTP/2.
#
# The deliveries are signed when their block starts (WebhookTest::sign);
# a block's requests carry their Content-Length, so that a body is sent
# byte for byte.  --- init sends what must run at once (the 10 resends,
# the forger beside the real delivery) and what Test::Nginx cannot (HTTP/2,
# with curl); the block's requests read the key's row through the
# operator API and the receiver's count of the delivery.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use WebhookTest;
use POSIX ();

IdemStress::begin_file();
plan skip_all => 'the signing libraries are not installed '
                 . '(scripts/node-deps.sh)' unless have_signers();
plan 'no_plan';

our $TAG = "t510-$$-" . int(time);
our $SECRET = 'whsec_t510_' . ('s' x 24);
our $S = IdemStress::pct_encode($SECRET);
our $H2 = IdemTest::extra_port(511);

# each block's event id
our %ID = map { $_ => "evt_${TAG}_$_" } qw(resent refused forged h2);
our $NOTIFY = "ac05${TAG}";

# the cookbook's Stripe location, and Alipay's; the backend is told the
# secret, as a real receiver knows it
our $LOCATIONS = <<'LOC';
    location /hooks/stripe {
        idempotency              main;
        idempotency_scope        stripe;
        idempotency_key          json=id;
        idempotency_required     on;
        idempotency_fingerprint  off;
        idempotency_store_status 2xx;
        idempotency_wait         20s;
        proxy_pass               http://backend;
        add_header X-Idem $idempotency_status always;
    }

    location /hooks/alipay {
        idempotency              main;
        idempotency_scope        alipay;
        idempotency_key          form=notify_id;
        idempotency_required     on;
        idempotency_fingerprint  off;
        idempotency_store_status 2xx;
        proxy_pass               http://backend;
        add_header X-Idem $idempotency_status always;
    }
LOC

sub event {
    my ($id) = @_;
    return qq({"id":"$id","object":"event","type":"charge.succeeded",)
         . qq("data":{"object":{"id":"ch_$id","amount":1099}}});
}

# the headers of $n deliveries of $body, each signed anew under $secret
# (as Stripe does: a new t=), for a block's --- more_headers
sub signed {
    my ($body, $secret, $n) = @_;
    return map { "Content-Type: application/json\n"
                 . 'Content-Length: ' . length($body) . "\n"
                 . "Stripe-Signature: $_->{'Stripe-Signature'}" }
           sign(map { +{ scheme => 'stripe', secret => $secret,
                        body => $body } } 1 .. ($n // 1));
}

# a delivery of $body to $uri, signed under $secret, as IdemStress's
# client sends it (--- init)
sub delivery {
    my ($uri, $body, $secret) = @_;
    my ($h) = sign({ scheme => 'stripe', secret => $secret, body => $body });
    return { port => port(), method => 'POST', uri => $uri, body => $body,
             headers => [ [ 'Content-Type', 'application/json' ],
                          map { [ $_, $h->{$_} ] } sort keys %$h ] };
}

sub idem { IdemStress::hdr($_[0], 'X-Idem') // '-' }

# the request that reads the receiver's count of a delivery
sub count {
    my ($provider, $id) = @_;
    return 'GET /count?key=' . IdemStress::pct_encode("hook:$provider:$id");
}

# the request that reads the row of a key made of @$parts under $scope
sub row {
    my ($parts, $scope) = @_;
    return 'GET /admin?hash=' . source_hash_hex($parts, $scope);
}

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config()
        . "server {\n"
        . '    ' . IdemStress::listen_http2("127.0.0.1:$H2", '    ') . "\n"
        . $LOCATIONS
        . "}\n",
    config => $LOCATIONS
        . "    location = /count { proxy_pass http://backend/__count; }\n"
        . "    location = /admin { idempotency_admin main; }\n",
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: a delivery resent 10 times at once and then 10 times one after the other runs once; every resend gets the first answer
--- init
my $id = $main::ID{resent};
my $body = main::event($id);
my $uri = "/hooks/stripe?secret=$main::S&delay=1500";

# each resend signed anew, as Stripe does (a new t=)
my @q = map { main::delivery($uri, $body, $main::SECRET) } 1 .. 10;
my @r = IdemStress::http_many(\@q, timeout => 60);

is(scalar(grep { ($_->{status} // 0) == 200 } @r), 10,
   '10 concurrent resends: each gets 200');
is(scalar(grep { main::idem($_) eq 'new' } @r), 1, '... one ran');
is(scalar(grep { main::idem($_) eq 'replay' } @r), 9, '... nine were replayed');
is(scalar(grep { ($_->{body} // '') eq '{"received":true}' } @r), 10,
   '... every answer the backend\'s acknowledgement');
--- request eval
[("POST /hooks/stripe?secret=$main::S&delay=1500\n"
  . main::event($main::ID{resent})) x 10,
 main::count('stripe', $main::ID{resent})]
--- more_headers eval
[main::signed(main::event($main::ID{resent}), $main::SECRET, 10), ""]
--- error_code eval
[(200) x 11]
--- response_headers eval
[("X-Idem: replay") x 10, ""]
--- response_body eval
[('{"received":true}') x 10, "1"]



=== TEST 2: a delivery the receiver refused (400) is released, not kept; the provider's retry runs as new, and its resend is replayed; it ran once
--- request eval
my $id = $main::ID{refused};
my $post = "POST /hooks/stripe?secret=$main::S\n" . main::event($id);
[$post, main::row([$id], 'stripe'), $post, $post, main::count('stripe', $id)]
--- more_headers eval
# the first signed under a secret the receiver does not know (yet)
my $body = main::event($main::ID{refused});
[main::signed($body, 'whsec_rotated_too_early'),
 "", main::signed($body, $main::SECRET, 2), ""]
--- error_code eval
[400, 200, 200, 200, 200]
--- response_headers eval
["", "", "X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['bad signature', '"state":"released"', '^\{"received":true\}$',
 '^\{"received":true\}$', '^1$']



=== TEST 3: a forged delivery with a real event id, sent first, is refused by the receiver and never blocks the real one; a forged copy after it gets the real answer replayed and runs nothing
--- init
my $id = $main::ID{forged};
my $uri = "/hooks/stripe?secret=$main::S&delay=1000";
my $out = "$IdemStress::DIR/t510-forged";
unlink $out;

# the forger's copy comes first and holds the key while the receiver
# takes a second to refuse it
my $pid = fork // die "fork: $!";
if ($pid == 0) {
    my $f = IdemStress::http_one(%{ main::delivery($uri, main::event($id) . ' ',
                                       'whsec_forger') }, timeout => 30);
    IdemStress::write_file($out, ($f->{status} // 0) . ' ' . main::idem($f));
    POSIX::_exit(0);    # not the END blocks that stop nginx
}

IdemStress::wait_for('the forged delivery to hold the key', 10,
                     sub { WebhookTest::source_state([$id], 'stripe') eq '0' });

my $r = IdemStress::http_one(%{ main::delivery($uri, main::event($id), $main::SECRET) },
                 timeout => 30);
waitpid $pid, 0;

is(IdemStress::read_file($out), '400 new',
   'the forged delivery reached the receiver, which refused it');
is($r->{status} . ' ' . main::idem($r), '200 new',
   'the real delivery waited for it and then ran, the same request');
is($r->{body}, '{"received":true}', '... with the receiver\'s answer');
is(WebhookTest::hook_count('stripe', $id), 1, 'the real delivery ran once');
--- request eval
["POST /hooks/stripe?secret=$main::S&delay=1000\n"
 . main::event($main::ID{forged}) . '  ',
 main::count('stripe', $main::ID{forged})]
--- more_headers eval
[main::signed(main::event($main::ID{forged}) . '  ', 'whsec_forger'), ""]
--- error_code eval
[200, 200]
--- response_headers eval
["X-Idem: replay", ""]
--- response_body eval
['{"received":true}', "1"]



=== TEST 4: Alipay: the form notification runs once; each resend gets "success" as text/plain, as the receiver answered
--- request eval
my $body = "notify_time=2026-12-03+10%3A00%3A00&notify_type=trade_status_sync"
         . "&notify_id=$main::NOTIFY&out_trade_no=T510&trade_status=TRADE_SUCCESS";
[("POST /hooks/alipay\n$body") x 3, main::count('alipay', $main::NOTIFY)]
--- more_headers eval
[("Content-Type: application/x-www-form-urlencoded; charset=utf-8") x 3, ""]
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nContent-Type: text/plain", "X-Idem: replay",
 ""]
--- response_body eval
["success", "success", "success", "1"]



=== TEST 5: HTTP/2: a delivery runs, its resend is replayed with the answer; once
--- init
my $id = $main::ID{h2};
my $body = main::event($id);
my $f = "$IdemStress::DIR/t510-h2-body";
IdemStress::write_file($f, $body);
my @out;

for my $i (1, 2) {
    my ($h) = WebhookTest::sign({ scheme => 'stripe', secret => $main::SECRET,
                     body => $body });
    push @out, scalar `curl -s --http2-prior-knowledge -D - -X POST -H 'Content-Type: application/json' -H 'Stripe-Signature: $h->{'Stripe-Signature'}' --data-binary \@$f 'http://127.0.0.1:$main::H2/hooks/stripe?secret=$main::S'`;
}

like($out[0], qr{^HTTP/2 200.*x-idem: new}si, 'HTTP/2: a delivery runs');
like($out[1], qr{^HTTP/2 200.*x-idem: replay}si,
     '... its resend is replayed');
like($out[1], qr/\r\n\r\n\{"received":true\}\z/, '... with the answer');
--- request eval
main::count('stripe', $main::ID{h2})
--- response_body: 1

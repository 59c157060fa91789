# Webhook deliveries keyed by their own id, with the webhook policy
# (idempotency_store_status 2xx): deliveries signed by stripe-node as
# Stripe signs them, a backend that checks the signature itself
# (backend/webhooks.py).  A delivery resent 10 times at once and 10 times
# one after the other runs once and every resend gets the first answer;
# a delivery the backend refused runs when it is resent; a forged
# delivery that carries a real event id is refused by the backend and
# never blocks the real one; Alipay's form delivery is acknowledged by a
# replayed "success"; HTTP/2.

use strict;
use warnings;

use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

use lib 't', 't/stress';
use IdemStress;
use WebhookTest;

IdemStress::begin_file();
plan skip_all => 'the signing libraries are not installed '
                 . '(scripts/node-deps.sh)' unless have_signers();

my $P = port(510);
my $P2 = port(511);
my $tag = "t510-$$-" . int(time);
my $ngx;

END { $ngx->stop if $ngx }

my $SECRET = 'whsec_t510_' . ('s' x 24);
my $S = IdemStress::pct_encode($SECRET);

# the cookbook's Stripe location, and Alipay's; the backend is told the
# secret, as a real receiver knows it
my $locations = <<"LOC";
        location /hooks/stripe {
            idempotency              main;
            idempotency_scope        stripe;
            idempotency_key          json=id;
            idempotency_required     on;
            idempotency_fingerprint  off;
            idempotency_store_status 2xx;
            idempotency_wait         20s;
            proxy_pass               http://backend;
            add_header X-Idem \$idempotency_status always;
        }

        location /hooks/alipay {
            idempotency              main;
            idempotency_scope        alipay;
            idempotency_key          form=notify_id;
            idempotency_required     on;
            idempotency_fingerprint  off;
            idempotency_store_status 2xx;
            proxy_pass               http://backend;
            add_header X-Idem \$idempotency_status always;
        }
LOC

$ngx = IdemStress::Nginx->start(name => 'webhooks', port => $P,
    http => store_line('main', $ENV{TEST_NGINX_MYSQL_PORT})
          . server_block($P, $locations)
          . "    server {\n        "
          . IdemStress::listen_http2("127.0.0.1:$P2", '        ')
          . "\n$locations    }\n");

sub event {
    my ($id) = @_;
    return qq({"id":"$id","object":"event","type":"charge.succeeded",)
         . qq("data":{"object":{"id":"ch_$id","amount":1099}}});
}

# a delivery of $body, signed under $secret, to $uri
sub delivery {
    my ($uri, $body, $secret, %o) = @_;
    my ($h) = sign({ scheme => 'stripe', secret => $secret, body => $body });
    return { port => $o{port} // $P, method => 'POST', uri => $uri,
             body => $body,
             headers => [ [ 'Content-Type', 'application/json' ],
                          map { [ $_, $h->{$_} ] } sort keys %$h ] };
}

sub idem { IdemStress::hdr($_[0], 'X-Idem') // '-' }

# ------------------------------------------------ 10 at once, 10 in turn

{
    my $id = "evt_${tag}_resent";
    my $uri = "/hooks/stripe?secret=$S&delay=1500";

    # each resend signed anew, as Stripe does (a new t=)
    my @q = map { delivery($uri, event($id), $SECRET) } 1 .. 10;
    my @r = http_many(\@q, timeout => 60);

    is(scalar(grep { ($_->{status} // 0) == 200 } @r), 10,
       '10 concurrent resends: each gets 200');
    is(scalar(grep { idem($_) eq 'new' } @r), 1, '... one ran');
    is(scalar(grep { idem($_) eq 'replay' } @r), 9, '... nine were replayed');
    is(scalar(grep { ($_->{body} // '') eq '{"received":true}' } @r), 10,
       '... every answer the backend\'s acknowledgement');

    for my $i (1 .. 10) {
        my $x = http_one(%{ delivery($uri, event($id), $SECRET) });
        if (($x->{status} // 0) != 200 || idem($x) ne 'replay'
            || $x->{body} ne '{"received":true}')
        {
            fail("sequential resend $i: " . ($x->{status} // $x->{error})
                 . ' ' . idem($x));
        }
    }
    pass('10 sequential resends: each replayed with the first answer');

    is(hook_count('stripe', $id), 1, 'the delivery ran once in 20');
}

# ------------------------------------------ refused, then resent: it runs

{
    my $id = "evt_${tag}_refused";
    my $uri = "/hooks/stripe?secret=$S";

    # signed under a secret the receiver does not know (yet)
    my $r = http_one(%{ delivery($uri, event($id), 'whsec_rotated_too_early') });
    is($r->{status}, 400, 'the receiver refuses a delivery it cannot verify');
    like($r->{body}, qr/bad signature/, '... its own answer');
    is(source_state([$id], 'stripe'), 4, '... the key is released, not kept');

    $r = http_one(%{ delivery($uri, event($id), $SECRET) });
    is($r->{status}, 200, 'the provider\'s retry runs');
    is(idem($r), 'new', '... as a new execution');

    $r = http_one(%{ delivery($uri, event($id), $SECRET) });
    is(idem($r) . ' ' . $r->{body}, 'replay {"received":true}',
       '... and its resend is replayed');
    is(hook_count('stripe', $id), 1, 'the delivery ran once');
}

# ------------------- a forged delivery with a real id never blocks it

{
    my $id = "evt_${tag}_forged";
    my $uri = "/hooks/stripe?secret=$S&delay=1000";

    # the forger's copy comes first and holds the key while the receiver
    # takes a second to refuse it
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        my $f = http_one(%{ delivery($uri, event($id) . ' ', 'whsec_forger') },
                         timeout => 30);
        IdemStress::write_file("$IdemStress::DIR/t510-forged",
                               ($f->{status} // 0) . ' ' . idem($f));
        POSIX::_exit(0);    # not the END block that stops nginx
    }

    IdemStress::wait_for('the forged delivery to hold the key', 10,
                         sub { source_state([$id], 'stripe') eq '0' });

    my $t0 = time;
    my $r = http_one(%{ delivery($uri, event($id), $SECRET) }, timeout => 30);
    waitpid $pid, 0;

    is(IdemStress::read_file("$IdemStress::DIR/t510-forged"), '400 new',
       'the forged delivery reached the receiver, which refused it');
    is($r->{status} . ' ' . idem($r), '200 new',
       'the real delivery waited for it and then ran, the same request');
    is($r->{body}, '{"received":true}', '... with the receiver\'s answer');
    is(hook_count('stripe', $id), 1, 'the real delivery ran once');

    $r = http_one(%{ delivery("/hooks/stripe?secret=$S&delay=1000",
                              event($id) . '  ', 'whsec_forger') });
    is($r->{status} . ' ' . idem($r), '200 replay',
       'a forged copy that comes after it gets the real answer replayed');
    is(hook_count('stripe', $id), 1, '... and runs nothing');
}

# ------------------------------- Alipay: a form, acknowledged "success"

{
    my $nid = "ac05${tag}";
    my $body = "notify_time=2026-12-03+10%3A00%3A00&notify_type=trade_status_sync"
             . "&notify_id=$nid&out_trade_no=T510&trade_status=TRADE_SUCCESS";
    my $q = { port => $P, method => 'POST', uri => '/hooks/alipay',
              body => $body, headers => [ [ 'Content-Type',
                  'application/x-www-form-urlencoded; charset=utf-8' ] ] };

    my @r = map { http_one(%$q) } 1 .. 3;

    is(join(' ', map { "$_->{status}:" . idem($_) . ":$_->{body}" } @r),
       '200:new:success 200:replay:success 200:replay:success',
       'Alipay: the notification runs once; each resend gets "success"');
    is(IdemStress::hdr($r[1], 'Content-Type'), 'text/plain',
       '... as text/plain, as the receiver answered');
    is(hook_count('alipay', $nid), 1, '... once');
}

# --------------------------------------------------------------- HTTP/2

{
    my $id = "evt_${tag}_h2";
    my $body = event($id);
    my @out;

    for my $i (1, 2) {
        my ($h) = sign({ scheme => 'stripe', secret => $SECRET,
                         body => $body });
        my $f = "$IdemStress::DIR/t510-h2-body";
        IdemStress::write_file($f, $body);
        push @out, scalar `curl -s --http2-prior-knowledge -D - -X POST -H 'Content-Type: application/json' -H 'Stripe-Signature: $h->{'Stripe-Signature'}' --data-binary \@$f 'http://127.0.0.1:$P2/hooks/stripe?secret=$S'`;
    }

    like($out[0], qr{^HTTP/2 200.*x-idem: new}si, 'HTTP/2: a delivery runs');
    like($out[1], qr{^HTTP/2 200.*x-idem: replay}si,
         '... its resend is replayed');
    like($out[1], qr/\r\n\r\n\{"received":true\}\z/, '... with the answer');
    is(hook_count('stripe', $id), 1, '... once');
}

is_deeply([ $ngx->health ], [], 'no worker crashed, no alert');

done_testing();

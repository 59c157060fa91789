# A live owner keeps its key: lease renewals go ahead of claims and held
# duplicates' polls (a flood of held duplicates on a small pool does not
# starve them), a row past its retention is not taken over while its owner
# still renews, and a duplicate that has seen its key in progress is never
# forwarded when the store fails, even with idempotency_on_store_error pass.

use strict;
use warnings;

use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file();

my $P = port(151);
my $RELAY = port(152);
my $SLOWDB = port(153);
my $MYSQL = $ENV{TEST_NGINX_MYSQL_PORT};
my $tag = "l$$-" . int(time);
my $n = 0;
my ($ngx, $relay, $slow);

END {
    kill 'KILL', $relay if $relay;
    kill 'KILL', $slow if $slow;
    $ngx->stop if $ngx;
}

$relay = IdemStress::tcp_proxy($RELAY, $MYSQL);

# 20 ms per packet: a few dozen statements a second for the whole pool
$slow = IdemStress::tcp_proxy($SLOWDB, $MYSQL, 0.02);

$ngx = IdemStress::Nginx->start(name => 'leases', port => $P, workers => 1,
    http => store_line('tiny', $MYSQL, pool => 2, query_timeout => '500ms')
          . store_line('slow', $SLOWDB, pool => 2, wait_queue => 1000,
                       connect_timeout => '1s', query_timeout => '1s')
          . store_line('relayed', $RELAY, pool => 4,
                       connect_timeout => '300ms', query_timeout => '500ms')
          . server_block($P, <<"SERVER"));
        add_header X-Idem \$idempotency_status always;

        location /flood {
            idempotency slow;
            idempotency_lease 3s;
            idempotency_wait 8s;
            proxy_pass http://backend/orders;
        }

        location /retention {
            idempotency tiny;
            idempotency_ttl 2s;
            idempotency_lease 1500ms;
            proxy_pass http://backend/orders;
        }

        # a lease longer than the outage the test makes
        location /late {
            idempotency relayed;
            idempotency_lease 6s;
            proxy_pass http://backend/orders;
        }

        location /pass {
            idempotency relayed;
            idempotency_on_store_error pass;
            idempotency_lease 1500ms;
            idempotency_wait 3s;
            proxy_pass http://backend/orders;
        }
SERVER

sub fresh { return "$tag-" . shift() . '-' . ++$n }

sub idem { IdemStress::hdr($_[0], 'X-Idem') // '-' }

# runs the first request in a child; returns a sub that waits for it and
# gives back its response
sub first_request {
    my ($uri, $key) = @_;

    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        close $rd;
        my $r = http_one(port => $P, method => 'POST', uri => $uri,
                         key => $key, body => 'x', timeout => 30);
        print {$wr} ($r->{error} ? "error $r->{error}"
                                 : "$r->{status} " . idem($r));
        close $wr;
        POSIX::_exit(0);
    }

    close $wr;

    return sub {
        local $/;
        my $out = <$rd>;
        waitpid $pid, 0;
        return $out // '';
    };
}

# ------------------------------------------------------------------------

{
    my $name = '500 duplicates (idempotency_wait) flood a slow store, pool 2';
    my $key = fresh('flood');
    my $uri = '/flood?delay=4000';

    my $first = first_request($uri, $key);
    wait_for("$key upstream", 10, sub { backend_count($key) == 1 });

    my @res = http_many([ map { { port => $P, method => 'POST', uri => $uri,
                                  key => $key, body => 'x' } } 1 .. 500 ],
                        timeout => 40);

    is($first->(), '201 new', "$name: the first request gets its answer");

    my %by;
    $by{ $_->{error} ? 'error' : "$_->{status} " . idem($_) }++ for @res;
    note("$name: " . join ', ', map { "$_ x$by{$_}" } sort keys %by);

    my $fwd = grep { idem($_) =~ /^(new|takeover)$/
                     || (idem($_) eq 'error' && $_->{status} < 500) } @res;
    is($fwd, 0, "$name: no duplicate was forwarded");
    ok(($by{'201 replay'} // 0) > 0, "$name: held duplicates are replayed");
    is(backend_count($key), 1, "$name: executed once");
    unlike($ngx->error_log, qr/taken over|lease lost|keep failing/,
           "$name: the owner's lease was never lost");
}

{
    my $name = 'a row past its retention whose owner still renews';
    my $key = fresh('ret');
    my $uri = '/retention?delay=3500';

    my $first = first_request($uri, $key);
    wait_for("$key upstream", 10, sub { backend_count($key) == 1 });

    # the row expires 2 s after the claim; its lease is renewed meanwhile
    sleep 2.6;
    my $r = http_one(port => $P, method => 'POST', uri => $uri, key => $key,
                     body => 'x');
    is("$r->{status} " . idem($r), '409 conflict',
       "$name: a duplicate gets 409, the key is not taken over");

    is($first->(), '201 new', "$name: the first request gets its answer");
    is(backend_count($key), 1, "$name: executed once");
}

{
    my $name = 'idempotency_on_store_error pass, store lost while a '
               . 'duplicate waits';
    my $key = fresh('pass');
    my $uri = '/pass?delay=1500';

    my $first = first_request($uri, $key);
    wait_for("$key upstream", 10, sub { backend_count($key) == 1 });

    # the duplicate sees the key in progress and is held; then the store
    # goes away under it
    my @dup;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        sleep 0.4;
        kill 'KILL', $relay;
        POSIX::_exit(0);
    }

    my $r = http_one(port => $P, method => 'POST', uri => $uri, key => $key,
                     body => 'x', timeout => 20);
    waitpid $pid, 0;
    undef $relay;

    is("$r->{status} " . idem($r), '409 conflict',
       "$name: the duplicate gets 409, never a forward");
    like($ngx->error_log, qr/the key was in progress, so the request is never forwarded/,
         "$name: the error log says why");

    $first->();
    is(backend_count($key), 1, "$name: executed once");
}

{
    my $name = 'a completion the store cannot take in time';
    my $key = fresh('late');
    my $uri = '/late?delay=1000';

    $relay = IdemStress::tcp_proxy($RELAY, $MYSQL);

    # the pool got over the last scenario's outage
    wait_for('the relayed store to answer', 30, sub {
        my $p = http_one(port => $P, method => 'POST', uri => '/late',
                         key => fresh('probe'), body => 'x');
        return ($p->{status} // 0) == 201;
    }, 0.25);

    my $first = first_request($uri, $key);
    wait_for("$key upstream", 10, sub { backend_count($key) == 1 });

    # the store goes away before the response is complete
    kill 'KILL', $relay;
    undef $relay;

    my $t0 = time;
    is($first->(), '201 new', "$name: the client still gets its response");
    cmp_ok(time - $t0, '<', 5, "$name: ... after the hold, not a retry "
           . 'schedule');
    like($ngx->error_log, qr/response of key \Q${\ IdemStress::key_id($key)}\E not committed within 500 ms: sent to the client anyway/,
         "$name: the error log says so");

    # the write goes on: once the store is back, the retry is a replay
    $relay = IdemStress::tcp_proxy($RELAY, $MYSQL);

    my $r;
    wait_for("$key stored", 30, sub {
        $r = http_one(port => $P, method => 'POST', uri => $uri,
                      key => $key, body => 'x');
        return idem($r) eq 'replay';
    }, 0.25);
    is("$r->{status} " . idem($r), '201 replay',
       "$name: the write went on, and a retry gets the replay");
    is(backend_count($key), 1, "$name: executed once");
}

is_deeply([ $ngx->crashes ], [], 'no worker crashed');
unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in error.log');

done_testing();

# Bounded work per client.  A request whose fingerprint differs from the
# stored one is answered 422 without the stored response leaving MySQL.
# Held duplicates are capped per worker (idempotency_max_held): beyond
# the cap a duplicate of a key in progress gets 409 at once, and the held
# ones still get the replay.  The memory of responses being captured is
# capped per worker (idempotency_capture_memory): a response that would
# pass the cap is still sent in full, recorded as executed, not stored
# (410 to its retries), while the capture that fits is stored.

use strict;
use warnings;

use Test::More;
use Digest::SHA ();
use POSIX ();
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file('MYSQL_SOCKET');

my $P = port(185);
my $tag = "b$$-" . int(time);
my $ngx;

END { $ngx->stop if $ngx }

# as root on the suite's server
sub root_sql { IdemStress::sql_root($ENV{TEST_NGINX_MYSQL_SOCKET}, @_) }

sub bytes_sent {
    return IdemStress::server_status($ENV{TEST_NGINX_MYSQL_SOCKET},
                                     'Bytes_sent')->{Bytes_sent};
}

$ngx = IdemStress::Nginx->start(name => 'bounded', port => $P,
    workers => 1,
    http => store_line('main', $ENV{TEST_NGINX_MYSQL_PORT}, pool => 8)
          . <<"HTTP");
    upstream backend { server 127.0.0.1:$BACKEND_PORT; }

    idempotency_max_held 2;
    idempotency_capture_memory 1m;

    server {
        listen 127.0.0.1:$P;
        client_max_body_size 200m;

        location /orders {
            idempotency main;
            idempotency_wait 10s;
            proxy_pass http://backend;
            add_header X-Idem \$idempotency_status always;
        }

        location /big {
            idempotency main;
            add_header X-Idem \$idempotency_status always;
            proxy_pass http://127.0.0.1:$P/sink;
        }

        location = /sink { return 201 "stored\\n"; }

        location = /ping { return 200 "pong\\n"; }
    }
HTTP

sub st { my ($r) = @_; return ($r->{status} // 0) . ' '
         . (IdemStress::hdr($r, 'X-Idem') // '-') }

# a request in a child; the returned code waits for it and gives status,
# X-Idem and the body's length
sub bg {
    my (%q) = @_;
    my $file = "$IdemStress::DIR/bounded-bg-$$-" . int(rand 1e9);
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        my $r = http_one(%q, port => $P, method => 'POST', timeout => 30);
        IdemStress::write_file($file, join "\n", st($r),
                               length($r->{body} // ''));
        POSIX::_exit(0);
    }
    return sub {
        waitpid $pid, 0;
        my ($st, $len) = split /\n/, IdemStress::read_file($file);
        unlink $file;
        return { st => $st, len => $len };
    };
}

# ---------------------------------------------------------------- 422
{
    my $key = "$tag-fp";
    my $r = post($P, '/orders?size=300000', $key);
    is(st($r), '201 new', 'a 300 KB response stored');
    sleep 0.2;

    my $before = bytes_sent();
    for (1 .. 5) {
        is(st(post($P, '/orders?size=300000', $key, body => 'other body')),
           '422 mismatch', "mismatch $_: 422");
    }
    my $mismatch = bytes_sent() - $before;
    cmp_ok($mismatch, '<', 100_000,
           "5 mismatches: the response never left MySQL ($mismatch bytes)");

    $before = bytes_sent();
    $r = post($P, '/orders?size=300000', $key);
    is(st($r), '201 replay', 'the matching retry is replayed');
    is(length $r->{body}, 300000, '... in full');
    my $replay = bytes_sent() - $before;
    cmp_ok($replay, '>', 300_000,
           "and that one read it ($replay bytes): the count sees responses");
}

# ---------------------------------------------------------- max_held
{
    my $key = "$tag-held";
    my $first = bg(key => $key, body => 'x', uri => '/orders?delay=2000');
    sleep 0.5;
    # the duplicates arrive while the first is upstream
    my @dup = http_many([map { { port => $P, method => 'POST', key => $key,
                                 body => 'x', uri => '/orders?delay=2000' } }
                         1 .. 5], timeout => 30);
    is($first->()->{st}, '201 new', 'the first: executed');

    my %by;
    $by{st($_)}++ for @dup;
    is($by{'201 replay'} // 0, 2, 'two duplicates held, then replayed');
    is($by{'409 conflict'} // 0, 3, 'three beyond the cap: 409');
    my @fast = grep { st($_) eq '409 conflict' && $_->{time} < 1 } @dup;
    is(scalar @fast, 3, '... at once');
    is(backend_count($key), 1, 'executed once');
    like($ngx->error_log, qr/\[warn\].*idempotency: 2 duplicates held, the idempotency_max_held of this worker: more get 409 at once/,
         'the error log says so, once');
}

# --------------------------------------------------- capture_memory
{
    # 450 KB counts 900 KB of the 1 MB (twice: its copy and the record):
    # one fits, two at once do not
    my ($ka, $kb) = ("$tag-mem-a", "$tag-mem-b");
    my $a = bg(key => $ka, body => 'x',
               uri => '/orders?size=450000&slow_body=1500');
    sleep 0.5;
    my $b = post($P, '/orders?size=450000', $kb);
    is(st($b), '201 new', 'the second at once: the client gets it');
    is(length $b->{body}, 450000, '... in full');
    my $ra = $a->();
    is($ra->{st}, '201 new', 'the slow one: the client gets it');
    is($ra->{len}, 450000, '... in full');
    sleep 0.2;

    my $r = post($P, '/orders?size=450000&slow_body=1500', $ka);
    is(st($r), '201 replay', 'the one that fitted is replayed');
    is(length $r->{body}, 450000, '... in full');
    is(st(post($P, '/orders?size=450000', $kb)), '410 unstored',
       'the one over the cap: 410 to its retry');
    is(backend_count($ka) + backend_count($kb), 2, 'each executed once');
    like($ngx->error_log, qr/\[warn\].*response of key ${\ key_id($kb)} not stored: the responses being stored by this worker hold \d+ of idempotency_capture_memory 1048576/,
         'the error log names the key and the cap');

    # all of it was given back: a response of 300 KB is stored again
    my $kc = "$tag-mem-c";
    post($P, '/orders?size=300000', $kc);
    sleep 0.2;
    is(st(post($P, '/orders?size=300000', $kc)), '201 replay',
       'the memory was given back: the next one is stored');
}

# ------------------------------------------------- a temp-file body
SKIP: {
    skip 'timings mean nothing under valgrind', 8
        if $ENV{TEST_NGINX_USE_VALGRIND};

    # hashed in 512 KiB slices between events: another connection is
    # answered all along (in one piece, 128 MB would stall the worker for
    # about 100 ms on this kind of machine)
    my $body = join '', map { chr(($_ * 7) % 256) x 4096 } 0 .. 32767;

    # the POST, and a client pinging the same worker all along: the
    # longest a ping waited, and how many were answered
    my $big = sub {
        my ($key) = @_;
        pipe(my $rd, my $wr) or die "pipe: $!";
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            close $rd;
            my ($worst, $pings) = (0, 0);
            my $end = time + 30;
            while (time < $end) {
                my $t = time;
                my $r = http_one(port => $P, method => 'GET',
                                 uri => '/ping', timeout => 10);
                my $dt = time - $t;
                $worst = $dt if $dt > $worst;
                $pings++;
                print STDERR "# ping: $r->{error}\n" if $r->{error};
                last if -e "$IdemStress::DIR/bounded-stop-$$";
                sleep 0.002;
            }
            print $wr "$worst $pings\n";
            close $wr;
            POSIX::_exit(0);
        }
        close $wr;

        my $r = post($P, '/big', $key, body => $body);
        IdemStress::write_file("$IdemStress::DIR/bounded-stop-$pid", '');
        my ($worst, $pings) = split ' ', <$rd>;
        waitpid $pid, 0;
        unlink "$IdemStress::DIR/bounded-stop-$pid";
        return ($r, $worst, $pings);
    };

    # a ping may wait on a loaded machine for reasons of its own (the
    # CPUs busy with other tests): up to three tries, each with a key of
    # its own; a worker that hashed the body in one piece stalls them all
    my ($key, $r, $worst, $pings);
    for my $try (1 .. 3) {
        $key = $try == 1 ? "$tag-big" : "$tag-big-$try";
        ($r, $worst, $pings) = $big->($key);
        last if $worst < 0.06 || st($r) ne '201 new';
        diag(sprintf('try %d: a ping waited %.1f ms', $try, 1000 * $worst));
    }

    is(st($r), '201 new', '128 MB in a temp file: executed');
    like($ngx->error_log, qr/a client request body is buffered to a temporary file/,
         '... it was in a temp file');
    cmp_ok($pings, '>', 10, "another connection was served ($pings pings)");
    cmp_ok($worst, '<', 0.06,
           sprintf('... and waited %.1f ms at most', 1000 * $worst));

    my $kh = key_hash_hex($key);
    chomp(my $row = root_sql("SELECT LOWER(HEX(fingerprint))"
                             . " FROM idempotency_keys"
                             . " WHERE key_hash = UNHEX('$kh')"));
    is($row, Digest::SHA::sha256_hex("idempotency-fp/1POST\0/big\0$body"),
       'the fingerprint is the SHA-256 of the whole request');

    is(st(post($P, '/big', $key, body => $body)), '201 replay',
       'the same body: replay');
    substr($body, -1, 1) = 'x';
    is(st(post($P, '/big', $key, body => $body)), '422 mismatch',
       'the last byte changed: 422');
    substr($body, 0, 1) = 'x';
    is(st(post($P, '/big', $key, body => $body)), '422 mismatch',
       'the first byte changed: 422');
}

unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in the log');

done_testing();

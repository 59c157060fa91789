# Bounded work per client.  A request whose fingerprint differs from the
# stored one is answered 422 without the stored response leaving MySQL.
# Held duplicates are capped per worker (idempotency_max_held): beyond
# the cap a duplicate of a key in progress gets 409 at once, and the held
# ones still get the replay.  The memory of responses being captured is
# capped per worker (idempotency_capture_memory): a response that would
# pass the cap is still sent in full, recorded as executed, not stored
# (410 to its retries), while the capture that fits is stored.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use Digest::SHA ();
use POSIX ();
use Time::HiRes ();

IdemStress::begin_file('MYSQL_SOCKET');
plan 'no_plan';

# as root on the suite's server
sub root_sql { sql_root($ENV{TEST_NGINX_MYSQL_SOCKET}, @_) }

sub bytes_sent {
    return IdemStress::server_status($ENV{TEST_NGINX_MYSQL_SOCKET},
                                     'Bytes_sent')->{Bytes_sent};
}

# a request in a child; the returned code waits for it and gives
# "STATUS X-IDEM" and the body's length
sub bg {
    my ($uri, $key, %o) = @_;
    my $file = "$IdemStress::DIR/bounded-bg-$$-" . int(rand 1e9);
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        my $r = post_key($uri, $key, %o);
        IdemStress::write_file($file, join "\n", idem_of($r),
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

# the POST of $body to /big, and a client pinging the same worker all
# along: the response, the longest a ping waited, and how many were
# answered
sub big {
    my ($key, $body) = @_;
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        close $rd;
        my ($worst, $pings) = (0, 0);
        my $end = Time::HiRes::time() + 30;
        while (Time::HiRes::time() < $end) {
            my $t = Time::HiRes::time();
            my $r = IdemStress::http_one(port => port(), method => 'GET',
                                         uri => '/ping', timeout => 10);
            my $dt = Time::HiRes::time() - $t;
            $worst = $dt if $dt > $worst;
            $pings++;
            print STDERR "# ping: $r->{error}\n" if $r->{error};
            last if -e "$IdemStress::DIR/bounded-stop-$$";
            Time::HiRes::sleep(0.002);
        }
        print $wr "$worst $pings\n";
        close $wr;
        POSIX::_exit(0);
    }
    close $wr;

    my $r = post_key('/big', $key, body => $body);
    IdemStress::write_file("$IdemStress::DIR/bounded-stop-$pid", '');
    my ($worst, $pings) = split ' ', <$rd>;
    waitpid $pid, 0;
    unlink "$IdemStress::DIR/bounded-stop-$pid";
    return ($r, $worst, $pings);
}

# the body of size=N: byte i is i % 251
sub pattern { CORE::join('', map { chr($_ % 251) } 0 .. $_[0] - 1) }

# the log of 128 MB of request body at info, not debug
log_level('info');

# the log lines of a block come before its last request
check_accum_error_log();

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(pool => 8) . <<'HTTP',
idempotency_max_held 2;
idempotency_capture_memory 1m;
HTTP
    config => IdemTest::orders_location(idempotency_wait => '10s',
                                        add_header => 'X-Idem', count => 1)
              . <<'CONFIG',
    # Test::Nginx's server has client_max_body_size 30M
    location /big {
        client_max_body_size 200m;
        idempotency main;
        add_header X-Idem $idempotency_status always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/sink;
    }

    location = /sink {
        client_max_body_size 200m;
        return 201 "stored\n";
    }

    location = /ping { return 200 "pong\n"; }
CONFIG
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: a request whose fingerprint differs gets 422 without the stored response leaving MySQL
--- init
is(idem_of(post_key('/orders?size=300000', 't185-fp')), '201 new',
   'a 300 KB response stored');
Time::HiRes::sleep(0.2);

my $before = main::bytes_sent();
for (1 .. 5) {
    is(idem_of(post_key('/orders?size=300000', 't185-fp', body => 'other body')),
       '422 mismatch', "mismatch $_: 422");
}
my $mismatch = main::bytes_sent() - $before;
cmp_ok($mismatch, '<', 100_000,
       "5 mismatches: the response never left MySQL ($mismatch bytes)");
--- more_headers
Idempotency-Key: t185-fp
--- request
POST /orders?size=300000
other body
--- error_code: 422
--- response_headers
X-Idem: mismatch



=== TEST 2: ... the matching retry is replayed in full, and the server's count of bytes sees it read
--- init
my $before = main::bytes_sent();
my $r = post_key('/orders?size=300000', 't185-fp');
is(idem_of($r), '201 replay', 'the matching retry is replayed');
is(length $r->{body}, 300000, '... in full');
my $replay = main::bytes_sent() - $before;
cmp_ok($replay, '>', 300_000,
       "and that one read it ($replay bytes): the count sees responses");
--- more_headers
Idempotency-Key: t185-fp
--- request
POST /orders?size=300000
x
--- error_code: 201
--- response_headers
X-Idem: replay
--- response_body eval
main::pattern(300000)



=== TEST 3: idempotency_max_held 2: two duplicates of a key in progress are held and replayed, three beyond the cap get 409 at once, the log says so
--- init
my $first = main::bg('/orders?delay=2000', 't185-held');
Time::HiRes::sleep(0.5);

# the duplicates arrive while the first is upstream
my @dup = IdemStress::http_many(
    [ map { post_key('/orders?delay=2000', 't185-held', spec => 1) } 1 .. 5 ],
    timeout => 30);
is($first->()->{st}, '201 new', 'the first: executed');

my %by;
$by{ idem_of($_) }++ for @dup;
is($by{'201 replay'} // 0, 2, 'two duplicates held, then replayed');
is($by{'409 conflict'} // 0, 3, 'three beyond the cap: 409');
is(scalar(grep { idem_of($_) eq '409 conflict' && $_->{time} < 1 } @dup), 3,
   '... at once');
--- request
GET /count?key=t185-held
--- response_body: 1
--- error_log eval
qr/\[warn\].*idempotency: 2 duplicates held, the idempotency_max_held of this worker: more get 409 at once/
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: idempotency_capture_memory 1m: of two 450 KB responses at once (each counts 900 KB) the one that fits is stored and the other is sent in full and not stored (410 to its retry); the memory is given back
--- init
my $a = main::bg('/orders?size=450000&slow_body=1500', 't185-mem-a');
Time::HiRes::sleep(0.5);
my $b = post_key('/orders?size=450000', 't185-mem-b');
is(idem_of($b), '201 new', 'the second at once: the client gets it');
is(length $b->{body}, 450000, '... in full');
my $ra = $a->();
is($ra->{st}, '201 new', 'the slow one: the client gets it');
is($ra->{len}, 450000, '... in full');
Time::HiRes::sleep(0.2);

# all of it was given back: a response of 300 KB is stored again (its
# retry is the block's third request)
post_key('/orders?size=300000', 't185-mem-c');
Time::HiRes::sleep(0.2);
--- more_headers eval
["Idempotency-Key: t185-mem-a", "Idempotency-Key: t185-mem-b",
 "Idempotency-Key: t185-mem-c", "", ""]
--- request eval
["POST /orders?size=450000&slow_body=1500\nx", "POST /orders?size=450000\nx",
 "POST /orders?size=300000\nx", "GET /count?key=t185-mem-a",
 "GET /count?key=t185-mem-b"]
--- error_code eval
[201, 410, 201, 200, 200]
--- response_headers eval
["X-Idem: replay", "X-Idem: unstored", "X-Idem: replay", "", ""]
--- response_body_like eval
[IdemTest::size_re(450000), '', '', '^1$', '^1$']
--- error_log eval
qr/\[warn\].*response of key ${\ IdemStress::key_id('t185-mem-b')} not stored: the responses being stored by this worker hold \d+ of idempotency_capture_memory 1048576/
--- no_error_log
[alert]
[crit]
[emerg]
--- timeout: 10



=== TEST 5: a 128 MB body in a temp file is hashed in slices between events: another connection is answered all along, the fingerprint is the SHA-256 of the whole request, and a change of its first or last byte gets 422
--- skip_eval: 13: $ENV{TEST_NGINX_USE_VALGRIND}
--- init
# hashed in 512 KiB slices between events (in one piece, 128 MB would
# stall the worker for about 100 ms on this kind of machine)
my $body = CORE::join('', map { chr(($_ * 7) % 256) x 4096 } 0 .. 32767);

# a ping may wait on a loaded machine for reasons of its own (the CPUs
# busy with other tests): up to three tries, each with a key of its own;
# a worker that hashed the body in one piece stalls them all
my ($key, $r, $worst, $pings);
for my $try (1 .. 3) {
    $key = $try == 1 ? 't185-big' : "t185-big-$try";
    ($r, $worst, $pings) = main::big($key, $body);
    last if $worst < 0.06 || idem_of($r) ne '201 new';
    diag(sprintf('try %d: a ping waited %.1f ms', $try, 1000 * $worst));
}

is(idem_of($r), '201 new', '128 MB in a temp file: executed');
cmp_ok($pings, '>', 10, "another connection was served ($pings pings)");
cmp_ok($worst, '<', 0.06,
       sprintf('... and waited %.1f ms at most', 1000 * $worst));

my $kh = key_hash_hex($key);
chomp(my $row = main::root_sql("SELECT LOWER(HEX(fingerprint))"
                               . " FROM idempotency_keys"
                               . " WHERE key_hash = UNHEX('$kh')"));
is($row, Digest::SHA::sha256_hex("idempotency-fp/1POST\0/big\0$body"),
   'the fingerprint is the SHA-256 of the whole request');

is(idem_of(post_key('/big', $key, body => $body)), '201 replay',
   'the same body: replay');
substr($body, -1, 1) = 'x';
is(idem_of(post_key('/big', $key, body => $body)), '422 mismatch',
   'the last byte changed: 422');
substr($body, 0, 1) = 'x';
is(idem_of(post_key('/big', $key, body => $body)), '422 mismatch',
   'the first byte changed: 422');
--- request
GET /ping
--- response_body
pong
--- error_log
a client request body is buffered to a temporary file
--- timeout: 10

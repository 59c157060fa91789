# Read your writes: the end of a stored response reaches the client only
# once its completion is committed, so a client that has the whole
# response and repeats the request at once is replayed, never answered
# 409 — on a fresh connection, or pipelined behind the first request on
# the same one.  200 rounds for each of three sizes.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use IO::Socket::INET ();

our $ROUNDS = $ENV{IDEM_RYW_ROUNDS} || 200;
our $N = 0;

sub fresh { return 't140-' . shift() . '-' . ++$N }

sub request {
    my ($uri, $key, $close) = @_;
    return "POST $uri HTTP/1.1\r\nHost: localhost\r\n"
         . ($close ? "Connection: close\r\n" : '')
         . "Idempotency-Key: $key\r\nContent-Length: 1\r\n\r\nx";
}

# reads responses off a socket by their Content-Length, as a client that
# acts on a complete response does (not waiting for the connection to end)
sub read_response {
    my ($s, $bufref) = @_;

    while (1) {
        if ($$bufref =~ /^(.*?\r\n)\r\n/s) {
            my $head = $1;
            my ($len) = $head =~ /^Content-Length:\s*(\d+)/mi;
            $len //= 0;
            my $total = length($head) + 2 + $len;

            if (length $$bufref >= $total) {
                my $body = substr($$bufref, length($head) + 2, $len);
                substr($$bufref, 0, $total, '');
                my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
                my ($idem) = $head =~ /^X-Idem:\s*(\S+)/mi;
                return { status => $status, idem => $idem // '-',
                         replayed => $head =~ /^Idempotent-Replayed: true/mi
                                     ? 1 : 0,
                         body => $body };
            }
        }

        my $r = sysread($s, my $chunk, 1 << 20);
        return { error => 'closed' } unless $r;
        $$bufref .= $chunk;
    }
}

sub connect_nginx {
    return IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . IdemTest::port())
        or die "connect: $!";
}

# $ROUNDS rounds of a first request of $size bytes and its duplicate at
# once, on a new connection the moment the first response is complete
# ('fresh') or pipelined behind it ('piped'); the rounds whose duplicate
# was not the first response replayed, as "first / duplicate" x count
sub rounds {
    my ($size, $how) = @_;
    my %bad;

    for my $i (1 .. $ROUNDS) {
        my $key = fresh(($how eq 'fresh' ? 'f' : 'p') . $size);
        my $uri = "/orders?size=$size";
        my ($r1, $r2);
        my $s = connect_nginx();
        my $buf = '';

        if ($how eq 'fresh') {
            print {$s} request($uri, $key, 0);
            $r1 = read_response($s, \$buf);
            my $s2 = connect_nginx();
            my $buf2 = '';
            print {$s2} request($uri, $key, 1);
            $r2 = read_response($s2, \$buf2);
            close $s2;

        } else {
            print {$s} request($uri, $key, 0) . request($uri, $key, 1);
            $r1 = read_response($s, \$buf);
            $r2 = read_response($s, \$buf);
        }
        close $s;

        $bad{ join ' / ', map { $_->{error} // "$_->{status} $_->{idem}" }
                          $r1, $r2 }++
            unless ($r1->{status} // 0) == 201 && $r2->{replayed}
                   && $r2->{body} eq $r1->{body};
    }

    return join ', ', map { "$_ x$bad{$_}" } sort keys %bad;
}

# the body of size=N: byte i is i % 251
sub pattern { CORE::join('', map { chr($_ % 251) } 0 .. $_[0] - 1) }

# two workers: a duplicate on a new connection may meet the other one;
# the rounds' 2400 requests log at info (debug triples the run)
log_level('info');
master_on();
workers(2);

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(pool => 8)
                   =~ s/(upstream backend \{ server [^;]+;)/$1 keepalive 8;/r,
    config => IdemTest::orders_location(proxy_http_version => '1.1',
                                        proxy_set_header => 'Connection ""',
                                        add_header => 'X-Idem', count => 1),
    no_error_log => "not committed within\n[emerg]\n");
run_tests();

__DATA__

=== TEST 1: 100 B: a duplicate sent on a new connection the moment the response is complete is replayed (200 rounds)
--- init
is(main::rounds(100, 'fresh'), '', "100 B, $main::ROUNDS rounds: every duplicate on a new connection replayed");
--- request eval
["POST /orders?size=100\nx", "POST /orders?size=100\nx"]
--- more_headers
Idempotency-Key: t140-100-last
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true"]
--- response_body eval
[main::pattern(100), main::pattern(100)]
--- timeout: 20



=== TEST 2: 100 B: a duplicate pipelined behind the first request is replayed (200 rounds)
--- init
is(main::rounds(100, 'piped'), '', "100 B, $main::ROUNDS rounds: every duplicate pipelined behind the first replayed");
--- pipelined_requests eval
["POST /orders?size=100\nx", "POST /orders?size=100\nx"]
--- more_headers
Idempotency-Key: t140-100-piped
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true"]
--- response_body eval
[main::pattern(100), main::pattern(100)]
--- timeout: 20



=== TEST 3: 65536 B: a duplicate sent on a new connection the moment the response is complete is replayed (200 rounds)
--- init
is(main::rounds(65536, 'fresh'), '', "65536 B, $main::ROUNDS rounds: every duplicate on a new connection replayed");
--- request eval
["POST /orders?size=65536\nx", "POST /orders?size=65536\nx"]
--- more_headers
Idempotency-Key: t140-65536-last
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true"]
--- response_body eval
[main::pattern(65536), main::pattern(65536)]
--- timeout: 20



=== TEST 4: 65536 B: a duplicate pipelined behind the first request is replayed (200 rounds)
--- init
is(main::rounds(65536, 'piped'), '', "65536 B, $main::ROUNDS rounds: every duplicate pipelined behind the first replayed");
--- pipelined_requests eval
["POST /orders?size=65536\nx", "POST /orders?size=65536\nx"]
--- more_headers
Idempotency-Key: t140-65536-piped
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true"]
--- response_body eval
[main::pattern(65536), main::pattern(65536)]
--- timeout: 20



=== TEST 5: 900000 B: a duplicate sent on a new connection the moment the response is complete is replayed (200 rounds)
--- init
is(main::rounds(900000, 'fresh'), '', "900000 B, $main::ROUNDS rounds: every duplicate on a new connection replayed");
--- request eval
["POST /orders?size=900000\nx", "POST /orders?size=900000\nx"]
--- more_headers
Idempotency-Key: t140-900000-last
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true"]
--- response_body eval
[main::pattern(900000), main::pattern(900000)]
--- timeout: 60



=== TEST 6: 900000 B: a duplicate pipelined behind the first request is replayed (200 rounds)
--- init
is(main::rounds(900000, 'piped'), '', "900000 B, $main::ROUNDS rounds: every duplicate pipelined behind the first replayed");
--- pipelined_requests eval
["POST /orders?size=900000\nx", "POST /orders?size=900000\nx"]
--- more_headers
Idempotency-Key: t140-900000-piped
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true"]
--- response_body eval
[main::pattern(900000), main::pattern(900000)]
--- timeout: 60



=== TEST 7: every first request ran once (a sample of the keys)
--- request eval
["GET /count?key=t140-f100-1",
 "GET /count?key=t140-p100-" . ($main::ROUNDS + 2)]
--- response_body eval
["1", "1"]

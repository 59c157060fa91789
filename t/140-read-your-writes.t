# Read your writes: the end of a stored response reaches the client only
# once its completion is committed, so a client that has the whole
# response and repeats the request at once is replayed, never answered
# 409 — on a fresh connection, or pipelined behind the first request on
# the same one.  200 rounds for each of three sizes.

use strict;
use warnings;

use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file();

my $P = port(141);
my $ROUNDS = $ENV{IDEM_RYW_ROUNDS} || 200;
my $tag = "ryw$$-" . int(time);
my $n = 0;
my $ngx;

END { $ngx->stop if $ngx }

$ngx = IdemStress::Nginx->start(name => 'ryw', port => $P,
    http => store_line('main', $ENV{TEST_NGINX_MYSQL_PORT}, pool => 8)
          . <<"HTTP");
    upstream backend { server 127.0.0.1:$BACKEND_PORT; keepalive 8; }

    server {
        listen 127.0.0.1:$P;

        location /orders {
            idempotency main;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://backend;
            add_header X-Idem \$idempotency_status always;
        }
    }
HTTP

sub fresh { return "$tag-" . shift() . '-' . ++$n }

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

sub desc {
    my $r = shift;
    return $r->{error} // "$r->{status} $r->{idem}";
}

for my $size (100, 65536, 900000) {
    my (%fresh, %piped, $fresh_bad, $piped_bad);

    for my $i (1 .. $ROUNDS) {

        # the first request on one connection, the duplicate on a new one
        # the moment the first response is complete

        my $key = fresh("f$size");
        my $uri = "/orders?size=$size";
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$P")
            or die "connect: $!";
        my $buf = '';
        print {$s} request($uri, $key, 0);
        my $r1 = read_response($s, \$buf);

        my $s2 = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$P")
            or die "connect: $!";
        my $buf2 = '';
        print {$s2} request($uri, $key, 1);
        my $r2 = read_response($s2, \$buf2);
        close $s;
        close $s2;

        my $d = desc($r1) . ' / ' . desc($r2);
        $fresh{$d}++;
        $fresh_bad //= $d unless ($r1->{status} // 0) == 201
                                 && $r2->{replayed}
                                 && $r2->{body} eq $r1->{body};

        # both requests written at once on one connection

        $key = fresh("p$size");
        $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$P")
            or die "connect: $!";
        $buf = '';
        print {$s} request($uri, $key, 0) . request($uri, $key, 1);
        $r1 = read_response($s, \$buf);
        $r2 = read_response($s, \$buf);
        close $s;

        $d = desc($r1) . ' / ' . desc($r2);
        $piped{$d}++;
        $piped_bad //= $d unless ($r1->{status} // 0) == 201
                                 && $r2->{replayed}
                                 && $r2->{body} eq $r1->{body};
    }

    my $fig = sub { my $h = shift;
                    join ', ', map { "$_ x$h->{$_}" } sort keys %$h };

    ok(!defined $fresh_bad, "$size B: a duplicate sent on a new connection "
       . "the moment the response is complete is replayed ($ROUNDS rounds)")
        or diag('first and duplicate: ' . $fig->(\%fresh));
    ok(!defined $piped_bad, "$size B: a duplicate pipelined behind the "
       . "first request is replayed ($ROUNDS rounds)")
        or diag('first and duplicate: ' . $fig->(\%piped));
    note("$size B: fresh: " . $fig->(\%fresh) . '; pipelined: '
         . $fig->(\%piped));
}

# every first request ran once: a sample of the keys
for my $key ("$tag-f100-1", "$tag-p100-2") {
    is(backend_count($key), 1, "$key executed once");
}

is_deeply([ $ngx->crashes ], [], 'no worker crashed');
unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]|not committed within/,
       'no alert, every completion committed before the response ended');

done_testing();

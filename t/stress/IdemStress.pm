# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package IdemStress;

# Harness for the tests that run several nginx at once: the races
# (t/100-races.t, `make stress`), the faults (t/110-faults.t) and the
# nodes of a sharded store (t/320-nodes.t).  It starts its own nginx
# instances (own prefix under build/stress/, own ports from 19000 or as
# TEST_NGINX_PORT moves them, master + workers), an optional second
# private MariaDB, a load generator, and fires many concurrent HTTP
# requests from one process with non-blocking sockets.  The Test::Nginx
# files use its client, SQL, relays, private MariaDB and Prometheus
# (t/IdemTest.pm loads it).  Core Perl only.  See docs/reliability.md.
#
#   IdemStress::begin_file();
#   my $ngx = IdemStress::Nginx->start(name => 'race1', port => port(81),
#       http => store_line('main', $ENV{TEST_NGINX_MYSQL_PORT})
#               . server_block(port(81), $locations));
#   my @res = http_many([ { port => port(81), method => 'POST',
#                           uri => '/orders', key => 'k', body => 'x' } ]);
#   backend_count('k');
#   $ngx->stop;

use strict;
use warnings;

use Cwd qw(abs_path);
use Digest::SHA qw(sha256_hex);
use Errno qw(EINPROGRESS EAGAIN EWOULDBLOCK EINTR);
use Exporter 'import';
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK LOCK_EX LOCK_NB);
use File::Basename qw(dirname);
use File::Path qw(make_path remove_tree);
use IO::Poll qw(POLLIN POLLOUT POLLERR POLLHUP);
use POSIX qw(WNOHANG setsid);
use Socket qw(PF_INET SOCK_STREAM SOL_SOCKET SO_ERROR SO_LINGER
              IPPROTO_TCP TCP_NODELAY inet_aton sockaddr_in);
use Time::HiRes qw(time sleep);

our @EXPORT = qw(port http_many http_one post backend_count wait_for
                 request_for pct_encode key_hash_hex key_id store_line server_block
                 summarize_burst
                 $ROOT $BUILD $BACKEND_PORT $MODULE $NGINX);

our $ROOT = abs_path(dirname(__FILE__) . '/../..');
our $BUILD = "$ROOT/build";
our $NGINX = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
our $MODULE = $ENV{TEST_NGINX_LOAD_MODULES}
              || "$BUILD/ngx_http_idempotency_module.so";
our $BACKEND_PORT = $ENV{TEST_NGINX_BACKEND_PORT} || 8091;

# where instances live and which ports they take; a second copy of these
# tests (a developer's run beside `make test`) needs other values: the
# ports follow the Test::Nginx port (19000 for 1984, 20000 for 2984)
our $DIR = $ENV{IDEM_STRESS_DIR} || "$BUILD/stress";
our $PORT_BASE = $ENV{IDEM_STRESS_PORT_BASE}
    || 19000 + (($ENV{TEST_NGINX_PORT} || 1984) - 1984);

sub port { return $PORT_BASE + $_[0] }

# Two runs that share $DIR would stop each other's servers: the second
# waits for the first.  Called once by each test file; held until exit.
my $LOCK_FH;

sub lock_dir {
    make_path($DIR);
    open $LOCK_FH, '>', "$DIR/.lock" or die "cannot open $DIR/.lock: $!";
    if (!flock($LOCK_FH, LOCK_EX | LOCK_NB)) {
        print STDERR "# waiting for another run that uses $DIR...\n";
        flock($LOCK_FH, LOCK_EX) or die "flock $DIR/.lock: $!";
    }
}

# The start of a test file that runs its own servers: skips the file
# unless `make test` has set TEST_NGINX_BACKEND_PORT and each
# TEST_NGINX_$name of @need, makes INT and TERM an exit (so that the
# file's END blocks stop what it started), then takes lock_dir.
sub begin_file {
    my (@need) = @_;

    require Test::More;
    for my $v (map { "TEST_NGINX_$_" } 'BACKEND_PORT', @need) {
        Test::More::plan(skip_all => "$v is not set: run with 'make test'")
            unless $ENV{$v};
    }

    $SIG{INT} = $SIG{TERM} = sub { exit 1 };
    lock_dir();
}

$SIG{PIPE} = 'IGNORE';

# ------------------------------------------------------------------ misc

sub wait_for {
    my ($what, $timeout, $cond, $interval) = @_;

    my $deadline = time + $timeout;
    $interval //= 0.05;

    while (1) {
        my $v = $cond->();
        return $v if $v;
        die "timed out after ${timeout}s waiting for $what\n"
            if time > $deadline;
        sleep $interval;
    }
}

sub pct_encode {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9_.~-])/sprintf('%%%02X', ord $1)/ge;
    return $s;
}

# the module's lookup hash of (scope, key) (ngx_http_idempotency_key.c)
sub key_hash_hex {
    my ($key, $scope) = @_;
    $scope //= '';
    return sha256_hex('idempotency-key/1' . pack('N', length $scope)
                      . $scope . $key);
}

# how the error log names a key: the first 8 hex digits of its hash
sub key_id {
    my ($key, $scope) = @_;
    return substr(key_hash_hex($key, $scope), 0, 8);
}

# the version of the nginx under test ($NGINX -v) as one number: 1.25.1
# is 1025001
my $NGINX_VERSION;

sub nginx_version {
    return $NGINX_VERSION if defined $NGINX_VERSION;
    my $v = `'$NGINX' -v 2>&1`;
    die "cannot tell the version of $NGINX: $v\n"
        unless $v =~ m{nginx/(\d+)\.(\d+)\.(\d+)};
    return $NGINX_VERSION = $1 * 1000000 + $2 * 1000 + $3;
}

# a listen directive for HTTP/2 on $addr, as the version under test
# accepts it: "listen ... http2" before 1.25.1, "http2 on" from it (the
# listen parameter is deprecated there); $indent goes before a 2nd line
sub listen_http2 {
    my ($addr, $indent) = @_;
    return nginx_version() >= 1025001
           ? "listen $addr;\n" . ($indent // '') . "http2 on;"
           : "listen $addr http2;";
}

# the value of a sample in Prometheus' text format (idempotency_metrics),
# by name and some of its labels; undef if none matches
sub metric {
    my ($text, $name, %labels) = @_;
    for my $line (split /\n/, $text) {
        next unless $line =~ /^\Q$name\E\{([^}]*)\} (\S+)$/;
        my ($l, $v) = ($1, $2);
        my %got = $l =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
        next if grep { ($got{$_} // '') ne $labels{$_} } keys %labels;
        return $v;
    }
    return undef;
}

# the idempotency_store line for a MariaDB on 127.0.0.1:$port
sub store_line {
    my ($name, $port, %p) = @_;

    my %d = (user => $ENV{TEST_NGINX_MYSQL_USER} || 'idem',
             password => $ENV{TEST_NGINX_MYSQL_PASSWORD} || 'idem-secret',
             database => $ENV{TEST_NGINX_MYSQL_DB} || 'idempotency',
             %p);

    return "idempotency_store $name mysql=127.0.0.1:$port "
           . join(' ', map { "$_=$d{$_}" } sort keys %d) . ";\n";
}

# The http{} lines of an instance after its idempotency_store lines: the
# test backend as upstream "backend", and a server on 127.0.0.1:$port
# around $body (the server's own directives and its locations).
sub server_block {
    my ($port, $body) = @_;

    return "    upstream backend { server 127.0.0.1:$BACKEND_PORT; }\n\n"
         . "    server {\n"
         . "        listen 127.0.0.1:$port;\n\n"
         . $body
         . "    }\n";
}

# ------------------------------------------------------------------- SQL

# The mariadb client in batch mode, on the suite's database
# (TEST_NGINX_MYSQL_DB): as the module's user on 127.0.0.1:$port
# (sql_at), or as root over a server's unix socket (sql_root: schema,
# accounts, global settings; $input, when given, is a file of statements
# fed on stdin).  Returns the output, column names left out; dies when the
# client fails.  server_status: { name => value } of the server's global
# status variables named, without a database (its counters see the least
# of the client itself).
sub sql_at {
    my ($port, $stmt) = @_;

    return mariadb(['-h', '127.0.0.1', '-P', $port,
                    '-u', $ENV{TEST_NGINX_MYSQL_USER} || 'idem',
                    '-p' . ($ENV{TEST_NGINX_MYSQL_PASSWORD} || 'idem-secret')],
                   $stmt);
}

sub sql_root {
    my ($socket, $stmt, $input) = @_;

    return mariadb(['--protocol=socket', "--socket=$socket", '-u', 'root'],
                   $stmt, $input);
}

sub server_status {
    my ($socket, @names) = @_;

    my $out = mariadb(['--protocol=socket', "--socket=$socket", '-u', 'root'],
                      "SHOW GLOBAL STATUS WHERE Variable_name IN ("
                      . join(', ', map { "'$_'" } @names) . ")", undef, '');

    return { map { split /\t/ } split /\n/, $out };
}

# $db: the database, '' for none [TEST_NGINX_MYSQL_DB]
sub mariadb {
    my ($args, $stmt, $input, $db) = @_;

    $db //= $ENV{TEST_NGINX_MYSQL_DB} || 'idempotency';

    my @cmd = ('mariadb', '--no-defaults', '--batch', '--skip-column-names',
               @$args, $db eq '' ? () : $db,
               defined $stmt ? ('-e', $stmt) : ());

    if (defined $input) {
        my $cmd = join ' ', map { "'$_'" } @cmd;
        $cmd .= " < '$input'";
        my $out = `$cmd`;
        die "mariadb failed ($?): $input\n" if $?;
        return $out // '';
    }

    open my $fh, '-|', @cmd or die "cannot run mariadb: $!";
    local $/;
    my $out = <$fh>;
    close $fh or die "mariadb failed ($?): " . ($stmt // '') . "\n";

    return $out // '';
}

# ------------------------------------------------------------ HTTP client

# A request: { port, method, uri, key (Idempotency-Key value, optional),
# headers => [[name, value], ...], body, raw (sent as is instead),
# close_after => seconds (close without reading the answer) }.
sub request_for {
    my ($q) = @_;

    return $q->{raw} if defined $q->{raw};

    my $body = $q->{body} // '';
    my $r = ($q->{method} || 'POST') . " $q->{uri} HTTP/1.1\r\n"
            . "Host: localhost\r\nConnection: close\r\n";
    $r .= "Idempotency-Key: $q->{key}\r\n" if defined $q->{key};
    $r .= "$_->[0]: $_->[1]\r\n" for @{ $q->{headers} || [] };
    $r .= "Content-Length: " . length($body) . "\r\n"
        unless grep { lc $_->[0] eq 'transfer-encoding' }
                    @{ $q->{headers} || [] };
    return "$r\r\n$body";
}

sub parse_response {
    my ($raw) = @_;

    my %res = (raw => $raw, headers => {});

    my $i = index($raw, "\r\n\r\n");
    if ($i < 0) {
        $res{error} = length $raw ? 'incomplete header' : 'no response';
        return \%res;
    }

    my ($status_line, @lines) = split /\r\n/, substr($raw, 0, $i);
    my $body = substr($raw, $i + 4);

    if ($status_line !~ m{^HTTP/1\.[01] (\d{3})}) {
        $res{error} = "bad status line: $status_line";
        return \%res;
    }

    $res{status} = $1;

    for my $l (@lines) {
        my ($n, $v) = $l =~ /^([^:]+):\s*(.*?)\s*$/ or next;
        push @{ $res{headers}{lc $n} }, $v;
    }

    my $te = $res{headers}{'transfer-encoding'};
    my $cl = $res{headers}{'content-length'};

    if ($te && $te->[0] =~ /chunked/i) {
        my $out = '';
        my $done = 0;
        while ($body =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
            my $n = hex $1;
            if ($n == 0) { $done = 1; last }
            last if length $body < $n + 2;
            $out .= substr($body, 0, $n);
            substr($body, 0, $n + 2) = '';
        }
        $res{error} = 'truncated chunked body' unless $done;
        $body = $out;

    } elsif ($cl) {
        if (length $body < $cl->[0]) {
            $res{error} = 'truncated body (' . length($body)
                          . " of $cl->[0])";
        } else {
            $body = substr($body, 0, $cl->[0]);
        }
    }

    $res{body} = $body;
    return \%res;
}

sub hdr {
    my ($res, $name) = @_;
    my $v = $res->{headers}{lc $name};
    return $v ? join(', ', @$v) : undef;
}

# Sends all requests at once, each on its own connection, and returns the
# responses in order: { status, headers => {lc name => [values]}, body,
# error }.  $o{timeout} bounds the whole batch.
sub http_many {
    my ($reqs, %o) = @_;

    my $timeout = $o{timeout} // 60;
    my $deadline = time + $timeout;
    my $poll = IO::Poll->new;
    my (@st, %by_fd);

    for my $i (0 .. $#$reqs) {
        my $q = $reqs->[$i];
        my $s;
        my %c = (i => $i, out => request_for($q), off => 0, in => '',
                 started => time);

        if (!socket($s, PF_INET, SOCK_STREAM, 0)) {
            $st[$i] = { error => "socket: $!" };
            next;
        }

        my $fl = fcntl($s, F_GETFL, 0);
        fcntl($s, F_SETFL, $fl | O_NONBLOCK);
        setsockopt($s, IPPROTO_TCP, TCP_NODELAY, 1);

        if (!connect($s, sockaddr_in($q->{port}, inet_aton('127.0.0.1')))
            && $! != EINPROGRESS)
        {
            $st[$i] = { error => "connect: $!" };
            close $s;
            next;
        }

        $c{sock} = $s;
        $c{close_at} = $q->{close_after};
        $c{state} = 'write';
        $by_fd{fileno $s} = \%c;
        $poll->mask($s => POLLOUT);
    }

    while (%by_fd) {
        my $now = time;
        my $left = $deadline - $now;

        for my $c (values %by_fd) {
            next unless defined $c->{close_at} && $c->{state} eq 'read';
            if ($now - $c->{sent_at} >= $c->{close_at}) {
                finish_conn($poll, \%by_fd, $c, \@st, 'closed by client');
            }
        }

        last unless %by_fd;

        if ($left <= 0) {
            for my $c (values %by_fd) {
                finish_conn($poll, \%by_fd, $c, \@st, 'timeout');
            }
            last;
        }

        my $wait = $left > 0.2 ? 0.2 : $left;
        my $n = $poll->poll($wait);
        next if !defined $n || $n <= 0;

        for my $s ($poll->handles) {
            my $ev = $poll->events($s);
            next unless $ev;

            my $c = $by_fd{fileno $s} or next;

            if ($c->{state} eq 'write') {
                my $err = unpack('i', getsockopt($s, SOL_SOCKET, SO_ERROR)
                                      // pack('i', 0));
                if ($err) {
                    local $! = $err;
                    finish_conn($poll, \%by_fd, $c, \@st, "connect: $!");
                    next;
                }

                my $w = syswrite($s, $c->{out}, length($c->{out}) - $c->{off},
                                 $c->{off});
                if (!defined $w) {
                    next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
                    finish_conn($poll, \%by_fd, $c, \@st, "write: $!");
                    next;
                }

                $c->{off} += $w;

                if ($c->{off} >= length $c->{out}) {
                    $c->{state} = 'read';
                    $c->{sent_at} = time;
                    $poll->mask($s => POLLIN);
                }
                next;
            }

            my $r = sysread($s, my $buf, 65536);
            if (!defined $r) {
                next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
                finish_conn($poll, \%by_fd, $c, \@st, "read: $!");
                next;
            }

            if ($r == 0) {
                finish_conn($poll, \%by_fd, $c, \@st, undef);
                next;
            }

            $c->{in} .= $buf;
        }
    }

    return @st;
}

sub finish_conn {
    my ($poll, $by_fd, $c, $st, $error) = @_;

    my $s = $c->{sock};
    $poll->remove($s);
    delete $by_fd->{fileno $s};
    close $s;

    my $res = parse_response($c->{in});
    $res->{time} = time - $c->{started};

    # a transport error wins over what the parser says
    $res->{error} = $error if defined $error;
    $st->[$c->{i}] = $res;
}

sub http_one {
    my (%q) = @_;
    my $timeout = delete $q{timeout} // 30;
    my ($res) = http_many([\%q], timeout => $timeout);
    return $res;
}

# a POST of $o{body} ("x") with the key $key to the nginx on $port: its
# response (http_one, $o{timeout} 30 s); with spec => 1 the request
# itself, for http_many
sub post {
    my ($port, $uri, $key, %o) = @_;
    my %q = (port => $port, method => 'POST', uri => $uri, key => $key,
             body => $o{body} // 'x');

    return \%q if $o{spec};
    return http_one(%q, timeout => $o{timeout} // 30);
}

sub backend_count {
    my ($key) = @_;

    my $res = http_one(port => $BACKEND_PORT, method => 'GET',
                       uri => '/__count?key=' . pct_encode($key));

    die "backend /__count failed: " . ($res->{error} // $res->{status})
        . "\n" if $res->{error} || $res->{status} != 200;

    return $res->{body} + 0;
}

# a TCP relay from 127.0.0.1:$listen to 127.0.0.1:$target in a child
# process, so a test can cut a store off and bring it back; returns the
# pid (kill it to cut).  With $delay (seconds), every chunk waits that
# long: a slow store, one chunk at a time for all connections.
sub tcp_proxy {
    my ($listen, $target, $delay) = @_;

    require IO::Socket::INET;
    require IO::Select;

    my $srv = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                    LocalPort => $listen, Listen => 64,
                                    ReuseAddr => 1)
        or die "tcp_proxy: listen $listen: $!";

    my $pid = fork;
    die "fork: $!" unless defined $pid;

    if ($pid) {
        close $srv;
        return $pid;
    }

    my $sel = IO::Select->new($srv);
    my %peer;

    while (1) {
        for my $fh ($sel->can_read(1)) {
            if ($fh == $srv) {
                my $c = $srv->accept or next;
                my $u = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                              PeerPort => $target)
                    or do { close $c; next };
                $peer{$c} = $u;
                $peer{$u} = $c;
                $sel->add($c, $u);
                next;
            }

            # its pair may have been closed earlier in this same round
            next unless $peer{$fh};

            my $n = sysread($fh, my $buf, 65536);
            my $other = $peer{$fh};

            if (!$n) {
                $sel->remove($fh, $other);
                delete @peer{$fh, $other};
                close $fh;
                close $other;
                next;
            }

            select(undef, undef, undef, $delay) if $delay;
            syswrite($other, $buf);
        }
    }
}

# Checks one burst of identical requests for one key.  Returns a hash:
# executions (backend), original (the executed response), n409, nreplay,
# problems => [text, ...] (empty when everything holds).
sub summarize_burst {
    my ($key, $res, %o) = @_;

    my %s = (key => $key, n409 => 0, nreplay => 0, noriginal => 0,
             problems => []);
    my $p = $s{problems};
    my @replays;

    for my $r (@$res) {
        if ($r->{error}) {
            push @$p, "$key: transport error: $r->{error}";
            next;
        }

        my $replayed = (hdr($r, 'Idempotent-Replayed') // '') eq 'true';

        if ($r->{status} == 409) {
            $s{n409}++;
            push @$p, "$key: 409 without the problem document"
                unless ($r->{body} // '') =~ /request-in-progress/
                       && (hdr($r, 'Content-Type') // '')
                          eq 'application/problem+json';

        } elsif ($r->{status} == ($o{status} // 201) && $replayed) {
            $s{nreplay}++;
            push @replays, $r;

        } elsif ($r->{status} == ($o{status} // 201) && !$replayed) {
            $s{noriginal}++;
            $s{original} = $r;

        } else {
            push @$p, "$key: unexpected status $r->{status}"
                      . " (X-Idem " . (hdr($r, 'X-Idem') // '-') . ")";
        }
    }

    my $want = $o{originals} // 1;
    push @$p, "$key: $s{noriginal} executed response(s), expected $want"
        if $s{noriginal} != $want;

    if (my $orig = $s{original} // $o{original}) {
        for my $r (@replays) {
            if ($r->{body} ne $orig->{body}) {
                push @$p, "$key: replayed body differs from the original";
                last;
            }
            for my $h (qw(Location X-Order-Id X-Execution Content-Type)) {
                my ($a, $b) = (hdr($r, $h) // '', hdr($orig, $h) // '');
                if ($a ne $b) {
                    push @$p, "$key: replayed $h '$a' differs from '$b'";
                    last;
                }
            }
        }
    }

    return \%s;
}

# ----------------------------------------------------------------- procs

sub proc_alive {
    my ($pid) = @_;

    return 0 unless $pid && kill 0, $pid;
    open my $fh, '<', "/proc/$pid/stat" or return 0;
    my $stat = <$fh>;
    close $fh;
    return 0 unless defined $stat;
    $stat =~ s/^.*\)\s+//;
    return substr($stat, 0, 1) ne 'Z';
}

sub children_of {
    my ($ppid) = @_;
    my @kids;

    opendir my $d, '/proc' or return;
    for my $p (grep { /^\d+$/ } readdir $d) {
        open my $fh, '<', "/proc/$p/stat" or next;
        my $stat = <$fh>;
        close $fh;
        next unless defined $stat;
        $stat =~ s/^.*\)\s+//;
        my ($state, $pp) = split ' ', $stat;
        push @kids, $p + 0 if $pp == $ppid && $state ne 'Z';
    }
    closedir $d;

    return sort { $a <=> $b } @kids;
}

# pids (among @pids) that hold a TCP connection to 127.0.0.1:$port
sub pids_connected_to {
    my ($port, @pids) = @_;

    my %inode;
    my $hexport = sprintf('%04X', $port);

    open my $fh, '<', '/proc/net/tcp' or return;
    while (<$fh>) {
        my @f = split ' ';
        next unless @f > 9 && $f[2] =~ /:$hexport$/ && $f[3] eq '01';
        $inode{$f[9]} = 1;
    }
    close $fh;

    my %n;
    for my $pid (@pids) {
        opendir my $d, "/proc/$pid/fd" or next;
        for my $fd (readdir $d) {
            my $l = readlink "/proc/$pid/fd/$fd" // next;
            $n{$pid}++ if $l =~ /^socket:\[(\d+)\]$/ && $inode{$1};
        }
        closedir $d;
    }

    return \%n;
}

# pids that have $file open
sub pids_with_file {
    my ($file) = @_;
    my @pids;

    opendir my $d, '/proc' or return;
    for my $pid (grep { /^\d+$/ } readdir $d) {
        next if $pid == $$;
        opendir my $f, "/proc/$pid/fd" or next;
        for my $fd (readdir $f) {
            my $l = readlink "/proc/$pid/fd/$fd" // next;
            if ($l eq $file) {
                push @pids, $pid + 0;
                last;
            }
        }
        closedir $f;
    }
    closedir $d;

    return @pids;
}

sub read_file {
    my ($f) = @_;
    open my $fh, '<', $f or return '';
    local $/;
    my $s = <$fh>;
    close $fh;
    return $s // '';
}

sub write_file {
    my ($f, $s) = @_;
    make_path(dirname($f));     # a fresh build/ has only $DIR itself
    open my $fh, '>', $f or die "cannot write $f: $!";
    print {$fh} $s;
    close $fh or die "cannot write $f: $!";
}

# ------------------------------------------------------------- load gen

# A child process that keeps sending waves of duplicate requests with
# fresh keys until stopped: each wave has $o{keys} keys x $o{dups}
# identical requests, spread over @{$o{ports}}.  Every response is
# appended to a file; load_stop() returns them.
my %LOADGENS;

END {
    # a test that dies must not leave a load generator running
    for my $lg (values %LOADGENS) {
        next unless $lg->{owner} == $$;
        write_file($lg->{stop}, '') if -d dirname($lg->{stop});
        kill 'TERM', $lg->{pid};
        waitpid($lg->{pid}, 0);
    }
}

sub load_start {
    my (%o) = @_;

    my $file = "$DIR/load-$$-" . int(time * 1000) . ".log";
    my $stop = "$file.stop";
    unlink $file, $stop;

    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        my $wave = 0;
        my $parent = getppid();
        my $until = time + ($o{max_seconds} || 600);
        open my $out, '>>', $file or POSIX::_exit(1);
        $out->autoflush(1);
        $SIG{TERM} = sub { POSIX::_exit(0) };

        # stop when told, after the waves asked for, when the test process
        # is gone, or at the latest after max_seconds
        until (-e $stop || ($o{waves} && $wave >= $o{waves})
               || getppid() != $parent || time > $until)
        {
            $wave++;
            my @reqs;
            for my $k (1 .. $o{keys} || 3) {
                my $key = "$o{prefix}-w$wave-k$k";
                for my $d (1 .. $o{dups} || 3) {
                    my $port = $o{ports}[($k + $d) % @{ $o{ports} }];
                    push @reqs, { port => $port, method => 'POST',
                                  uri => $o{uri}, key => $key,
                                  body => "{\"wave\":$wave,\"k\":$k}" };
                }
            }

            my @res = http_many(\@reqs, timeout => $o{timeout} || 60);

            for my $i (0 .. $#reqs) {
                my $r = $res[$i];
                my $line = join("\t", $reqs[$i]{key}, $reqs[$i]{port},
                    $r->{status} // 0,
                    (hdr($r, 'Idempotent-Replayed') // '') eq 'true' ? 1 : 0,
                    hdr($r, 'X-Idem') // '-',
                    hdr($r, 'X-Order-Id') // '-',
                    sha256_hex($r->{body} // ''),
                    $r->{error} // '-', $reqs[$i]{body});
                $line =~ s/\n/ /g;
                print {$out} "$line\n";
            }

            sleep($o{pause} // 0.02);
        }

        close $out;
        POSIX::_exit(0);
    }

    my $lg = { pid => $pid, file => $file, stop => $stop, owner => $$ };
    $LOADGENS{$pid} = $lg;
    return $lg;
}

sub load_stop_all {
    for my $lg (values %LOADGENS) {
        next unless $lg->{owner} == $$;
        eval { load_stop($lg) };
    }
}

# how many responses the load generator has recorded so far
sub load_count {
    my ($lg) = @_;
    my $n = () = read_file($lg->{file}) =~ /\n/g;
    return $n;
}

# waits until the load generator has recorded $n more responses
sub load_more {
    my ($lg, $n, $timeout) = @_;
    my $want = load_count($lg) + $n;
    wait_for("$n more responses from the load", $timeout // 60,
             sub { load_count($lg) >= $want }, 0.1);
}

sub load_stop {
    my ($lg) = @_;

    write_file($lg->{stop}, '');
    waitpid($lg->{pid}, 0);
    delete $LOADGENS{$lg->{pid}};

    my @rows;
    open my $fh, '<', $lg->{file} or die "load log: $!";
    while (<$fh>) {
        chomp;
        my %r;
        @r{qw(key port status replayed idem order body_sha error body)}
            = split /\t/;
        $r{error} = undef if $r{error} eq '-';
        push @rows, \%r;
    }
    close $fh;
    unlink $lg->{file}, $lg->{stop};

    return \@rows;
}

# Checks the rows of a load run: statuses, transport errors, at most one
# executed response per key, replays equal to it.
# %o: allowed => {status => 1, ...} (what a response may be besides
# 201/409), errors_ok => 1 (transport errors allowed).
# Returns (problems arrayref, stats hashref, {key => [rows]}).
sub check_load {
    my ($rows, %o) = @_;

    my (@p, %by_key, %st);
    my %allowed = (201 => 1, 409 => 1, %{ $o{allowed} || {} });

    for my $r (@$rows) {
        push @{ $by_key{$r->{key}} }, $r;
        $st{requests}++;
        $st{"status_$r->{status}"}++;

        if ($r->{error}) {
            $st{transport_errors}++;
            push @p, "$r->{key}: transport error: $r->{error}"
                unless $o{errors_ok};
            next;
        }

        push @p, "$r->{key}: unexpected status $r->{status}"
            unless $allowed{$r->{status}};
    }

    $st{keys} = scalar keys %by_key;

    for my $key (sort keys %by_key) {
        my @r = @{ $by_key{$key} };
        my @orig = grep { $_->{status} == 201 && !$_->{replayed} } @r;
        my @rep = grep { $_->{status} == 201 && $_->{replayed} } @r;

        push @p, "$key: " . scalar(@orig) . " executed responses"
            if @orig > 1;

        for my $x (@rep) {
            if (@orig && $x->{body_sha} ne $orig[0]{body_sha}) {
                push @p, "$key: a replay differs from the original";
            }
        }

        $st{executed_during_load} += @orig;
        $st{replayed_during_load} += @rep;
    }

    return (\@p, \%st, \%by_key);
}

# ----------------------------------------------------------------- nginx

package IdemStress::Nginx;

use File::Path qw(make_path);
use Time::HiRes qw(time sleep);

# name, port (first listen port, for the readiness check), http (the body
# of the http{} block), workers (2), log_level (info), events (extra)
sub start {
    my ($class, %o) = @_;

    my $self = bless { workers => 2, log_level => 'info', %o }, $class;
    my $prefix = $self->{prefix} = "$IdemStress::DIR/$o{name}";

    $self->{pidfile} = "$prefix/logs/nginx.pid";
    $self->{errlog} = "$prefix/logs/error.log";
    $self->{conf} = "$prefix/conf/nginx.conf";

    $self->kill_leftover;

    make_path("$prefix/logs", "$prefix/conf", "$prefix/tmp");
    unlink $self->{errlog}, "$prefix/logs/access.log";

    my $user = $> == 0 ? "user root;\n" : '';

    IdemStress::write_file($self->{conf}, <<"CONF");
load_module $IdemStress::MODULE;
${user}worker_processes $self->{workers};
worker_rlimit_nofile 20000;
pid $self->{pidfile};
error_log $self->{errlog} $self->{log_level};

events {
    worker_connections 8192;
    @{[ $o{events} // '' ]}
}

http {
    access_log $prefix/logs/access.log;
    client_body_temp_path $prefix/tmp/body;
    proxy_temp_path $prefix/tmp/proxy;
    fastcgi_temp_path $prefix/tmp/fastcgi;
    uwsgi_temp_path $prefix/tmp/uwsgi;
    scgi_temp_path $prefix/tmp/scgi;

$o{http}
}
CONF

    $self->run;
    return $self;
}

sub run {
    my ($self) = @_;

    my $rc = system($IdemStress::NGINX, '-p', "$self->{prefix}/", '-c',
                    $self->{conf}, '-e', $self->{errlog});
    if ($rc != 0) {
        die "nginx $self->{name} did not start:\n"
            . IdemStress::read_file($self->{errlog});
    }

    $self->wait_ready;
}

# starts the instance again with its configuration (after a crash)
sub restart {
    my ($self) = @_;
    $self->kill_leftover;
    $self->run;
}

sub kill_leftover {
    my ($self) = @_;

    # workers left behind by a master that was killed: they still hold
    # the listening socket; they are ours if they write our error.log
    my $orphans = sub {
        grep { IdemStress::read_file("/proc/$_/cmdline")
               =~ /^nginx: (worker|cache)/ }
        IdemStress::pids_with_file($self->{errlog});
    };
    if (my @o = $orphans->()) {
        kill 'QUIT', @o;
        eval { IdemStress::wait_for("orphaned workers @o to exit", 30,
                   sub { !$orphans->() }, 0.1) };
        kill 'KILL', $orphans->();
    }

    for my $f ($self->{pidfile}, "$self->{pidfile}.oldbin") {
        my $pid = IdemStress::read_file($f) =~ /(\d+)/ ? $1 : next;
        next unless IdemStress::proc_alive($pid);
        my $cmd = IdemStress::read_file("/proc/$pid/cmdline");
        next unless index($cmd, $self->{prefix}) >= 0;
        kill 'TERM', $pid;
        eval { IdemStress::wait_for("old nginx $pid to exit", 20,
                   sub { !IdemStress::proc_alive($pid) }) };
        kill 'KILL', $pid if IdemStress::proc_alive($pid);
    }
}

sub master {
    my ($self) = @_;
    my $s = IdemStress::read_file($self->{pidfile});
    return $s =~ /(\d+)/ ? $1 : undef;
}

sub workers {
    my ($self) = @_;
    my $m = $self->master or return;
    return grep { IdemStress::read_file("/proc/$_/cmdline") =~ /worker/ }
           IdemStress::children_of($m);
}

sub wait_ready {
    my ($self) = @_;

    IdemStress::wait_for("nginx $self->{name} to listen", 30, sub {
        my $m = $self->master;
        return 0 unless $m && IdemStress::proc_alive($m);
        return 0 unless $self->workers == $self->{workers};
        my $r = IdemStress::http_one(port => $self->{port}, method => 'GET',
                                     uri => '/__ready', timeout => 2);
        return !$r->{error};
    }, 0.1);
}

sub signal {
    my ($self, $sig) = @_;
    my $m = $self->master or die "nginx $self->{name}: no master pid\n";
    kill $sig, $m or die "nginx $self->{name}: kill $sig $m: $!\n";
    return $m;
}

sub error_log { IdemStress::read_file($_[0]{errlog}) }

# "exited on signal" lines, except for the given pids
sub crashes {
    my ($self, @expected) = @_;
    my %ok = map { $_ => 1 } @expected;
    my @lines = grep { /exited on signal/ } split /\n/, $self->error_log;
    return grep { !(/process (\d+) exited/ && $ok{$1}) } @lines;
}

# what went wrong in this instance: crashed workers and alert, crit or
# emerg lines of its error log (at most 10 lines); empty when healthy
sub health {
    my ($self) = @_;
    my @bad = ($self->crashes,
               grep { /\[(alert|crit|emerg)\]/ } split /\n/, $self->error_log);
    return @bad > 10 ? @bad[0 .. 9] : @bad;
}

sub stop {
    my ($self, $sig) = @_;

    my $m = $self->master;

    if ($m && IdemStress::proc_alive($m)) {
        kill $sig // 'TERM', $m;
        eval { IdemStress::wait_for("nginx $self->{name} to exit", 60,
                   sub { !IdemStress::proc_alive($m) }) };
        if (IdemStress::proc_alive($m)) {
            kill 'KILL', $_ for $m, IdemStress::children_of($m);
        }
    }

    # a master that died leaves its workers behind
    $self->kill_leftover;
}

# dies with a clear message when the master is gone (a crash)
sub check_master {
    my ($self, $pid) = @_;
    $pid //= $self->master;
    return 1 if $pid && IdemStress::proc_alive($pid);
    my @last = (split /\n/, $self->error_log)[-5 .. -1];
    die "nginx $self->{name}: the master process "
        . ($pid // '?') . " is gone:\n" . join("\n", grep { defined } @last)
        . "\n";
}

# ------------------------------------------------------------ Prometheus

# A private Prometheus server (Debian's package: /usr/bin/prometheus) in
# $o{dir}, on 127.0.0.1:$o{port}, scraping @{$o{targets}} (host:port, job
# "nginx") every second and loading @{$o{rule_files}}; undef when the
# package is missing.  It is stopped with ->stop, or when the test exits.

package IdemStress::Prometheus;

use JSON::PP ();
use POSIX ();

my @RUNNING;

END { $_->stop for @RUNNING }

sub start {
    my ($class, %o) = @_;

    return undef unless -x '/usr/bin/prometheus';

    my $self = bless { %o }, $class;
    my $dir = $o{dir};

    File::Path::remove_tree($dir);
    File::Path::make_path($dir);

    my $rules = join '', map { "  - $_\n" } @{$o{rule_files} // []};
    IdemStress::write_file("$dir/prometheus.yml", <<"YML");
global:
  scrape_interval: 1s
  evaluation_interval: 1s
@{[ $rules ? "rule_files:\n$rules" : '' ]}scrape_configs:
  - job_name: nginx
    metrics_path: /metrics
    static_configs:
      - targets: [@{[ join ', ', map { "'$_'" } @{$o{targets}} ]}]
YML

    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', "$dir/prometheus.log";
        open STDERR, '>&', \*STDOUT;
        exec('/usr/bin/prometheus', "--config.file=$dir/prometheus.yml",
             "--storage.tsdb.path=$dir/data",
             "--web.listen-address=127.0.0.1:$o{port}")
            or POSIX::_exit(127);
    }
    $self->{pid} = $pid;
    $self->{owner} = $$;
    push @RUNNING, $self;

    return $self;
}

# GET /api/v1/$path: the decoded answer, or undef (not up yet, an error)
sub api {
    my ($self, $path) = @_;

    my $r = IdemStress::http_one(port => $self->{port}, method => 'GET',
                                 uri => "/api/v1/$path", timeout => 5);
    return undef if $r->{error} || !defined $r->{body} || $r->{body} eq '';
    return eval { JSON::PP::decode_json($r->{body}) };
}

# an instant query of a PromQL expression: the decoded answer
sub query {
    my ($self, $expr) = @_;
    return $self->api('query?query=' . IdemStress::pct_encode($expr));
}

sub log_text { IdemStress::read_file("$_[0]{dir}/prometheus.log") }

sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    return unless $self->{owner} == $$;
    kill 'TERM', $pid;
    waitpid $pid, 0;
}

package IdemStress;

# --------------------------------------------------------- fault MariaDB

package IdemStress::DB;

use File::Basename qw(basename);
use Time::HiRes qw(time sleep);

# A second private MariaDB, only for fault injection, so that stopping,
# freezing or killing its connections never disturbs the suite's server.
# name (faultdb) and port (19306) make another one; args are more server
# options (a server with hostile defaults, TLS).  scripts/services.sh
# (`services.sh mysql`) starts, provisions and stops it; this package
# freezes, thaws and kills it through the pid that script reports.
sub new {
    my ($class, %o) = @_;

    my $dir = "$IdemStress::DIR/" . ($o{name} // 'faultdb');
    my $self = bless {
        port => IdemStress::port(306), dir => $dir, data => "$dir/data",
        args => [],
        sock => "$dir/mysql.sock", pidfile => "$dir/mysql.pid",
        log => "$dir/mysql.log", user => 'idem', password => 'idem-secret',
        db => 'idempotency', %o,
    }, $class;

    my ($path) = grep { -x } map { "$_/mariadb" }
                 split(/:/, $ENV{PATH} // ''), '/usr/sbin', '/usr/bin';
    die "mariadb not found\n" unless $path;
    $self->{bin}{mariadb} = $path;

    return $self;
}

sub pid {
    my ($self) = @_;
    my $p = IdemStress::read_file($self->{pidfile}) =~ /(\d+)/ ? $1 : undef;
    return $p && IdemStress::proc_alive($p) ? $p : undef;
}

# scripts/services.sh mysql COMMAND on this instance, more arguments
# before "--"; returns its output, dies when it fails
sub services {
    my ($self, $cmd, @more) = @_;

    my @cmd = ("$IdemStress::ROOT/scripts/services.sh", 'mysql', $cmd,
               $self->{dir}, '--name', basename($self->{dir}),
               '--port', $self->{port},
               '--data', $self->{data}, '--socket', $self->{sock},
               '--user', $self->{user}, '--password', $self->{password},
               '--database', $self->{db}, '--timeout', 90, @more,
               '--', '--innodb-buffer-pool-size=32M',
               '--innodb-log-file-size=16M', '--max-connections=300',
               @{ $self->{args} });

    open my $fh, '-|', @cmd or die "services.sh: $!\n";
    my $out = do { local $/; <$fh> } // '';
    close $fh or die "services.sh mysql $cmd failed ($?): $out\n";
    return $out;
}

sub ping { return eval { $_[0]->services('status'); 1 } }

# starts it (initializes its data directory the first time, keeps a
# running one), creates the account and the table; fresh => 1: drop and
# create the table (a restart keeps it)
sub start {
    my ($self, %o) = @_;

    my $out = $self->services('start', $o{fresh} ? '--fresh' : ());
    $out =~ /\(pid (\d+)/ or die "services.sh mysql start: no pid in: $out\n";

    return $self;
}

# runs SQL as root over the socket; returns the output (batch, no names)
sub root_sql {
    my ($self, $sql, $db) = @_;

    my $tmp = "$self->{dir}/sql.$$.in";
    IdemStress::write_file($tmp, $sql);

    my $cmd = "$self->{bin}{mariadb} --no-defaults --protocol=socket"
              . " --socket=$self->{sock} -uroot --batch --skip-column-names"
              . " " . ($db // '') . " < $tmp 2>&1";
    my $out = `$cmd`;
    my $rc = $?;
    unlink $tmp;
    die "root SQL failed ($rc): $out\nSQL: $sql\n" if $rc;
    return $out;
}

sub sql { $_[0]->root_sql($_[1], $_[0]{db}) }

# the module's connections: [[id, command, info], ...]
sub module_conns {
    my ($self) = @_;
    my $out = $self->root_sql("SELECT id, command, state, IFNULL(info, '')"
        . " FROM information_schema.processlist WHERE user = '$self->{user}'");
    return [ map { [ split /\t/ ] } grep { length } split /\n/, $out ];
}

# a clean shutdown (a frozen server is thawed first)
sub stop {
    my ($self) = @_;
    return unless $self->pid;
    eval { $self->services('stop'); 1 } or warn $@;
}

# SIGKILL: a crash, InnoDB recovers at the next start
sub crash {
    my ($self) = @_;
    my $pid = $self->pid or return;
    kill 'KILL', $pid;
    IdemStress::wait_for("fault mariadbd to die", 30,
                         sub { !IdemStress::proc_alive($pid) }, 0.05);
}

sub freeze { my $p = $_[0]->pid or die "no mariadbd\n"; kill 'STOP', $p }
sub thaw { my $p = $_[0]->pid or die "no mariadbd\n"; kill 'CONT', $p }

# A root session that holds LOCK TABLES ... WRITE on the table until
# unlocked: every statement of the module queues behind it.
sub lock_table {
    my ($self) = @_;

    my $out = "$self->{dir}/lock.$$.out";
    unlink $out;

    open my $fh, '|-', "$self->{bin}{mariadb} --no-defaults --protocol=socket"
        . " --socket=$self->{sock} -uroot --batch --skip-column-names"
        . " --unbuffered $self->{db} > $out 2>&1"
        or die "mariadb: $!";
    $fh->autoflush(1);
    print {$fh} "LOCK TABLES idempotency_keys WRITE;\nSELECT 'locked';\n";

    IdemStress::wait_for("the table lock", 30,
        sub { IdemStress::read_file($out) =~ /locked/ });

    $self->{lock} = [$fh, $out];
}

sub unlock_table {
    my ($self) = @_;
    my ($fh, $out) = @{ delete $self->{lock} || return };
    print {$fh} "UNLOCK TABLES;\n";
    close $fh;
    unlink $out;
}

1;

# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package TierTest;

# Helpers for the replay tier tests (t/200-tiers-shm.t, t/210-tiers-redis.t):
# a raw HTTP client that keeps the response byte for byte, a minimal Redis
# client (RESP, binary safe), private redis-server instances a test can
# stop, hang (SIGSTOP) and restart (scripts/services.sh starts and stops
# them), and the configuration of the stores.

use strict;
use warnings;

use Exporter ();
our @ISA = ('Exporter');

use Digest::SHA ();
use JSON::PP ();
use File::Temp ();
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes ();

use IdemTest ();

our @EXPORT = qw(http_req strip_volatile redis_cmd redis_key free_port
                 start_redis stop_redis redis_signal tier_stores
                 wait_for_tier wait_redis wait_log reload_nginx
                 admin error_log);

# Test::Nginx evaluates "--- init" code in package Test::Nginx::Util:
# make the helpers callable there too, as IdemTest does.
sub import {
    my $class = shift;

    __PACKAGE__->export_to_level(1, $class, @EXPORT);

    no strict 'refs';
    for my $f (@EXPORT) {
        *{"Test::Nginx::Util::$f"} = \&{$f};
    }
}

# a request on its own connection; the whole response, as sent
sub http_req {
    my (%a) = @_;

    my $method = $a{method} // 'POST';
    my $uri = $a{uri} // '/orders';
    my $body = $a{body} // '';
    my $port = IdemTest::port();

    my $t0 = Time::HiRes::time();

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Timeout => 10)
        or die "http_req: connect 127.0.0.1:$port: $!\n";

    my $req = "$method $uri HTTP/1.1\r\nHost: localhost\r\n"
            . "Connection: close\r\n";
    $req .= "Idempotency-Key: $a{key}\r\n" if defined $a{key};
    for my $h (@{$a{headers} // []}) {
        $req .= "$h\r\n";
    }
    $req .= "Content-Length: " . length($body) . "\r\n\r\n$body";

    print $s $req;

    my $raw = '';
    my $sel = IO::Select->new($s);
    my $deadline = $t0 + ($a{timeout} // 30);

    while (1) {
        my $left = $deadline - Time::HiRes::time();
        last if $left <= 0;
        last unless $sel->can_read($left);
        my $n = sysread($s, my $buf, 65536);
        last unless $n;
        $raw .= $buf;
    }

    close $s;

    my ($head, $content) = split /\r\n\r\n/, $raw, 2;
    $head //= '';
    my ($status) = $head =~ m{^HTTP/1\.\d (\d+)};
    my %h;
    for my $line (split /\r\n/, $head) {
        push @{$h{lc $1}}, $2 if $line =~ /^([^:]+):\s*(.*)$/;
    }

    return {
        status  => $status // 0,
        raw     => $raw,
        body    => $content // '',
        headers => \%h,
        tier    => ($h{'x-tier'} // [''])->[0],
        idem    => ($h{'x-idem'} // [''])->[0],
        elapsed => Time::HiRes::time() - $t0,
    };
}

# a response without what differs between any two responses (Date) and
# without the test's own tier marker
sub strip_volatile {
    my ($raw) = @_;

    $raw =~ s/^Date: [^\r\n]*\r\n//mg;
    $raw =~ s/^X-Tier: [^\r\n]*\r\n//mg;

    return $raw;
}

# one Redis command; returns the reply (+/: as a string, $ as the bytes or
# undef, * as an array ref, - as "ERR: ...")
sub redis_cmd {
    my ($port, @args) = @_;

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Timeout => 5)
        or die "redis_cmd: connect 127.0.0.1:$port: $!\n";

    my @replies;
    my @cmds = ref $args[0] ? @args : (\@args);

    for my $cmd (@cmds) {
        my $out = '*' . scalar(@$cmd) . "\r\n";
        $out .= '$' . length($_) . "\r\n$_\r\n" for @$cmd;
        print $s $out;
        push @replies, _redis_reply($s);
    }

    close $s;

    return wantarray ? @replies : $replies[-1];
}

sub _redis_line {
    my ($s) = @_;
    my $line = '';
    while (1) {
        my $n = sysread($s, my $c, 1);
        die "redis: connection closed\n" unless $n;
        $line .= $c;
        last if $line =~ /\r\n$/;
    }
    $line =~ s/\r\n$//;
    return $line;
}

sub _redis_reply {
    my ($s) = @_;
    my $line = _redis_line($s);
    my ($t, $v) = (substr($line, 0, 1), substr($line, 1));

    return $v if $t eq '+' || $t eq ':';
    return "ERR: $v" if $t eq '-';

    if ($t eq '$') {
        return undef if $v < 0;
        my $data = '';
        while (length($data) < $v + 2) {
            my $n = sysread($s, my $buf, $v + 2 - length $data);
            die "redis: connection closed\n" unless $n;
            $data .= $buf;
        }
        return substr($data, 0, $v);
    }

    if ($t eq '*') {
        return undef if $v < 0;
        return [map { _redis_reply($s) } 1 .. $v];
    }

    die "redis: unexpected reply \"$line\"\n";
}

# the secret tier_stores gives every store with Redis
our $SECRET = 'tier-test-secret-0123456789';

# an entry as the module writes it to Redis: followed by its HMAC-SHA256
# over the key hash and the entry (ngx_http_idempotency_entry.h)
sub signed {
    my ($scope, $key, $entry, $secret) = @_;
    return $entry . Digest::SHA::hmac_sha256(
        pack('H64', IdemStress::key_hash_hex($key, $scope)) . $entry,
        $secret // $SECRET);
}

# the key the module uses for a (scope, key) of a store
sub redis_key {
    my ($store, $scope, $key) = @_;
    return "idempotency:$store:" . IdemStress::key_hash_hex($key, $scope);
}

sub free_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 1, ReuseAddr => 1)
        or die "free_port: $!\n";
    my $port = $s->sockport;
    close $s;
    return $port;
}

my %redis;     # port => { pid, dir }
my $owner = $$; # forked children must not stop the servers on exit

# scripts/services.sh redis COMMAND for the server on $port; its output
sub redis_services {
    my ($cmd, $port, @opts) = @_;

    my @cmd = ("$IdemStress::ROOT/scripts/services.sh", 'redis', $cmd,
               $redis{$port}{dir}, '--port', $port, '--', @opts);

    open my $fh, '-|', @cmd or die "services.sh: $!\n";
    my $out = do { local $/; <$fh> } // '';
    close $fh or die "services.sh redis $cmd failed ($?): $out\n";
    return $out;
}

# a private redis-server on $port (extra options as a list), started by
# scripts/services.sh; returns its pid once it answers
sub start_redis {
    my ($port, @opts) = @_;

    $redis{$port}{dir} //= File::Temp::tempdir('idem-redis-XXXXXX',
                                               TMPDIR => 1, CLEANUP => 1);

    my $out = redis_services('start', $port, @opts);
    $out =~ /\(pid (\d+)/ or die "start_redis: no pid in: $out\n";
    $redis{$port}{pid} = $1;
    $redis{$port}{opts} = \@opts;

    return $1;
}

sub redis_signal {
    my ($port, $sig) = @_;
    my $r = $redis{$port} or die "redis_signal: no redis on $port\n";
    kill $sig, $r->{pid};
}

# SIGCONT (it may be frozen), then a shutdown
sub stop_redis {
    my ($port) = @_;
    my $r = $redis{$port} or return;

    redis_services('stop', $port, @{ $r->{opts} || [] });
    delete $r->{pid};
}

END {
    return unless $$ == $owner;

    for my $port (keys %redis) {
        eval { stop_redis($port); 1 } or warn $@ if $redis{$port}{pid};
    }
}

# "idempotency_store" lines for each (name => extra parameters) pair,
# then the backend upstream
sub tier_stores {
    my (@stores) = @_;
    my $out = '';

    while (my ($name, $extra) = splice @stores, 0, 2) {
        # under valgrind everything is slower than a Redis timeout expects
        if ($ENV{TEST_NGINX_USE_VALGRIND} && $extra =~ /\bredis=/
            && $extra !~ /\bredis_timeout=/)
        {
            $extra .= ' redis_timeout=5s';
        }

        $extra .= " secret=$SECRET"
            if $extra =~ /\bredis=/ && $extra !~ /\bsecret(_file)?=/;

        $out .= "idempotency_store $name"
              . " mysql=127.0.0.1:$ENV{TEST_NGINX_MYSQL_PORT}"
              . " user=$ENV{TEST_NGINX_MYSQL_USER}"
              . " password=$ENV{TEST_NGINX_MYSQL_PASSWORD}"
              . " database=$ENV{TEST_NGINX_MYSQL_DB} $extra;\n";
    }

    return $out . "upstream backend { server 127.0.0.1:"
                . "$ENV{TEST_NGINX_BACKEND_PORT}; }\n";
}

# Waits (10 s at most) until the Redis on $port holds the entry of $key
# (scope '') in $store: a completion or a MySQL replay writes it after the
# client has its answer, without waiting for Redis.  @pre: commands sent
# first on the same connection (['AUTH', ...], ['SELECT', ...]).
sub wait_redis {
    my ($port, $store, $key, @pre) = @_;
    my $k = redis_key($store, '', $key);

    IdemStress::wait_for("the Redis entry of $key", 10, sub {
        my @r = redis_cmd($port, @pre, ['EXISTS', $k]);
        return $r[-1] eq '1';
    });
}

# the whole error log of the current block's nginx
sub error_log {
    no warnings 'once';
    my $log = $Test::Nginx::Util::ErrLogFile
              // $Test::Nginx::Socket::ErrLogFile;

    local $/;
    open my $fh, '<', $log or die "$log: $!";
    return <$fh>;
}

# waits (10 s at most) until a line of the error log matches $re
sub wait_log {
    my ($re) = @_;

    IdemStress::wait_for("an error-log line like $re", 10,
                         sub { error_log() =~ $re });
}

# a call of the operator API (idempotency_admin at /admin), its JSON
# answer decoded into {json}
sub admin {
    my ($method, $args, %a) = @_;

    my $r = http_req(method => $method, uri => "/admin?$args", %a);
    $r->{json} = eval { JSON::PP::decode_json($r->{body}) };

    return $r;
}

# the pids of the processes whose parent is $ppid
sub _children {
    my ($ppid) = @_;
    my @pids;

    opendir my $d, '/proc' or die "/proc: $!";
    for my $pid (grep { /^\d+$/ } readdir $d) {
        open my $fh, '<', "/proc/$pid/stat" or next;
        my $stat = <$fh> // next;
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        push @pids, $pid if $stat =~ /\) \S+ (\d+) / && $1 == $ppid;
    }

    return @pids;
}

# HUP to the master of the test's nginx; waits (15 s at most) until none
# of the workers it had runs any more and new ones do
sub reload_nginx {
    my $pidfile = "$ENV{TEST_NGINX_SERVER_ROOT}/logs/nginx.pid";

    open my $fh, '<', $pidfile or die "$pidfile: $!";
    chomp(my $master = <$fh>);

    my %old = map { $_ => 1 } _children($master);
    die "reload_nginx: no workers under $master\n" unless %old;

    kill 'HUP', $master or die "HUP $master: $!";

    IdemStress::wait_for('the new workers of the reload', 15, sub {
        my @now = _children($master);
        return @now && !grep { $old{$_} } @now;
    });
}

# repeats a request until its X-Tier says $tier (or $secs pass); returns
# the last response
sub wait_for_tier {
    my ($tier, $secs, %req) = @_;
    my $end = Time::HiRes::time() + $secs;
    my $res;

    while (1) {
        $res = http_req(%req);
        return $res if $res->{tier} eq $tier;
        return $res if Time::HiRes::time() > $end;
        Time::HiRes::sleep(0.1);
    }
}

1;

# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package IdemTest;

# Shared set-up for the module's Test::Nginx suite: the store and backend
# configuration every block gets, the protected location most blocks test
# (orders_location), and helpers that read or seed the real
# MariaDB table the way the module does (same hash framing as
# ngx_http_idempotency_key.c).

use strict;
use warnings;

use Digest::SHA qw(sha256_hex);
use IO::Socket::INET ();
use Exporter ();
our @ISA = ('Exporter');
use Test::Nginx::Socket ();
use File::Basename qw(dirname);
use lib dirname(__FILE__), dirname(__FILE__) . '/stress';
use IdemStress ();
use Reaper ();

our @EXPORT = qw(key_hash_hex marker_hex fingerprint sql sql_at sql_root bg_request
                 store_config orders_location via_location block_defaults
                 port curl_post record tcp_proxy shard_of wait_state
                 post_key idem_of);

for my $v (qw(MYSQL_PORT MYSQL_USER MYSQL_PASSWORD MYSQL_DB BACKEND_PORT)) {
    die "TEST_NGINX_$v is not set: run the suite with 'make test'\n"
        unless defined $ENV{"TEST_NGINX_$v"};
}

# the store "main" on the suite's MariaDB, with more parameters (sorted by
# name; mysql => [ADDRESS, ...] for other servers), and the backend
sub store_config {
    my (%p) = @_;
    my $mysql = delete $p{mysql} // ['127.0.0.1:$TEST_NGINX_MYSQL_PORT'];
    my $extra = join ' ', map { "$_=$p{$_}" } sort keys %p;

    return "idempotency_store main "
         . join('', map { "mysql=$_ " } @$mysql)
         . "user=\$TEST_NGINX_MYSQL_USER"
         . " password=\$TEST_NGINX_MYSQL_PASSWORD"
         . " database=\$TEST_NGINX_MYSQL_DB $extra;\n"
         . "upstream backend { server 127.0.0.1:\$TEST_NGINX_BACKEND_PORT; }\n";
}

# The protected location most blocks test, for a "--- config eval":
#
#   IdemTest::orders_location()
#
# is location /orders { idempotency main; proxy_pass http://backend; }.
# Its options, in the location in this order:
#
#   via => 'plain ...'      for each name, a first line
#                           if ($http_x_via = plain) { rewrite ^ /plain$uri last; }
#   idempotency => NAME     the store [main]
#   idempotency_X => VALUE  "idempotency_X VALUE;", in the order given
#   proxy_pass => URL       [http://backend]
#   DIRECTIVE => VALUE      any other directive, "DIRECTIVE VALUE;", in the
#                           order given (proxy_buffering => 'off')
#   add_header => 'X-Idem X-Tier X-Key'
#                           "add_header NAME $idempotency_status always;"
#                           ($idempotency_tier, $idempotency_key)
#
# and count => 1 adds location = /count (the backend's count of the
# executions of ?key=).  More locations: IdemTest::orders_location(...) . q{...}
sub orders_location {
    return _location('/orders', 'http://backend', [], @_);
}

# The location that "via => NAME" rewrites a request into:
#
#   IdemTest::via_location('plain')
#
# is location /plain/ { internal; idempotency plain; proxy_pass
# http://backend/; }, with the options of orders_location (another store:
# idempotency => 'main').
sub via_location {
    my ($name, @o) = @_;

    return _location("/$name/", 'http://backend/', ['internal;'],
                     idempotency => $name, @o);
}

# A protected location at $path that passes the request's URI as it is,
# with the options of orders_location:
#
#   IdemTest::location('/v1/', add_header => 'X-Idem')
sub location {
    my ($path, @o) = @_;

    return _location($path, 'http://backend', [], @o);
}

# A server of a block's own beside Test::Nginx's, for its http_config:
# listen 127.0.0.1:$listen ("PORT" and any listen parameters) around
# $body, its directives and locations
sub server {
    my ($listen, $body) = @_;

    return "server {\n    listen 127.0.0.1:$listen;\n$body}\n";
}

# the n-th of the ports beside Test::Nginx's that the suite's files take
# for their other servers and relays (IdemStress::port)
sub extra_port { IdemStress::port(@_) }

my %SHOWN = ('X-Idem' => 'status', 'X-Tier' => 'tier', 'X-Key' => 'key');

# location $path { @$first_lines ... proxy_pass $pass; ... }
sub _location {
    my ($path, $pass, $first, @o) = @_;
    my (@via, @idem, @other, @headers, $count);
    my $store = 'main';

    while (my ($k, $v) = splice @o, 0, 2) {
        if ($k eq 'via') { push @via, split ' ', $v }
        elsif ($k eq 'count') { $count = $v }
        elsif ($k eq 'idempotency') { $store = $v }
        elsif ($k eq 'proxy_pass') { $pass = $v }
        elsif ($k eq 'add_header') { push @headers, split ' ', $v }
        elsif ($k =~ /^idempotency_/) { push @idem, "$k $v;" }
        else { push @other, "$k $v;" }
    }

    my @lines = ((map { "if (\$http_x_via = $_) { rewrite ^ /$_\$uri last; }" }
                  @via),
                 @$first, "idempotency $store;", @idem, "proxy_pass $pass;",
                 @other,
                 map { "add_header $_ \$idempotency_"
                       . ($SHOWN{$_} // die "orders_location: no header $_\n")
                       . " always;" } @headers);

    return "    location $path {\n" . join('', map { "        $_\n" } @lines)
         . "    }\n"
         . ($count ? "    location = /count { proxy_pass http://backend/__count; }\n"
                   : '');
}

# every block gets the store and the backend unless it brings its own; an
# [alert] or [crit] line (a crashed worker is an [alert] of the master)
# fails every block unless the block expects one
Test::Nginx::Socket::add_block_preprocessor(sub {
    my $block = shift;

    if (!defined $block->http_config) {
        $block->set_value('http_config', store_config());
    }

    my $expected = $block->error_log // '';
    my $never = $block->no_error_log // '';

    return if ref $expected || ref $never || defined scalar($block->must_die);

    for my $level ('[alert]', '[crit]') {
        next if index($expected, $level) >= 0 || index($never, $level) >= 0;
        $never .= ($never eq '' || $never =~ /\n\z/ ? '' : "\n") . "$level\n";
    }

    $block->set_value('no_error_log', $never);
});

# Under valgrind Test::Nginx starts nginx in the foreground and goes on
# before it listens (its own requests retry the connection): a block's
# init code waits for it first
if ($ENV{TEST_NGINX_USE_VALGRIND}) {
    Test::Nginx::Socket::add_block_preprocessor(sub {
        my $block = shift;
        my $init = $block->init;

        $block->set_value('init', "IdemTest::wait_listening();\n$init")
            if defined $init && $init =~ /\S/;
    });
}

# Test::Nginx runs the --- init of a block it skips all the same, without
# the block's nginx: a block that its --- skip_eval skips keeps none
Test::Nginx::Socket::add_block_preprocessor(sub {
    my $block = shift;
    my $skip = $block->skip_eval;

    return unless defined $skip && defined $block->init;

    my ($code) = $skip =~ /^\s*\d+\s*:\s*(.*?)\s*$/s or return;
    $block->set_value('init', '') if eval $code;
});

sub wait_listening {
    IdemStress::wait_for('nginx to listen', 60, sub {
        IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => port())
    }, 0.2);
}

# the sections a block of the file gets when it has none of its own,
# called before run_tests:
#
#   block_defaults(config => orders_location(add_header => 'X-Idem'));
sub block_defaults {
    my (%d) = @_;

    Test::Nginx::Socket::add_block_preprocessor(sub {
        my $block = shift;

        for my $section (sort keys %d) {
            $block->set_value($section, $d{$section})
                unless defined $block->$section;
        }
    });
}

sub port {
    return $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
}

# a POST of $o{body} ("x") with the key $key to Test::Nginx's server (or
# $o{port}): its response, as IdemStress's client reads it ({status,
# headers, body, error})
sub post_key {
    my ($uri, $key, %o) = @_;

    return IdemStress::post(delete $o{port} // port(), $uri, $key, %o);
}

# a pattern for response_body_like that matches a body of exactly $n
# bytes, whatever they are
sub size_re {
    my ($n) = @_;
    my $k = int($n / 1000);

    return '\A' . ($k ? "(?:[\\s\\S]{1000}){$k}" : '')
         . '[\s\S]{' . ($n - 1000 * $k) . '}\z';
}

# a response as "STATUS X-IDEM" (its X-Idem header, "-" if none)
sub idem_of {
    my ($r) = @_;

    return ($r->{error} ? "error $r->{error}" : $r->{status} // 0) . ' '
         . (IdemStress::hdr($r, 'X-Idem') // '-');
}

# curl -s OPTIONS -X POST -H 'Idempotency-Key: KEY' --data-binary x
# http://127.0.0.1:PORT$uri: its output; $? is its exit status
sub curl_post {
    my ($uri, $key, @opt) = @_;

    open my $fh, '-|', 'curl', '-s', @opt, '-X', 'POST',
         '-H', "Idempotency-Key: $key", '--data-binary', 'x',
         'http://127.0.0.1:' . port() . $uri
        or die "cannot run curl: $!";
    local $/;
    my $out = <$fh>;
    close $fh;

    return $out // '';
}

# the module's lookup hash of (key, scope): IdemStress::key_hash_hex
sub key_hash_hex { IdemStress::key_hash_hex(@_) }

# the name of the key's current use in a fence's marker table, as the
# module sends it in $idempotency_marker: SHA-256 of "idempotency-marker/1",
# the key hash and the row's life; the key hash for a row without a life
# (docs/design.md, "Fence or find"), computed here by MariaDB; $table
# [idempotency_keys]
sub marker_hex {
    my ($key, $scope, $table) = @_;
    my $m = sql("SELECT HEX(IF(life IS NULL, key_hash, UNHEX(SHA2(CONCAT("
                . "'idempotency-marker/1', key_hash, life), 256))))"
                . " FROM " . ($table // 'idempotency_keys')
                . " WHERE key_hash = X'" . key_hash_hex($key, $scope) . "'");
    chomp $m;
    return lc $m;
}

sub fingerprint {
    my ($method, $uri, $body) = @_;

    return sha256_hex("idempotency-fp/1$method\0$uri\0" . ($body // ''));
}

sub sql {
    my ($stmt) = @_;

    return sql_at($ENV{TEST_NGINX_MYSQL_PORT}, $stmt);
}

# the same as the module's user, on the server at 127.0.0.1:$port; as
# root over a server's unix socket, $input a file of statements
# (IdemStress::sql_at, IdemStress::sql_root)
sub sql_at { IdemStress::sql_at(@_) }

sub sql_root { IdemStress::sql_root(@_) }

# waits (10 s at most) until the row of $key has $state: an outcome is
# recorded when its request ends, after the client has had the response
sub wait_state {
    my ($key, $state) = @_;

    IdemStress::wait_for("state $state of key $key", 10, sub {
        sql("SELECT state FROM idempotency_keys WHERE key_hash = X'"
            . key_hash_hex($key) . "'") eq "$state\n" });
}

# the shard (0-based) a key lives on among $n mysql= servers: the first
# four bytes of its key hash, big-endian, modulo $n (docs/design.md)
sub shard_of {
    my ($scope, $key, $n) = @_;

    return hex(substr(key_hash_hex($key, $scope), 0, 8)) % $n;
}

# a stored response record, format 1 (ngx_http_idempotency_record.h),
# built independently of the module's encoder
sub record {
    my ($status, $headers, $body) = @_;

    my $r = 'IDR1' . pack('nn', $status, scalar @$headers);

    for my $h (@$headers) {
        $r .= pack('n', length $h->[0]) . $h->[0]
              . pack('N', length $h->[1]) . $h->[1];
    }

    return $r . pack('N', length $body) . $body;
}

# a TCP relay that a test can cut (IdemStress::tcp_proxy)
sub tcp_proxy { return IdemStress::tcp_proxy(@_) }

# Test::Nginx evaluates "--- init" code in package Test::Nginx::Util:
# make the helpers callable there too, without their package's name.
sub import {
    my $class = shift;

    __PACKAGE__->export_to_level(1, $class, @EXPORT);

    no strict 'refs';
    for my $f (@EXPORT) {
        *{"Test::Nginx::Util::$f"} = \&{$f};
    }

    # and Test::More's checks, which --- init code calls too
    require Test::More;
    for my $f (qw(is isnt ok like unlike is_deeply cmp_ok diag note pass
                  fail))
    {
        *{"Test::Nginx::Util::$f"} = \&{"Test::More::$f"}
            unless defined &{"Test::Nginx::Util::$f"};
    }
}

# fires a request in the background (so a block's own request can race
# it), then gives it a head start of $delay seconds, or, with 'claimed',
# until its claim is in the table (the key's row in state 0); returns the
# pid of its client (waitpid: the request has its whole answer)
sub bg_request {
    my ($method, $uri, $key, $body, $delay) = @_;

    my $pid = fork;
    die "fork: $!" unless defined $pid;

    if ($pid == 0) {
        my $port = port();
        exec 'curl', '-s', '-o', '/dev/null', '--max-time', '20',
             '-X', $method, '-H', "Idempotency-Key: $key",
             '--data-binary', $body // '', "http://127.0.0.1:$port$uri";
        exit 1;
    }

    if (defined $delay && $delay eq 'claimed') {
        wait_state($key, 0);

    } else {
        select(undef, undef, undef, $delay // 0.5);
    }

    return $pid;
}

1;

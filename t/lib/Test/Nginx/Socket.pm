# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package Test::Nginx::Socket;

# A small, self-contained test scaffold for nginx C modules whose test
# files use the data-driven format of OpenResty's Test::Nginx::Socket.
#
# It is written for this project from scratch and is only used when the
# real Test::Nginx is not installed (see the Makefile's "test" target,
# which then puts t/lib on PERL5LIB).  The aim is that one .t file passes
# under both: every section and exported function implemented here keeps
# the meaning it has in the real framework.  See t/lib/README.md for the
# list of what is supported and where this runner deliberately differs.

use strict;
use warnings;
use v5.10.1;

# Test::Base parses the __DATA__ blocks (sections, filters such as "eval",
# ONLY/SKIP/LAST) exactly as it does for the real framework.  Importing it
# also makes it the class of the default spec object that blocks() uses.
use Test::Base;

use Test::More ();
use Test::LongString ();
use Carp ();
use Config ();
use Cwd ();
use Errno qw(EAGAIN EWOULDBLOCK EINTR);
use Fcntl ();
use File::Path qw(make_path remove_tree);
use File::Spec ();
use HTTP::Response ();
use IO::Select ();
use IO::Socket::INET ();
use List::Util qw(shuffle max min);
use Digest::MD5 ();
use Digest::SHA ();
use POSIX qw(:sys_wait_h SIGQUIT SIGTERM SIGKILL);
use Scalar::Util qw(looks_like_number);
use Time::HiRes qw(sleep time);

our $VERSION = '0.01';

# ------------------------------------------------------------------------
# settings (environment and the functions that test files call)
# ------------------------------------------------------------------------

our $NginxBinary = $ENV{TEST_NGINX_BINARY}
    || find_in_path('nginx') || '/usr/sbin/nginx';

our $ServRoot = File::Spec->rel2abs($ENV{TEST_NGINX_SERVROOT} || 't/servroot');
$ServRoot =~ s{/+$}{};

our $LogDir     = "$ServRoot/logs";
our $ErrLogFile = "$LogDir/error.log";
our $AccLogFile = "$LogDir/access.log";
our $StderrFile = "$LogDir/stderr.log";
our $ValgrindLogFile = "$LogDir/valgrind.log";
our $HtmlDir    = "$ServRoot/html";
our $ConfDir    = "$ServRoot/conf";
our $ConfFile   = "$ConfDir/nginx.conf";
our $PidFile    = "$LogDir/nginx.pid";

our $ServerAddr = '127.0.0.1';
our $ServerName = 'localhost';
our $ServerPort = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
our $ServerPortForClient = $ENV{TEST_NGINX_CLIENT_PORT} || $ServerPort;

our $Timeout        = $ENV{TEST_NGINX_TIMEOUT} || 3;
our $TestNginxSleep = $ENV{TEST_NGINX_SLEEP} || 0.015;
our $UseValgrind    = $ENV{TEST_NGINX_USE_VALGRIND};
our $LoadModules    = $ENV{TEST_NGINX_LOAD_MODULES};
our $LogLevel       = $ENV{TEST_NGINX_LOG_LEVEL} || 'debug';
our $MasterProcessEnabled = $ENV{TEST_NGINX_MASTER_PROCESS} || 'off';
our $NoShuffle      = $ENV{TEST_NGINX_NO_SHUFFLE} || 0;
our $CheckAccumErrLog = $ENV{TEST_NGINX_CHECK_ACCUM_ERR_LOG};
our $Verbose        = $ENV{TEST_NGINX_VERBOSE};
our $WorkerUser     = $ENV{TEST_NGINX_WORKER_USER};

our $Workers           = 1;
our $WorkerConnections = 64;
our $RepeatEach        = 1;
our $NoRootLocation    = 0;
our $NoLongString;
our $ConfigPreamble    = '';
our $NoNginxManager    = 0;
our $NginxVersion;
our $NginxRawVersion;

our @EnvToNginx;
our @BlockPreprocessors;
our @CleanupHandlers;
our @ResponseBodyChecks;

# valgrind: a generous start-up allowance, the exit code that marks errors
our $ValgrindStartupTimeout = 30;
our $ValgrindErrorExitCode  = 66;
# nginx's own once-per-process allocations, which it never frees
our $CoreSuppressions = File::Spec->rel2abs(__FILE__) =~ s/\.pm$//r
    . '/nginx-core.supp';

# the environment that sections may reference
$ENV{TEST_NGINX_SERVER_PORT} //= $ServerPort;
$ENV{TEST_NGINX_PORT}        //= $ServerPort;
$ENV{TEST_NGINX_SERVER_ROOT}   = $ServRoot;

# A daemonized nginx is orphaned when it forks; make this process the one
# that adopts it (Linux PR_SET_CHILD_SUBREAPER) so that it can be reaped
# here instead of lingering as a zombie where init does not reap.
eval {
    local $SIG{__WARN__} = sub {};
    package Test::Nginx::Socket::Syscall;
    require 'sys/syscall.ph';
    syscall(&SYS_prctl, 36, 1, 0, 0, 0);
};

# run-time state
our $NginxPid;          # pid of the running nginx (master or single process)
our $ChildPid;          # our own child when nginx runs in the foreground
our $TcpServerPid;      # the --- tcp_listen mock server
our $ErrLogFilePos = 0; # where the next error.log read starts
our $PrevBlock;         # the block whose nginx is (or was last) running
our $PrevConfig;
our $InSubprocess;
our $RunTestsCalled;
our $TotalConnectFailures = 0;

sub repeat_each (@) {
    $RepeatEach = shift if @_;
    return $RepeatEach;
}

sub workers (@) {
    if (@_) { $Workers = shift; return }
    return $Workers;
}

sub worker_connections (@) {
    if (@_) { $WorkerConnections = shift; return }
    return $WorkerConnections;
}

sub master_on ()  { $MasterProcessEnabled = 'on' }
sub master_off () { $MasterProcessEnabled = 'off' }

sub master_process_enabled (@) {
    if (@_) { $MasterProcessEnabled = shift() ? 'on' : 'off'; return }
    return $MasterProcessEnabled;
}

sub log_level (@) {
    if (@_) { $LogLevel = shift; return }
    return $LogLevel;
}

sub no_shuffle ()       { $NoShuffle = 1 }
sub no_long_string ()   { $NoLongString = 1 }
sub no_root_location () { $NoRootLocation = 1 }
sub no_nginx_manager () { $NoNginxManager = 1 }
sub check_accum_error_log () { $CheckAccumErrLog = 1 }

sub use_hup () {
    warn "WARNING: use_hup() is not supported by this runner; "
        . "nginx is restarted for every block\n";
}

sub timeout (@) {
    if (@_) { $Timeout = shift; return }
    return $Timeout;
}

sub server_addr (@) {
    if (@_) { $ServerAddr = shift; return }
    return $ServerAddr;
}

sub server_name (@) {
    if (@_) { $ServerName = shift; return }
    return $ServerName;
}

sub server_port (@) {
    if (@_) { $ServerPort = shift; return }
    return $ServerPort;
}

sub server_port_for_client (@) {
    if (@_) { $ServerPortForClient = shift; return }
    return $ServerPortForClient;
}

sub server_root () { $ServRoot }
sub html_dir ()    { $HtmlDir }
sub sleep_time ()  { $TestNginxSleep }
sub verbose ()     { $Verbose }

sub config_preamble ($) { $ConfigPreamble = shift }

sub env_to_nginx (@) {
    Carp::croak("env_to_nginx: no arguments specified") if !@_;
    for my $v (@_) {
        if ($v !~ /^[A-Za-z_]/ || $v =~ /\n/) {
            Carp::croak("env_to_nginx: bad argument value: $v\n");
        }
        push @EnvToNginx, $v;
    }
}

sub add_block_preprocessor (&) { unshift @BlockPreprocessors, shift }
sub add_cleanup_handler ($)    { unshift @CleanupHandlers, shift }
sub add_response_body_check ($) { push @ResponseBodyChecks, shift }

sub is_str (@) {
    my ($got, $expected, $desc) = @_;
    if (ref $expected && ref $expected eq 'Regexp') {
        return Test::More::like($got, $expected, $desc);
    }
    if ($NoLongString) {
        return Test::More::is($got, $expected, $desc);
    }
    return Test::LongString::is_string($got, $expected, $desc);
}

sub bail_out (@) {
    cleanup();
    Test::More::BAIL_OUT(join '', @_);
}

# ------------------------------------------------------------------------
# exporting
# ------------------------------------------------------------------------

our @EXPORT = qw(
    run_tests run_test blocks plan
    repeat_each no_shuffle workers worker_connections
    master_on master_off master_process_enabled
    log_level no_long_string no_root_location no_nginx_manager use_hup
    env_to_nginx add_block_preprocessor add_cleanup_handler
    add_response_body_check bail_out is_str check_accum_error_log
    config_preamble timeout sleep_time verbose
    server_addr server_name server_port server_port_for_client
    server_root html_dir
);

our @EXPORT_VARS = qw(
    $ServerPort $ServerPortForClient $ServerAddr $ServerName
    $ServRoot $PidFile $ConfFile $NginxVersion $RepeatEach $NoLongString
);

sub import {
    my ($class, @args) = @_;
    my $caller = caller;

    no strict 'refs';

    # everything Test::Base gives a test file: the Test::More functions
    # (with Test::Base's diffing is()), blocks(), filters(), ...
    for my $name (@Test::Base::EXPORT) {
        next if $name =~ /^\W/ || $name =~ /^(?:WWW|XXX|YYY|ZZZ)$/;
        next if grep { $_ eq $name } @EXPORT;
        my $code = defined &{"Test::Base::$name"} ? \&{"Test::Base::$name"}
                 : defined &{"Test::More::$name"} ? \&{"Test::More::$name"}
                 : defined &{"Carp::$name"}       ? \&{"Carp::$name"}
                 : undef;
        next if !$code;
        *{"${caller}::$name"} = $code;
    }

    for my $name (@EXPORT) {
        my $code = defined &{"${class}::$name"} ? \&{"${class}::$name"}
                 : defined &{"Test::Base::$name"} ? \&{"Test::Base::$name"}
                 : \&{"Test::More::$name"};
        *{"${caller}::$name"} = $code;
    }

    for my $var (@EXPORT_VARS) {
        (my $n = $var) =~ s/^\$//;
        *{"${caller}::$n"} = \${"${class}::$n"};
    }

    # "use Test::Nginx::Socket 'no_plan';" / "... tests => 3;" /
    # "... skip_all => 'why';"
    if (@args) {
        Test::More::plan(@args);
    }
}

# ------------------------------------------------------------------------
# small helpers
# ------------------------------------------------------------------------

sub find_in_path {
    my $cmd = shift;
    if ($cmd =~ m{/}) {
        return (-f $cmd && -x _) ? $cmd : undef;
    }
    for my $dir (split /\Q$Config::Config{path_sep}\E/, $ENV{PATH} // '') {
        next if $dir eq '';
        my $abs = File::Spec->catfile($dir, $cmd);
        return $abs if -f $abs && -x _;
    }
    return undef;
}

sub parse_time {
    my $tm = shift;
    return undef if !defined $tm;
    $tm =~ s/^\s+|\s+$//g;
    if ($tm =~ s/([^_a-zA-Z])ms$/$1/) {
        $tm = $tm / 1000;
    } elsif ($tm =~ s/([^_a-zA-Z])s$/$1/) {
        # seconds
    }
    return $tm;
}

sub trim {
    my $s = shift;
    return undef if !defined $s;
    $s =~ s/^\s+|\s+$//g;
    $s =~ s/\n/ /gs;
    $s =~ s/\s{2,}/ /gs;
    return $s;
}

sub fmt_str {
    my $str = shift;
    return '' if !defined $str;
    chomp $str;
    $str =~ s/"/\\"/g;
    $str =~ s/\r/\\r/g;
    $str =~ s/\n/\\n/g;
    return $str;
}

sub slurp {
    my $file = shift;
    open my $in, '<', $file or return undef;
    binmode $in;
    local $/;
    my $data = <$in>;
    close $in;
    return $data;
}

# true while $pid exists and is not a zombie (a daemonized nginx is not
# our child, and whoever adopted it may never reap it)
sub is_running {
    my $pid = shift;
    return 0 if !$pid;
    if (!defined $ChildPid || $pid != $ChildPid) {
        # reap it if it is an exited child (adopted daemon)
        waitpid($pid, WNOHANG);
    }
    return 0 if !kill(0, $pid);
    if (open my $in, '<', "/proc/$pid/stat") {
        my $stat = <$in> // '';
        close $in;
        return 0 if $stat =~ /^\d+ \(.*\) [ZX]/s;
    }
    return 1;
}

sub get_pid_from_pidfile {
    my $data = slurp($PidFile);
    return undef if !defined $data;
    $data =~ s/\s+//g;
    return $data =~ /^\d+$/ ? $data : undef;
}

sub get_canon_version {
    sprintf "%d.%03d%03d", $_[0], $_[1], $_[2];
}

sub get_nginx_version {
    my $out = `$NginxBinary -V 2>&1`;
    if (!defined $out || $? != 0) {
        bail_out("Failed to get the version of the nginx binary "
                 . "\"$NginxBinary\": " . ($out // ''));
    }
    if ($out =~ m{(?:nginx|openresty)[^/]*/(\d+)\.(\d+)\.(\d+)}s) {
        $NginxRawVersion = "$1.$2.$3";
        return get_canon_version($1, $2, $3);
    }
    bail_out("Failed to parse the output of \"nginx -V\": $out\n");
}

# the listening state of a local TCP port, from /proc/net/tcp{,6}
sub port_is_listening {
    my $port = shift;
    my $hex = sprintf '%04X', $port;
    for my $f ('/proc/net/tcp', '/proc/net/tcp6') {
        open my $in, '<', $f or next;
        while (<$in>) {
            # sl local_address rem_address st ...
            if (/^\s*\d+:\s+[0-9A-F]+:$hex\s+[0-9A-F]+:[0-9A-F]+\s+0A\s/i) {
                close $in;
                return 1;
            }
        }
        close $in;
    }
    return 0;
}

sub expand_env_in_text {
    my ($text, $name, $rand_ports) = @_;
    return undef if !defined $text;

    $text =~ s{\$(TEST_NGINX_[_A-Z0-9]+)}{
        my $var = $1;
        my $val;
        if ($var =~ /^TEST_NGINX_RAND_PORT_[0-9]+$/) {
            $val = $rand_ports->{$var} //= gen_rand_port($rand_ports);
        } else {
            if (!defined $ENV{$var}) {
                bail_out("$name - No environment $var defined.\n");
            }
            $val = $ENV{$var};
        }
        $val;
    }ge;

    return $text;
}

sub gen_rand_port {
    my $used = shift;
    my %used = map { $_ => 1 } $ServerPort, values %$used;
    for (1 .. 1000) {
        my $port = int(rand 63550) + 1985;
        next if $used{$port};
        my $sock = IO::Socket::INET->new(
            LocalAddr => $ServerAddr,
            LocalPort => $port,
            Proto     => 'tcp',
        );
        if ($sock) {
            close $sock;
            return $port;
        }
    }
    bail_out("Cannot find an available listening port number");
}

# ------------------------------------------------------------------------
# the nginx server: server root, configuration, start and stop
# ------------------------------------------------------------------------

sub setup_server_root {
    if (-d $ServRoot) {
        # only what this runner creates; other files a test may have put
        # into the server root are left alone
        remove_tree($ConfDir, $HtmlDir, $LogDir,
                    glob("$ServRoot/*_temp"), glob("$ServRoot/*_cache"));
    } else {
        make_path($ServRoot)
            or bail_out("Failed to do mkdir $ServRoot: $!\n");
    }

    for my $dir ($LogDir, $HtmlDir, $ConfDir) {
        mkdir $dir or bail_out("Failed to do mkdir $dir: $!\n");
    }

    my $index_file = "$HtmlDir/index.html";
    open my $out, '>', $index_file
        or bail_out("Can't open $index_file for writing: $!\n");
    print $out '<html><head><title>It works!</title></head>'
        . '<body>It works!</body></html>';
    close $out;
}

sub write_user_files {
    my ($block, $rand_ports) = @_;
    my $name = $block->name;
    my $files = scalar($block->user_files);
    return if !$files;

    if (!ref $files) {
        my $raw = $files;
        $files = [];
        my ($fname, $body, $date);
        for my $line (split /^/, $raw) {
            if ($line =~ /^>>> (\S+)(?:\s+(.+))?/) {
                push @$files, [$fname, $body, $date] if defined $fname;
                ($fname, $date, $body) = ($1, $2, undef);
            } else {
                $body .= $line;
            }
        }
        push @$files, [$fname, $body, $date] if defined $fname;

    } elsif (ref $files ne 'ARRAY') {
        bail_out("$name - wrong value type for --- user_files: ", ref $files);
    }

    for my $file (@$files) {
        my ($fname, $body, $date) = @$file;
        $body //= '';
        my $path = $fname =~ m{^/} ? $fname : "$HtmlDir/$fname";
        if ($path =~ m{(.*)/} && !-d $1) {
            make_path($1) or bail_out("$name - Cannot create directory $1");
        }
        $body = expand_env_in_text($body, $name, $rand_ports);
        open my $out, '>', $path
            or bail_out("$name - Cannot open $path for writing: $!\n");
        binmode $out;
        print $out $body;
        close $out;
        if ($date) {
            system('touch', '-d', $date, $path) == 0
                or bail_out("$name - failed to set the time of $path");
        }
    }
}

sub write_config_file {
    my ($block, $config, $rand_ports) = @_;
    my $name = $block->name;

    my $http_config = expand_env_in_text(scalar($block->http_config), $name, $rand_ports) // '';
    my $main_config = expand_env_in_text(scalar($block->main_config), $name, $rand_ports) // '';
    my $post_main_config = expand_env_in_text(scalar($block->post_main_config), $name, $rand_ports) // '';
    my $server_name = scalar($block->server_name) // $ServerName;
    $config //= '';

    my ($daemon, $master, $workers) = ('on', $MasterProcessEnabled, $Workers);
    if ($UseValgrind) {
        # nginx runs in the foreground, as one process, under valgrind
        ($daemon, $master) = ('off', 'off');
    }

    my $modules = '';
    if ($LoadModules) {
        for my $so (grep { length } split /\s+/, $LoadModules) {
            my $path = $so;
            if ($path !~ m{^/}) {
                $path = File::Spec->rel2abs($path);
            }
            $modules .= "load_module $path;\n";
        }
    }

    my $env = '';
    for my $v (@EnvToNginx) {
        $env .= $v =~ /\s/ ? "env '$v';\n" : "env $v;\n";
    }

    # temporary files go under the server root (the packaged nginx has
    # absolute compiled-in paths) unless the test sets them itself
    my $temp_paths = '';
    for my $t (qw(client_body proxy fastcgi uwsgi scgi)) {
        my $directive = "${t}_temp_path";
        next if $http_config =~ /\b\Q$directive\E\b/;
        $temp_paths .= "    $directive $ServRoot/${t}_temp;\n";
    }

    (my $quoted_server_name = $server_name) =~ s/\\/\\\\/g;
    $quoted_server_name =~ s/'/\\'/g;

    my $root_location = $NoRootLocation ? '' : <<_EOC_;
        location / {
            root $HtmlDir;
            index index.html index.htm;
        }
_EOC_

    my $user = '';
    if (defined $WorkerUser) {
        $user = "user $WorkerUser;\n";
    } elsif ($> == 0) {
        $user = "user root;\n";
    }

    open my $out, '>', $ConfFile
        or bail_out("Can't open $ConfFile for writing: $!\n");
    print $out <<_EOC_;
${modules}worker_processes  $workers;
daemon $daemon;
master_process $master;
error_log $ErrLogFile $LogLevel;
pid       $PidFile;
env LD_PRELOAD;
env LD_LIBRARY_PATH;
$env
$main_config

http {
    access_log $AccLogFile;

    default_type text/plain;
    keepalive_timeout  68;

$temp_paths
$http_config

    server {
        listen          $ServerPort;
        server_name     '$quoted_server_name';

        client_max_body_size 30M;

        # Begin preamble config...
$ConfigPreamble
        # End preamble config...

        # Begin test case config...
$config
        # End test case config.

$root_location    }
}

$post_main_config

events {
    accept_mutex off;

    worker_connections  $WorkerConnections;
}

$user
_EOC_
    close $out;
}

# The command line.  Messages logged before the configuration's own
# error_log takes effect (configuration errors, mostly) go to the binary's
# compiled-in default log, which is "stderr" in Debian's package but
# logs/error.log under the prefix in a default build.  "-e" (nginx 1.19.5+)
# makes every build behave like the default one.
sub nginx_command {
    my @cmd = ($NginxBinary, '-p', "$ServRoot/", '-c', $ConfFile);
    if (defined $NginxVersion && $NginxVersion >= 1.019005) {
        push @cmd, '-e', $ErrLogFile;
    }
    return @cmd;
}

# start nginx; returns undef on success, or an error message
sub start_nginx {
    my ($block) = @_;
    my $name = $block->name;

    if (!find_in_path($NginxBinary)) {
        bail_out("$name - Cannot find the nginx executable \"$NginxBinary\"");
    }

    my @nginx = nginx_command();

    if ($UseValgrind) {
        my @vg = ('valgrind', '-q', '--tool=memcheck', '--leak-check=full',
                  '--show-leak-kinds=definite',
                  '--errors-for-leak-kinds=definite',
                  '--num-callers=30', '--gen-suppressions=all',
                  "--error-exitcode=$ValgrindErrorExitCode",
                  "--log-file=$ValgrindLogFile");
        push @vg, "--suppressions=$CoreSuppressions" if -f $CoreSuppressions;
        my $supp = File::Spec->rel2abs('t/valgrind.suppress');
        push @vg, "--suppressions=$supp" if -f $supp;

        if ($UseValgrind !~ /^\d+$/) {
            # TEST_NGINX_USE_VALGRIND may carry extra valgrind options
            push @vg, split ' ', $UseValgrind;
        }

        my $pid = spawn([@vg, @nginx], 1);
        $ChildPid = $pid;
        $NginxPid = $pid;   # valgrind runs nginx in the same process

        my $deadline = time + $ValgrindStartupTimeout;
        while (1) {
            my $r = waitpid($pid, WNOHANG);
            if ($r == $pid) {
                my $st = $?;
                undef $ChildPid;
                undef $NginxPid;
                return "nginx (under valgrind) exited with status "
                    . ($st >> 8) . " during start-up"
                    . stderr_excerpt();
            }
            last if port_is_listening($ServerPort);
            if (time > $deadline) {
                return "nginx (under valgrind) did not listen on port "
                    . "$ServerPort within $ValgrindStartupTimeout s"
                    . stderr_excerpt();
            }
            sleep 0.05;
        }
        return undef;
    }

    my $waited = 0;
    while (1) {
        my ($status, $err) = run_nginx_cmd(\@nginx);
        return "failed to execute $NginxBinary: $err" if defined $err;

        if ($status == 0) {
            last;
        }

        my $stderr = slurp($StderrFile) // '';
        my $log = slurp($ErrLogFile) // '';
        if (($stderr . $log) =~ /Address already in use/ && $waited < 5) {
            # a previous server may still be closing down; the failed
            # attempt's messages must not end up in this block's log checks
            unlink $ErrLogFile, $StderrFile;
            sleep 0.2;
            $waited += 0.2;
            next;
        }

        return "nginx exited with status " . ($status >> 8)
            . " during start-up" . stderr_excerpt();
    }

    # the daemon writes its pid file right after it forks
    my $deadline = time + max($Timeout, 5);
    while (1) {
        my $pid = get_pid_from_pidfile();
        if ($pid && is_running($pid)) {
            $NginxPid = $pid;
            last;
        }
        if (time > $deadline) {
            return "nginx did not write its pid file $PidFile"
                . stderr_excerpt();
        }
        sleep 0.01;
    }

    # its listening sockets were opened before it forked, but be sure
    while (!port_is_listening($ServerPort)) {
        if (time > $deadline || !is_running($NginxPid)) {
            return "nginx does not listen on port $ServerPort"
                . stderr_excerpt();
        }
        sleep 0.01;
    }

    return undef;
}

sub stderr_excerpt {
    my $s = slurp($StderrFile) // '';
    my $log = '';
    if (-f $ErrLogFile) {
        my @lines = grep { /\[(?:emerg|alert|crit)\]/ } split /^/, slurp($ErrLogFile) // '';
        $log = join '', @lines[0 .. min($#lines, 9)] if @lines;
    }
    my $all = $s . $log;
    return '' if $all eq '';
    $all =~ s/\s+$//;
    return ":\n$all";
}

# fork and exec a command with stdout to /dev/null and stderr to
# logs/stderr.log; returns the child's pid
sub spawn {
    my ($cmd, $own_group) = @_;
    my $pid = fork();
    bail_out("fork() failed: $!") if !defined $pid;
    if ($pid == 0) {
        $InSubprocess = 1;
        setpgrp(0, 0) if $own_group;
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', '/dev/null';
        open STDERR, '>', $StderrFile or open STDERR, '>', '/dev/null';
        { no warnings 'exec'; exec { $cmd->[0] } @$cmd; }
        POSIX::_exit(127);
    }
    return $pid;
}

# run nginx in the usual (daemon) way and wait for the command to return
sub run_nginx_cmd {
    my ($cmd) = @_;
    my $pid = spawn($cmd, 0);
    my $deadline = time + max($Timeout, 10);
    while (1) {
        my $r = waitpid($pid, WNOHANG);
        if ($r == $pid) {
            my $status = $?;
            return (undef, "exec failed") if ($status >> 8) == 127
                && !-s $StderrFile && !-f $PidFile;
            return ($status, undef);
        }
        if (time > $deadline) {
            # nginx does not go into the background (daemon off in the
            # test's main_config?); leave it running as our child
            $ChildPid = $pid;
            return (0, undef);
        }
        sleep 0.01;
    }
}

sub wait_for_exit {
    my ($pid, $secs) = @_;
    my $deadline = time + $secs;
    while (time < $deadline) {
        if (defined $ChildPid && $ChildPid == $pid) {
            my $r = waitpid($pid, WNOHANG);
            return 1 if $r == $pid || $r == -1;
        } else {
            return 1 if !is_running($pid);
        }
        sleep 0.02;
    }
    return 0;
}

# stop nginx: QUIT (graceful), then TERM, then KILL the process group
sub stop_nginx {
    my ($name) = @_;
    $name //= 'cleanup';

    my $pid = $NginxPid;
    $pid = get_pid_from_pidfile() if !$pid;
    my $child = $ChildPid;

    if ($pid && is_running($pid)) {
        my $grace = $UseValgrind ? max($Timeout, 30) : $Timeout;
        kill SIGQUIT, $pid;
        if (!wait_for_exit($pid, $grace)) {
            warn "$name - timeout when waiting for nginx $pid to quit\n";
            kill SIGTERM, $pid;
            if (!wait_for_exit($pid, 2)) {
                warn "$name - WARNING: killing nginx $pid with force\n";
                kill SIGKILL, -$pid if getpgrp($pid) == $pid;
                kill SIGKILL, $pid;
                wait_for_exit($pid, 2);
            }
        }
    }

    if (defined $child) {
        if (waitpid($child, WNOHANG) == 0) {
            kill SIGKILL, $child;
            waitpid($child, 0);
        }
    }

    undef $NginxPid;
    undef $ChildPid;
    unlink $PidFile if -f $PidFile;

    # adopted nginx processes that have exited
    1 while waitpid(-1, WNOHANG) > 0;
}

sub stop_tcp_server {
    if (defined $TcpServerPid) {
        kill SIGKILL, $TcpServerPid;
        waitpid($TcpServerPid, 0);
        undef $TcpServerPid;
    }
}

sub cleanup {
    for my $hdl (@CleanupHandlers) {
        $hdl->();
    }
    stop_tcp_server();
}

# ------------------------------------------------------------------------
# logs
# ------------------------------------------------------------------------

sub error_log_data {
    # leave time for logging in the log phase, after the response
    sleep $TestNginxSleep * 3;

    open my $in, '<', $ErrLogFile or return [];
    if (!$CheckAccumErrLog && $ErrLogFilePos > 0) {
        seek $in, $ErrLogFilePos, 0;
    }
    my @lines = <$in>;
    if (!$CheckAccumErrLog) {
        $ErrLogFilePos = tell($in);
    }
    close $in;
    return \@lines;
}

sub access_log_data {
    sleep $TestNginxSleep * 3;
    open my $in, '<', $AccLogFile or return [];
    my @lines = <$in>;
    close $in;
    return \@lines;
}

sub value_contains {
    my ($val, $pat) = @_;
    return 0 if !defined $val;
    if (!ref $val || ref $val eq 'Regexp') {
        return $val =~ /\Q$pat\E/ ? 1 : 0;
    }
    if (ref $val eq 'ARRAY') {
        for my $v (@$val) {
            return 1 if value_contains($v, $pat);
        }
    }
    return 0;
}

sub pattern_list {
    my $pats = shift;
    if (!ref $pats) {
        chomp $pats;
        return [split /\n+/, $pats];
    }
    if (ref $pats eq 'Regexp') {
        return [$pats];
    }
    return [@$pats];
}

sub line_matches {
    my ($line, $pat) = @_;
    return ref $pat ? $line =~ /$pat/ : index($line, $pat) >= 0;
}

sub check_error_log {
    my ($block, $res, $repeated_req_idx, $need_array, $extra) = @_;
    my $name = $block->name;

    my $lines = error_log_data();
    if (defined $extra) {
        # nginx's stderr, where configuration errors go when it fails to
        # start (--- must_die)
        $lines = [@$lines, split /^/, $extra];
    }

    # warn about these levels; not in a --- must_die block, where an
    # [emerg] is the expected outcome
    my %warn_for = defined scalar($block->must_die)
                   ? () : (alert => 1, crit => 1, emerg => 1);
    for my $sec (scalar($block->error_log), scalar($block->no_error_log)) {
        for my $level (keys %warn_for) {
            delete $warn_for{$level} if value_contains($sec, "[$level");
        }
    }

    # --- grep_error_log / --- grep_error_log_out
    my $grep_pat = scalar($block->grep_error_log);
    if (defined $grep_pat) {
        $grep_pat = $grep_pat->[$repeated_req_idx] if ref $grep_pat eq 'ARRAY';
    } elsif (defined scalar($block->grep_error_log_out)) {
        bail_out("$name - No --- grep_error_log defined but "
                 . "--- grep_error_log_out is defined");
    }
    if (defined $grep_pat) {
        my $expected = scalar($block->grep_error_log_out);
        if (!defined $expected) {
            bail_out("$name - No --- grep_error_log_out defined but "
                     . "--- grep_error_log is defined");
        }
        $expected = $expected->[$repeated_req_idx] if ref $expected eq 'ARRAY';

        my $matched = '';
        for my $line (@$lines) {
            if (ref $grep_pat ? $line =~ /$grep_pat/ : $line =~ /\Q$grep_pat\E/) {
                my $m = $&;
                $matched .= "$m\n" if $m !~ /\n/;
            }
        }
        if (ref $expected eq 'Regexp') {
            Test::More::like($matched, $expected,
                "$name - grep_error_log_out (req $repeated_req_idx)");
        } else {
            is_str($matched, $expected,
                "$name - grep_error_log_out (req $repeated_req_idx)");
        }
    }

    if (defined scalar($block->error_log)) {
        my $pats = pattern_list(scalar($block->error_log));
        for my $line (@$lines) {
            for my $pat (@$pats) {
                next if !defined $pat;
                if (line_matches($line, $pat)) {
                    Test::More::pass("$name - pattern \"$pat\" matches a "
                        . "line in error.log (req $repeated_req_idx)");
                    undef $pat;
                }
            }
        }
        for my $pat (@$pats) {
            next if !defined $pat;
            Test::More::fail("$name - pattern \"$pat\" should match a line "
                . "in error.log (req $repeated_req_idx)");
        }
    }

    if (defined scalar($block->no_error_log)) {
        my $pats = pattern_list(scalar($block->no_error_log));
        for my $pat (@$pats) {
            next if !defined $pat;
            my $p = fmt_str($pat);
            my ($i, $hit) = (0, undef);
            for my $line (@$lines) {
                if (line_matches($line, $pat)) {
                    $hit = $i;
                    last;
                }
                $i++;
            }
            if (defined $hit) {
                my $ln = fmt_str($lines->[$hit]);
                my $more = join '', @$lines[$hit + 1 .. min($hit + 9, $#$lines)];
                Test::More::fail("$name - pattern \"$p\" should not match "
                    . "any line in error.log but matches line \"$ln\" "
                    . "(req $repeated_req_idx)\n$more");
            } else {
                Test::More::pass("$name - pattern \"$p\" does not match a "
                    . "line in error.log (req $repeated_req_idx)");
            }
        }
    }

    for my $line (@$lines) {
        for my $level (sort keys %warn_for) {
            if ($line =~ /\[\Q$level\E\]/) {
                warn "WARNING: $name - " . fmt_str($line) . "\n";
            }
        }
    }

    check_crash_lines($block, $lines);
}

# a worker that died on a signal, or an assertion that failed, fails the
# block (unless the block says it expects exactly that)
sub check_crash_lines {
    my ($block, $lines) = @_;
    my $name = $block->name;
    for my $line (@$lines) {
        if ($line =~ /\bAssertion .*?failed\b/
            || ($line =~ /exited on signal \d+/
                && !value_contains(scalar($block->error_log), 'exited on signal')
                && !value_contains(scalar($block->shutdown_error_log), 'exited on signal')))
        {
            my $l = $line;
            chomp $l;
            Test::More::fail("$name - nginx crashed: $l");
        }
    }
}

sub check_access_log {
    my ($block, $repeated_req_idx) = @_;
    my $name = $block->name;

    if (defined scalar($block->access_log)) {
        my $pats = pattern_list(scalar($block->access_log));
        my $lines = access_log_data();
        for my $line (@$lines) {
            for my $pat (@$pats) {
                next if !defined $pat;
                if (line_matches($line, $pat)) {
                    Test::More::pass("$name - pattern \"$pat\" matches a "
                        . "line in access.log (req $repeated_req_idx)");
                    undef $pat;
                }
            }
        }
        for my $pat (@$pats) {
            next if !defined $pat;
            Test::More::fail("$name - pattern \"$pat\" should match a line "
                . "in access.log (req $repeated_req_idx)");
        }
    }

    if (defined scalar($block->no_access_log)) {
        my $pats = pattern_list(scalar($block->no_access_log));
        my $lines = access_log_data();
        for my $pat (@$pats) {
            next if !defined $pat;
            my $p = fmt_str($pat);
            my ($hit) = grep { line_matches($_, $pat) } @$lines;
            if (defined $hit) {
                Test::More::fail("$name - pattern \"$p\" should not match "
                    . "any line in access.log but matches line \""
                    . fmt_str($hit) . "\" (req $repeated_req_idx)");
            } else {
                Test::More::pass("$name - pattern \"$p\" does not match a "
                    . "line in access.log (req $repeated_req_idx)");
            }
        }
    }
}

# --- shutdown_error_log / --- no_shutdown_error_log of the block whose
# nginx has just been stopped
sub check_shutdown_error_log {
    my ($block) = @_;
    return if !defined $block;
    my $name = $block->name;

    my $lines = error_log_data();

    if (defined scalar($block->no_shutdown_error_log)) {
        my $pats = pattern_list(scalar($block->no_shutdown_error_log));
        for my $pat (@$pats) {
            next if !defined $pat;
            my $p = fmt_str($pat);
            my ($hit) = grep { line_matches($_, $pat) } @$lines;
            if (defined $hit) {
                Test::More::fail("$name - pattern \"$p\" should not match any "
                    . "line in error.log but matches line \"" . fmt_str($hit) . "\"");
            } else {
                Test::More::pass("$name - pattern \"$p\" does not match a line in error.log");
            }
        }
    }

    if (defined scalar($block->shutdown_error_log)) {
        my $pats = pattern_list(scalar($block->shutdown_error_log));
        for my $line (@$lines) {
            for my $pat (@$pats) {
                next if !defined $pat;
                if (line_matches($line, $pat)) {
                    Test::More::pass("$name - pattern \"$pat\" matches a line in error.log");
                    undef $pat;
                }
            }
        }
        for my $pat (@$pats) {
            next if !defined $pat;
            Test::More::fail("$name - pattern \"$pat\" should match a line in error.log");
        }
    }

    check_crash_lines($block, $lines);
}

# valgrind writes its report when nginx exits: fail the block if it found
# invalid accesses, uses of uninitialised values, or definite leaks
sub check_valgrind_log {
    my ($block, $exit_status) = @_;
    my $name = $block->name;

    my $log = slurp($ValgrindLogFile) // '';
    my @bad = grep {
        /Invalid (?:read|write|free)/
        || /uninitialised/
        || /definitely lost/
        || /Mismatched free/
        || /Source and destination overlap/
        || /unaddressable/
        || /Jump to the invalid address/
        || /Process terminating with default action/
    } split /\n/, $log;

    my $vg_failed = defined $exit_status
        && ($exit_status >> 8) == $ValgrindErrorExitCode;

    if (@bad || $vg_failed) {
        my @lines = split /\n/, $log;
        my $excerpt = join "\n", @lines[0 .. min($#lines, 60)];
        Test::More::fail("$name - no valgrind errors");
        Test::More::diag("valgrind reported errors (see $ValgrindLogFile):\n$excerpt");
        return;
    }

    # a passing check adds a test only where it cannot upset a fixed plan
    my $plan = Test::More->builder->has_plan;
    if (!defined $plan || $plan eq 'no_plan') {
        Test::More::pass("$name - no valgrind errors");
    }
}

# ------------------------------------------------------------------------
# building requests
# ------------------------------------------------------------------------

sub parse_more_headers {
    my ($in) = @_;
    my $out = '';
    my $is_chunked;
    for my $header (split /\n+/, $in // '') {
        next if $header =~ /^\s*\#/;
        my ($key, $val) = split /:\s*/, $header, 2;
        $val //= '';
        if (lc($key) eq 'transfer-encoding' && $val eq 'chunked') {
            $is_chunked = 1;
        }
        $out .= "$key: $val\r\n";
    }
    return ($out, $is_chunked);
}

# Turn a test's request text ("METHOD [URI [VERSION]]\nbody") into what is
# sent on the wire.  The request may be given as several packets: the
# result keeps the packet boundaries at the corresponding places.
sub build_request_from_packets {
    my ($name, $more_headers, $is_chunked, $conn_header, $packets) = @_;

    my @values = map { ref $_ ? $_->{value} : $_ } @$packets;
    my $raw = join '', map { $_ // '' } @values;

    my $nl = index($raw, "\n");
    my $line_len = $nl < 0 ? length($raw) : $nl + 1;
    my $first = substr($raw, 0, $line_len);
    if ($first eq '') {
        bail_out("$name - Request line should be non-empty");
    }

    my ($before, $meth, $url, $ver);
    if ($first =~ /^(\s*)(\S+)( *)(?:(\S+)( *))?(?:(\S+)( *))?(\s*)$/) {
        ($before, $meth, $url, $ver) = (length($1), $2, $4, $6);
    } else {
        bail_out("$name - Request line is not valid. Should be "
                 . "'meth [url [version]]' but got \"$first\".");
    }
    $url //= '/';
    $ver //= 'HTTP/1.1';

    my $content = substr($raw, $line_len);
    my ($lead, $kept_len) = (0, length $content);

    $more_headers //= '';
    my $len_header = '';
    if (!$is_chunked && $content ne ''
        && $more_headers !~ /(?:^|\n)Content-Length:/)
    {
        my ($l) = $content =~ /^(\s*)/;
        $lead = length $l;
        (my $t = $content) =~ s/^\s+|\s+$//gs;
        $kept_len = length $t;
        $content = $t;
        $len_header = "Content-Length: " . length($content) . "\r\n";
    }

    $more_headers =~ s/(?<!\r)\n/\r\n/gs;

    my $headers = '';
    if ($more_headers !~ /(?:^|\n)Host:/msi) {
        $headers .= "Host: $ServerName\r\n";
    }
    if ($more_headers !~ /(?:^|\n)Connection/msi) {
        $headers .= "Connection: $conn_header\r\n";
    }
    $headers .= "$more_headers$len_header\r\n";

    my $req_line = "$meth $url $ver";
    my $head = "$req_line\r\n$headers";
    my $out = $head . $content;

    return [$out] if @values <= 1;

    # map each original packet boundary into the new request
    my @cuts;
    my $off = 0;
    for my $i (0 .. $#values - 1) {
        $off += length($values[$i] // '');
        my $pos;
        if ($off >= $line_len) {
            my $o = $off - $line_len - $lead;
            $o = 0 if $o < 0;
            $o = $kept_len if $o > $kept_len;
            $pos = length($head) + $o;
        } else {
            my $o = $off - $before;
            $o = 0 if $o < 0;
            $o = length($req_line) if $o > length($req_line);
            $pos = $o;
        }
        push @cuts, $pos;
    }

    my @res;
    my $prev = 0;
    for my $cut (@cuts) {
        $cut = $prev if $cut < $prev;
        push @res, substr($out, $prev, $cut - $prev);
        $prev = $cut;
    }
    push @res, substr($out, $prev);
    return \@res;
}

# a list of requests; each request is a list of packets {value => ...,
# delay_before => ...}
sub get_req_from_block {
    my ($block) = @_;
    my $name = $block->name;
    my @req_list;

    if (defined scalar($block->raw_request)) {
        my $raw = scalar($block->raw_request);
        if (ref $raw && ref $raw eq 'ARRAY') {
            # as OpenResty's: every element is a packet's value (a delay
            # needs "--- request eval" with an array of packets)
            push @req_list, [map { {value => $_} } @$raw];
        } else {
            push @req_list, [{value => $raw}];
        }
        return \@req_list;
    }

    my $request = scalar($block->request);
    if (defined $request && !ref $request) {
        1 while $request =~ s/^\s*\#[^\n]+\s+|^\s+//gs;
    }

    my $more_headers = scalar($block->more_headers) // '';

    my $headers_for = sub {
        my ($i, $what) = @_;
        if (ref $more_headers eq 'ARRAY') {
            my $h = $more_headers->[$i];
            bail_out("--- more_headers lacks data for $what") if !defined $h;
            return parse_more_headers($h);
        }
        return parse_more_headers($more_headers);
    };

    if (scalar($block->pipelined_requests)) {
        my $reqs = scalar($block->pipelined_requests);
        if (!ref $reqs || ref $reqs ne 'ARRAY') {
            bail_out("$name - invalid entries in --- pipelined_requests");
        }
        my $all = '';
        for my $i (0 .. $#$reqs) {
            my $conn = $i == $#$reqs ? 'close' : 'keep-alive';
            my ($hdr, $chunked) = $headers_for->($i, "the $i pipelined request");
            my $r = build_request_from_packets($name, $hdr, $chunked, $conn,
                                               [$reqs->[$i]]);
            $all .= $r->[0];
        }
        push @req_list, [{value => $all}];
        return \@req_list;
    }

    if (!defined $request) {
        bail_out("$name - Request line should be non-empty "
                 . "(no --- request section)");
    }

    if (!ref $request) {
        my ($hdr, $chunked) = $headers_for->(0, "the request");
        my $r = build_request_from_packets($name, $hdr, $chunked, 'close', [$request]);
        push @req_list, [{value => $r->[0]}];

    } elsif (ref $request eq 'ARRAY') {
        my $i = 0;
        for my $one (@$request) {
            my ($hdr, $chunked) = $headers_for->($i, "the ${i}th request");
            if (!ref $one) {
                my $r = build_request_from_packets($name, $hdr, $chunked,
                                                   'close', [$one]);
                push @req_list, [{value => $r->[0]}];

            } elsif (ref $one eq 'ARRAY') {
                for my $p (@$one) {
                    if (ref $p && ref $p ne 'HASH') {
                        bail_out("$name - Invalid syntax. $p should be a "
                                 . "string or hash with value.");
                    }
                }
                my $r = build_request_from_packets($name, $hdr, $chunked,
                                                   'close', $one);
                my @pk;
                for my $j (0 .. $#$r) {
                    my $orig = $one->[$j];
                    push @pk, ref $orig ? {%$orig, value => $r->[$j]}
                                        : {value => $r->[$j]};
                }
                push @req_list, \@pk;

            } else {
                bail_out("$name - Invalid syntax. $one should be a string "
                         . "or an array of packets.");
            }
            $i++;
        }

    } else {
        bail_out("$name - invalid ---request : MUST be string or array of requests");
    }

    return \@req_list;
}

# ------------------------------------------------------------------------
# the HTTP client
# ------------------------------------------------------------------------

sub send_request {
    my ($packets, $middle_delay, $timeout, $block) = @_;
    my $name = $block->name;

    my @queue = map { {%$_} } @$packets;
    my $all = join '', map { $_->{value} // '' } @queue;
    my $head_req = $all =~ /^\s*HEAD\s+/ ? 1 : 0;

    my $server_addr = scalar($block->server_addr_for_client) // $ServerAddr;

    my $sock;
    my $deadline = time + ($UseValgrind ? $ValgrindStartupTimeout : max($timeout, 5));
    while (1) {
        $sock = IO::Socket::INET->new(
            PeerAddr => $server_addr,
            PeerPort => $ServerPortForClient,
            Proto    => 'tcp',
            Timeout  => $timeout,
        );
        last if $sock;
        my $err = $!;
        if (time > $deadline || (defined $NginxPid && !is_running($NginxPid))) {
            Test::More::fail("$name - Can't connect to "
                . "$server_addr:$ServerPortForClient: $err (aborted)\n");
            if (++$TotalConnectFailures >= 3) {
                bail_out("$name - Can't connect to $server_addr:"
                         . "$ServerPortForClient: $err (aborted)");
            }
            return (undef, $head_req);
        }
        sleep 0.05;
    }

    $sock->blocking(0);
    binmode $sock;
    local $SIG{PIPE} = 'IGNORE';

    my $resp = '';
    my $first = shift @queue;
    my $wbuf = $first->{value} // '';
    my $woff = 0;
    my ($reading, $writing) = (1, 1);
    my $sel = IO::Select->new($sock);

    LOOP:
    while ($reading || $writing) {
        my ($r, $w) = IO::Select->select($reading ? $sel : undef,
                                         $writing ? $sel : undef,
                                         undef, $timeout);
        if (!$r && !$w) {
            if ($! && $! == EINTR) {
                next;
            }
            # timed out
            close $sock;
            if (!defined scalar($block->abort)) {
                Test::More::fail("ERROR: client socket timed out - $name\n");
            } else {
                sleep 0.005;
            }
            return ($resp, $head_req);
        }

        if ($w && @$w) {
            while (1) {
                my $rest = length($wbuf) - $woff;
                if ($rest > 0) {
                    my $n = syswrite($sock, $wbuf, $rest, $woff);
                    if (!defined $n) {
                        last if $! == EAGAIN || $! == EWOULDBLOCK;
                        warn "WARNING: $name - write failed: $!\n";
                        $resp = "write failed: $!" if $resp eq '';
                        $writing = 0;
                        last;
                    }
                    $woff += $n;
                    next;
                }
                my $next = shift @queue;
                if (!defined $next) {
                    $writing = 0;
                    my $shutdown = scalar($block->shutdown);
                    if (defined $shutdown) {
                        $shutdown = 1 if $shutdown =~ /^\s*$/s;
                        shutdown($sock, $shutdown);
                    }
                    last;
                }
                $wbuf = $next->{value} // '';
                $woff = 0;
                my $delay = $next->{delay_before} // $middle_delay;
                sleep $delay if $delay;
            }
        }

        if ($r && @$r) {
            while (1) {
                my $buf;
                my $n = sysread($sock, $buf, 16384);
                if (!defined $n) {
                    last if $! == EAGAIN || $! == EWOULDBLOCK;
                    warn "WARNING: $name - HTTP response read failure: $!\n"
                        if $resp eq '';
                    $reading = $writing = 0;
                    last;
                }
                if ($n == 0) {
                    $reading = $writing = 0;
                    last;
                }
                $resp .= $buf;
            }
        }
    }

    close $sock;
    return ($resp, $head_req);
}

# parse one response off the front of $raw; returns ($res, $raw_headers,
# $left, $error) where $error says how the response is incomplete
sub parse_response {
    my ($name, $raw, $head_req) = @_;

    my ($left, $error);
    my $raw_headers = '';
    if ($raw =~ /(.*?\r\n)\r\n/s) {
        $raw_headers = $1;
    }

    my $res = HTTP::Response->parse($raw);
    my $code = $res->code;
    if (defined $code && $code !~ /^\d+$/) {
        undef $code;
        $res->code(undef);
    }

    if ($raw eq '') {
        return ($res, $raw_headers, undef, 'no response received');
    }

    if ($raw !~ /\r?\n\r?\n/) {
        $error = 'response header incomplete';
    }

    my $content = $res->content // '';

    if ($head_req || (defined $code
                      && ($code =~ /^1/ || $code == 204 || $code == 304)))
    {
        # no response body
        $res->content('');
        $left = $content if $content ne '';
        return ($res, $raw_headers, $left, $error);
    }

    my $enc = $res->header('Transfer-Encoding');
    my $len = $res->header('Content-Length');

    if (defined $enc && $enc =~ /\bchunked\b/i) {
        my $decoded = '';
        my $complete;
        pos($content) = 0;
        while (1) {
            if ($content =~ m{\G0+[ \t]*(?:;[^\r\n]*)?\r\n((?:[^\r\n]+\r\n)*)\r\n}gc) {
                $complete = 1;
                if ($content =~ /\G(.+)/gcs) {
                    $left = $1;
                }
                last;
            }
            if ($content =~ m{\G[ \t]*([A-Fa-f0-9]+)[ \t]*(?:;[^\r\n]*)?\r\n}gc) {
                my $size = hex($1);
                my $start = pos($content);
                if (length($content) - $start < $size) {
                    $decoded .= substr($content, $start);
                    $error = "invalid chunked data received (not enough "
                        . "octets for the data section)";
                    last;
                }
                $decoded .= substr($content, $start, $size);
                pos($content) = $start + $size;
                if ($content !~ /\G\r\n/gc) {
                    $error = "invalid chunked data received (expected CRLF)";
                    last;
                }
                next;
            }
            if ($content =~ /\G(.+)/gcs) {
                $error = "invalid chunked body received: " . fmt_str($1);
            } else {
                $error = "response truncated: no last chunk found";
            }
            last;
        }
        $res->content($decoded);
        $error //= 'response truncated: no last chunk found' if !$complete;

    } elsif (defined $len && $len =~ /^\s*(\d+)\s*$/) {
        $len = $1;
        if (length($content) < $len) {
            $error = "response body truncated: $len expected, but got "
                . length($content);
        } elsif (length($content) > $len) {
            $left = substr($content, $len);
            $res->content(substr($content, 0, $len));
        }
    }

    return ($res, $raw_headers, $left, $error);
}

# ------------------------------------------------------------------------
# checks on a response
# ------------------------------------------------------------------------

sub get_indexed_value {
    my ($name, $value, $req_idx, $need_array) = @_;
    if ($need_array) {
        if (ref $value && ref $value eq 'ARRAY') {
            return $value->[$req_idx];
        }
        bail_out("$name - You asked for many requests, the expected results "
                 . "should be arrays as well.");
    }
    if (ref $value && ref $value eq 'ARRAY') {
        return $value->[0];
    }
    return $value;
}

sub check_error_code {
    my ($block, $res, $req_idx, $need_array) = @_;
    my $name = $block->name;
    my $code = ($res && $res->code) || '';

    if (defined scalar($block->error_code_like)) {
        my $val = get_indexed_value($name, scalar($block->error_code_like), $req_idx, $need_array);
        Test::More::like($code, qr/$val/sm, "$name - status code ok");
    } elsif (defined scalar($block->error_code)) {
        my $val = get_indexed_value($name, scalar($block->error_code), $req_idx, $need_array);
        Test::More::is($code, $val, "$name - status code ok");
    } else {
        Test::More::is($code, 200, "$name - status code ok");
    }
}

sub check_raw_response_headers {
    my ($block, $raw_headers, $req_idx, $need_array) = @_;
    my $name = $block->name;
    if (defined scalar($block->raw_response_headers_like)) {
        my $expected = get_indexed_value($name, scalar($block->raw_response_headers_like),
                                         $req_idx, $need_array);
        Test::More::like($raw_headers, qr/$expected/s, "$name - raw resp headers like");
    }
    if (defined scalar($block->raw_response_headers_unlike)) {
        my $expected = get_indexed_value($name, scalar($block->raw_response_headers_unlike),
                                         $req_idx, $need_array);
        Test::More::unlike($raw_headers, qr/$expected/s, "$name - raw resp headers unlike");
    }
}

sub parse_headers {
    my $s = shift;
    my %headers;
    for my $line (split /\n/, $s // '') {
        $line =~ s/^\s+|\s+$//g;
        next if $line eq '';
        if ($line =~ s/^!\s*//) {
            $headers{$line} = undef;
        } else {
            my ($key, $val) = split /\s*:\s*/, $line, 2;
            $headers{$key} = $val // '';
        }
    }
    return \%headers;
}

sub check_response_headers {
    my ($block, $res, $raw_headers, $req_idx, $need_array) = @_;
    my $name = $block->name;

    if (defined scalar($block->response_headers)) {
        my $headers = parse_headers(get_indexed_value($name, scalar($block->response_headers),
                                                      $req_idx, $need_array));
        for my $key (sort keys %$headers) {
            my $val = $headers->{$key};
            if (!defined $val) {
                Test::More::unlike($raw_headers, qr/^\s*\Q$key\E\s*:/ms,
                    "$name - header $key not present in the raw headers");
                next;
            }
            $val =~ s/\$ServerPort\b/$ServerPort/g;
            $val =~ s/\$ServerPortForClient\b/$ServerPortForClient/g;
            my $actual = $res ? scalar $res->header($key) : undef;
            $actual //= '';
            Test::More::is($actual, $val, "$name - header $key ok");
        }

    } elsif (defined scalar($block->response_headers_like)) {
        my $headers = parse_headers(get_indexed_value($name, scalar($block->response_headers_like),
                                                      $req_idx, $need_array));
        for my $key (sort keys %$headers) {
            my $val = $headers->{$key} // '';
            my $actual = $res ? scalar $res->header($key) : undef;
            $actual //= '';
            Test::More::like($actual, qr/^$val$/, "$name - header $key like ok");
        }
    }
}

sub run_body_filter {
    my ($block, $filter, $content) = @_;
    my $name = $block->name;
    if (ref $filter && ref $filter eq 'CODE') {
        return $filter->($content);
    }
    if (ref $filter) {
        bail_out("$name - the --- response_body_filters section only "
                 . "supports subroutine reference values and string values");
    }
    my %f = (
        md5_hex  => sub { Digest::MD5::md5_hex($_[0]) },
        sha1_hex => sub { Digest::SHA::sha1_hex($_[0]) },
        uc       => sub { uc $_[0] },
        lc       => sub { lc $_[0] },
        ucfirst  => sub { ucfirst $_[0] },
        lcfirst  => sub { lcfirst $_[0] },
        length   => sub { length $_[0] },
    );
    my $code = $f{$filter}
        or bail_out("$name - unknown filter, \"$filter\", specified in the "
                    . "--- response_body_filters section");
    return $code->($content);
}

sub transform_response_body {
    my ($block, $res, $req_idx) = @_;
    return if !$res;
    my $filters = scalar($block->response_body_filters);
    return if !defined $filters;
    my $content = $res->content;
    return if !defined $content;

    if (!ref $filters) {
        $filters =~ s/^\s+|\s+$//gs;
        $filters = [split /\s+/, $filters];
    } elsif (ref $filters ne 'ARRAY') {
        $filters = [$filters];
    }

    my $f = $filters;
    if (ref $filters->[0] eq 'ARRAY') {
        $f = $filters->[$req_idx];
        bail_out($block->name . " - the --- response_body_filters two-dimensional "
                 . "array does not match the request ($req_idx)") if !defined $f;
    }
    for my $one (ref $f eq 'ARRAY' ? @$f : ($f)) {
        $content = run_body_filter($block, $one, $content);
    }
    $res->content($content);
}

sub check_response_body {
    my ($block, $res, $req_idx, $repeated_req_idx, $need_array, $error) = @_;
    my $name = $block->name;
    my $content = $res ? $res->content : undef;
    my $checked;

    if (defined scalar($block->response_body)) {
        $checked = 1;
        my $expected = get_indexed_value($name, scalar($block->response_body),
                                         $req_idx, $need_array);
        if (defined $expected && !ref $expected) {
            $expected =~ s/\$ServerPort\b/$ServerPort/g;
            $expected =~ s/\$ServerPortForClient\b/$ServerPortForClient/g;
        }
        my $desc = "$name - response_body - "
            . (ref $expected ? 'like' : 'response is expected')
            . " (repeated req $repeated_req_idx, req $req_idx)";
        if (defined $error) {
            Test::More::fail($desc);
            Test::More::diag("$name - $error; received body: \""
                             . fmt_str($content) . "\"");
        } elsif (ref $expected) {
            Test::More::like($content, $expected, $desc);
        } else {
            is_str($content, $expected, $desc);
        }

    } elsif (defined scalar($block->response_body_like) || defined scalar($block->response_body_unlike)) {
        $checked = 1;
        my ($type, $patterns) = defined scalar($block->response_body_like)
            ? ('like', scalar($block->response_body_like))
            : ('unlike', scalar($block->response_body_unlike));
        my $pat = get_indexed_value($name, $patterns, $req_idx, $need_array);
        $pat =~ s/\$ServerPort\b/$ServerPort/g;
        $pat =~ s/\$ServerPortForClient\b/$ServerPortForClient/g;
        my $summary = trim($content) // '';
        my $desc = "$name - response_body_$type - response is expected ($summary)";
        if (defined $error) {
            Test::More::fail($desc);
            Test::More::diag("$name - $error");
        } elsif ($type eq 'like') {
            Test::More::like($content, qr/$pat/s, $desc);
        } else {
            Test::More::unlike($content, qr/$pat/s, $desc);
        }
    }

    if (defined $error && !$checked) {
        # a cut-short response is a failure even when the body is not checked
        Test::More::fail("$name - $error (req $req_idx)");
    }

    for my $check (@ResponseBodyChecks) {
        $check->($block, $content, $req_idx, $repeated_req_idx, 0);
    }
}

# ------------------------------------------------------------------------
# the --- tcp_listen mock server
# ------------------------------------------------------------------------

sub start_tcp_server {
    my ($block) = @_;
    my $name = $block->name;
    my $target = scalar($block->tcp_listen);
    return (undef, undef) if !defined $target;

    my $reply = scalar($block->tcp_reply);
    if (!defined $reply && !defined scalar($block->tcp_shutdown)) {
        bail_out("$name - no --- tcp_reply specified but --- tcp_listen is specified");
    }

    my $req_len = scalar($block->tcp_query_len);
    my $query_file;
    if (defined scalar($block->tcp_query) || defined $req_len) {
        $req_len //= length(scalar($block->tcp_query));
        $query_file = "$LogDir/tcp_query.$$." . int(rand 1e9);
    }

    my $sock;
    for (1 .. 30) {
        if ($target =~ /^\d+$/) {
            $sock = IO::Socket::INET->new(LocalHost => '127.0.0.1',
                LocalPort => $target, Proto => 'tcp', ReuseAddr => 1,
                Listen => 5);
        } elsif ($target =~ /\.sock$/) {
            require IO::Socket::UNIX;
            unlink $target if -e $target;
            $sock = IO::Socket::UNIX->new(Local => $target,
                Type => Socket::SOCK_STREAM(), Listen => 5);
        } else {
            bail_out("$name - bad tcp_listen target: $target");
        }
        last if $sock;
        sleep 0.1;
    }
    bail_out("$name - failed to create the tcp listening socket: $!") if !$sock;

    my $pid = fork();
    bail_out("$name - fork() failed: $!") if !defined $pid;
    if ($pid == 0) {
        $InSubprocess = 1;
        Test::More->builder->no_ending(1);
        my $client;
        until ($client = $sock->accept()) { sleep $TestNginxSleep }

        my $buf = '';
        my ($no_read, $no_write);
        if (defined scalar($block->tcp_shutdown)) {
            my $how = scalar($block->tcp_shutdown);
            sleep scalar($block->tcp_shutdown_delay) if scalar($block->tcp_shutdown_delay);
            $client->shutdown($how);
            if ($how == 0 || $how == 2) { $no_read = 1 } else { $no_write = 1 }
        }
        unless ($no_read) {
            while (1) {
                my $b = '';
                my $ret = $client->recv($b, 4096);
                last if !defined $ret || $b eq '';
                $buf .= $b;
                if ($query_file) {
                    open my $out, '>', $query_file;
                    binmode $out;
                    print $out $buf;
                    close $out;
                }
                last if !$req_len || length($buf) >= $req_len;
            }
        }
        my $delay = parse_time(scalar($block->tcp_reply_delay));
        sleep $delay if $delay;
        if (!$no_write && defined $reply) {
            if (ref $reply eq 'CODE') {
                $reply = $reply->($buf);
            }
            for my $r (ref $reply eq 'ARRAY' ? @$reply : ($reply)) {
                $client->send($r);
            }
        }
        if (defined scalar($block->tcp_no_close)) {
            sleep 1 while 1;
        }
        $client->close;
        POSIX::_exit(0);
    }

    $TcpServerPid = $pid;
    return ($sock, $query_file);
}

sub finish_tcp_server {
    my ($block, $sock, $query_file) = @_;
    return if !defined $sock;
    my $name = $block->name;

    if ($query_file) {
        my $buf = slurp($query_file) // '';
        if (defined scalar($block->tcp_query)) {
            is_str($buf, scalar($block->tcp_query), "$name - tcp_query ok");
        }
        if (defined scalar($block->tcp_query_len)) {
            Test::More::is(length($buf), scalar($block->tcp_query_len),
                           "$name - TCP query length ok");
        }
        unlink $query_file;
    }

    stop_tcp_server();
    close $sock;
}

# ------------------------------------------------------------------------
# running the blocks
# ------------------------------------------------------------------------

sub run_test_helper {
    my ($block, $repeated_req_idx) = @_;
    my $name = $block->name;

    my $reqs = get_req_from_block($block);
    bail_out("$name - request empty") if !@$reqs;

    my $timeout = parse_time(scalar($block->timeout)) // $Timeout;
    my $pipelined = scalar($block->pipelined_requests);
    my $need_array = $pipelined ? 1 : @$reqs > 1;

    my $req_idx = 0;
    my $res;
    for my $i (0 .. $#$reqs) {
        my ($raw, $head_req) = send_request($reqs->[$i],
            parse_time(scalar($block->raw_request_middle_delay)), $timeout, $block);
        $raw //= '';

        my $nresp = $pipelined ? scalar @$pipelined : 1;
        for my $k (1 .. $nresp) {
            my ($raw_headers, $left, $error) = ('', undef, undef);
            if (!defined scalar($block->ignore_response)) {
                if (defined scalar($block->http09)) {
                    $res = HTTP::Response->new(200, 'OK', [], $raw);
                } else {
                    ($res, $raw_headers, $left, $error)
                        = parse_response($name, $raw, $head_req);
                }
            }

            if ($k == $nresp && !$pipelined) {
                if (defined $left && $left ne '') {
                    my $l = $left;
                    $l =~ s/([\0-\037\200-\377])/sprintf('\x{%02x}', ord $1)/eg;
                    warn "WARNING: $name - unexpected extra bytes after the "
                        . "response: \"$l\"\n";
                }
            }
            $raw = $left // '';

            if (!defined scalar($block->ignore_response)) {
                check_error_code($block, $res, $req_idx, $need_array);
                check_raw_response_headers($block, $raw_headers, $req_idx, $need_array);
                check_response_headers($block, $res, $raw_headers, $req_idx, $need_array);
                transform_response_body($block, $res, $req_idx);
                check_response_body($block, $res, $req_idx, $repeated_req_idx,
                                    $need_array, $error);
            }

            if ($k < $nresp || $i < $#$reqs) {
                sleep parse_time(scalar($block->wait)) if scalar($block->wait);
                check_error_log($block, $res, $repeated_req_idx, $need_array);
                check_access_log($block, $repeated_req_idx)
                    if !defined scalar($block->ignore_response);
            }
            $req_idx++;
        }
    }

    sleep parse_time(scalar($block->wait)) if scalar($block->wait);
    check_error_log($block, $res, $repeated_req_idx, $need_array);
    check_access_log($block, $repeated_req_idx) if !defined scalar($block->ignore_response);
}

sub run_must_die {
    my ($block, $must_die) = @_;
    my $name = $block->name;
    my @nginx = nginx_command();

    $ErrLogFilePos = 0;
    for my $i (0 .. $RepeatEach - 1) {
        unlink $StderrFile;
        my ($status, $err) = run_nginx_cmd(\@nginx);
        if (defined $err) {
            Test::More::fail("$name - failed to execute the nginx command line");
        } else {
            my $exit_code = $status >> 8;
            if ($status & 128) {
                Test::More::fail("$name - nginx core dumped");
            } elsif (looks_like_number($must_die)) {
                Test::More::is($must_die, $exit_code,
                               "$name - die with the expected exit code");
            } else {
                Test::More::isnt($status, 0, "$name - die as expected");
            }
        }

        check_error_log($block, undef, $i, 0, slurp($StderrFile) // '');

        if (!defined $err && $status == 0) {
            warn "WARNING: $name - nginx must die but it does not; "
                . "killing it (req $i)\n";
            for (1 .. 50) {
                last if get_pid_from_pidfile();
                sleep $TestNginxSleep;
            }
            stop_nginx($name);
        }
    }
}

sub block_skip_info {
    my ($block) = @_;
    my $name = $block->name;
    my ($tests_to_skip, $should_skip, $skip_reason);

    if (defined(my $skip_eval = scalar($block->skip_eval))) {
        if ($skip_eval =~ /^\s*(\d+)\s*:\s*(.*)/s) {
            $tests_to_skip = $1;
            $skip_reason = 'skip_eval';
            my $code = $2;
            $should_skip = eval "package main; $code";
            bail_out("$name - skip_eval - failed to eval the Perl code "
                     . "\"$code\": $@") if $@;
        }
    }

    if (defined(my $skip_nginx = scalar($block->skip_nginx))) {
        if ($skip_nginx =~ /^\s*(\d+)\s*:\s*([<>]=?)\s*(\d+)\.(\d+)\.(\d+)(?:\s*:\s*(.*))?\s*$/) {
            $tests_to_skip = $1;
            my ($op, $ver) = ($2, get_canon_version($3, $4, $5));
            $skip_reason = $6 || "nginx version $op $3.$4.$5";
            if (eval "$NginxVersion $op $ver") {
                $should_skip = 1;
            }
        } else {
            bail_out("$name - Invalid --- skip_nginx spec: $skip_nginx");
        }
    }

    my ($should_todo, $todo_reason);
    if (defined(my $todo = scalar($block->todo))) {
        if ($todo =~ /^\s*(\d+)\s*:\s*(.*)/s) {
            ($should_todo, $tests_to_skip, $todo_reason) = (1, $1, $2);
        } else {
            bail_out("$name - Invalid --- todo spec: $todo");
        }
    }

    return ($tests_to_skip, $should_skip, $skip_reason || 'various reasons',
            $should_todo, $todo_reason || 'various reasons');
}

sub run_test ($) {
    my ($block) = @_;
    return if defined scalar($block->SKIP);

    my $name = $block->name;
    my $rand_ports = {};

    my $config = scalar($block->config);
    if (!defined $config) {
        # like the real framework: a block without --- config runs against
        # the previous block's configuration
        $config = $PrevConfig // '';
    } else {
        $PrevConfig = $config;
    }
    $config = expand_env_in_text($config, $name, $rand_ports);

    local $LogLevel = scalar($block->log_level) || $LogLevel;
    my $must_die = scalar($block->must_die);
    local $UseValgrind = defined $must_die ? undef : $UseValgrind;

    for my $sec (qw(http2 http3 stap curl udp_listen)) {
        if (defined $block->$sec) {
            warn "WARNING: $name - --- $sec is not supported by this runner; ignored\n";
        }
    }

    my ($tests_to_skip, $should_skip, $skip_reason, $should_todo, $todo_reason)
        = block_skip_info($block);

    # the previous block's server goes first
    finish_prev_block();

    if ($should_skip && defined $tests_to_skip) {
        for (1 .. $RepeatEach) {
            SKIP: {
                Test::More::skip("$name - $skip_reason", $tests_to_skip);
            }
        }
        return;
    }
    if ($should_todo) {
        for (1 .. $RepeatEach) {
            TODO: {
                Test::More::todo_skip("$name - $todo_reason", $tests_to_skip);
            }
        }
        return;
    }

    setup_server_root();
    write_user_files($block, $rand_ports);
    write_config_file($block, $config, $rand_ports);

    if (defined $must_die) {
        run_must_die($block, $must_die);
        return;
    }

    if (my $err = start_nginx($block)) {
        Test::More::fail("$name - failed to start nginx: $err");
        stop_nginx($name);
        return;
    }

    $PrevBlock = $block;

    if (scalar($block->init)) {
        my $code = scalar($block->init);
        eval "package main; $code; 1" or bail_out("$name - init failed: $@");
    }

    $ErrLogFilePos = 0;
    for my $i (0 .. $RepeatEach - 1) {
        if ($i > 0) {
            write_user_files($block, $rand_ports);
        }
        my ($tcp_sock, $tcp_query_file) = start_tcp_server($block);
        run_test_helper($block, $i);
        finish_tcp_server($block, $tcp_sock, $tcp_query_file);
    }

    if (defined $NginxPid && !is_running($NginxPid)) {
        Test::More::fail("$name - the nginx process $NginxPid is gone "
                         . "(crashed?)" . stderr_excerpt());
        undef $NginxPid;
    }

    if ($UseValgrind) {
        # valgrind reports leaks only when nginx exits
        my $status = stop_valgrind_nginx($name);
        check_valgrind_log($block, $status);
        check_shutdown_error_log($block);
        $PrevBlock = undef;
    }
}

sub stop_valgrind_nginx {
    my ($name) = @_;
    my $pid = $ChildPid;
    return undef if !defined $pid;

    my $status;
    kill SIGQUIT, $pid;
    my $deadline = time + max($Timeout, 60);
    while (time < $deadline) {
        my $r = waitpid($pid, WNOHANG);
        if ($r == $pid) { $status = $?; last }
        last if $r == -1;
        sleep 0.05;
    }
    if (!defined $status && waitpid($pid, WNOHANG) == 0) {
        warn "$name - timeout when waiting for nginx (valgrind) $pid to quit\n";
        kill SIGTERM, $pid;
        sleep 1;
        kill SIGKILL, -$pid;
        kill SIGKILL, $pid;
        waitpid($pid, 0);
        $status = $?;
    }
    undef $ChildPid;
    undef $NginxPid;
    unlink $PidFile;
    return $status;
}

# stop the server of the previous block and run its shutdown checks
sub finish_prev_block {
    if (defined $NginxPid || defined $ChildPid || -f $PidFile) {
        stop_nginx($PrevBlock ? $PrevBlock->name : 'cleanup');
    }
    if (defined $PrevBlock) {
        check_shutdown_error_log($PrevBlock);
        undef $PrevBlock;
    }
}

# Test files that share a server root (and so, normally, a port) must not
# run at the same time: each would wipe and stop the other's server.  Hold
# a lock beside the server root for as long as this test file runs.
our $ServRootLock;

sub lock_server_root {
    my $file = "$ServRoot.lock";
    open $ServRootLock, '>>', $file
        or bail_out("Cannot open the lock file $file: $!");
    if (!flock($ServRootLock, Fcntl::LOCK_EX() | Fcntl::LOCK_NB())) {
        warn "# waiting for another test run that uses $ServRoot ...\n";
        flock($ServRootLock, Fcntl::LOCK_EX())
            or bail_out("Cannot lock $file: $!");
    }
}

sub run_tests () {
    $RunTestsCalled = 1;
    lock_server_root();
    $NginxVersion = get_nginx_version();

    if (!Test::More->builder->has_plan) {
        Test::More::plan('no_plan');
    }

    # a server left over from an earlier run (TEST_NGINX_NO_CLEAN, a crash)
    if (-f $PidFile) {
        my $pid = get_pid_from_pidfile();
        if ($pid && is_running($pid)) {
            stop_nginx('startup');
        } else {
            unlink $PidFile;
        }
    }

    my @blocks = Test::Base::blocks();
    @blocks = shuffle(@blocks) if !$NoShuffle;

    for my $block (@blocks) {
        for my $hdl (@BlockPreprocessors) {
            $hdl->($block);
        }
        $block->set_value('name', "$0 " . $block->name);
        run_test($block);
    }

    cleanup();
}

END {
    return if $InSubprocess;
    local $?;
    cleanup();
    return if !$RunTestsCalled;

    if ($UseValgrind || !$ENV{TEST_NGINX_NO_CLEAN}) {
        finish_prev_block();
    }
}

1;

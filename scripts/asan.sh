#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# nginx and the module under AddressSanitizer + UndefinedBehaviorSanitizer
# (make test-asan).
#
#   scripts/asan.sh build            build build/asan/sbin/nginx and
#                                    build/asan/modules/<module>.so
#   scripts/asan.sh test [FILES...]  run the Test::Nginx suite with them
#                                    (the TEST_NGINX_* environment of
#                                    `make test`), then fail on any
#                                    sanitizer report
#   scripts/asan.sh check            only scan build/asan/logs/
#
# The binary is nginx from Debian's nginx source package (fuzz/nginx-src.sh),
# configured with the packaged binary's flags (conf_flags of nginx-dev),
# --with-cc=clang (ASAN_CC; see below), plus
#   --with-cc-opt='-fsanitize=address,undefined -fno-omit-frame-pointer -g -O1'
#   --with-ld-opt='-fsanitize=address,undefined'
# and the module is built in the same tree as a dynamic module, so both
# carry the same flags.  ASAN_CC_OPT_EXTRA adds compiler options (e.g.
# -DNGX_DEBUG_PALLOC=1: every pool allocation its own malloc()).
#
# nginx forks (daemon, workers) and its children inherit the sanitizer
# options: every report goes to build/asan/logs/san.<pid>, which `check`
# reads after the run, along with the servroot's logs.  Known reports in
# nginx's own code are suppressed by scripts/asan-ubsan.supp and
# scripts/asan-lsan.supp (each entry says why); nothing in the module is.
#
# Environment: TEST_NGINX_PORT [1986] and TEST_NGINX_SERVROOT
# [t/servroot-asan], so that a run does not meet a `make test` nginx.

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

MODULE=ngx_http_idempotency_module
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
A=$ROOT/build/asan
NGINX_DEV=${NGINX_DEV:-/usr/share/nginx/src}
CC_OPT="-fsanitize=address,undefined -fno-omit-frame-pointer -g -O1${ASAN_CC_OPT_EXTRA:+ $ASAN_CC_OPT_EXTRA}"
LD_OPT="-fsanitize=address,undefined"
# clang, not gcc: GCC 12's libubsan ignores UBSAN_OPTIONS=log_path, and
# UBSan reports from daemonized nginx processes must reach a file that
# outlives the test block (the runner empties the log directory per block)
ASAN_CC=${ASAN_CC:-clang}
LOGS=$A/logs

log() { echo "asan: $*" >&2; }
die() { log "$*"; exit 1; }

# the packaged binary has more static modules than conf_flags lists
# (sub, addition, gunzip, ...; the suite uses some): take its other
# --with-* options from `nginx -V`, except the dynamic modules and the
# compiler/linker options
pkg_extra_flags() {
    local line a
    local -a pkg
    EXTRA=()
    [ -x "$NGINX_BIN" ] || return 0
    line=$("$NGINX_BIN" -V 2>&1 | sed -n 's/^configure arguments: //p')
    eval "pkg=( $line )"
    for a in "${pkg[@]}"; do
        case $a in
            --with-cc-opt=*|--with-ld-opt=*|*=dynamic) continue ;;
            --with-*) ;;
            *) continue ;;
        esac
        case " $flags " in *" $a "*) continue ;; esac
        EXTRA+=("$a")
    done
}

build() {
    local src flags sig
    mkdir -p "$A"
    exec 7>"$A/.build.lock"
    flock 7

    if ! command -v "$ASAN_CC" >/dev/null 2>&1; then
        log "installing clang"
        apt-get update -qq >&2 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends clang libclang-rt-dev >&2 \
            || die "$ASAN_CC not found and could not be installed"
    fi

    src=$("$ROOT/fuzz/nginx-src.sh") || exit 1
    [ -f "$NGINX_DEV/conf_flags" ] || die "$NGINX_DEV/conf_flags not found (make deps: nginx-dev)"
    flags=$(cat "$NGINX_DEV/conf_flags")
    pkg_extra_flags
    sig="$src $(cat "$src/../version" 2>/dev/null) $(echo "$flags" | cksum) $ASAN_CC $CC_OPT $LD_OPT ${EXTRA[*]} $(cksum < "$ROOT/config")"

    if [ ! -f "$A/.configured" ] || [ "$(cat "$A/.configured")" != "$sig" ]; then
        log "configure nginx $(cat "$src/../version" 2>/dev/null) with sanitizers ($A/configure.log)"
        log "flags: conf_flags + ${EXTRA[*]} --with-cc=$ASAN_CC"
        rm -rf "$A/nginx-src" "$A/obj" "$A/.configured"
        cp -a "$src" "$A/nginx-src"
        mkdir -p "$A/obj"
        (
            # a relative --builddir, as in the Makefile (".S" in a path)
            cd "$A/nginx-src" && . "$NGINX_DEV/conf_flags" &&
            ./configure "${NGX_CONF_FLAGS[@]}" "${EXTRA[@]}" --with-cc="$ASAN_CC" \
                --with-cc-opt="$CC_OPT" --with-ld-opt="$LD_OPT" \
                --add-dynamic-module="$ROOT" --builddir=../obj
        ) > "$A/configure.log" 2>&1 \
            || { tail -n 30 "$A/configure.log" >&2; die "configure failed"; }
        # the module list of the .so defines ngx_modules[] and
        # ngx_module_names[] as the binary does; ASan would register the
        # .so's 2-element arrays over the binary's (the symbols resolve to
        # the binary's) and report the next reload's copy of the list as a
        # global-buffer-overflow: leave that generated file uninstrumented
        MODS_O="../obj/${MODULE}_modules.o" perl -0pi -e \
            's{(\n\Q$ENV{MODS_O}\E:.*?\$\(CFLAGS\))}{$1 -fno-sanitize=address}s' \
            "$A/obj/Makefile"
        grep -q -- '-fno-sanitize=address' "$A/obj/Makefile" \
            || die "could not patch the module list's rule in $A/obj/Makefile"
        echo "$sig" > "$A/.configured"
    fi

    log "make (nginx + $MODULE.so, $A/make.log)"
    make -C "$A/nginx-src" -f "$A/obj/Makefile" -j"$(nproc 2>/dev/null || echo 2)" \
            binary modules > "$A/make.log" 2>&1 \
        || { grep -E 'error|Error' "$A/make.log" | head -n 30 >&2; die "make failed ($A/make.log)"; }

    mkdir -p "$A/sbin" "$A/modules"
    cp "$A/obj/nginx" "$A/sbin/nginx.tmp" && mv -f "$A/sbin/nginx.tmp" "$A/sbin/nginx"
    cp "$A/obj/$MODULE.so" "$A/modules/$MODULE.so.tmp" \
        && mv -f "$A/modules/$MODULE.so.tmp" "$A/modules/$MODULE.so"
    log "built build/asan/sbin/nginx ($("$A/sbin/nginx" -v 2>&1 | sed 's/.*: //'))" \
        "and build/asan/modules/$MODULE.so"
}

# every sanitizer report in the logs of the last run; exit 1 if any.
# Two leaks are nginx's own and are not counted: the pool of the start-up
# cycle, which main() does not free when nginx exits early (a bad
# configuration, a port still in use), and the whole configuration of a
# successful "nginx -t", which main() returns without freeing;
# LeakSanitizer cannot suppress them without also hiding every leaked
# pool (scripts/asan-lsan.supp holds the other known nginx leaks).
check() {
    local servroot=$1

    perl - "$ROOT" "$LOGS" "$servroot" <<'PERL'
use strict;
use warnings;

my ($root, $logs, $servroot) = @ARGV;
my @files = glob("$logs/*");
push @files, split /\n/, `find '$servroot' -name '*.log' 2>/dev/null`
    if $servroot && -d $servroot;

my ($bad, $ignored, $nfiles) = (0, 0, 0);
my (%count, %first);

for my $f (@files) {
    open my $fh, '<', $f or next;
    local $/;
    my $t = <$fh>;
    close $fh;
    next unless defined $t;
    (my $name = $f) =~ s/^\Q$root\E\///;
    my @found;

    while ($t =~ /^(.*runtime error:.*)$/mg) {
        my $e = $1;
        # the frame that made it, when the line itself does not say
        push @found, $e;
    }
    push @found, $1 while $t =~ /^==\d+==(ERROR: AddressSanitizer:[^\n]*?)(?: on address.*)?$/mg;
    push @found, $1 while $t =~ /^==\d+==(WARNING: AddressSanitizer.*)$/mg;

    # a successful "nginx -t" returns from main() without freeing the
    # cycle it read: everything allocated for the configuration leaks at
    # exit, nginx's own doing.  Such a log has leaks from ngx_init_cycle
    # only (besides frame-less ones that hang off them, OpenSSL's).
    my (@leaks, $config_only);
    $config_only = 1;

    while ($t =~ /((?:Direct|Indirect) leak of .*?)\n((?:[ \t]+#\d+ .*\n)+)/g) {
        my ($head, $stack) = ($1, $2);
        my @fn = grep { !/^(?:__interceptor_|malloc$|calloc$|realloc$|posix_memalign$)/ }
                 ($stack =~ /#\d+ 0x[0-9a-f]+ in (\S+)/g);
        if (join(' ', @fn > 3 ? @fn[0 .. 2] : @fn)
            eq 'ngx_memalign ngx_create_pool main')
        {
            $ignored++;
            next;
        }
        $config_only = 0
            if grep({ /^ngx_/ } @fn) && !grep({ $_ eq 'ngx_init_cycle' } @fn);
        $head =~ s/ of \d+ byte\(s\) in \d+ object\(s\)//;
        push @leaks, "$head " . join(' < ', @fn[0 .. ($#fn < 6 ? $#fn : 6)]);
    }

    if (@leaks && $config_only
        && grep { /ngx_init_cycle < main/ } @leaks)
    {
        $ignored += @leaks;
    } else {
        push @found, @leaks;
    }

    next unless @found;
    $nfiles++;
    for (@found) {
        $bad++;
        $count{$_}++;
        $first{$_} //= $name;
    }
}

my $n = () = glob("$logs/*");
if ($bad) {
    print STDERR "asan: $bad sanitizer report(s) in $nfiles of $n process logs"
        . " (build/asan/logs/), " . scalar(keys %count) . " distinct:\n";
    my @k = sort { $count{$b} <=> $count{$a} } keys %count;
    for (@k[0 .. ($#k < 19 ? $#k : 19)]) {
        print STDERR "  $count{$_} x $_\n       (first in $first{$_})\n";
    }
    exit 1;
}
print STDERR "asan: no sanitizer reports ($n process logs in build/asan/logs/"
    . ($ignored ? "; $ignored leak(s) of nginx's start-up cycle or an \"nginx -t\" not counted" : "")
    . ")\n";
exit 0;
PERL
}

test_suite() {
    local rc crc servroot

    [ -x "$A/sbin/nginx" ] && [ -f "$A/modules/$MODULE.so" ] \
        || die "build/asan not built (scripts/asan.sh build)"

    servroot=${TEST_NGINX_SERVROOT_ASAN:-$ROOT/t/servroot-asan}
    rm -rf "$LOGS"
    mkdir -p "$LOGS"

    export TEST_NGINX_BINARY=$A/sbin/nginx
    export TEST_NGINX_LOAD_MODULES=$A/modules/$MODULE.so
    export TEST_NGINX_SERVROOT=$servroot
    export TEST_NGINX_PORT=${TEST_NGINX_ASAN_PORT:-1986}
    export TEST_NGINX_SERVER_PORT=$TEST_NGINX_PORT
    # sanitizers slow start-up and requests down
    export TEST_NGINX_TIMEOUT=${TEST_NGINX_TIMEOUT:-10}

    # one file per process: build/asan/logs/san.<pid>.  No abort on
    # error: a leak report at exit would turn every "must die"
    # configuration test into a core dump (a dying nginx leaks its
    # start-up cycle); exit code 1 is nginx's own for a failed start, and
    # every report is counted from the logs below whatever the exit.
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=1:log_path=$LOGS/san${ASAN_OPTIONS_EXTRA:+:$ASAN_OPTIONS_EXTRA}"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$LOGS/san"
    [ -f "$ROOT/scripts/asan-ubsan.supp" ] \
        && UBSAN_OPTIONS+=":suppressions=$ROOT/scripts/asan-ubsan.supp"
    UBSAN_OPTIONS+=${UBSAN_OPTIONS_EXTRA:+:$UBSAN_OPTIONS_EXTRA}
    if [ -f "$ROOT/scripts/asan-lsan.supp" ]; then
        export LSAN_OPTIONS="suppressions=$ROOT/scripts/asan-lsan.supp:print_suppressions=0"
    fi

    log "suite with nginx build/asan/sbin/nginx, port $TEST_NGINX_PORT, servroot ${servroot#$ROOT/}"
    scripts/run-tests.sh "$@"
    rc=$?

    check "$servroot"
    crc=$?

    if [ $rc -ne 0 ]; then
        log "FAILED: the suite failed (prove exit $rc)"
    fi
    if [ $crc -ne 0 ]; then
        log "FAILED: sanitizer reports (build/asan/logs/)"
    fi
    [ $rc -eq 0 ] && [ $crc -eq 0 ] && log "passed: the suite and no sanitizer reports"
    [ $rc -eq 0 ] && [ $crc -eq 0 ]
}

case ${1:-} in
    build) build ;;
    test)  shift; test_suite "$@" ;;
    check) check "${TEST_NGINX_SERVROOT_ASAN:-$ROOT/t/servroot-asan}" ;;
    *) sed -n '5,33p' "$0" >&2; exit 2 ;;
esac

# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# ngx_http_idempotency_module: build, demo and tests (GNU make, Debian 12).
#
#   make              build build/ngx_http_idempotency_module.so against the
#                     packaged nginx (Debian's nginx-dev tree)
#   make test         deps + build + services + 20 s of each fuzz target
#                     (FUZZ_TEST_SECONDS=0: none) + the Test::Nginx suite
#                     (make test TEST_FILES=t/010-x.t, PROVE_FLAGS=-v);
#                     it stops the services it started (KEEP_SERVICES=1:
#                     they stay), and leaves those that were running
#                     + the short fault run (FAULTS_TEST=0: none)
#   make run          demo on http://127.0.0.1:8080 (make stop to end it)
#   make NGINX_SRC=/path/to/nginx-x.y.z
#                     build against an upstream nginx source tree instead
#                     (NGINX_OBJ=, MODULE_SO=: where; make nginx-bin: its
#                     nginx binary too)
#   make test-matrix  the suite against every supported nginx version,
#                     each built from source (scripts/matrix.sh)
#   make deb          the Debian package libnginx-mod-http-idempotency in
#                     build/deb/ (make test-deb tries it in the system nginx)

SHELL := /bin/bash
.DEFAULT_GOAL := all

# nginx's configure and its generated Makefile split paths at spaces: a
# checkout whose path has one cannot be built (nor can make's own rules
# name its files), so say so before anything runs
ifneq ($(words $(CURDIR)),1)
  $(error the checkout's path has a space ("$(CURDIR)"): nginx's build \
    cannot take one; clone or move the checkout to a path without spaces)
endif
# The steps of deps -> build -> services -> test must not overlap; the
# nginx sub-make still compiles in parallel with -jN.
.NOTPARALLEL:
MAKEFLAGS += --no-print-directory

MODULE      := ngx_http_idempotency_module
BUILD       := $(CURDIR)/build
# where the module is copied once built (make test loads this one)
MODULE_SO   ?= build/$(MODULE).so
SO          := $(MODULE_SO)
SRCS        := $(wildcard $(MODULE)/*.c $(MODULE)/*.h)

NGINX_BIN   ?= /usr/sbin/nginx
NGINX_DEV   ?= /usr/share/nginx/src
NGINX_SRC   ?=
CC_OPT      ?= -Wextra -g -O2
# extra ./configure flags for an NGINX_SRC build
CUSTOM_CONF_FLAGS ?=

MYSQL_PORT        ?= 3307
MYSQL2_PORT       ?= 3308
REDIS_PORT        ?= 6380
DEMO_PORT         ?= 8080
BACKEND_PORT      ?= 8081
# the demo backend's interpreter: Debian's, with python3-pymysql (deps.sh)
DEMO_PYTHON       ?= /usr/bin/python3
TEST_BACKEND_PORT ?= 8091
# the suite's PHP-FPM and uWSGI (scripts/services.sh php-fpm, uwsgi)
PHPFPM_PORT       ?= 8094
UWSGI_PORT        ?= 8095
# the gRPC test backend (t/tools/grpc-server.js)
TEST_GRPC_PORT    ?= 8093
# Test::Nginx's port; the tests' other nginx ports follow it (IdemStress)
TEST_NGINX_PORT   ?= 1984
TEST_FILES        ?= t/
PROVE_FLAGS       ?=
# 1: make test and make test-valgrind leave the services they started
# running (scripts/run-tests.sh stops them otherwise)
KEEP_SERVICES     ?= 0

export IDEM_MYSQL_PORT := $(MYSQL_PORT)
export IDEM_MYSQL2_PORT := $(MYSQL2_PORT)
export IDEM_REDIS_PORT := $(REDIS_PORT)
export IDEM_PHPFPM_PORT := $(PHPFPM_PORT)
export IDEM_UWSGI_PORT := $(UWSGI_PORT)
export NGINX_BIN

ifeq ($(strip $(NGINX_SRC)),)
  OBJ      := build/nginx-obj
  CONF_SIG := debian $(NGINX_DEV) $(CC_OPT) \
              $(shell cat $(NGINX_DEV)/conf_flags 2>/dev/null | cksum)
else
  NGINX_SRC_ABS := $(abspath $(NGINX_SRC))
  # the build directory of an NGINX_SRC build (one per tree and flags)
  NGINX_OBJ ?= build/nginx-obj-custom
  OBJ      := $(NGINX_OBJ)
  CONF_SIG := custom $(NGINX_SRC_ABS) $(CUSTOM_CONF_FLAGS)
  # --builddir relative to the tree, see OBJ_REL below
  OBJ_REL  := $(shell realpath -m --relative-to='$(NGINX_SRC_ABS)' '$(abspath $(OBJ))')
endif

# nginx's auto/make turns "x.c" into "<builddir>/x.o" and then rewrites
# every "….S" of the result into an object name too, the builddir's
# own: an absolute --builddir under a folder named "something.S" (as
# mktemp may name one) breaks the build.  The build directory is given
# relative to the tree configure runs in, a path of the checkout's own
# folders (build/...), which never holds ".S".
ifneq ($(findstring .S/,$(OBJ_REL)/),)
  $(error NGINX_OBJ seen from NGINX_SRC is "$(OBJ_REL)": nginx's build \
    cannot take a build directory whose path holds ".S"; set NGINX_OBJ \
    (or NGINX_SRC) so that the path from one to the other has none)
endif

.PHONY: all build deps services services-stop run stop test test-valgrind \
        stress stress-short dashboard bench bench-shards test-galera fuzz \
        test-asan deb test-deb clean distclean help bench-sqlcost bench-sqlcost-variants \
        bench-keycost \
        bench-pagefill FORCE \
        nginx-bin test-matrix bench-scale test-paths

all: build  ## build the module (the default)

# Builds are serialized per checkout (several people share it).
build:  ## build build/ngx_http_idempotency_module.so
	@mkdir -p build
	@flock build/.build.lock $(MAKE) $(SO)

# ---------------------------------------------------------------- build

# A file whose content is the configuration signature: it changes (and so
# triggers configure / the copy of the .so) only when the signature does.
$(OBJ)/.sig: FORCE
	@mkdir -p $(OBJ)
	@echo '$(CONF_SIG)' | cmp -s - $@ || echo '$(CONF_SIG)' > $@

SO_SIG := $(dir $(SO)).so-sig

$(SO_SIG): FORCE
	@mkdir -p $(dir $(SO))
	@echo '$(OBJ) $(CONF_SIG)' | cmp -s - $@ || echo '$(OBJ) $(CONF_SIG)' > $@

$(SO): $(OBJ)/.configured $(SRCS) $(SO_SIG)
	@echo "make modules ($(OBJ))"
	@$(MAKE) -C $(if $(NGINX_SRC),$(NGINX_SRC_ABS),build/nginx-src) \
	    -f $(abspath $(OBJ))/Makefile modules
	@cp $(OBJ)/$(MODULE).so $@.tmp && mv -f $@.tmp $@
	@echo "built $@"

ifeq ($(strip $(NGINX_SRC)),)

$(NGINX_DEV)/conf_flags:
	@echo "error: $@ not found: install nginx-dev (make deps)" >&2; exit 1

# configure writes a Makefile into the current directory: work on a copy
build/nginx-src/.copied: $(NGINX_DEV)/conf_flags
	@rm -rf build/nginx-src
	@mkdir -p build
	@cp -a $(NGINX_DEV) build/nginx-src
	@touch $@

$(OBJ)/.configured: config build/nginx-src/.copied $(OBJ)/.sig
	@echo "configure (Debian nginx-dev, $(OBJ)/configure.log)"
	@rm -f $@
	@cd build/nginx-src && . ./conf_flags && \
	  ./configure "$${NGX_CONF_FLAGS[@]}" --with-cc-opt='$(CC_OPT)' \
	    --add-dynamic-module=$(CURDIR) --builddir=../nginx-obj \
	    > $(BUILD)/nginx-obj/configure.log 2>&1 \
	  || { tail -n 30 $(BUILD)/nginx-obj/configure.log >&2; \
	       echo "error: configure failed (see $(OBJ)/configure.log)" >&2; \
	       exit 1; }
	@touch $@

else

$(OBJ)/.configured: config $(OBJ)/.sig
	@echo "configure ($(NGINX_SRC_ABS), $(OBJ)/configure.log)"
	@rm -f $@
	@cd $(NGINX_SRC_ABS) && \
	  if [ -x ./configure ]; then cf=./configure; else cf=./auto/configure; fi && \
	  $$cf --with-compat $(CUSTOM_CONF_FLAGS) \
	    --add-dynamic-module=$(CURDIR) --builddir='$(OBJ_REL)' \
	    > $(abspath $(OBJ))/configure.log 2>&1 \
	  || { tail -n 30 $(abspath $(OBJ))/configure.log >&2; \
	       echo "error: configure failed (see $(OBJ)/configure.log)" >&2; \
	       exit 1; }
	@touch $@

# the nginx binary of that tree, configured as the module is
nginx-bin: $(OBJ)/.configured  ## with NGINX_SRC: that tree's nginx binary too, in NGINX_OBJ
	@echo "make binary ($(OBJ))"
	@$(MAKE) -C $(NGINX_SRC_ABS) -f $(abspath $(OBJ))/Makefile binary

endif

FORCE:

# ------------------------------------------------------------- services

deps:  ## install the Debian packages that are missing
	@scripts/deps.sh

services:  ## start the private MariaDB instances, Redis, PHP-FPM and uWSGI
	@scripts/services.sh start

services-stop:  ## stop them
	@scripts/services.sh stop

# ----------------------------------------------------------------- demo

RUN := $(BUILD)/run

run: deps build services  ## the demo on 127.0.0.1:8080, with curl lines to try
	@mkdir -p $(RUN)
	@scripts/services.sh reset >/dev/null
	@PYTHON=$(DEMO_PYTHON) BACKEND_ARGS="--bank-db idempotency --bank-user idem \
	    --bank-password idem-secret --bank-socket $(BUILD)/services/mysql.sock" \
	    scripts/services.sh backend restart $(BACKEND_PORT) $(RUN)/backend.pid $(RUN)/backend.log
	@sed -e 's|@PREFIX@|$(RUN)|g' \
	     -e 's|@MODULE@|$(BUILD)/$(MODULE).so|g' \
	     -e 's|@NGINX_PORT@|$(DEMO_PORT)|g' \
	     -e 's|@BACKEND_PORT@|$(BACKEND_PORT)|g' \
	     -e 's|@MYSQL_PORT@|$(MYSQL_PORT)|g' \
	     -e 's|@REDIS_PORT@|$(REDIS_PORT)|g' \
	     demo/nginx.conf.in > $(RUN)/nginx.conf
	@scripts/nginx.sh start $(RUN)
	@echo
	@echo "demo: http://127.0.0.1:$(DEMO_PORT) -> backend 127.0.0.1:$(BACKEND_PORT)"
	@echo "      config build/run/nginx.conf, logs build/run/error.log, build/run/backend.log"
	@echo
	@NGINX_PORT=$(DEMO_PORT) BACKEND_PORT=$(BACKEND_PORT) demo/try.sh --print
	@echo
	@echo "(run them all: NGINX_PORT=$(DEMO_PORT) BACKEND_PORT=$(BACKEND_PORT) demo/try.sh; stop: make stop)"

stop:  ## stop everything make run started
	@scripts/nginx.sh stop $(RUN)
	@scripts/services.sh backend stop $(RUN)/backend.pid
	@scripts/services.sh backend stop $(BUILD)/test/backend.pid -q
	@scripts/services.sh stop

# ---------------------------------------------------------------- tests

TEST_ENV = \
    TEST_NGINX_BINARY=$(NGINX_BIN) \
    TEST_NGINX_LOAD_MODULES=$(abspath $(SO)) \
    TEST_NGINX_SERVROOT=$(CURDIR)/t/servroot \
    TEST_NGINX_PORT=$(TEST_NGINX_PORT) \
    TEST_NGINX_MYSQL_HOST=127.0.0.1 \
    TEST_NGINX_MYSQL_PORT=$(MYSQL_PORT) \
    TEST_NGINX_MYSQL_SOCKET=$(BUILD)/services/mysql.sock \
    TEST_NGINX_MYSQL_USER=idem \
    TEST_NGINX_MYSQL_PASSWORD=idem-secret \
    TEST_NGINX_MYSQL_DB=idempotency \
    TEST_NGINX_MYSQL2_PORT=$(MYSQL2_PORT) \
    TEST_NGINX_MYSQL2_SOCKET=$(BUILD)/services/mysql2.sock \
    TEST_NGINX_REDIS_HOST=127.0.0.1 \
    TEST_NGINX_REDIS_PORT=$(REDIS_PORT) \
    TEST_NGINX_REDIS_SOCKET=$(BUILD)/services/redis.sock \
    TEST_NGINX_BACKEND_PORT=$(TEST_BACKEND_PORT) \
    TEST_NGINX_PHPFPM_PORT=$(PHPFPM_PORT) \
    TEST_NGINX_PHPFPM_TERM_SOCKET=$(BUILD)/services/php-fpm-term.sock \
    TEST_NGINX_UWSGI_PORT=$(UWSGI_PORT) \
    TEST_NGINX_GRPC_PORT=$(TEST_GRPC_PORT) \
    PROVE_FLAGS='$(PROVE_FLAGS)' \
    KEEP_SERVICES=$(KEEP_SERVICES)

test: deps build  ## the whole suite (TEST_FILES=, PROVE_FLAGS=, KEEP_SERVICES=1), with a short fuzz run first
	@python3 scripts/layers.py > build/layers.txt || \
	   { sed -n '/^layers:/,$$p' build/layers.txt; exit 1; }
	@scripts/node-deps.sh
	@if [ "$(FUZZ_TEST_SECONDS)" != 0 ]; then fuzz/run.sh -t $(FUZZ_TEST_SECONDS); fi
	@env $(TEST_ENV) scripts/run-tests.sh $(TEST_FILES)
	@if [ "$(TEST_FILES)" = t/ ] && [ "$(FAULTS_TEST)" != 0 ]; then \
	   if [ "$$(id -u)" = 0 ]; then timeout -k 10 120 scripts/faults/run.sh --short; \
	   else echo "test: faults skipped (they need root)"; fi; fi

test-valgrind: deps build  ## the suite with nginx under valgrind (KEEP_SERVICES=1)
	@env $(TEST_ENV) TEST_NGINX_USE_VALGRIND=1 scripts/run-tests.sh $(TEST_FILES)

# the version matrix (scripts/matrix.sh, not part of `make test`): nginx
# and the module built from source for each supported version, in
# build/matrix/<version>/, and the whole suite against each; the table
# goes to build/matrix/summary.md.  MATRIX_VERSIONS='1.30.4 1.31.4' runs
# some; the ports and TEST_FILES apply to every run.
MATRIX_VERSIONS ?=

test-matrix: deps services  ## the suite against every supported nginx version
	@env MYSQL_PORT=$(MYSQL_PORT) MYSQL2_PORT=$(MYSQL2_PORT) \
	    REDIS_PORT=$(REDIS_PORT) TEST_BACKEND_PORT=$(TEST_BACKEND_PORT) \
	    TEST_NGINX_PORT=$(TEST_NGINX_PORT) \
	    PHPFPM_PORT=$(PHPFPM_PORT) UWSGI_PORT=$(UWSGI_PORT) \
	    TEST_GRPC_PORT=$(TEST_GRPC_PORT) \
	    TEST_FILES='$(TEST_FILES)' PROVE_FLAGS='$(PROVE_FLAGS)' \
	    scripts/matrix.sh $(MATRIX_VERSIONS)

# race and fault harness (t/stress/): `make test` runs the short races;
# `make stress` runs the long one (more than 10 000 racing duplicates) and
# `make stress-short` the short races and the faults, both with figures

stress: deps build services  ## the long race run (30 000 duplicates)
	@env $(TEST_ENV) IDEM_STRESS=long PROVE_FLAGS=-v scripts/run-tests.sh t/100-races.t

stress-short: deps build services  ## the short races and the faults, with figures
	@env $(TEST_ENV) PROVE_FLAGS=-v scripts/run-tests.sh t/100-races.t t/110-faults.t

dashboard: deps build services  ## make stress with its metrics scraped: docs/operations.png
	@env $(TEST_ENV) bench/dashboard.sh

# first-request throughput with 1 vs 2 MySQL shards (docs/scale-out.md):
# unlimited, and with each mariadbd held to SHARD_CPU CPUs (default 0.3)
# by a cgroup quota, as if each shard were its own host (needs root)

bench-shards: deps build services  ## 1 and 2 shards, unlimited and at SHARD_CPU per shard
	@bench/shards.sh

# mariadbd CPU per request of each statement form (bench/sqlcost.c), on
# the services' MariaDB: SQLCOST_THREADS clients, SQLCOST_REQUESTS each
SQLCOST_THREADS  ?= 16
SQLCOST_REQUESTS ?= 2000

build/sqlcost: bench/sqlcost.c
	@mkdir -p build
	@$(CC) -O2 -Wall -o $@ bench/sqlcost.c \
	    $$(mariadb_config --cflags --libs) -lpthread

bench-sqlcost: deps services build/sqlcost  ## mariadbd CPU per request of each statement
	@for m in text-claim-new text-claim-dup claim-new claim-dup \
	          read-dup first; do \
	    build/sqlcost $$m $(SQLCOST_THREADS) $(SQLCOST_REQUESTS) \
	        $(MYSQL_PORT) build/services/mysql.pid || exit 1; done
	@for m in first-batch read-batch; do for n in 2 4 8 16; do \
	    build/sqlcost $$m $(SQLCOST_THREADS) $(SQLCOST_REQUESTS) \
	        $(MYSQL_PORT) build/services/mysql.pid $$n || exit 1; done; done

# the same, a first request's statements on mysql/schema.sql and variants
# of it (bench/sqlcost.sh: SQLCOST_VARIANTS, SQLCOST_ROUNDS, ...)
bench-sqlcost-variants: deps services build/sqlcost  ## mariadbd CPU per first request, by table layout
	@MYSQL_PORT=$(MYSQL_PORT) bench/sqlcost.sh

# how full the key table's pages are after a run of first requests
# (bench/pagefill.sh: PAGEFILL_RETAIN, PAGEFILL_ROUNDS, ...)
bench-pagefill: deps services build/sqlcost  ## page fill of the key table after 100,000 first requests
	@MYSQL_PORT=$(MYSQL_PORT) bench/pagefill.sh

# what the key's JSON scan and a webhook's HMAC cost a delivery, alone
# on the module's own code (bench/keycost.c, docs/benchmarks.md "Webhook
# keys"), built against the configured Debian tree of `make build`;
# KEYCOST_SECONDS per figure
KEYCOST_SECONDS ?= 2
KEYCOST_SRCS := bench/keycost.c fuzz/ngx_fuzz.c \
    $(addprefix $(MODULE)/ngx_http_idempotency_,keyscan.c json.c hmac.c)

# nginx's own pool and string code from Debian's source package (the
# fuzzers' copy, fuzz/nginx-src.sh), configured as `make build` did
build/keycost: $(KEYCOST_SRCS) $(SO)
	@src=$$(fuzz/nginx-src.sh) && \
	  $(CC) -O2 -w -o $@ -I$(OBJ) \
	    $$(for d in core event event/modules os/unix http http/modules \
	       http/v2; do echo -I$$src/src/$$d; done) -I$(MODULE) -Ifuzz \
	    $(KEYCOST_SRCS) $$(for f in core/ngx_palloc.c core/ngx_string.c \
	       core/ngx_array.c core/ngx_list.c core/ngx_buf.c \
	       core/ngx_parse_time.c os/unix/ngx_alloc.c; do \
	       echo $$src/src/$$f; done) -lyajl -lcrypto

bench-keycost: deps build build/keycost  ## µs per delivery of the key's JSON scan and a webhook's HMAC
	@build/keycost $(KEYCOST_SECONDS)

# the benchmark (bench/, docs/benchmarks.md), not part of `make test`:
# BENCH_ROUNDS, BENCH_DURATION, BENCH_CONNECTIONS, BENCH_THREADS and
# BENCH_RSS_REQUESTS override its defaults (bench/run.sh lists them all)

bench: deps build services  ## throughput against nginx and two Node.js peers
	@bench/setup.sh
	@bench/run.sh

# the store's cost against the live keys (bench/scale.sh, docs/benchmarks.md
# "The store at scale"), not part of `make bench`: on a MariaDB of its own
# (SCALE_MYSQL_PORT, a buffer pool of SCALE_BUFFER_POOL), stopped and
# removed at the end; SCALE_SIZES, SCALE_DURATION and SCALE_PORT_BASE
# override its defaults (bench/scale.sh lists them all)

bench-scale: deps build  ## first requests, replays, purge and listing at 0 to 20 M live keys
	@bench/setup.sh
	@bench/scale.sh

# a 3-node MariaDB Galera cluster on loopback (scripts/galera.sh, ports
# 13306-13308, build/galera/) and two nginx on two of its nodes racing the
# same keys (t-galera/, not part of `make test`); the cluster is stopped
# at the end, pass or fail
GALERA_BACKEND_PORT ?= 13380

test-galera: deps build  ## a 3-node Galera cluster, two nginx racing through it
	@rc=0; scripts/galera.sh start \
	  && env $(TEST_ENV) TEST_NGINX_BACKEND_PORT=$(GALERA_BACKEND_PORT) \
	       timeout -k 10 300 prove $(PROVE_FLAGS) -r t-galera/ \
	  || rc=$$?; scripts/galera.sh stop; exit $$rc

# fuzzing and sanitizers (fuzz/run.sh, scripts/asan.sh): `make fuzz` runs
# each libFuzzer target FUZZ_SECONDS; `make test` runs them
# FUZZ_TEST_SECONDS each first (0: skip); `make test-asan` runs the suite
# with nginx and the module built with ASan + UBSan (build/asan/)
FUZZ_SECONDS      ?= 300
FUZZ_TEST_SECONDS ?= 20
# the whole suite ends with make test-faults-short (as root); 0: not
FAULTS_TEST       ?= 1

fuzz: deps  ## the libFuzzer targets, FUZZ_SECONDS each
	@fuzz/run.sh -t $(FUZZ_SECONDS) $(FUZZ_TARGETS)

test-asan: deps services  ## the suite with nginx and the module under ASan/UBSan
	@scripts/asan.sh build
	@env $(TEST_ENV) scripts/asan.sh test $(TEST_FILES)

# the Debian package (debian/, built with nginx-dev's dh-sequence-nginx like
# Debian's own libnginx-mod-* packages; version from debian/changelog):
# `make deb` builds build/deb/libnginx-mod-http-idempotency_*.deb and runs
# lintian on it (scripts/deb.sh); `make test-deb` installs it into the
# system's nginx with apt-get, runs nginx -t, serves a claim and a replay
# through /usr/sbin/nginx on a free port with the private MariaDB, then
# purges it (scripts/test-deb.sh; not part of `make test`).  Both take
# /tmp/idem-make.lock.

deb:  ## build the Debian package into build/deb/, lintian-checked
	@scripts/deb.sh

test-deb: deps deb services  ## install the .deb into the system nginx, claim + replay, purge
	@scripts/test-deb.sh

# the README's commands from awkward places (scripts/paths-check.sh, on
# throwaway clones of HEAD with ports of their own): a folder only root
# may enter whose name holds ".S", an ordinary user's, a path with a
# space; CI runs it after make test
test-paths: deps  ## build, run, test and stop clones of HEAD in awkward paths
	@scripts/paths-check.sh

# ---------------------------------------------------------------- clean

clean:  ## remove the module build
	rm -rf build/nginx-obj build/nginx-obj-custom build/*.so build/*.so.tmp \
	       build/.so-sig build/matrix/*/obj build/matrix/*/*.so

distclean:  ## stop everything and remove build/ and t/servroot*
	-@scripts/nginx.sh stop $(RUN)
	-@scripts/services.sh backend stop $(RUN)/backend.pid -q
	-@scripts/services.sh backend stop $(BUILD)/test/backend.pid -q
	-@scripts/services.sh stop
	rm -rf build t/servroot*

help:  ## this list, made from the Makefile's own ## comments
	@sed -n '/^# ngx_http_idempotency_module:/,/^$$/p' Makefile | sed 's/^# \{0,1\}//'
	@echo "targets:"
	@grep -E '^[a-z-]+:.*## ' Makefile \
	  | sed -E 's/^([a-z-]+):[^#]*## (.*)/  \1\t\2/' | expand -t 18

# faults under retrying load (scripts/faults/, docs/reliability.md); the
# whole `make test` ends with test-faults-short; as root: a MariaDB in a network namespace of its
# own (idemf-db, 10.231.0.0/30, port 3347), Redis 6420, the backend 8491
# and the fence's bank 8492,
# nginx 8480, then the Galera cluster of scripts/galera.sh with nginx on
# 8482/8483; everything under build/faults/, removed at the end pass or
# fail.  FAULTS_FLAGS='--only partition,db-kill' or '--no-galera'.
# test-faults-short: one partition, one MariaDB kill and the fence's bank
# killed under withdrawals, under a minute.
# galera-durability: what a claim survives per Galera setting
# (docs/scale-out.md).
FAULTS_FLAGS ?=

.PHONY: test-faults test-faults-short galera-durability

test-faults: deps build  ## faults under retrying load, Galera too (docs/reliability.md)
	@timeout -k 30 1500 scripts/faults/run.sh $(FAULTS_FLAGS)

test-faults-short: deps build  ## a partition and a MariaDB kill under load, < 1 min
	@timeout -k 10 120 scripts/faults/run.sh --short

galera-durability: deps build  ## what a claim survives per Galera setting (docs/scale-out.md)
	@timeout -k 30 1800 scripts/faults/run.sh --durability

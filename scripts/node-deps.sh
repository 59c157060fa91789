#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Install the npm packages used by the Node.js test clients in t/tools/
# (t/tools/stripe-retry.js needs the official Stripe Node library;
# t/tools/grpc-server.js and grpc-call.js need @grpc/grpc-js;
# t/tools/webhook-sign.js signs deliveries with stripe, standardwebhooks
# and @octokit/webhooks-methods, as the providers do).
#
#   scripts/node-deps.sh           install what is missing (quiet when nothing is)
#   scripts/node-deps.sh --check   exit 1 (with a message) if something is missing
#
# The packages go into build/node (not committed: build/ is ignored), pinned
# to exact versions.  IDEM_NODE_DIR overrides the directory.
# t/tools/h2-reset.js needs nothing but node itself (built-in http2 module).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NODE_DIR=${IDEM_NODE_DIR:-$ROOT/build/node}

# exact versions, name@version
# stripe 18 is the last major that runs on Debian 12's Node.js 18, and
# @octokit/webhooks-methods 5 the last that does (6 needs Node.js 20)
PACKAGES=(stripe@18.5.0 @grpc/grpc-js@1.14.7 standardwebhooks@1.3.0
          @octokit/webhooks-methods@5.1.1)

die() { echo "node-deps: $*" >&2; exit 1; }

installed_version() {   # name -> version in NODE_DIR, or nothing
    local pj=$NODE_DIR/node_modules/$1/package.json
    [ -f "$pj" ] || return 0
    node -e 'process.stdout.write(String(require(process.argv[1]).version || ""))' \
        "$pj" 2>/dev/null || true
}

missing() {
    local spec name want
    for spec in "${PACKAGES[@]}"; do
        name=${spec%@*}
        want=${spec##*@}
        [ "$(installed_version "$name")" = "$want" ] || echo "$spec"
    done
}

command -v node >/dev/null 2>&1 \
    || die "node not found: install Node.js >= 18 (make deps)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || die "node $(node --version) is too old: Node.js >= 18 is needed"

case ${1:-} in
    --check)
        todo=$(missing)
        if [ -n "$todo" ]; then
            echo "node-deps: missing in $NODE_DIR:" $todo >&2
            exit 1
        fi
        exit 0 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

mapfile -t todo < <(missing)
[ ${#todo[@]} -eq 0 ] && exit 0

command -v npm >/dev/null 2>&1 \
    || die "npm not found: install it (Debian: apt-get install npm) to get ${todo[*]}"

echo "node-deps: npm install ${todo[*]} into $NODE_DIR"
mkdir -p "$NODE_DIR"
# a package.json of its own keeps npm from walking up to another project
[ -f "$NODE_DIR/package.json" ] \
    || printf '{\n  "name": "idem-test-node-deps",\n  "private": true\n}\n' \
        > "$NODE_DIR/package.json"
if ! npm install --prefix "$NODE_DIR" --save-exact --no-audit --no-fund \
        --loglevel=error "${todo[@]}"; then
    die "npm install of ${todo[*]} into $NODE_DIR failed (is the npm registry reachable?)"
fi

todo=$(missing)
[ -z "$todo" ] || die "still missing after npm install: $todo"

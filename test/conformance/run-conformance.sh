#!/usr/bin/env bash
# The Connect conformance suite against this server (npm run conformance): connectrpc's runner, pinned,
# installed with `go install` when missing, in server mode against test/conformance/conformance-server.ts.
# DATABASE_URL puts each server it starts on PostgreSQL (a database of its own), which starts well within
# the runner's 10 s; the embedded database may not on a busy machine. Extra arguments go to the runner
# (e.g. --run 'Basic/**' -v).
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=v1.0.7
export PATH="$PWD/node_modules/.bin:$PATH:/usr/local/go/bin"
# Each server the runner starts must answer within 10 s: cached compiled modules halve its start.
export NODE_COMPILE_CACHE="${NODE_COMPILE_CACHE:-$PWD/node_modules/.cache/node-compile-conformance}"
gobin="$(go env GOPATH)/bin"
runner="$gobin/connectconformance"
if [ ! -x "$runner" ] || ! go version -m "$runner" | grep -q "connectrpc.com/conformance[[:space:]]*$VERSION"; then
  go install "connectrpc.com/conformance/cmd/connectconformance@$VERSION"
fi
exec "$runner" --mode server --max-servers 1 --conf test/conformance/conformance.yaml \
  --known-failing @test/conformance/known-failing.txt --known-flaky @test/conformance/known-flaky.txt "$@" -- node test/conformance/conformance-server.ts

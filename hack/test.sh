#!/usr/bin/env bash
# The whole suite: static checks, compiler tests, kernel and packet tests,
# and the tests against a real kube-apiserver.
# Kernel tests need root; with CI set they fail rather than skip without it.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
hack/deps.sh
# kube-apiserver and etcd for the tests against a real API server
# (internal/apiserver): built once into hack/tools/bin, and again only when
# hack/tools changes (a cold build is 6-10 min on 2 idle cores, a relink seconds).
NFTPOLICY_TOOLS_BIN=$(hack/tools/build.sh)
export NFTPOLICY_TOOLS_BIN

unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "gofmt needed:" $unformatted >&2
	exit 1
fi
go vet ./...
# -p 2: packages run in parallel on the two CI cores; each kernel test makes
# its own uniquely named namespaces, so parallel packages never collide.
go test -count=1 -p 2 -timeout 25m ./...
# Each fuzz target for a fixed number of inputs (their seed corpora ran
# above). Counts, not durations: with -fuzztime 12s Go's coordinator can
# report its own deadline as "context deadline exceeded" and fail the run
# with no failing input when a slow machine is mid-exec at the deadline
# (seen in CI); a count has no deadline. The count includes the baseline
# pass over the stored corpus.
export FUZZMINIMIZETIME=100x
FUZZ=FuzzLoadFile FUZZTIME=3000x hack/fuzz.sh
FUZZ=FuzzCompile FUZZTIME=600x hack/fuzz.sh

#!/usr/bin/env bash
# The whole suite: static checks, compiler tests, kernel and packet tests.
# Kernel tests need root; with CI set they fail rather than skip without it.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
hack/deps.sh

unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "gofmt needed:" $unformatted >&2
	exit 1
fi
go vet ./...
# -p 2: packages run in parallel on the two CI cores; each kernel test makes
# its own uniquely named namespaces, so parallel packages never collide.
go test -count=1 -p 2 -timeout 25m ./...

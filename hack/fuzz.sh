#!/usr/bin/env bash
# Runs each `go test -fuzz` target for FUZZTIME (default 5m; a count such as
# 3000x is inputs, which hack/test.sh uses to stay clear of the deadline). FUZZ=FuzzCompile runs only that one. A failing
# input is written to the package's testdata/fuzz/<Target>/ and the command
# to rerun it is printed; plain `go test` runs every checked-in corpus.
# FuzzCompile loads tables into a kernel as root (a namespace per process).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-5m}
# New coverage is minimized for up to a minute by default, during which
# nothing else runs: keep that short so the time goes to fuzzing.
minimize=${FUZZMINIMIZETIME:-5s}

# -fuzz takes one target of one package per run.
targets=(
	"FuzzLoadFile ./k8s"
	"FuzzCompile ./enforcer"
)
for t in "${targets[@]}"; do
	read -r name pkg <<<"$t"
	if [ -n "${FUZZ:-}" ] && [ "$name" != "$FUZZ" ]; then
		continue
	fi
	echo "fuzz: $name in $pkg for $fuzztime" >&2
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "$pkg"
done

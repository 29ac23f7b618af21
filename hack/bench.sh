#!/usr/bin/env bash
# Benchmarks, not tests: report, never assert on time.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench . -benchmem -benchtime "${BENCHTIME:-3x}" ./enforcer/

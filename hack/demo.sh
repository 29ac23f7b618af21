#!/usr/bin/env bash
# make demo: build nftpolicy, then enforce deploy/examples on a sandbox of
# network namespaces (one node, five pods) and show the traffic before and
# after. Needs root; removes everything it creates, also on Ctrl-C.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
hack/deps.sh
hack/build.sh >/dev/null
exec go run ./hack/demo --nftpolicy bin/nftpolicy --examples deploy/examples

#!/usr/bin/env bash
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
version=$(git describe --always --dirty 2>/dev/null || echo dev)
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${version}" -o bin/nftpolicy ./cmd/nftpolicy
echo "built bin/nftpolicy ${version}"

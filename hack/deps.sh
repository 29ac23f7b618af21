#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine:
# nft (the oracle of the kernel tests, and `nft list` in the demo), iproute2
# (network namespaces), conntrack, iptables-nft (a co-resident the doctor
# tests write). The daemon itself executes none of them.
set -o errexit -o nounset -o pipefail

need=()
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
# iptables-nft: the doctor and inspect tests write rules with it, as
# kube-proxy's iptables mode would, to check what we read of them.
command -v iptables-nft >/dev/null 2>&1 || need+=(iptables)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "hack/deps.sh: need root to install ${need[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v go >/dev/null 2>&1 || { echo "hack/deps.sh: Go 1.26 is required (go not on PATH)" >&2; exit 1; }
# br_netfilter makes bridged pod traffic traverse the forward hook.
modprobe br_netfilter 2>/dev/null || true

#!/usr/bin/env bash
# Benchmarks, not tests: they report, never assert on time. Figures are
# ratios against a baseline measured in the same run (these machines are
# shared and noisy). Needs root for the kernel parts.
#
#   make bench                 # everything below; ~40 min on 2 cores
#   SCALES="100x100x10" make bench   # namespaces x pods-per-ns x policies-per-ns
#
# Sections and their knobs: SKIP_GO_BENCH (go test -bench), SCALES and
# ROUNDS (full program vs nft -f), SKIP_RSS and RSS_SCALES (daemon memory),
# SKIP_PPS, PPS_ROUNDS, PPS_SECONDS (per-NEW-packet cost, with the
# ClusterNetworkPolicy variants unless SKIP_CNP), SKIP_EVENTS and EVENTS
# (event -> kernel at 1k and 10k policies, and at 10k with
# CLUSTER_POLICIES ClusterNetworkPolicies, 100, unless SKIP_CNP).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
hack/deps.sh
command -v /usr/bin/time >/dev/null || { apt-get install -y -qq time >/dev/null; }

if [ -z "${SKIP_GO_BENCH:-}" ]; then
	echo "== compiler and applier (go test -bench)"
	go test -run '^$' -bench . -benchmem -benchtime "${BENCHTIME:-3x}" ./enforcer/
fi

work=$(mktemp -d)
trap 'rm -rf "$work"; for n in $(ip netns list | awk "/^nftbench-/{print \$1}"); do ip netns del "$n"; done' EXIT
go build -o "$work/nftpolicy" ./cmd/nftpolicy
go build -o "$work/gen" ./hack/bench/gen

# measure CMD...: prints "seconds maxrss_kb" of one run.
measure() {
	/usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || { cat "$work/stderr" >&2; return 1; }
	cat "$work/time"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo
echo "== full program from empty: nftpolicy apply vs nft -f of the same ruleset"
echo "   (apply includes reading the manifests and compiling; 1 warm-up + ${ROUNDS:-3} interleaved rounds, medians;"
echo "   issue 14's target at 10k pol / 10k pods: apply_vs_nft <= 2.0x, apply peak RSS <= 200 MB)"
printf '%-28s %10s %10s %10s %12s %12s %12s\n' scale elements apply_s nft_f_s apply_rss_MB nft_rss_MB apply_vs_nft
for s in ${SCALES:-100x100x10 100x100x100 100x1000x10 100x1000x100}; do
	IFS=x read -r nss pods pols <<<"$s"
	dir="$work/m-$s"
	"$work/gen" -namespaces "$nss" -pods "$pods" -policies "$pols" -local 110 -node node-1 -out "$dir"
	"$work/nftpolicy" dump --manifests "$dir" --node node-1 >"$dir.nft" 2>/dev/null
	elements=$(grep -cE '^\s+[0-9a-f:.]+( |,|$)' "$dir.nft" || true)
	: >"$work/a" ; : >"$work/n"
	for round in $(seq 0 "${ROUNDS:-3}"); do
		ip netns add "nftbench-a$round"; ip netns add "nftbench-n$round"
		a=$(measure "$work/nftpolicy" apply --manifests "$dir" --node node-1 --netns "nftbench-a$round")
		n=$(measure ip netns exec "nftbench-n$round" nft -f "$dir.nft")
		ip netns del "nftbench-a$round"; ip netns del "nftbench-n$round"
		[ "$round" -eq 0 ] && continue # warm-up
		echo "$a" >>"$work/a"; echo "$n" >>"$work/n"
	done
	at=$(awk '{print $1}' "$work/a" | median); am=$(awk '{print $2}' "$work/a" | median)
	nt=$(awk '{print $1}' "$work/n" | median); nm=$(awk '{print $2}' "$work/n" | median)
	printf '%-28s %10s %10s %10s %12d %12d %11.2fx\n' "$((nss*pols)) pol / $((nss*pods)) pods" "$elements" "$at" "$nt" "$((am/1024))" "$((nm/1024))" "$(echo "$at / $nt" | bc -l)"
done

if [ -z "${SKIP_RSS:-}" ]; then
	echo
	echo "== daemon memory: nftpolicy run on the manifests, after its first sync (VmRSS) and at its peak (VmHWM)"
	printf '%-28s %12s %12s %14s\n' scale first_sync_s rss_MB peak_rss_MB
	for s in ${RSS_SCALES:-100x100x100 100x1000x100}; do
		IFS=x read -r nss pods pols <<<"$s"
		dir="$work/m-$s"
		[ -d "$dir" ] || "$work/gen" -namespaces "$nss" -pods "$pods" -policies "$pols" -local 110 -node node-1 -out "$dir"
		ip netns add nftbench-rss
		start=$(date +%s.%N)
		"$work/nftpolicy" run --manifests "$dir" --node node-1 --netns nftbench-rss --drift-check 0 2>"$work/rss.log" &
		pid=$!
		until grep -q 'programmed table' "$work/rss.log"; do
			kill -0 "$pid" 2>/dev/null || { cat "$work/rss.log" >&2; exit 1; }
			sleep 0.2
		done
		took=$(echo "$(date +%s.%N) - $start" | bc -l)
		sleep 5 # the daemon hands the first sync's memory back (releaseAfterFirstSync)
		rss=$(awk '/^VmRSS/{print $2}' "/proc/$pid/status")
		hwm=$(awk '/^VmHWM/{print $2}' "/proc/$pid/status")
		kill "$pid"; wait "$pid" || true
		ip netns del nftbench-rss
		printf '%-28s %12.1f %12d %14d\n' "$((nss*pols)) pol / $((nss*pods)) pods" "$took" "$((rss/1024))" "$((hwm/1024))"
	done
fi

if [ -z "${SKIP_PPS:-}" ]; then
	echo
	echo "== per-NEW-packet cost"
	cnp=true
	[ -n "${SKIP_CNP:-}" ] && cnp=false
	go run ./hack/bench/pps -rounds "${PPS_ROUNDS:-5}" -seconds "${PPS_SECONDS:-2}" -cnp="$cnp"
fi

if [ -z "${SKIP_EVENTS:-}" ]; then
	echo
	echo "== event -> kernel"
	go run ./hack/bench/events -policies 10 -events "${EVENTS:-200}"
	go run ./hack/bench/events -policies 100 -events "${EVENTS:-200}"
	if [ -z "${SKIP_CNP:-}" ]; then
		echo
		echo "== event -> kernel with ClusterNetworkPolicies (every kind, and cnp edit/add/delete)"
		go run ./hack/bench/events -policies 100 -cluster-policies "${CLUSTER_POLICIES:-100}" -events "${EVENTS:-200}"
	fi
fi

// Command scale measures `nftpolicy run --kubeconfig` against a real
// kube-apiserver and etcd (internal/apiserver) holding a large synthetic
// cluster: how long the daemon takes to program its first table and to be
// ready, the memory it holds, the bytes it reads from the API server, and
// how long a change written to the API server takes to reach the kernel.
// The figures a unit benchmark cannot give: informers listing 150k pods,
// watch caches, decoding and the first compile, all in one process.
//
//	go run ./hack/bench/scale -pods 150000 -policies 10000 -nodes 5000
//
// To compare builds, give several: each is measured in turn against the
// one cluster, made once.
//
//	go run ./hack/bench/scale -pods 150000 -policies 10000 -nodes 5000 -bin /tmp/a/nftpolicy,/tmp/b/nftpolicy -rounds 3
//
// # Flags
//
//   - -pods, -policies, -nodes, -namespaces: the cluster's size (below);
//   - -events: events of each kind (100);
//   - -bin: a prebuilt nftpolicy, or several, comma-separated, measured
//     one after the other against the same cluster (below): creating the
//     cluster is most of a run, and two binaries measured on one cluster
//     differ by the binary alone;
//   - -rounds N: run the -bin list N times (1), interleaved, a,b,a,b, so
//     that the machine's noise (the API server's compaction, another
//     process) falls on each binary alike rather than on one round of
//     one of them;
//   - -daemon-args: more flags for the daemon; -daemon-env: more
//     environment for it (GOMEMLIMIT=410MiB plays a 512Mi container
//     limit, which the daemon turns into a Go soft limit of 80%);
//     -daemon-log: keep its log in this file;
//   - -heap-profile FILE: a heap profile of the daemon (below);
//     -start-profile FILE: a CPU profile of its start (below);
//   - -parallel: clients creating the cluster (32); -gap: quiet before each
//     event; -settle: from ready to the steady reading (10 s);
//     -ready-timeout (30 min).
//
// Creating the cluster takes most of a run: about 900 writes a second on
// 2 cores, 6 minutes for 150k pods (each pod is two writes).
//
// # The cluster
//
// internal/scale.ClusterOnNodes: -namespaces namespaces (default
// -policies/100), the pods and policies shared equally among them (rounded
// down), the policies of the internal/scale mix, and -nodes Nodes, node-0
// to node-(N-1), each with its InternalIPs. Pods are spread evenly over
// the nodes, so about pods/nodes of them are on node-0, the node under
// test. Everything is created through the API with -parallel clients over
// several connections, in protobuf: each pod and node is created, then
// given its status (addresses), as the kubelet does, since the API server
// drops the status a create carries. Progress and the rate are printed
// every 10 seconds.
//
// # The daemon
//
// The binary is -bin, else built from the module's ./cmd/nftpolicy into a
// temporary directory. It runs as
//
//	nftpolicy run --kubeconfig K --node node-0 --netns NS --health-addr 127.0.0.1:P --metrics-addr 127.0.0.1:Q [--profiling] [-daemon-args]
//
// in a network namespace of its own (nftbench-scale-PID), with a
// kubeconfig whose server is a counting TCP proxy in this process: the
// TLS stream passes through untouched (the serving certificate is for
// 127.0.0.1, as is the proxy), and the bytes from the API server to the
// daemon are counted.
//
// With several binaries or rounds, the daemon runs one at a time, each
// from scratch: a new namespace (nftbench-scale-PID-K, K the daemon run
// from 1, checked to hold no table, since a table left there would make
// start_to_programmed the time to any commit), a new proxy and its count,
// a new netlink reader and its own log; the previous daemon has exited
// and its namespace is deleted before the next starts. Between two runs
// the cluster is put back as it was created (below), so that each daemon
// starts on the same objects.
//
// # What it reports
//
// Each figure is printed as it is measured, then a summary line whose
// first fields are stable, and whose last two say which binary and round
// it was:
//
//	scale: pods=N policies=M nodes=K start_to_programmed_s=… start_to_ready_s=… rss_mb=… hwm_mb=… heap_mb=… api_rx_mb=… event_p99_ms=… [more key=value] bin=B round=R
//
// Each daemon run prints its figures and its summary line, preceded by
// "daemon run K/N: B, round R/M" when there is more than one. B is the
// binary's base name, or its path when two base names are alike (as
// a/nftpolicy and b/nftpolicy are), "./cmd/nftpolicy" for the one built;
// R counts from 1.
//
// The fields:
//
//   - start_to_programmed_s: from just before the daemon's process starts
//     to the first ruleset generation, polled every millisecond over
//     netlink in its namespace, at which table inet nftpolicy exists and
//     holds chains;
//   - start_to_ready_s: to /readyz answering 200, polled every 5 ms;
//   - cpu_to_programmed_s: the CPU time (user and system, /proc/PID/stat)
//     the daemon had used when it was seen programmed: its own work,
//     steadier than the time where the API server shares the cores;
//   - rss_mb: VmRSS (/proc/PID/status, read from outside) -settle after
//     ready; hwm_mb: VmHWM at the end; rss_peak_mb: the largest VmRSS of
//     those sampled every 100 ms from start to end, and rss_peak_at_s when
//     (seconds after start: against start_to_programmed_s, whether the
//     peak was the informers' list or the first sync); rss_events_mb: the
//     largest of those sampled while the events ran, after rss_mb (the
//     collector lets the heap grow between collections as events
//     allocate, so this is where the daemon sits under churn);
//   - heap_mb: go_memstats_heap_inuse_bytes of the daemon's /metrics at
//     the same time as rss_mb (heap_alloc_mb: go_memstats_heap_alloc_bytes);
//   - api_rx_mb: the bytes the API server sent the daemon until ready
//     (the lists and the start of the watches), as they cross the wire:
//     the API server gzips large responses to a client that accepts it, as
//     client-go does, and the synthetic pods, alike, compress far better
//     than a real cluster's; api_rx_total_mb, until the end, events
//     included;
//   - event_p99_ms: the p99 of every event below, all kinds together;
//     <kind>_p50_ms and <kind>_p99_ms per kind;
//   - list_pods_s: the API floor, measured once per run before any
//     daemon starts: one List of every pod in protobuf, from the watch
//     cache (resourceVersion 0), decoded by a bare client, the best of
//     two. No daemon knows every pod sooner, and on this machine the API
//     server shares the cores with the daemon: compare
//     start_to_programmed_s with it, not only with a target in seconds;
//   - watchlist_pods_s: the same floor as the daemon's informers list:
//     one watch of every pod with its initial events (sendInitialEvents,
//     WatchList) up to the bookmark that ends them, decoded by a bare
//     client, the best of two. The informers' sync cannot come sooner.
//
// MB are 2^20 bytes.
//
// With more than one binary, a table ends the run: for each binary, the
// median over its rounds of start_to_programmed_s, rss_mb, hwm_mb,
// heap_mb and each event kind's p99, and for the binaries after the first
// the change from the first in per cent. The median, since a single slow
// round (a compaction, a noisy neighbour) should not move it; one round
// of each gives no median, only the one figure: run -rounds 3 or more
// when the difference sought is small.
//
// -heap-profile FILE runs the daemon with --profiling and, after the
// steady reading, writes its heap profile (/debug/pprof/heap?gc=1 on the
// metrics address) to FILE, for `go tool pprof`: what holds the memory.
// -start-profile FILE profiles the daemon's CPU for -start-profile-for
// (25 s) from the moment its metrics address answers: where the start
// goes.
//
// # Events
//
// -events events of each kind are written through the API server while
// the cluster is at full size, one at a time. Each is written -gap (the
// daemon's default debounce and 100 ms) after the kernel held the previous
// one, so it meets a quiet daemon and is synced on the debounce's leading
// edge, and each is timed from just before its API write to the first
// ruleset generation after which the kernel holds it: the generation is
// read every 0.2 ms over netlink, and at each new one the content the
// event must change is read back (nothing sleeps to wait). An event the
// kernel does not show within 30 s fails the run: every event must change
// the kernel, so none times a no-op.
//
//   - pod_add: the status write that gives a new pod on another node its
//     addresses (the pod was created earlier, untimed, without them: an API
//     server drops the status of a create, so a pod becomes a peer at this
//     write, as it does in a real cluster when its kubelet reports it). The
//     pod copies the labels and namespace of a peer of a policy that
//     selects a pod of node-0, so its IPv4 address (in 100.64.0.0/10) must
//     enter that peer set (the set whose comment is "peers <key>", the key
//     as enforcer spells it).
//   - pod_delete: those pods deleted (grace period 0, so the object goes
//     at once, as after its kubelet confirmed); the address must leave the
//     set. The API server sends such a delete, as a kubelet's final
//     delete in a real cluster, as two watch events 0.1 ms apart: an
//     update that sets deletionTimestamp, then the deletion. The first
//     changes nothing in the kernel; a daemon whose no-op sync opened the
//     debounce window (before 134b1d7) made the second wait it out, so
//     pod_delete took the debounce, about 150 ms.
//   - pod_label_change: a peer pod on another node gets, in the label its
//     peer selector reads (tier), a value no selector names, so its address
//     must leave the set; the next event gives the label back, and it must
//     enter the set again.
//   - policy_edit: the first port of the first ingress rule of a policy
//     that selects a pod of node-0 changes, and the policy's chain
//     (ingress-<hash>-<ns>/<name>) must compare the new port.
//
// Each daemon run's events change the kernel as the first run's did: its
// added pods are named (bench-add-I) and addressed after those of the runs
// before it, so that none is a twin of a pod an earlier run left; its
// ports (from 20000) follow those of the runs before it and skip the
// port the policy has, since a write that changes nothing reaches no
// kernel. After the events, with the daemon stopped, the cluster is put
// back: a pod whose last label event took its label (an odd -events)
// gets it back, and the policy its first port. Then every pod is listed
// (in pages) and compared with the cluster as created, names, labels and
// addresses, and the policy's port too: a difference fails the run rather
// than measure the next daemon on another cluster.
//
// # Clean up
//
// The API server, etcd, the daemon, the namespace and the temporary
// directory are removed on every exit path, an interrupt (SIGINT, SIGTERM)
// included; the daemon and the API server also die with this process
// (Pdeathsig). Each daemon's namespace, proxy and reader go when its run
// ends, before the next run. -daemon-log keeps the daemon's log (with
// more than one daemon run, FILE-K.ext for run K, and -heap-profile
// alike); else its warnings and errors are printed at the end of its run
// and the file goes with the directory.
//
// Needs root (a network namespace), and the kube-apiserver and etcd that
// hack/tools/build.sh builds.
package main

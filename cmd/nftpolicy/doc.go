// Command nftpolicy enforces Kubernetes NetworkPolicy on a node by compiling
// it into one nftables table, written over netlink. It never executes nft,
// iptables or ipset.
//
// # Commands
//
//	nftpolicy apply   [--manifests DIR | --kubeconfig FILE] [--node NAME] [--netns NAME|PATH] [--priority auto|N] [--mark-mask 0xM] [--allow-empty]
//	nftpolicy run     (the flags of apply) [--health-addr ADDR] [--poll D] [--rescan D] [--debounce D] [--max-delay D] [--drift-check D]
//	nftpolicy dump    (the flags of apply): print the ruleset as nft text, touching nothing
//	nftpolicy cleanup [--netns NAME|PATH]: delete table inet nftpolicy
//	nftpolicy version
//
// The cluster comes from --manifests (a directory of YAML), --kubeconfig (an
// API server), or, with neither, the in-cluster configuration when
// $KUBERNETES_SERVICE_HOST is set, as in the DaemonSet. --netns enters
// another network namespace with setns, which needs CAP_SYS_ADMIN besides
// CAP_NET_ADMIN.
//
// apply programs the ruleset for the pods of --node (default $NODE_NAME, then
// the hostname; an empty --node, or a $NODE_NAME set but empty, is refused).
// Exit codes:
//
//   - 0: everything was programmed;
//   - 1: nothing was programmed (unreadable directory, a directory with no
//     objects and no --allow-empty, missing namespace, refused batch);
//   - 2: bad flags, including a --mark-mask that overlaps a known
//     component's bits without --allow-mark-overlap, and a non-positive
//     --poll or --rescan, or a negative duration;
//   - 3: the ruleset was programmed but something was left out: manifest
//     objects that fail validation or are duplicates that differ, parts the
//     compiler skipped, or a --node that no Node and no pod names. The last
//     lines of stderr sum them up, one per object; objects of kinds
//     nftpolicy does not read (a Service) and identical duplicates (used
//     once) are logged and not counted.
//
// dump prints the ruleset and exits with the same codes.
//
// run does the same and then follows the source. The directory is watched
// with inotify (k8s.WatchDir): a file renamed into it is loaded at once; a
// file written in place once it was closed and untouched for --poll; what
// no event reports, by a read of every file each --rescan, once a read
// --poll later agrees. Where inotify cannot be set up the directory is
// polled every --poll, as the log says once. /readyz on --health-addr
// answers 200 "synced generation N" once the current manifests are
// programmed, and 503 with one reason per line otherwise: a sync that
// failed, a file or directory that cannot be read or parsed (its last good
// objects stay programmed and the error is logged again with backoff),
// manifest objects skipped or kept at their last good version (an edit the
// API server would reject, differing duplicates: the first few are named),
// a directory that holds no objects, or that comes back without any
// NetworkPolicy after it was removed or emptied (the last programmed state
// stays unless --allow-empty), or an unknown --node. From an API server,
// a list or watch that fails (the API server is down or unreachable, or
// refuses us) is a reason too, naming the API server and the error, from
// the first failed request until every informer has caught up again; the
// last state stays programmed meanwhile, the failure is logged at once and
// then with backoff, and readiness comes back by itself. SIGTERM and SIGINT
// stop it and leave the table in place, so pods stay protected across
// restarts.
//
// # Priority
//
// --priority auto reads every base chain on the forward hook and places ours
// strictly ahead of every other filter chain, at a priority no other chain
// uses; conntrack is not on the forward hook (it runs at prerouting and
// output), so there is no lower bound. With no other chain it is filter - 5.
package main

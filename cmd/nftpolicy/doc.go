// Command nftpolicy enforces Kubernetes NetworkPolicy on a node by compiling
// it into one nftables table, written over netlink. It never executes nft,
// iptables or ipset.
//
// # Commands
//
//	nftpolicy apply   [--manifests DIR | --kubeconfig FILE] [--node NAME] [--netns NAME|PATH] [--priority auto|N] [--mark-mask 0xM]
//	nftpolicy run     (the flags of apply) [--health-addr ADDR] [--poll D] [--debounce D]
//	nftpolicy dump    (the flags of apply): print the ruleset as nft text, touching nothing
//	nftpolicy cleanup [--netns NAME|PATH]: delete table inet nftpolicy
//	nftpolicy version
//
// The cluster comes from --manifests (a directory of YAML), --kubeconfig (an
// API server), or, with neither, the in-cluster configuration when
// $KUBERNETES_SERVICE_HOST is set, as in the DaemonSet.
//
// apply programs the ruleset for the pods of --node (default $NODE_NAME, then
// the hostname) and exits 0; it exits 1 when nothing could be programmed
// (unreadable directory, missing namespace, refused batch) and 2 for bad
// flags, including a --mark-mask that overlaps a known component's bits
// without --allow-mark-overlap. Manifest objects that fail validation are
// reported with their file, document, kind and name, and left out; the
// others are programmed.
//
// run does the same and then follows the directory, re-applying within
// --poll + --debounce of a change. /readyz on --health-addr answers 200
// "synced generation N" once the current manifests are programmed. SIGTERM
// and SIGINT stop it and leave the table in place, so pods stay protected
// across restarts.
//
// # Priority
//
// --priority auto reads every base chain on the forward hook and places ours
// strictly ahead of every other filter chain, at a priority no other chain
// uses, and after conntrack (-200). With no other chain it is filter - 5.
package main

// Package flowlog reads the first packets of connections that nftables
// logs to an nflog group (`log group N prefix "..."`), over
// nfnetlink_log, and turns them into flow records: the log prefix, which
// names the policy rule or pod default deny that decided, and the
// connection's 5-tuple.
//
// # Reading
//
// Reader binds one nflog group in one network namespace (the node's) and
// asks for the first 128 bytes of each packet: enough for the IPv4 or
// IPv6 header and the ports. The kernel hands logged packets to the
// group's socket; if nobody reads, or reads too slowly, it drops them
// (the socket's buffer overflows, ENOBUFS), never the traffic itself.
// The rules rate-limit logging in the kernel, so a flood costs the kernel
// little and the reader less.
//
// # Merging
//
// Merger folds the records of one 5-tuple seen again within a window (one
// second) into the first: a TCP SYN retransmitted, a UDP flow whose NEW
// packets are dropped, each logged again, give one line with a count.
package flowlog

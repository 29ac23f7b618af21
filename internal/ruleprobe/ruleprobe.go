// Package ruleprobe reads the daemon's table from outside the daemon, for
// the tests and benchmarks that time a change on its way into the kernel
// (test/k8se2e, hack/bench/scale): the names of the table's chains, and
// the rules of one chain in a dump the kernel filters by chain, so a read
// costs the same whatever the table's size (`nft list` and
// nft.Conn.ReadTable read every set and element first).
package ruleprobe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/enforcer"
)

// A Reader reads the daemon's table (inet enforcer.DefaultTable) in one
// network namespace, on a netlink socket it keeps open.
type Reader struct {
	fd    int
	Conn  *nftables.Conn
	Table *nftables.Table
}

// Open opens a Reader in the network namespace netns (a name under
// /run/netns).
func Open(netns string) (*Reader, error) {
	fd, err := unix.Open("/run/netns/"+netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	conn, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(fd))
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nftables in %s: %w", netns, err)
	}
	return &Reader{fd: fd, Conn: conn, Table: &nftables.Table{Name: enforcer.DefaultTable, Family: nftables.TableFamilyINet}}, nil
}

// Close closes the socket and the namespace handle.
func (r *Reader) Close() {
	r.Conn.CloseLasting()
	unix.Close(r.fd)
}

// Chains lists the names of the chains of the table.
func (r *Reader) Chains() ([]string, error) {
	all, err := r.Conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range all {
		if c.Table.Name == r.Table.Name {
			out = append(out, c.Name)
		}
	}
	return out, nil
}

// Chain returns the name of the chain of the table that has prefix and
// suffix (a policy chain is `ingress-<hash>-<namespace>/<name>`).
func (r *Reader) Chain(prefix, suffix string) (string, error) {
	chains, err := r.Chains()
	if err != nil {
		return "", err
	}
	for _, c := range chains {
		if strings.HasPrefix(c, prefix) && strings.HasSuffix(c, suffix) {
			return c, nil
		}
	}
	return "", fmt.Errorf("no chain %s…%s in table inet %s", prefix, suffix, r.Table.Name)
}

// ComparesPort reports whether a rule of chain compares a field with the
// 16-bit port (`th dport PORT`).
func (r *Reader) ComparesPort(chain string, port uint16) (bool, error) {
	rules, err := r.Conn.GetRules(r.Table, &nftables.Chain{Name: chain, Table: r.Table})
	if err != nil {
		return false, err
	}
	want := binary.BigEndian.AppendUint16(nil, port)
	for _, rule := range rules {
		for _, e := range rule.Exprs {
			if c, ok := e.(*expr.Cmp); ok && c.Op == expr.CmpOpEq && bytes.Equal(c.Data, want) {
				return true, nil
			}
		}
	}
	return false, nil
}

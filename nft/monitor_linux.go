package nft

import (
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A Monitor follows every commit in a network namespace, as `nft monitor`
// does, and remembers which generations changed one table. It answers the
// question a refused delta raises — someone committed since our last
// batch: was it to our table? — without reading the table back, which at
// 10k policies takes seconds (the kernel's rule and set dumps restart
// their walk for every buffer they fill) while another component's commit
// (kube-proxy's, every second on a busy node) leaves our table as it was.
//
// It listens to the NFNLGRP_NFTABLES group: for each commit the kernel
// sends a notification per object it changed, each naming its table (the
// first attribute of every nf_tables object message is the table name),
// then NEWGEN with the generation the commit created. A listener makes the
// kernel build those notifications for every commit, ours included: for a
// whole 10k-policy table that is tens of MB, which the socket's large
// buffer takes; if it overflows anyway (ENOBUFS), the generations up to the
// next NEWGEN are unknown and Untouched says so.
type Monitor struct {
	nl    *netlink.Conn
	table string

	mu      sync.Mutex
	seen    sync.Cond
	latest  uint32          // generation of the last NEWGEN read
	pending bool            // the commit being read has touched the table
	touched map[uint32]bool // generations whose commit touched the table
	unknown uint32          // generations up to this one may have touched it unseen
	lost    bool            // notifications lost; unknown is set at the next NEWGEN
	err     error           // the socket failed; the Monitor knows nothing more
	forward chan struct{}   // see ForwardChains

	own     *ownPorts     // the port ids of our Conn's batch sockets
	foreign chan struct{} // see Foreign
	byOther bool          // the commit being read has touched the table, not from our Conn
}

// Monitor starts following commits to the inet table named table. Close it
// when done.
func (c *Conn) Monitor(table string) (*Monitor, error) {
	nl, err := c.dialLarge()
	if err != nil {
		return nil, err
	}
	if err := nl.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		nl.Close()
		return nil, err
	}
	m := &Monitor{nl: nl, table: table, touched: map[uint32]bool{}, forward: make(chan struct{}, 1),
		own: &c.ports, foreign: make(chan struct{}, 1)}
	m.seen.L = &m.mu
	// Commits before the first NEWGEN read are unknown.
	gen, err := c.Generation()
	if err != nil {
		nl.Close()
		return nil, err
	}
	m.latest, m.unknown = gen, gen
	go m.read()
	return m, nil
}

// Close stops the Monitor.
func (m *Monitor) Close() error { return m.nl.Close() }

func (m *Monitor) read() {
	for {
		msgs, err := m.nl.Receive()
		m.mu.Lock()
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				m.lost, m.pending, m.byOther = true, false, false
				m.notifyForward() // a base chain may be among what was lost
				m.notifyForeign() // so may a commit to our table
				m.mu.Unlock()
				continue
			}
			m.err = err
			m.seen.Broadcast()
			m.mu.Unlock()
			return
		}
		for _, msg := range msgs {
			m.note(msg)
		}
		m.mu.Unlock()
	}
}

// note takes one notification into account; m.mu is held.
func (m *Monitor) note(msg netlink.Message) {
	if msg.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || len(msg.Data) < 4 {
		return
	}
	if msg.Header.Type == newGenType {
		gen, err := genOf(msg)
		if err != nil {
			m.lost = true
			return
		}
		if m.pending {
			m.touched[gen] = true
			if len(m.touched) > maxRemembered {
				m.forgetBefore(gen - maxRemembered/2)
			}
		}
		if m.lost {
			m.unknown, m.lost = gen, false
		}
		if m.byOther {
			m.notifyForeign()
		}
		m.latest, m.pending, m.byOther = gen, false, false
		m.seen.Broadcast()
		return
	}
	if msg.Header.Type == newChainType {
		m.noteChain(msg)
	}
	if msg.Data[0] != unix.NFPROTO_INET {
		return
	}
	ad, err := netlink.NewAttributeDecoder(msg.Data[4:])
	if err != nil {
		m.lost = true
		return
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		// NFTA_TABLE_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_TABLE,
		// NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE ... are
		// all attribute 1.
		if ad.Type() == 1 {
			if ad.String() == m.table {
				m.pending = true
				m.byOther = m.byOther || !m.own.has(msg.Header.PID)
			}
			return
		}
	}
}

// maxRemembered bounds the generations a Monitor remembers as touching the
// table (each of our own commits is one), for a daemon whose caller never
// asks about old ones.
const maxRemembered = 4096

// forgetBefore drops what is known of generations before gen: queries about
// them answer that they cannot tell. m.mu is held.
func (m *Monitor) forgetBefore(gen uint32) {
	for g := range m.touched {
		if gen-g-1 < 1<<31 { // g < gen, wrapping
			delete(m.touched, g)
		}
	}
	if gen-m.unknown < 1<<31 { // unknown < gen
		m.unknown = gen - 1
	}
}

// Untouched reports whether no commit after generation since, up to and
// including generation upto, changed the table. It waits up to wait for
// the notifications of upto to arrive, and answers false whenever it
// cannot be sure: not seen in time, notifications lost, the socket failed.
func (m *Monitor) Untouched(since, upto uint32, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	timer := time.AfterFunc(wait, func() {
		m.mu.Lock()
		m.seen.Broadcast()
		m.mu.Unlock()
	})
	defer timer.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.latest-upto > 1<<31 && m.err == nil && time.Now().Before(deadline) { // latest < upto, wrapping
		m.seen.Wait()
	}
	if m.err != nil || m.latest-upto > 1<<31 || m.lost || since < m.unknown {
		return false
	}
	for g := range m.touched {
		if g-since-1 < upto-since { // since < g <= upto, wrapping
			return false
		}
	}
	// What is older than since is never asked again.
	for g := range m.touched {
		if g-since > 1<<31 || g == since {
			delete(m.touched, g)
		}
	}
	return true
}

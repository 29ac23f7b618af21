package nft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// RuleCounters reads the counters of the rules of the named chains of the
// inet table: one dump of the table's rules, decoding nothing but chain
// names, handles and counters (a dump per chain cost a netlink round trip
// per policy at every scrape). Chains not named, and rules without a
// counter, are skipped; a missing table is ErrNoTable.
func (c *Conn) RuleCounters(table string, chains []string) (*RuleCounts, error) {
	nl, err := c.dial()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	handle, err := tableHandle(nl, table)
	if err != nil {
		return nil, err
	}
	wanted := make(map[string]bool, len(chains))
	for _, ch := range chains {
		wanted[ch] = true
	}
	out := &RuleCounts{Table: handle}
	attrs := []netlink.Attribute{{Type: unix.NFTA_RULE_TABLE, Data: []byte(table + "\x00")}}
	err = dump(nl, unix.NFT_MSG_GETRULE, attrs, func() { out.Rules = out.Rules[:0] }, func(b []byte) error {
		var rc RuleCount
		counted := false
		err := walk(b, func(typ uint16, data []byte) error {
			switch typ {
			case unix.NFTA_RULE_CHAIN:
				rc.Chain = str(data)
			case unix.NFTA_RULE_HANDLE:
				rc.Handle = u64(data)
			case unix.NFTA_RULE_EXPRESSIONS:
				return walk(data, func(typ uint16, data []byte) error {
					if typ != unix.NFTA_LIST_ELEM {
						return nil
					}
					p, b, ok, err := counterOf(data)
					if ok {
						counted = true
						rc.Packets += p
						rc.Bytes += b
					}
					return err
				})
			}
			return nil
		})
		if counted && wanted[rc.Chain] {
			out.Rules = append(out.Rules, rc)
		}
		return err
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("read counters of table inet %s: %w", table, ErrNoTable)
	}
	if err != nil {
		return nil, fmt.Errorf("read counters of table inet %s: %w", table, err)
	}
	// The table replaced meanwhile: the handles read are of two tables.
	if again, err := tableHandle(nl, table); err != nil || again != handle {
		if err == nil {
			err = errDumpInterrupted
		}
		return nil, fmt.Errorf("read counters of table inet %s: %w", table, err)
	}
	return out, nil
}

// nftaTableHandle is NFTA_TABLE_HANDLE (linux/netfilter/nf_tables.h),
// which x/sys/unix lacks.
const nftaTableHandle = 4

// tableHandle reads the handle of an inet table; ErrNoTable if there is none.
func tableHandle(nl *netlink.Conn, name string) (uint64, error) {
	var handle uint64
	found := false
	err := dump(nl, unix.NFT_MSG_GETTABLE, nil, func() { found = false }, func(b []byte) error {
		var tname []byte
		var h uint64
		err := walk(b, func(typ uint16, data []byte) error {
			switch typ {
			case unix.NFTA_TABLE_NAME:
				tname = data
			case nftaTableHandle:
				h = u64(data)
			}
			return nil
		})
		if str(tname) == name {
			found, handle = true, h
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read table inet %s: %w", name, err)
	}
	if !found {
		return 0, fmt.Errorf("read table inet %s: %w", name, ErrNoTable)
	}
	return handle, nil
}

// counterOf reads a counter expression (the attributes of an
// NFTA_LIST_ELEM of a rule's expressions); ok is false for any other.
func counterOf(b []byte) (packets, bytes_ uint64, ok bool, err error) {
	name, data, err := exprParts(b)
	if err != nil || name != "counter" {
		return 0, 0, false, err
	}
	err = walk(data, func(typ uint16, v []byte) error {
		switch typ {
		case unix.NFTA_COUNTER_PACKETS:
			packets = u64(v)
		case unix.NFTA_COUNTER_BYTES:
			bytes_ = u64(v)
		}
		return nil
	})
	return packets, bytes_, true, err
}

func u64(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

package flowlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nfnetlink_log (linux/netfilter/nfnetlink_log.h), which x/sys does not
// define.
const (
	nfnlSubsysULOG = 4
	msgPacket      = nfnlSubsysULOG<<8 | 0 // NFULNL_MSG_PACKET
	msgConfig      = nfnlSubsysULOG<<8 | 1 // NFULNL_MSG_CONFIG

	cfgCmd     = 1 // NFULA_CFG_CMD
	cfgMode    = 2 // NFULA_CFG_MODE
	cfgTimeout = 4 // NFULA_CFG_TIMEOUT, 1/100 s
	cfgQThresh = 5 // NFULA_CFG_QTHRESH

	cmdBind = 1 // NFULNL_CFG_CMD_BIND

	copyPacket = 2 // NFULNL_COPY_PACKET

	attrPayload = 9  // NFULA_PAYLOAD
	attrPrefix  = 10 // NFULA_PREFIX

	// copyRange is how much of each packet the kernel hands over: the
	// IPv6 header (40) and the ports, with room for IPv4 options.
	copyRange = 128
)

// A Reader receives the packets logged to one nflog group in one network
// namespace.
type Reader struct {
	conn  *netlink.Conn
	group uint16
}

// Open binds group in the network namespace at path ("" for the caller's
// own). Only one socket in a namespace can bind a group: a second reader
// (another nftpolicy, ulogd) gets EBUSY.
func Open(path string, group uint16) (*Reader, error) {
	var cfg netlink.Config
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("flow log: %w", err)
		}
		defer f.Close()
		cfg.NetNS = int(f.Fd())
	}
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &cfg)
	if err != nil {
		return nil, fmt.Errorf("flow log: nfnetlink: %w", err)
	}
	r := &Reader{conn: conn, group: group}
	mode := make([]byte, 6) // struct nfulnl_msg_config_mode: copy_range, copy_mode, pad
	binary.BigEndian.PutUint32(mode, copyRange)
	mode[4] = copyPacket
	timeout := make([]byte, 4)
	binary.BigEndian.PutUint32(timeout, 1) // hand packets over within 10ms
	qthresh := make([]byte, 4)
	binary.BigEndian.PutUint32(qthresh, 1) // ... or at once
	for _, attrs := range [][]netlink.Attribute{
		{{Type: cfgCmd, Data: []byte{cmdBind}}},
		{{Type: cfgMode, Data: mode}, {Type: cfgTimeout, Data: timeout}, {Type: cfgQThresh, Data: qthresh}},
	} {
		if err := r.config(attrs); err != nil {
			conn.Close()
			return nil, fmt.Errorf("flow log: bind nflog group %d: %w", group, err)
		}
	}
	return r, nil
}

// config sends one NFULNL_MSG_CONFIG for the group and waits for its ack.
func (r *Reader) config(attrs []netlink.Attribute) error {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return err
	}
	data := make([]byte, 4, 4+len(b)) // struct nfgenmsg: family, version, res_id (the group)
	data[0] = unix.AF_UNSPEC
	binary.BigEndian.PutUint16(data[2:], r.group)
	_, err = r.conn.Execute(netlink.Message{
		Header: netlink.Header{Type: msgConfig, Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(data, b...),
	})
	return err
}

// Read blocks until packets are logged and returns them. A record the
// kernel could not hand over (the socket's buffer overflowed) is lost,
// and Read says how: ErrOverrun, after which reading goes on.
func (r *Reader) Read() ([]Record, error) {
	msgs, err := r.conn.Receive()
	if err != nil {
		if errors.Is(err, unix.ENOBUFS) {
			return nil, ErrOverrun
		}
		return nil, err
	}
	now := time.Now()
	var out []Record
	for _, m := range msgs {
		if m.Header.Type != msgPacket || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			continue
		}
		ad.ByteOrder = binary.BigEndian
		rec := Record{Time: now, Count: 1}
		var payload []byte
		for ad.Next() {
			switch ad.Type() {
			case attrPrefix:
				rec.Prefix = ad.String()
			case attrPayload:
				payload = ad.Bytes()
			}
		}
		if ad.Err() != nil {
			continue
		}
		t, ok := ParseTuple(payload)
		if !ok {
			continue
		}
		rec.Tuple = t
		out = append(out, rec)
	}
	return out, nil
}

// ErrOverrun: the kernel dropped logged packets the reader was too slow
// to take.
var ErrOverrun = errors.New("flow log: packets dropped by the kernel (reader too slow)")

// Close closes the socket, which unbinds the group; a Read in progress
// returns an error.
func (r *Reader) Close() error { return r.conn.Close() }

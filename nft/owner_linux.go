package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Table comments and owner records.
//
// google/nftables v0.3.0's Table has no user data, so the writer encodes
// the NEWTABLE message that creates our table itself (writer.addTable),
// with the comment as nft encodes `table inet t { comment "x"; }`: an
// NFTA_TABLE_USERDATA attribute holding libnftnl's
// NFTNL_UDATA_TABLE_COMMENT TLV (type 0, one byte of length, the string
// with its NUL). The kernel takes a table's
// user data only when it creates the table (nf_tables_updtable ignores it),
// which is why a record changes only with a whole-table write.

const (
	// nftaTableUserdata is NFTA_TABLE_USERDATA (linux/netfilter/nf_tables.h),
	// which x/sys/unix does not define.
	nftaTableUserdata = 6
	// udataTableComment is NFTNL_UDATA_TABLE_COMMENT (libnftnl udata.h).
	udataTableComment = 0
)

var (
	newTableType = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWTABLE)
	getTableType = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETTABLE)
	delTableType = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_DELTABLE)
)

// tableUserdataAttr encodes comment as the NFTA_TABLE_USERDATA attribute
// of a NEWTABLE message; nil for no comment.
func tableUserdataAttr(comment string) ([]byte, error) {
	if comment == "" {
		return nil, nil
	}
	if len(comment)+1 > 255 {
		return nil, fmt.Errorf("table comment of %d bytes: at most 254 fit", len(comment))
	}
	ud := userdata.AppendString(nil, udataTableComment, comment)
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(nftaTableUserdata, ud)
	return ae.Encode()
}

// TableComment returns the comment of the inet table name, "" if it has
// none; ErrNoTable if the table does not exist.
func (c *Conn) TableComment(name string) (string, error) {
	info, err := c.tableInfo(name)
	return info.comment, err
}

// A tableInfo is what the kernel says of a table besides its content.
type tableInfo struct {
	flags   uint32 // NFTA_TABLE_FLAGS: NFT_TABLE_F_DORMANT
	comment string
	handle  uint64 // NFTA_TABLE_HANDLE: this table, not another of its name
}

// tableInfo reads the flags and comment of the inet table name;
// ErrNoTable if there is none.
func (c *Conn) tableInfo(name string) (tableInfo, error) {
	msgs, err := c.getTable(name)
	if err != nil {
		return tableInfo{}, err
	}
	for _, m := range msgs {
		if m.Header.Type != newTableType || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return tableInfo{}, fmt.Errorf("read table inet %s: %w", name, err)
		}
		ad.ByteOrder = binary.BigEndian
		var info tableInfo
		for ad.Next() {
			switch ad.Type() {
			case nftaTableUserdata:
				info.comment, _ = userdata.GetString(ad.Bytes(), udataTableComment)
			case unix.NFTA_TABLE_FLAGS:
				info.flags = ad.Uint32()
			case nftaTableHandle:
				info.handle = ad.Uint64()
			}
		}
		if err := ad.Err(); err != nil {
			return tableInfo{}, fmt.Errorf("read table inet %s: %w", name, err)
		}
		return info, nil
	}
	return tableInfo{}, fmt.Errorf("read table inet %s: the kernel sent no table", name)
}

// getTable asks the kernel for the inet table name; ErrNoTable if there
// is none.
func (c *Conn) getTable(name string) ([]netlink.Message, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_TABLE_NAME, name)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	var msgs []netlink.Message
	// On the batch socket: WriteDeltaAt reads the table before every
	// delta (see onBatchSocket).
	err = c.onBatchSocket("read table inet "+name, func(nl *netlink.Conn) error {
		var err error
		msgs, err = nl.Execute(netlink.Message{
			Header: netlink.Header{Type: getTableType, Flags: netlink.Request | netlink.Acknowledge},
			Data:   append(nfgenmsg(unix.NFPROTO_INET, 0), attrs...),
		})
		if err != nil {
			return fmt.Errorf("read table inet %s: %w", name, err)
		}
		return nil
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("read table inet %s: %w", name, ErrNoTable)
	}
	return msgs, err
}

// ApplyGuarded is Apply for a writer that must not overwrite a table it
// does not own. The batch is encoded first; then, right before it is sent,
// the generation is read, then the table's comment (exists is false when
// there is no table), and check decides: an error from check cancels the
// batch, which never reaches the kernel, and is returned as is. Otherwise
// the batch is sent checked against that generation, so what check saw is
// what the batch replaces: if anyone committed in between, nothing is
// applied and the error is ErrGenerationChanged (read again and retry).
// The window between the reads and the kernel's check is two small
// netlink round trips, whatever the size of the table.
func (c *Conn) ApplyGuarded(t *Table, check func(comment string, exists bool) error) (BatchStats, error) {
	return c.apply(t, 0, c.guard(t.Name, check))
}

// guard reads the generation, then the comment of table name, and lets
// check decide; the batch it guards is checked against that generation.
func (c *Conn) guard(name string, check func(comment string, exists bool) error) func() (uint32, error) {
	return func() (uint32, error) {
		gen, err := c.Generation()
		if err != nil {
			return 0, err
		}
		comment, err := c.TableComment(name)
		exists := true
		if errors.Is(err, ErrNoTable) {
			exists, err = false, nil
		}
		if err != nil {
			return 0, err
		}
		if err := check(comment, exists); err != nil {
			return 0, err
		}
		return gen, nil
	}
}

// DeleteGuarded deletes the inet table name (nothing if there is none) as
// Delete does, unless check refuses: as in ApplyGuarded, the generation
// and then the table's comment are read right before the batch is sent,
// check decides (an error cancels the delete and is returned as is), and
// the delete is checked against that generation (ErrGenerationChanged if
// anyone committed in between: read again and retry).
func (c *Conn) DeleteGuarded(name string, check func(comment string, exists bool) error) error {
	return c.deleteTable(name, c.guard(name, check))
}

// CheckNetns reports, with an error wrapping ErrNetnsGone, whether the
// namespace this Conn was opened on is no longer the one its path names:
// the device and inode of the path are compared with those of the handle
// the Conn holds. A Conn on the current namespace is always fine.
func (c *Conn) CheckNetns() error {
	fd, release, err := c.holdNetns()
	if err != nil {
		return err
	}
	defer release()
	if fd < 0 {
		return nil
	}
	var held, now unix.Stat_t
	if err := unix.Fstat(fd, &held); err != nil {
		return fmt.Errorf("netns %s: %w", c.path, err)
	}
	if err := unix.Stat(c.path, &now); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("netns %s was deleted: %w", c.path, ErrNetnsGone)
		}
		return fmt.Errorf("netns %s: %w", c.path, err)
	}
	if now.Dev != held.Dev || now.Ino != held.Ino {
		return fmt.Errorf("netns %s now names another namespace: %w", c.path, ErrNetnsGone)
	}
	return nil
}

// Owner liveness.
//
// An owner record must tell a live owner from a dead one: a daemon killed
// with -9 cannot remove its record, and its restart must not be refused
// forever. Two other ways were weighed and left:
//
//   - An identity stable across restarts (node, source, netns): the old and
//     the new pod of a DaemonSet rollout, or a systemd unit and a DaemonSet
//     both given the node's name, have the same identity while both are
//     alive, and would fight exactly as before.
//   - A lease the owner refreshes: the kernel keeps a table's user data
//     only from its creation, so a refresh would rewrite the whole table
//     (seconds at 10k policies), or would need one more object in the
//     table, and an expiry guesses at clocks and stalls.
//
// Instead each owner binds an abstract unix socket, its beacon, named by
// its random token, in the network namespace it programs (abstract socket
// names are per network namespace, so every process programming that
// namespace, whatever namespace it runs in itself, finds the same names).
// The kernel removes the name when the process dies, kill -9 included, so
// connecting to it answers exactly whether the owner lives: ECONNREFUSED
// once it is gone. A datagram socket is used so that the check never
// queues anything the owner would have to accept.

// A Beacon is a live owner's socket (see Conn.Hold).
type Beacon struct {
	fd   int
	once sync.Once
}

func beaconAddr(o Owner) *unix.SockaddrUnix {
	return &unix.SockaddrUnix{Name: "@nftpolicy/owner/" + o.Token} // '@': abstract
}

// Hold binds o's beacon in this Conn's namespace: until it is closed, or
// the process ends, Alive(o) is true there.
func (c *Conn) Hold(o Owner) (*Beacon, error) {
	fd, err := c.unixSocket()
	if err != nil {
		return nil, fmt.Errorf("owner beacon: %w", err)
	}
	if err := unix.Bind(fd, beaconAddr(o)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("owner beacon: bind %s: %w", beaconAddr(o).Name, err)
	}
	return &Beacon{fd: fd}, nil
}

// Close releases the beacon: its owner is from now on taken for dead.
func (b *Beacon) Close() error {
	var err error
	b.once.Do(func() { err = unix.Close(b.fd) })
	return err
}

// Alive reports whether o's beacon is held in this Conn's namespace, that
// is, whether the process that wrote the record o still runs (and has not
// released it).
func (c *Conn) Alive(o Owner) (bool, error) {
	fd, err := c.unixSocket()
	if err != nil {
		return false, fmt.Errorf("check owner %s: %w", o.ID(), err)
	}
	defer unix.Close(fd)
	switch err := unix.Connect(fd, beaconAddr(o)); {
	case err == nil:
	case errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.ENOENT):
		return false, nil
	default:
		return false, fmt.Errorf("check owner %s: %w", o.ID(), err)
	}
	// Abstract names are not protected: any process of the namespace, of
	// any user, may bind the name of a beacon whose owner died (it is in
	// /proc/net/unix and in the table's comment), and keep every later
	// nftpolicy out. A beacon is an owner's only if its socket belongs to
	// root or to our own user, as the kernel tells (sock_diag); a datagram
	// socket has no peer credentials to ask instead.
	uid, found, err := c.beaconUID(o)
	if err != nil {
		return false, fmt.Errorf("check owner %s: %w", o.ID(), err)
	}
	if !found {
		return false, nil // released between the connect and the dump
	}
	return uid == 0 || uid == uint32(os.Geteuid()), nil
}

// sock_diag for unix sockets (linux/unix_diag.h), which x/sys does not
// define.
const (
	udiagShowName  = 0x01
	udiagShowUID   = 0x40
	unixDiagName   = 0 // UNIX_DIAG_NAME: sun_path, abstract names with a leading NUL
	unixDiagUID    = 7 // UNIX_DIAG_UID: the socket's owner, in our user namespace
	unixDiagMsgLen = 16
)

// beaconUID finds the socket bound to o's beacon name in this Conn's
// namespace and returns its owner's uid.
func (c *Conn) beaconUID(o Owner) (uid uint32, found bool, err error) {
	fd, release, err := c.holdNetns()
	if err != nil {
		return 0, false, err
	}
	var cfg netlink.Config
	if fd >= 0 {
		cfg.NetNS = fd
	}
	nl, err := netlink.Dial(unix.NETLINK_SOCK_DIAG, &cfg)
	release()
	if err != nil {
		return 0, false, fmt.Errorf("sock_diag: %w", err)
	}
	defer nl.Close()
	// struct unix_diag_req: family, protocol, pad, states, ino, show,
	// cookie[2].
	req := make([]byte, 24)
	req[0] = unix.AF_UNIX
	binary.NativeEndian.PutUint32(req[4:], 0xffffffff) // every state
	binary.NativeEndian.PutUint32(req[12:], udiagShowName|udiagShowUID)
	msgs, err := nl.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.SOCK_DIAG_BY_FAMILY, Flags: netlink.Request | netlink.Dump},
		Data:   req,
	})
	if err != nil {
		return 0, false, fmt.Errorf("sock_diag dump: %w", err)
	}
	want := "\x00" + strings.TrimPrefix(beaconAddr(o).Name, "@")
	for _, m := range msgs {
		if len(m.Data) < unixDiagMsgLen {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[unixDiagMsgLen:])
		if err != nil {
			return 0, false, fmt.Errorf("sock_diag: %w", err)
		}
		var name string
		var owner uint32
		var hasUID bool
		for ad.Next() {
			switch ad.Type() {
			case unixDiagName:
				name = string(ad.Bytes())
			case unixDiagUID:
				owner, hasUID = ad.Uint32(), true
			}
		}
		if err := ad.Err(); err != nil {
			return 0, false, fmt.Errorf("sock_diag: %w", err)
		}
		if name == want && hasUID {
			return owner, true, nil
		}
	}
	return 0, false, nil
}

// unixSocket creates a unix datagram socket in this Conn's namespace. The
// namespace is the socket's from its creation on, so binding and
// connecting it happen back in the caller's.
func (c *Conn) unixSocket() (int, error) {
	fd, release, err := c.holdNetns()
	if err != nil {
		return -1, err
	}
	defer release()
	if fd < 0 {
		return unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	}
	return fdInNetns(func() error {
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter netns %s: %w", c.path, err)
		}
		return nil
	}, func() (int, error) {
		return unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	}, "netns "+c.path)
}

// fdInNetns makes a file descriptor (a socket, a namespace handle) in
// another network namespace: on a thread locked to a goroutine of its own,
// enter switches into the namespace, open makes the descriptor, and the
// thread switches back. A descriptor keeps the namespace it was made in,
// so it is used from any thread afterwards. what names the namespace in
// errors.
func fdInNetns(enter func() error, open func() (int, error), what string) (int, error) {
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// A thread switched into another namespace must not run anything
		// else: it is locked to this goroutine, and if it cannot switch
		// back it stays locked, so it ends with the goroutine.
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, err}
			return
		}
		defer unix.Close(orig)
		if err := enter(); err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, err}
			return
		}
		fd, oerr := open()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			if oerr == nil {
				unix.Close(fd)
			}
			done <- result{-1, fmt.Errorf("leave %s: %w", what, err)}
			return
		}
		runtime.UnlockOSThread()
		done <- result{fd, oerr}
	}()
	r := <-done
	return r.fd, r.err
}

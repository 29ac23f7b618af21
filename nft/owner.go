package nft

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// An Owner names the process that writes a table: the record a daemon
// keeps in the table's comment (NFTA_TABLE_USERDATA), so that a second
// daemon on the same network namespace sees the first one instead of
// silently taking turns rewriting the table with it. `nft list table`
// shows it as
//
//	comment "nftpolicy owner=node-1/4242/9f86d081884c7d65 since=2026-11-30T20:43:38Z layout=2"
//
// Host and PID are for the human reading it; Token is random per process
// and is what identifies the owner and its liveness beacon (see
// Conn.Hold): a restarted daemon is a new owner, and finds the record of
// its dead predecessor stale.
type Owner struct {
	Host  string
	PID   int
	Token string // 16 hex digits
	Since time.Time
	// Layout is the version of the table layout the owner writes (its
	// chains, sets and marks: enforcer.Layout); 0 in a record written
	// before records carried one. A daemon that finds another layout
	// still replaces the whole table in one transaction, as on any start;
	// the version tells the reader of `nft list` and the log what moved.
	Layout int
}

// ownerPrefix starts every owner record.
const ownerPrefix = "nftpolicy owner="

// maxOwnerHost bounds the host name in a record: a table comment is at
// most 255 bytes (the userdata TLV length is one byte), and comments are
// kept within 128 characters.
const maxOwnerHost = 64

// NewOwner returns an owner record for this process, starting at since.
func NewOwner(since time.Time) Owner {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	if len(host) > maxOwnerHost {
		host = host[:maxOwnerHost]
	}
	// The host name goes between slashes and inside a quoted comment.
	host = strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == '"' || r < ' ' || r > '~' {
			return '_'
		}
		return r
	}, host)
	var b [8]byte
	rand.Read(b[:])
	return Owner{Host: host, PID: os.Getpid(), Token: hex.EncodeToString(b[:]), Since: since.UTC().Truncate(time.Second)}
}

// ID is host/pid/token.
func (o Owner) ID() string { return fmt.Sprintf("%s/%d/%s", o.Host, o.PID, o.Token) }

// Comment is the record as the table's comment holds it.
func (o Owner) Comment() string {
	c := ownerPrefix + o.ID() + " since=" + o.Since.UTC().Format(time.RFC3339)
	if o.Layout > 0 {
		c += " layout=" + strconv.Itoa(o.Layout)
	}
	return c
}

// String is Comment.
func (o Owner) String() string { return o.Comment() }

// Same reports whether o and p are the same owner: the same process
// incarnation, whatever the clock said.
func (o Owner) Same(p Owner) bool { return o.Token == p.Token && o.Host == p.Host && o.PID == p.PID }

// ParseOwner reads an owner record from a table comment. A comment that is
// not one (a table written by nft -f, or by an nftpolicy that predates
// records) is reported as not ok.
func ParseOwner(comment string) (Owner, bool) {
	rest, ok := strings.CutPrefix(comment, ownerPrefix)
	if !ok {
		return Owner{}, false
	}
	id, since, ok := strings.Cut(rest, " since=")
	if !ok {
		return Owner{}, false
	}
	layout := 0
	since, l, found := strings.Cut(since, " layout=")
	if found {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			return Owner{}, false
		}
		layout = n
	}
	t, err := time.Parse(time.RFC3339, since)
	if err != nil {
		return Owner{}, false
	}
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return Owner{}, false
	}
	token := id[i+1:]
	j := strings.LastIndexByte(id[:i], '/')
	if j < 0 {
		return Owner{}, false
	}
	pid, err := strconv.Atoi(id[j+1 : i])
	if err != nil || token == "" || j == 0 {
		return Owner{}, false
	}
	return Owner{Host: id[:j], PID: pid, Token: token, Since: t, Layout: layout}, true
}

// ErrNetnsGone reports that the network namespace a Conn was opened on can
// no longer be reached by its name: it was deleted (`ip netns del`), or the
// name now stands for another namespace. The Conn still holds the old one
// open, so writes to it succeed, but they protect nothing anyone can use.
var ErrNetnsGone = errors.New("network namespace is gone")

package enforcer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Kernel object names derived from user input (a policy's or a pod's
// namespace/name, a peer list) carry a hash so that they stay short and
// stable. A shortened hash is only a hint: two keys can share one, by
// accident (about N²/2^33 for N keys at 8 hex digits) or on purpose (a
// colliding pair costs about 2^16 tries). Two keys sharing a name would
// share a chain or a set, and the one compiled last would decide what both
// allow. So every name is handed out by a registry that knows which key
// holds it, and a key whose short name is held by another key gets a
// longer one.

// hashLengths are the hex digits a name tries, in order: the short form
// first, then longer ones for a key whose shorter names are held by
// another key.
var hashLengths = []int{8, 16, 32, 2 * sha256.Size}

// A nameRegistry hands out kernel object names, unique by construction: a
// name is held by exactly one key, from the first acquire of that key to
// its last release, and no other key is given it meanwhile.
//
// Names depend on the order keys arrive only when hashes collide: a key
// keeps the name it was given while it is held, so a name never moves from
// one object to another under a running daemon.
type nameRegistry struct {
	sum    func(string) [sha256.Size]byte // sha256 unless a test forces collisions
	byKey  refCounted[string, string]     // key -> its name
	byName map[string]string              // name -> the key holding it
}

func newNameRegistry() *nameRegistry {
	return &nameRegistry{
		sum:    func(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) },
		byName: map[string]string{},
	}
}

// acquire returns the name of key, which format builds from a hex hash,
// and counts one more holder of it. The first acquire picks the shortest
// hash no other key holds; should even the whole hash be held (only an
// injected hash function can do that), a counter follows it.
func (r *nameRegistry) acquire(key string, format func(hash string) string) string {
	return r.byKey.acquire(key, func() string {
		name := r.pick(key, format)
		r.byName[name] = key
		return name
	})
}

// pick returns the name for a key that holds none.
func (r *nameRegistry) pick(key string, format func(hash string) string) string {
	sum := r.sum(key)
	full := hex.EncodeToString(sum[:])
	for _, n := range hashLengths {
		if name := format(full[:n]); r.free(name) {
			return name
		}
	}
	for i := 2; ; i++ {
		if name := format(full + "-" + strconv.Itoa(i)); r.free(name) {
			return name
		}
	}
}

func (r *nameRegistry) free(name string) bool {
	_, held := r.byName[name]
	return !held
}

// name returns the name key holds. It panics for a key nobody holds: every
// set and chain is named by an acquire before it is built.
func (r *nameRegistry) name(key string) string {
	name, ok := r.byKey.get(key)
	if !ok {
		panic(fmt.Sprintf("enforcer: no name registered for %q", key))
	}
	return name
}

// release drops one holder of key; the last one frees its name.
func (r *nameRegistry) release(key string) {
	if name, last := r.byKey.release(key); last {
		delete(r.byName, name)
	}
}

// maxReadable bounds the namespace/name part of chain names. The kernel
// allows 256 bytes; the registry keeps truncated names unique.
const maxReadable = 64

// chainKey is the registry key (and the hashed text) of the chain of one
// policy or pod for one direction: prefix is "ingress", "egress",
// "ingress-pod" or "egress-pod".
func chainKey(prefix, namespace, name string) string {
	return prefix + "\x00" + namespace + "/" + name
}

// chainNameFormat builds `<prefix>-<hash>-<namespace>/<name>`, e.g.
// `ingress-1a2b3c4d-x/allow-web`, the namespace/name cut to maxReadable.
func chainNameFormat(prefix, namespace, name string) func(string) string {
	readable := namespace + "/" + name
	if len(readable) > maxReadable {
		readable = readable[:maxReadable]
	}
	return func(hash string) string { return prefix + "-" + hash + "-" + readable }
}

func (c *Compiler) acquireChainName(prefix, namespace, name string) string {
	return c.chainNames.acquire(chainKey(prefix, namespace, name), chainNameFormat(prefix, namespace, name))
}

func (c *Compiler) releaseChainName(prefix, namespace, name string) {
	c.chainNames.release(chainKey(prefix, namespace, name))
}

// acquirePeersName returns the stem `peers-<hash>` of the sets of a peer
// list; each family's set appends its suffix (peersSetName).
func (c *Compiler) acquirePeersName(key string) string {
	return c.peerNames.acquire(key, func(hash string) string { return "peers-" + hash })
}

func (c *Compiler) releasePeersName(key string) { c.peerNames.release(key) }

// peersSetName is `peers-<hash>-v4`: the set of one family of a peer list
// whose name some rule holds, `peers-<hash>-v4-ranges` for a union held
// as ranges (longRuns), as its set is named now. The set's comment spells
// the key out.
func (c *Compiler) peersSetName(key string, f nft.IPFamily) string {
	if e, ok := c.peers.get(key); ok && e.sets[f] != nil {
		return e.sets[f].Name
	}
	return c.peersListName(key, f)
}

// peersListName is `peers-<hash>-v4`, the name of a peer list's set of
// family f, and of a union's held per address.
func (c *Compiler) peersListName(key string, f nft.IPFamily) string {
	return c.peerNames.name(key) + "-" + familySuffix(f)
}

package k8s

// Hostile round 19: the interning of pod records (pod.go), canonicalIP
// (defaults.go) and the slim decoder's records (slimdecode.go), each
// checked against an oracle that does not call the code under test.

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// r19Want is the record of p, built without NewPod or any interning: the
// labels as they are (nil stays nil, empty stays empty), the ports of the
// containers then of the sidecars (nil when none), status.podIP first
// when podIPs lacks it (nil when no address). canon canonicalizes the IPs
// with netip's String, as Admit's normalization must.
func r19Want(p *corev1.Pod, canon bool) *Pod {
	w := &Pod{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		Labels:            maps.Clone(p.Labels),
		CreationTimestamp: p.CreationTimestamp,
		DeletionTimestamp: p.DeletionTimestamp.DeepCopy(),
		Spec:              PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status:            PodStatus{Phase: p.Status.Phase},
	}
	for _, c := range p.Spec.Containers {
		w.Spec.Ports = append(w.Spec.Ports, c.Ports...)
	}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			w.Spec.Ports = append(w.Spec.Ports, c.Ports...)
		}
	}
	ip := func(s string) string {
		if !canon {
			return s
		}
		if a, err := netip.ParseAddr(s); err == nil {
			return a.String()
		}
		return s
	}
	var ips []corev1.PodIP
	seen := false
	for _, x := range p.Status.PodIPs {
		if x.IP == p.Status.PodIP {
			seen = true
		}
	}
	if p.Status.PodIP != "" && !seen {
		ips = append(ips, corev1.PodIP{IP: ip(p.Status.PodIP)})
	}
	for _, x := range p.Status.PodIPs {
		ips = append(ips, corev1.PodIP{IP: ip(x.IP)})
	}
	w.Status.PodIPs = ips
	return w
}

// r19Pieces are bits of label and port strings chosen so that a key made
// by joining them naively (with ':' or NUL, or with lengths written as
// digits) would spell another set.
var r19Pieces = []string{"", "1", ":", "1:", "0", "\x00", "a", "é", "2:ab", "10:", "a:1:b", "\xff", "=", ",", "1:a1:b", "3:", "\x00\x00", "日本"}

func r19Str(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(4) {
		b.WriteString(r19Pieces[r.IntN(len(r19Pieces))])
	}
	return b.String()
}

func r19Labels(r *rand.Rand) map[string]string {
	switch r.IntN(12) {
	case 0:
		return nil
	case 1:
		return map[string]string{}
	case 2: // more than the 16 keys held without allocating
		n := 16 + r.IntN(40)
		m := make(map[string]string, n)
		for range n {
			m[r19Str(r)+strconv.Itoa(r.IntN(100))] = r19Str(r)
		}
		return m
	}
	m := map[string]string{}
	for range 1 + r.IntN(4) {
		m[r19Str(r)] = r19Str(r)
	}
	return m
}

var r19Always, r19OnFailure = corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyOnFailure

func r19Ports(r *rand.Rand) []corev1.ContainerPort {
	nums := []int32{0, 1, 10, 11, -1, 80, 65535, 2147483647, -2147483648, 110, 1}
	protos := []corev1.Protocol{"TCP", "UDP", "", "1:TCP", "SCTP", "T"}
	var ports []corev1.ContainerPort
	for range r.IntN(4) {
		ports = append(ports, corev1.ContainerPort{
			Name: r19Str(r), Protocol: protos[r.IntN(len(protos))],
			ContainerPort: nums[r.IntN(len(nums))], HostPort: nums[r.IntN(len(nums))],
			HostIP: []string{"", "1", "1:", "::1", "10:", "0"}[r.IntN(6)],
		})
	}
	return ports
}

func r19Pod(r *rand.Rand, i int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: r19Str(r), UID: types.UID(fmt.Sprint(i)),
			ResourceVersion: strconv.Itoa(i), Labels: r19Labels(r)},
		Spec: corev1.PodSpec{NodeName: r19Str(r), HostNetwork: r.IntN(2) == 0},
		Status: corev1.PodStatus{Phase: corev1.PodPhase(r19Str(r)),
			PodIP: []string{"", "10.0.0.1", "fd00::1"}[r.IntN(3)]},
	}
	if r.IntN(3) == 0 {
		now := metav1.Unix(int64(i), 0)
		p.DeletionTimestamp = &now
	}
	if r.IntN(2) == 0 {
		p.Status.PodIPs = []corev1.PodIP{{IP: "fd00::1"}, {IP: "10.0.0.2"}}
	}
	for range r.IntN(3) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Ports: r19Ports(r)})
	}
	for range r.IntN(3) {
		c := corev1.Container{Name: "i", Ports: r19Ports(r)}
		switch r.IntN(3) {
		case 0:
			c.RestartPolicy = &r19Always
		case 1:
			c.RestartPolicy = &r19OnFailure
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
	return p
}

// TestHostileRound19AdversarialRecords records thousands of pods whose
// labels and ports are made of pieces that spell each other under a
// naive key (digits, ':', NUL, empty keys and values, unicode, invalid
// UTF-8, more than 16 labels), twice in different orders, and checks
// every record against the pod it came from, at once and at the end (a
// record altered by a later pod fails). It fails if two different label
// sets or port lists share an interning key, if an equal one is not
// shared, or if nil and empty labels are confused.
func TestHostileRound19AdversarialRecords(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 19))
	const n = 5000
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = r19Pod(r, i)
	}
	// Also pairs built to collide under a ':'-joined or length-free key.
	pairs := [][2]map[string]string{
		{{"a": "1:b"}, {"a1": "b"}},
		{{"1:a": ""}, {"": "1:a"}},
		{{"": ""}, {"0:": ""}},
		{{"a": "b\x00c\x00d"}, {"a": "b", "c": "d"}},
		{{"a": "1:b1:c"}, {"a": "", "b": "c"}},
		{{"": "", "1": ""}, {"": "01:"}},
		{{"a": "2:bc"}, {"a": "", "bc": ""}},
	}
	for i, pr := range pairs {
		for j, l := range pr {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pair%d-%d", i, j), Labels: l}}
			pods = append(pods, p)
		}
	}
	wants := make([]*Pod, len(pods))
	recs := make([]*Pod, len(pods))
	for i, p := range pods {
		wants[i] = r19Want(p, false)
		recs[i] = NewPod(p)
		if diff := cmp.Diff(wants[i], recs[i]); diff != "" {
			t.Fatalf("seed %d, pod %d: record differs from its pod (-pod +record):\n%s", seed, i, diff)
		}
	}
	// Again, in reverse: every equal label set and port list is found,
	// and must be the one the pod says.
	for i := len(pods) - 1; i >= 0; i-- {
		again := NewPod(pods[i])
		if diff := cmp.Diff(wants[i], again); diff != "" {
			t.Fatalf("seed %d, pod %d recorded again: differs (-pod +record):\n%s", seed, i, diff)
		}
	}
	for i := range pods {
		if diff := cmp.Diff(wants[i], recs[i]); diff != "" {
			t.Fatalf("seed %d, pod %d: its record changed after later pods (-pod +record):\n%s", seed, i, diff)
		}
	}
}

// TestHostileRound19CallerEditsDoNotReachRecords records a pod, then
// edits the corev1.Pod it came from (labels, ports, addresses, deletion
// time) as a caller reusing its object would, and checks that neither
// the record nor the record of an equal pod recorded afterwards changed:
// it fails if a record or an interning table held the caller's map,
// slice or pointer.
func TestHostileRound19CallerEditsDoNotReachRecords(t *testing.T) {
	for round := range 3 {
		uniq := fmt.Sprintf("r19-edit-%d-%d", round, rand.Uint64())
		mk := func() *corev1.Pod {
			now := metav1.Unix(1000, 0)
			return &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", Labels: map[string]string{"k": uniq, "k2": "v"}, DeletionTimestamp: &now},
				Spec: corev1.PodSpec{NodeName: "n",
					Containers:     []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{Name: uniq[:10], ContainerPort: 80, Protocol: "TCP"}}}},
					InitContainers: []corev1.Container{{Name: "s", RestartPolicy: &r19Always, Ports: []corev1.ContainerPort{{Name: "side" + uniq, ContainerPort: 81, Protocol: "UDP"}}}}},
				Status: corev1.PodStatus{PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}},
			}
		}
		p := mk()
		want := r19Want(mk(), false)
		rec := NewPod(p)
		if diff := cmp.Diff(want, rec); diff != "" {
			t.Fatalf("record differs (-pod +record):\n%s", diff)
		}
		// The caller reuses its pod.
		p.Labels["k"] = "changed"
		p.Labels["new"] = "x"
		p.Spec.Containers[0].Ports[0].Name = "changed"
		p.Spec.Containers[0].Ports[0].ContainerPort = 1
		p.Spec.InitContainers[0].Ports[0].Name = "changed2"
		p.Status.PodIPs[1].IP = "fd00::99"
		p.DeletionTimestamp.Time = p.DeletionTimestamp.Add(1e12)
		if diff := cmp.Diff(want, rec); diff != "" {
			t.Fatalf("the caller's edits of its pod reached the record (-was +now):\n%s", diff)
		}
		if diff := cmp.Diff(want, NewPod(mk())); diff != "" {
			t.Fatalf("an equal pod recorded after the edits differs (-pod +record):\n%s", diff)
		}
		_ = NewPod(p) // the edited one, interned too
		if diff := cmp.Diff(want, rec); diff != "" {
			t.Fatalf("recording the edited pod changed the first record (-was +now):\n%s", diff)
		}
	}
}

// TestHostileRound19Concurrent records pods from many goroutines at once,
// most of them sharing label sets and port lists with the others' (so that
// they race to add and find the same keys) and some of their own, checking
// each record when made and all at the end. Run with -race.
func TestHostileRound19Concurrent(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 7))
	pool := make([]*corev1.Pod, 400)
	for i := range pool {
		pool[i] = r19Pod(r, i)
	}
	const workers, each = 8, 1500
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(100+w)))
			type done struct {
				want, rec *Pod
			}
			var all []done
			for i := range each {
				var p *corev1.Pod
				if i%5 == 0 { // one of its own
					p = r19Pod(r, 1_000_000*w+i)
					p.Labels = map[string]string{"w": strconv.Itoa(w), "i": strconv.Itoa(i), "1:": r19Str(r)}
				} else {
					p = pool[r.IntN(len(pool))]
				}
				want, rec := r19Want(p, false), NewPod(p)
				if diff := cmp.Diff(want, rec); diff != "" {
					errs <- fmt.Sprintf("seed %d worker %d pod %d: record differs (-pod +record):\n%s", seed, w, i, diff)
					return
				}
				all = append(all, done{want, rec})
			}
			for i, d := range all {
				if diff := cmp.Diff(d.want, d.rec); diff != "" {
					errs <- fmt.Sprintf("seed %d worker %d pod %d: record changed later (-pod +record):\n%s", seed, w, i, diff)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestHostileRound19GenerationTurnover records more distinct label sets
// and port lists than two generations hold (minGeneration 1024 each),
// then as many others, so that the first ones are forgotten, then pods
// equal to the first ones again. Every record, old and new, must equal
// its pod; it fails if a forgotten value was handed to a different pod,
// or an old record was changed when the tables turned over.
func TestHostileRound19GenerationTurnover(t *testing.T) {
	tag := strconv.FormatUint(rand.Uint64(), 36)
	mk := func(gen, i int) *corev1.Pod {
		v := fmt.Sprintf("%s:%d:%d", tag, gen, i)
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"g": v, v: strconv.Itoa(i), "1:" + v: ""}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{
				{Name: v, ContainerPort: int32(i), Protocol: "TCP"}, {Name: "x" + v, ContainerPort: int32(gen), HostIP: v}}}}},
			Status: corev1.PodStatus{PodIP: "10.0.0.1"},
		}
	}
	const n = 3000
	first := make([]*Pod, n)
	for i := range n {
		first[i] = NewPod(mk(0, i))
	}
	for gen := 1; gen <= 3; gen++ { // enough for the first ones to go
		for i := range n {
			if rec, want := NewPod(mk(gen, i)), r19Want(mk(gen, i), false); !cmp.Equal(want, rec) {
				t.Fatalf("gen %d pod %d differs (-pod +record):\n%s", gen, i, cmp.Diff(want, rec))
			}
		}
	}
	for i := range n {
		want := r19Want(mk(0, i), false)
		if diff := cmp.Diff(want, first[i]); diff != "" {
			t.Fatalf("pod %d of the first generation: its record changed over turnovers (-pod +record):\n%s", i, diff)
		}
		if diff := cmp.Diff(want, NewPod(mk(0, i))); diff != "" {
			t.Fatalf("pod %d of the first generation recorded again: differs (-pod +record):\n%s", i, diff)
		}
		// A pod of gen 1 asked again too (it may be in prev or gone).
		if diff := cmp.Diff(r19Want(mk(1, i), false), NewPod(mk(1, i))); diff != "" {
			t.Fatalf("pod %d of gen 1 recorded again: differs (-pod +record):\n%s", i, diff)
		}
	}
	// A huge label map, past every buffer.
	huge := map[string]string{}
	for i := range 5000 {
		huge[fmt.Sprintf("%d:%s", i, tag)] = strings.Repeat("9", i%50)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: huge}}
	rec := NewPod(p)
	if !maps.Equal(rec.Labels, huge) {
		t.Fatalf("a pod with %d labels recorded with %d, not equal", len(huge), len(rec.Labels))
	}
	small := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"0:" + tag: ""}}}
	if got := NewPod(small).Labels; !maps.Equal(got, small.Labels) {
		t.Fatalf("after a huge map, a small one recorded as %v", got)
	}
	if !maps.Equal(rec.Labels, huge) {
		t.Fatalf("the huge map's record changed after a small one")
	}
}

// r19CanonOracle is what canonicalIP must return: netip's spelling of
// what parses, s itself otherwise.
func r19CanonOracle(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.String()
	}
	return s
}

// TestHostileRound19CanonicalIP compares canonicalIP with netip's String
// on edge cases (upper case, uncompressed, leading zeros in a group,
// IPv4-mapped, embedded IPv4, zones long and odd, what does not parse)
// and on random spellings of random addresses; and checks that a
// canonical address comes back as the very same string.
func TestHostileRound19CanonicalIP(t *testing.T) {
	long := strings.Repeat("z", 100)
	cases := []string{
		"", "10.0.0.1", "0.0.0.0", "255.255.255.255", "010.0.0.1", "1.2.3", "1.2.3.4.5", " 10.0.0.1", "10.0.0.1 ",
		"::", "::1", "0::0", "0:0:0:0:0:0:0:0", "FD00::1", "fd00:0:0:0:0:0:0:1", "fd00::0001", "FD00:0000::00:1",
		"2001:db8:0:0:1:0:0:1", "2001:DB8::1:0:0:1", "2001:0db8:0000:0000:0000:ff00:0042:8329",
		"::ffff:10.0.0.1", "::FFFF:10.0.0.1", "0:0:0:0:0:ffff:a00:1", "::ffff:a00:1", "::ffff:0:0",
		"::10.0.0.1", "64:ff9b::1.2.3.4", "1:2:3:4:5:6:1.2.3.4", "fe80::1%eth0", "FE80::1%ETH0", "fe80::1%", "fe80::1%" + long,
		"FE80:0:0:0::1%" + long + "%x", "fe80::1%\x00", "fe80::1%日本", "10.0.0.1%eth0", "::ffff:1.2.3.4%z",
		"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:8:9", ":::", "1::2::3", "[::1]", "0x0a.0.0.1",
		"1:0:0:1:0:0:0:1", "1:0:0:0:1:0:0:1", "0:0:1::", "::0:1", "1:0::", "FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF",
		"10.0.0.1\x00", "\x00", "fd00::1/64", "1.2.3.04",
	}
	check := func(s string) {
		t.Helper()
		got, want := canonicalIP(s), r19CanonOracle(s)
		if got != want {
			t.Errorf("canonicalIP(%q) = %q, want %q", s, got, want)
			return
		}
		if got == s && len(s) > 0 && unsafe.StringData(got) != unsafe.StringData(s) {
			t.Errorf("canonicalIP(%q): a canonical address came back as a new string", s)
		}
	}
	for _, s := range cases {
		check(s)
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 3))
	for range 20000 {
		var b [16]byte
		for i := range b {
			if r.IntN(3) != 0 {
				b[i] = byte(r.IntN(256))
			}
		}
		var a netip.Addr
		switch r.IntN(3) {
		case 0:
			a = netip.AddrFrom4([4]byte(b[:4]))
		default:
			a = netip.AddrFrom16(b)
		}
		if r.IntN(4) == 0 && a.Is6() {
			a = a.WithZone([]string{"eth0", "E", "1", long, "%"}[r.IntN(5)])
		}
		check(a.String())
		if a.Is6() {
			check(a.StringExpanded())
			check(strings.ToUpper(a.StringExpanded()))
			check(strings.ToUpper(a.String()))
			// Leading zeros trimmed unevenly.
			parts := strings.Split(a.StringExpanded(), ":")
			for i := range parts {
				if r.IntN(2) == 0 {
					parts[i] = strings.TrimLeft(parts[i], "0")
					if parts[i] == "" || parts[i][0] == '%' {
						parts[i] = "0" + parts[i]
					}
				}
			}
			check(strings.Join(parts, ":"))
		}
	}
}

// r19ValidLabels are label sets Admit accepts whose keys and values are
// digits and dots that a naive key would confuse.
func r19ValidLabels(r *rand.Rand, i int) map[string]string {
	keys := []string{"a", "a1", "1", "11", "a.b", "x/a", "x/1", "1-1", "a_1", "1.1", "b"}
	vals := []string{"", "1", "11", "a1", "1a", "1.1", "a", "1-1"}
	switch r.IntN(8) {
	case 0:
		return nil
	case 1: // many
		m := map[string]string{}
		for j := range 20 + r.IntN(20) {
			m["k"+strconv.Itoa(j)] = vals[r.IntN(len(vals))]
		}
		return m
	case 2: // its own
		return map[string]string{"own": strconv.Itoa(i), "1": strconv.Itoa(i)}
	}
	m := map[string]string{}
	for range 1 + r.IntN(4) {
		m[keys[r.IntN(len(keys))]] = vals[r.IntN(len(vals))]
	}
	return m
}

// r19ValidPod is a pod Admit accepts (mostly), with sidecars, other init
// containers, containers of various sizes, and addresses in spellings that
// are not canonical.
func r19ValidPod(r *rand.Rand, i int) *corev1.Pod {
	v4s := []string{"10.0.0.1", "10.1.2.3", "192.168.0.1"}
	v6s := []string{"fd00::1", "FD00::1", "fd00:0:0:0:0:0:0:1", "FD00:0000::0001", "2001:db8::1:0:0:1", "2001:DB8:0:0:1::1", "fd00::0a00:1"}
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: []string{"ns", "a", "n1"}[r.IntN(3)], UID: types.UID(strconv.Itoa(i)), ResourceVersion: strconv.Itoa(i), Labels: r19ValidLabels(r, i)},
		Spec:       corev1.PodSpec{NodeName: []string{"", "node-1", "n2"}[r.IntN(3)]},
		Status:     corev1.PodStatus{Phase: []corev1.PodPhase{"", "Running", "Pending"}[r.IntN(3)]},
	}
	switch r.IntN(4) {
	case 0:
	case 1:
		a := v4s[r.IntN(len(v4s))]
		p.Status.PodIP, p.Status.PodIPs = a, []corev1.PodIP{{IP: a}}
	case 2:
		a := v6s[r.IntN(len(v6s))]
		p.Status.PodIP, p.Status.PodIPs = a, []corev1.PodIP{{IP: a}}
	case 3:
		a, b := v6s[r.IntN(len(v6s))], v4s[r.IntN(len(v4s))]
		p.Status.PodIP, p.Status.PodIPs = a, []corev1.PodIP{{IP: a}, {IP: b}}
	}
	if r.IntN(5) == 0 {
		now := metav1.Unix(int64(1000+i), 0)
		p.DeletionTimestamp = &now
	}
	protos := []corev1.Protocol{"TCP", "UDP", "SCTP"}
	mkPorts := func(c int) []corev1.ContainerPort {
		var ps []corev1.ContainerPort
		for j := range r.IntN(5) {
			cp := corev1.ContainerPort{ContainerPort: int32(1 + r.IntN(3)*1000 + j), Protocol: protos[r.IntN(3)]}
			if r.IntN(2) == 0 {
				cp.Name = fmt.Sprintf("p%d-%d", c, j)
			}
			if r.IntN(6) == 0 {
				cp.HostPort = int32(1 + r.IntN(100))
			}
			ps = append(ps, cp)
		}
		return ps
	}
	for c := range r.IntN(5) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", c), Ports: mkPorts(c)})
	}
	for c := range r.IntN(4) {
		ic := corev1.Container{Name: fmt.Sprintf("i%d", c), Ports: mkPorts(10 + c)}
		switch r.IntN(3) {
		case 0:
			ic.RestartPolicy = &r19Always
		case 1:
			ic.RestartPolicy = &r19OnFailure
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, ic)
	}
	return p
}

// TestHostileRound19SlimRecords decodes, through the slim serializer
// with nothing to decode into (a watch event: its scratch pod is reused
// from pod to pod), pods of alternating sizes (many labels, containers,
// sidecars and ports, then few or none), from several goroutines, and
// checks each result against the generated decoder's pod through the
// transform (recordOf) and, for records, against an oracle that knows
// nothing of NewPod: its labels, the ports of its containers then of its
// sidecars, its addresses in netip's spelling. All records are checked
// again at the end, so that one altered by a later decode (a shared
// scratch map or slice) fails.
func TestHostileRound19SlimRecords(t *testing.T) {
	slim := slimSerializer{protobufCodec}
	seed := rand.Uint64()
	const workers, each = 4, 600
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	var recordsMu sync.Mutex
	records := 0
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			type done struct {
				want, rec *Pod
			}
			var all []done
			for i := range each {
				pod := r19ValidPod(r, w*each+i)
				data := encodeProtobuf(t, pod)
				gen, _, err := protobufCodec.Decode(data, nil, nil)
				if err != nil {
					errs <- fmt.Sprintf("generated decoder: %v", err)
					return
				}
				got, _, err := slim.Decode(data, nil, nil)
				if err != nil {
					errs <- fmt.Sprintf("seed %d w %d pod %d: slim: %v", seed, w, i, err)
					return
				}
				if diff := sameSlimPod(gen.(*corev1.Pod), got); diff != "" {
					errs <- fmt.Sprintf("seed %d w %d pod %d: slim differs from generated+transform:\n%s", seed, w, i, diff)
					return
				}
				rec, ok := got.(*Pod)
				if !ok {
					continue
				}
				want := r19Want(gen.(*corev1.Pod), true)
				if diff := cmp.Diff(want, rec); diff != "" {
					errs <- fmt.Sprintf("seed %d w %d pod %d: slim record differs from its pod (-pod +record):\n%s", seed, w, i, diff)
					return
				}
				all = append(all, done{want, rec})
			}
			for i, d := range all {
				if diff := cmp.Diff(d.want, d.rec); diff != "" {
					errs <- fmt.Sprintf("seed %d w %d record %d: changed by later decodes (-pod +record):\n%s", seed, w, i, diff)
					return
				}
			}
			recordsMu.Lock()
			records += len(all)
			recordsMu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if !t.Failed() && records < workers*each/3 {
		t.Fatalf("only %d of %d pods decoded to records: the oracle barely ran", records, workers*each)
	}
	t.Logf("%d records", records)
}

// TestHostileRound19SlimSidecarsAndOrder: one pod's ports, in
// containers and init containers in every mix of restart policies,
// decoded slim after a pod with more of everything, must be exactly the
// containers' ports then the sidecars' in order, and an init container
// that is no sidecar contributes none.
func TestHostileRound19SlimSidecarsAndOrder(t *testing.T) {
	slim := slimSerializer{protobufCodec}
	big := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "ns", Labels: map[string]string{"a": "1", "b": "2", "c": "3"}},
		Status:     corev1.PodStatus{PodIP: "10.0.0.9", PodIPs: []corev1.PodIP{{IP: "10.0.0.9"}}},
	}
	for c := range 6 {
		big.Spec.Containers = append(big.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", c), Ports: []corev1.ContainerPort{{Name: fmt.Sprintf("big%d", c), ContainerPort: int32(100 + c), Protocol: "TCP"}}})
		big.Spec.InitContainers = append(big.Spec.InitContainers, corev1.Container{Name: fmt.Sprintf("i%d", c), RestartPolicy: &r19Always, Ports: []corev1.ContainerPort{{Name: fmt.Sprintf("side%d", c), ContainerPort: int32(200 + c), Protocol: "UDP"}}})
	}
	never := corev1.ContainerRestartPolicy("Never")
	small := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: "ns", Labels: map[string]string{"a": "1"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: "i0", RestartPolicy: &never, Ports: []corev1.ContainerPort{{Name: "never", ContainerPort: 1, Protocol: "TCP"}}},
				{Name: "i1", Ports: []corev1.ContainerPort{{Name: "none", ContainerPort: 2, Protocol: "TCP"}}},
				{Name: "i2", RestartPolicy: &r19Always, Ports: []corev1.ContainerPort{{Name: "side", ContainerPort: 3, Protocol: "SCTP"}}},
			},
			Containers: []corev1.Container{{Name: "c0"}, {Name: "c1", Ports: []corev1.ContainerPort{{Name: "main", ContainerPort: 4}}}},
		},
		Status: corev1.PodStatus{PodIP: "FD00::0001"},
	}
	bare := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "ns"},
		Spec:       corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", Ports: []corev1.ContainerPort{{ContainerPort: 9, Protocol: "TCP"}}}}},
	}
	for range 50 {
		for _, p := range []*corev1.Pod{big, small, bare} {
			got, _, err := slim.Decode(encodeProtobuf(t, p), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec, ok := got.(*Pod)
			if !ok {
				t.Fatalf("%s decoded to %T, want a record", p.Name, got)
			}
			want := r19Want(p, true)
			// Admit defaults a port's protocol to TCP, and podIPs from podIP.
			for i := range want.Spec.Ports {
				if want.Spec.Ports[i].Protocol == "" {
					want.Spec.Ports[i].Protocol = "TCP"
				}
			}
			if diff := cmp.Diff(want, rec, cmp.Comparer(func(a, b metav1.Time) bool { return a.Equal(&b) })); diff != "" {
				t.Fatalf("%s: slim record differs (-pod +record):\n%s", p.Name, diff)
			}
		}
	}
}

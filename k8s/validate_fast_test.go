package k8s

import (
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The string checks of podSurelyValid and the upstream checks they stand
// for, by name.
var fastChecks = []struct {
	name     string
	fast     func(string) bool
	upstream func(string) []string
}{
	{"DNS1123Label", isDNS1123Label, validation.IsDNS1123Label},
	{"DNS1123Subdomain", isDNS1123Subdomain, validation.IsDNS1123Subdomain},
	{"QualifiedName", isLabelKey, validation.IsQualifiedName},
	{"LabelValue", isLabelValue, validation.IsValidLabelValue},
	{"PortName", isPortName, validation.IsValidPortName},
}

// edgeStrings are the inputs where a hand-written check most likely
// parts from a regular expression: ends, lengths at each limit, every
// separator in every place, case, bytes beyond ASCII, a newline before the
// end (which a Perl-style $ would let through).
func edgeStrings() []string {
	out := []string{"", "a", "A", "0", "-", ".", "_", "/", "a-", "-a", "a-b", "a--b", "a.b", "a..b", ".a", "a.",
		"a_b", "_a", "a_", "A-b", "a/b", "/a", "a/", "a//b", "a/b/c", "example.com/x", "Example.com/x", "exa_mple.com/x",
		"-x.com/y", "x.com/-y", "x.com/y-", "x/y.z", "a b", "a\n", "a\x00", "é", "aé", "http", "h1", "123", "1-2",
		"dns-tcp", "dns--tcp", "-dns", "dns-", "abcdefghijklmno", "abcdefghijklmnop"}
	for _, n := range []int{14, 15, 16, 62, 63, 64, 252, 253, 254} {
		out = append(out, strings.Repeat("a", n), strings.Repeat("a", n-1)+"-", strings.Repeat("a", n-1)+"1")
		// Labels joined by dots, the last one cut to make n.
		var b strings.Builder
		for b.Len() < n {
			b.WriteString("abcdefghi.")
		}
		s := strings.TrimRight(b.String()[:n], ".")
		out = append(out, s, "p.com/"+s, s+"/n")
	}
	return out
}

// randomString draws from an alphabet of the characters the checks tell
// apart, at lengths around their limits.
func randomString(r *rand.Rand) string {
	const alphabet = "abz019AZ-_./"
	lengths := []int{1, 2, 3, 4, 5, 8, 15, 16, 63, 64, 253, 254}
	n := lengths[r.IntN(len(lengths))]
	if r.IntN(4) == 0 {
		n = r.IntN(20)
	}
	b := make([]byte, n)
	for i := range b {
		switch k := r.IntN(100); {
		case k < 70:
			b[i] = "abcxyz0123"[r.IntN(10)] // mostly valid, so that the rest decides
		case k < 99:
			b[i] = alphabet[r.IntN(len(alphabet))]
		default:
			b[i] = byte(r.IntN(256))
		}
	}
	return string(b)
}

// TestFastChecksMatchUpstream: each hand-written check accepts exactly
// what the upstream check it replaces accepts, on the edge cases and on
// 200k random strings each.
func TestFastChecksMatchUpstream(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	inputs := edgeStrings()
	for range 200_000 {
		inputs = append(inputs, randomString(r))
	}
	for _, c := range fastChecks {
		accepted := 0
		for _, s := range inputs {
			want := len(c.upstream(s)) == 0
			if got := c.fast(s); got != want {
				t.Errorf("%s(%q): fast %v, upstream %v (%v)", c.name, s, got, want, c.upstream(s))
			}
			if want {
				accepted++
			}
		}
		// Both answers were asked for: the random inputs are not all
		// refused (a check that refuses everything would pass above
		// only where upstream refuses everything too).
		if accepted < 1000 || accepted > len(inputs)-1000 {
			t.Errorf("%s: upstream accepted %d of %d inputs: the inputs do not exercise both answers", c.name, accepted, len(inputs))
		}
	}
}

// FuzzFastChecksMatchUpstream is TestFastChecksMatchUpstream for the
// fuzzer (go test -fuzz FuzzFastChecksMatchUpstream ./k8s).
func FuzzFastChecksMatchUpstream(f *testing.F) {
	for _, s := range edgeStrings() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range fastChecks {
			if got, want := c.fast(s), len(c.upstream(s)) == 0; got != want {
				t.Errorf("%s(%q): fast %v, upstream %v (%v)", c.name, s, got, want, c.upstream(s))
			}
		}
	})
}

// randomPod builds a defaulted pod from random parts, each valid most of
// the time.
func randomPod(r *rand.Rand) *corev1.Pod {
	pick := func(valid string) string {
		if r.IntN(8) == 0 {
			return randomString(r)
		}
		return valid
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pick("web-1.a"), Namespace: pick("ns-1"),
			Labels: map[string]string{pick("app"): pick("web"), pick("example.com/tier"): pick("")}},
		Spec: corev1.PodSpec{NodeName: pick("node-0")},
	}
	switch r.IntN(40) {
	case 0:
		p.GenerateName = "web-"
	case 1:
		p.Annotations = map[string]string{"a": "b"}
	case 2:
		p.Finalizers = []string{"x/y"}
	case 3:
		p.Generation = -1
	}
	ports := func() []corev1.ContainerPort {
		var out []corev1.ContainerPort
		for range r.IntN(4) {
			pt := corev1.ContainerPort{Name: pick("http"), ContainerPort: int32(r.IntN(3)) * 40000, Protocol: corev1.ProtocolTCP}
			if r.IntN(3) == 0 {
				pt.Name = ""
			}
			if r.IntN(10) == 0 {
				pt.HostPort = int32(r.IntN(3)-1) * 70000
			}
			if r.IntN(10) == 0 {
				pt.Protocol = corev1.Protocol(pick("UDP"))
			}
			out = append(out, pt)
		}
		return out
	}
	for range r.IntN(3) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Ports: ports()})
	}
	if r.IntN(4) == 0 {
		p.Spec.InitContainers = []corev1.Container{{Name: "i", Ports: ports()}}
	}
	addrs := []string{"10.0.0.1", "fd00::1", "10.0.0.2", "::ffff:10.0.0.1", "fe80::1%eth0", "010.0.0.1", "x", ""}
	for range r.IntN(3) {
		ip := addrs[r.IntN(2)]
		if r.IntN(5) == 0 {
			ip = addrs[r.IntN(len(addrs))]
		}
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(p.Status.PodIPs) > 0 {
		p.Status.PodIP = p.Status.PodIPs[0].IP
		if r.IntN(20) == 0 {
			p.Status.PodIP = "10.9.9.9"
		}
	}
	return p
}

// TestPodSurelyValidIsTheFullCheck: on random pods, podSurelyValid says
// yes exactly when the full validation finds nothing, but for pods with
// what it leaves to the full check (generateName, annotations,
// finalizers, a negative generation), where it must say no.
func TestPodSurelyValidIsTheFullCheck(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sure, valid := 0, 0
	for range 50_000 {
		p := randomPod(r)
		full := validatePodFully(p)
		got := podSurelyValid(p)
		delegated := p.GenerateName != "" || len(p.Annotations) != 0 || len(p.Finalizers) != 0 || p.Generation < 0
		switch {
		case got && len(full) != 0:
			t.Fatalf("podSurelyValid accepted a pod the full check refuses (%v):\n%+v", full, p)
		case !got && len(full) == 0 && !delegated:
			t.Fatalf("podSurelyValid refused a valid pod:\n%+v", p)
		case got && delegated:
			t.Fatalf("podSurelyValid decided a pod it must leave to the full check:\n%+v", p)
		}
		if got {
			sure++
		}
		if len(full) == 0 {
			valid++
		}
		if errs := ValidatePod(p); len(errs) != len(full) {
			t.Fatalf("ValidatePod found %v, the full check %v", errs, full)
		}
	}
	if sure < 5000 || valid-sure > valid/10 {
		t.Errorf("of 50000 random pods, %d valid and %d taken by the fast path: the test does not exercise it", valid, sure)
	}
}

// BenchmarkValidatePod: a pod of the scale cluster through ValidatePod
// (the fast path) and through the full check it replaces, in one run:
// go test -run '^$' -bench ValidatePod -benchmem ./k8s
func BenchmarkValidatePod(b *testing.B) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-1234", Namespace: "ns-12",
			Labels: map[string]string{"app": "app-3", "tier": "web", "example.com/team": "team-7"}},
		Spec: corev1.PodSpec{NodeName: "node-17", Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}}},
		Status: corev1.PodStatus{PodIP: "10.1.2.3", PodIPs: []corev1.PodIP{{IP: "10.1.2.3"}, {IP: "fd00::1:2:3"}}},
	}
	for _, v := range []struct {
		name string
		fn   func(*corev1.Pod) field.ErrorList
	}{{"fast", ValidatePod}, {"full", validatePodFully}} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				if errs := v.fn(p); len(errs) != 0 {
					b.Fatal(errs)
				}
			}
		})
	}
}

package k8s

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// With length-prefixed keys, no two different label maps or port
// lists share an interned value, over random maps drawn from an alphabet of
// the key's own syntax (digits, ':') and NUL.
func TestInternKeysInjective(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alpha := []byte("01:9a\x00")
	str := func() string {
		var b strings.Builder
		for range r.IntN(5) {
			b.WriteByte(alpha[r.IntN(len(alpha))])
		}
		return b.String()
	}
	for i := range 200000 {
		m := map[string]string{}
		for range 1 + r.IntN(3) {
			m[str()] = str()
		}
		got := internLabels(m)
		if !maps.Equal(got, m) {
			t.Fatalf("iteration %d: internLabels(%q) = %q", i, m, got)
		}
		var ports []corev1.ContainerPort
		for range 1 + r.IntN(2) {
			ports = append(ports, corev1.ContainerPort{Name: str(), Protocol: corev1.Protocol(str()), ContainerPort: int32(r.IntN(12)), HostPort: int32(r.IntN(12)), HostIP: str()})
		}
		want := slices.Clone(ports)
		gotP := podPorts(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: ports}}}})
		if !slices.Equal(gotP, want) {
			t.Fatalf("iteration %d: podPorts(%q) = %q", i, want, gotP)
		}
	}
}

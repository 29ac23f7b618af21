package k8s

import (
	"testing"
	"testing/fstest"
)

// A kind nftpolicy does not read is a warning when it is a real kind
// (a Service, a Deployment); a kind of the groups nftpolicy reads that is
// not one of theirs (NetworkPolicyy) is an error, since it is most likely a
// typo that would drop what the document defines.
func TestUnknownKindsOfOurGroupsAreErrors(t *testing.T) {
	for _, tc := range []struct {
		apiVersion, kind string
		warning          bool
	}{
		{"v1", "Service", true},
		{"apps/v1", "Deployment", true},
		{"networking.k8s.io/v1", "Ingress", true},
		{"example.com/v1", "Widget", true},
		{"networking.k8s.io/v1", "NetworkPolicyy", false},
		{"networking.k8s.io/v1", "Networkpolicy", false},
		{"v1", "Pdo", false},
	} {
		doc := "apiVersion: " + tc.apiVersion + "\nkind: " + tc.kind + "\nmetadata: {name: a, namespace: x}\n"
		_, errs, err := LoadFS(fstest.MapFS{"a.yaml": {Data: []byte(doc)}})
		if err != nil || len(errs) != 1 {
			t.Errorf("%s %s: %v, %v; want one object error", tc.apiVersion, tc.kind, errs, err)
			continue
		}
		if errs[0].Warning() != tc.warning {
			t.Errorf("%s %s: %v: warning %v, want %v", tc.apiVersion, tc.kind, errs[0], errs[0].Warning(), tc.warning)
		}
	}
}

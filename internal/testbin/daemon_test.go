package testbin

import "testing"

func TestParseReadyz(t *testing.T) {
	for _, tc := range []struct {
		status  int
		body    string
		want    Readyz
		reasons string
		bad     bool
	}{
		{status: 200, body: "synced generation 4\n", want: Readyz{Ready: true, Generation: 4}},
		{status: 503, body: "not synced yet\n", want: Readyz{}, reasons: "not synced yet"},
		{status: 503, body: "manifests source: x.yaml: bad\nsynced generation 7\n", want: Readyz{Generation: 7}, reasons: "manifests source: x.yaml: bad"},
		{status: 503, body: "manifest objects skipped (2):\n  a\n  b\nlast sync failed: EPERM\nsynced generation 12\n", want: Readyz{Generation: 12},
			reasons: "manifest objects skipped (2):\n  a\n  b\nlast sync failed: EPERM"},
		// What the daemon never answers.
		{status: 200, body: "synced generation 4", bad: true},
		{status: 200, body: "synced generation 0\n", bad: true},
		{status: 200, body: "ok\n", bad: true},
		{status: 200, body: "a reason\nsynced generation 4\n", bad: true},
		{status: 200, body: "synced generation 4 and more\n", bad: true},
		{status: 200, body: "synced generation 4\nmore\n", bad: true},
		{status: 503, body: "synced generation 4\n", bad: true},
		{status: 503, body: "\n", bad: true},
		{status: 500, body: "synced generation 4\n", bad: true},
	} {
		got, err := ParseReadyz(tc.status, tc.body)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseReadyz(%d, %q) = %+v, want an error", tc.status, tc.body, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseReadyz(%d, %q): %v", tc.status, tc.body, err)
			continue
		}
		if got.Ready != tc.want.Ready || got.Generation != tc.want.Generation || got.Body != tc.body || got.Reasons() != tc.reasons {
			t.Errorf("ParseReadyz(%d, %q) = %+v, reasons %q; want %+v, reasons %q", tc.status, tc.body, got, got.Reasons(), tc.want, tc.reasons)
		}
	}
}

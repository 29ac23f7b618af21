package netns

import (
	"slices"
	"testing"
	"time"
)

// The check's windows: a state may be in force from the beginning of its
// change until the next change settles, and a probe must agree with the
// states that may have been in force while it ran whenever they agree.
func TestTimelineCheck(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Target 0: allowed, denied from the change at 100-110, allowed again
	// from the change at 200-220. Target 1 allowed throughout.
	tl := &Timeline{states: []timedState{
		{allowed: []bool{true, true}},
		{allowed: []bool{false, true}, begin: at(100), settled: at(110)},
		{allowed: []bool{true, true}, begin: at(200), settled: at(220)},
	}}
	targets := make([]ProbeTarget, 2)
	rec := func(target, start, end int, ok bool) ProbeRecord {
		return ProbeRecord{Target: target, Start: at(start), End: at(end), OK: ok, Why: "timeout"}
	}
	for _, c := range []struct {
		name   string
		r      ProbeRecord
		wrong  bool
		states []int
	}{
		{"allowed before the change", rec(0, 10, 20, true), false, []int{0}},
		{"blocked before the change", rec(0, 10, 20, false), true, []int{0}},
		{"allowed across the change", rec(0, 95, 105, true), false, []int{0, 1}},
		{"blocked across the change", rec(0, 95, 105, false), false, []int{0, 1}},
		{"allowed right after it began", rec(0, 101, 102, true), false, []int{0, 1}},
		{"allowed after it settled: a leak", rec(0, 111, 150, true), true, []int{1}},
		{"blocked after it settled", rec(0, 111, 150, false), false, []int{1}},
		{"a probe spanning two changes", rec(0, 105, 205, true), false, []int{0, 1, 2}},
		{"allowed across the second change", rec(0, 190, 210, true), false, []int{1, 2}},
		{"blocked after the second change settled", rec(0, 221, 230, false), true, []int{2}},
		{"a target both states allow, blocked across the change", rec(1, 95, 105, false), true, []int{0, 1}},
		{"blocked, but by a leak prober", ProbeRecord{Target: 1, Start: at(95), End: at(105), LeaksOnly: true}, false, nil},
		{"a leak found by a leak prober", ProbeRecord{Target: 0, Start: at(111), End: at(150), OK: true, LeaksOnly: true}, true, []int{1}},
	} {
		wrong, _ := tl.Check(targets, []ProbeRecord{c.r})
		if (len(wrong) > 0) != c.wrong {
			t.Errorf("%s: wrong verdicts %v, want wrong=%v", c.name, wrong, c.wrong)
		}
		if len(wrong) > 0 && !slices.Equal(wrong[0].States, c.states) {
			t.Errorf("%s: states %v, want %v", c.name, wrong[0].States, c.states)
		}
	}
	// An unknown state (a tampered table) excuses any verdict while it
	// may be in force, and only then.
	tl.states = append(tl.states, timedState{begin: at(300), settled: at(301)},
		timedState{allowed: []bool{false, true}, begin: at(301), settled: at(400)})
	for _, c := range []struct {
		r     ProbeRecord
		wrong bool
	}{
		{rec(0, 302, 303, true), false},
		{rec(1, 350, 360, false), false},
		{rec(0, 401, 410, true), true},
		{rec(1, 401, 410, false), true},
	} {
		if wrong, _ := tl.Check(targets, []ProbeRecord{c.r}); (len(wrong) > 0) != c.wrong {
			t.Errorf("%+v around an unknown state: wrong verdicts %v, want wrong=%v", c.r, wrong, c.wrong)
		}
	}

	// The counting of probes across a change.
	_, across := tl.Check(targets, []ProbeRecord{rec(0, 10, 20, true), rec(0, 95, 105, true), rec(1, 111, 150, true)})
	if across != 1 {
		t.Errorf("across = %d, want 1", across)
	}
}

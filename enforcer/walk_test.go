package enforcer

import (
	"fmt"
	"slices"
	"testing"
)

type obj struct{ k, v string }

func objKeyOf(o *obj) objKey { return objKey{name: o.k} }

func walk(prev, next []*obj) ([]*obj, []string) {
	var got []string
	out := walkChanges(prev, next, objKeyOf, func(k objKey, old, new *obj) {
		switch {
		case old == nil:
			got = append(got, "+"+k.name+"="+new.v)
		case new == nil:
			got = append(got, "-"+k.name)
		default:
			got = append(got, "~"+k.name+"="+new.v)
		}
	})
	return out, got
}

func TestWalkChanges(t *testing.T) {
	a, b, c, d := &obj{"a", "1"}, &obj{"b", "1"}, &obj{"c", "1"}, &obj{"d", "1"}
	b2 := &obj{"b", "2"}
	for _, tc := range []struct {
		name       string
		prev, next []*obj
		want       []string
		walked     []*obj
	}{
		{"first", nil, []*obj{a, b}, []string{"+a=1", "+b=1"}, []*obj{a, b}},
		{"same", []*obj{a, b, c}, []*obj{a, b, c}, nil, []*obj{a, b, c}},
		{"changed in place", []*obj{a, b, c}, []*obj{a, b2, c}, []string{"~b=2"}, []*obj{a, b2, c}},
		{"added and removed", []*obj{a, c}, []*obj{b, c, d}, []string{"-a", "+b=1", "+d=1"}, []*obj{b, c, d}},
		{"all gone", []*obj{a, b}, nil, []string{"-a", "-b"}, nil},
		{"unsorted next is sorted", []*obj{a, b, c}, []*obj{c, a, b2}, []string{"~b=2"}, []*obj{a, b2, c}},
		{"unchanged objects out of order", []*obj{a, b, c}, []*obj{b, a, c}, nil, []*obj{a, b, c}},
		{"duplicate key: the last wins", []*obj{a}, []*obj{a, b, b2}, []string{"+b=2"}, []*obj{a, b2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			walked, got := walk(tc.prev, tc.next)
			if !slices.Equal(got, tc.want) {
				t.Errorf("changes %q, want %q", got, tc.want)
			}
			if !slices.Equal(walked, tc.walked) {
				t.Errorf("walked %s, want %s", fmt.Sprint(walked), fmt.Sprint(tc.walked))
			}
		})
	}
}

package consistency

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]State{
		"": Default, "default": Default, "consistent": Consistent, "cached": Cached, "delegated": Delegated,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"fast", "Cached", " cached", "delegate"} {
		_, err := Parse(bad)
		if err == nil {
			t.Fatalf("Parse(%q) accepted", bad)
		}
		for _, v := range Valid() {
			if !strings.Contains(err.Error(), v) || !strings.Contains(err.Error(), bad) {
				t.Fatalf("error %q does not name the value and list %q", err, v)
			}
		}
	}
}

// Rules C4 and D5: where states overlap, the stronger one applies.
func TestC4_D5_StrongerWins(t *testing.T) {
	cases := []struct{ a, b, want State }{
		{Delegated, Cached, Cached},
		{Delegated, Consistent, Consistent},
		{Cached, Consistent, Consistent},
		{Cached, Default, Default},
		{Delegated, Delegated, Delegated},
	}
	for _, c := range cases {
		if got := Stronger(c.a, c.b); got != c.want {
			t.Errorf("Stronger(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := Stronger(c.b, c.a); got.rank() != c.want.rank() {
			t.Errorf("Stronger(%v, %v) = %v, not symmetric", c.b, c.a, got)
		}
	}
	if !Delegated.NeedsStore() || !Cached.NeedsStore() || Consistent.NeedsStore() || Default.NeedsStore() {
		t.Fatal("NeedsStore wrong")
	}
	if !Delegated.WritesBack() || Cached.WritesBack() {
		t.Fatal("WritesBack wrong")
	}
}

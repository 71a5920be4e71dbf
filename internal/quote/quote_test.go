package quote

import (
	"strings"
	"testing"
)

func TestPrefix(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `""`},
		{"abc", `"abc"`},
		{strings.Repeat("x", Max), `"` + strings.Repeat("x", Max) + `"`},
		{strings.Repeat("x", Max+1), `"` + strings.Repeat("x", Max) + `"… (41 bytes)`},
		{strings.Repeat("x", 100_000), `"` + strings.Repeat("x", Max) + `"… (100000 bytes)`},
		// Cut on a rune boundary: é is two bytes, the 40th byte starts one.
		{strings.Repeat("x", Max-1) + "é" + "yy", `"` + strings.Repeat("x", Max-1) + `"… (43 bytes)`},
		{"a\nb\x00", `"a\nb\x00"`},
	} {
		if got := Prefix(c.in); got != c.want {
			t.Errorf("Prefix(%.60q) = %s, want %s", c.in, got, c.want)
		}
	}
}

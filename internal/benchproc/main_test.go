//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseStopped(t *testing.T) {
	out := []byte(`summary of /tmp/r
OUTCOME             PAIRS  WHY
free                0      
stopped with proof  10000  
left uncertain      0      
`)
	if n, err := parseStopped(out); err != nil || n != 10000 {
		t.Errorf("parseStopped = %d, %v; want 10000", n, err)
	}
	for _, bad := range []string{"", "free 3\n", "stopped with proof\n", "stopped with proof  many\n"} {
		if n, err := parseStopped([]byte(bad)); err == nil {
			t.Errorf("parseStopped(%q) = %d, nil; want an error", bad, n)
		}
	}
}

func TestParseLoadavg(t *testing.T) {
	if l, err := parseLoadavg("2.36 0.57 0.19 4/118 8784\n"); err != nil || l != "2.36 0.57 0.19" {
		t.Errorf("parseLoadavg = %q, %v", l, err)
	}
	for _, bad := range []string{"", "1.0 2.0", "a b c 1/2 3"} {
		if l, err := parseLoadavg(bad); err == nil {
			t.Errorf("parseLoadavg(%q) = %q, nil; want an error", bad, l)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	if got := medianInt([]int64{10, 30, 20}); got != 20 {
		t.Errorf("medianInt = %d, want 20", got)
	}
}

func TestOneWinner(t *testing.T) {
	if err := oneWinner([]int{3, 0, 3, 3}); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]int{{3, 3}, {0, 0, 3}, {0, 1, 3}, {0, -1}} {
		if oneWinner(bad) == nil {
			t.Errorf("oneWinner(%v) = nil, want an error", bad)
		}
	}
}

// TestFsyncFloor: the floor writes three durable files per pair — in
// proofs, the seat's key directory and the session's — and counts the
// pairs; a root whose kinds disagree is refused.
func TestFsyncFloor(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"seat/a", "seat/b", "session/c", "session/d"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	_, n, err := fsyncFloor(root)
	if err != nil || n != 2 {
		t.Fatalf("fsyncFloor = %d pairs, %v", n, err)
	}
	for dir, want := range map[string]int{"proofs": 2, "seat/a": 1, "seat/b": 1, "session/c": 1, "session/d": 1} {
		ents, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil || len(ents) != want {
			t.Errorf("%s holds %d files (%v), want %d", dir, len(ents), err, want)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "seat", "e"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fsyncFloor(root); err == nil {
		t.Error("fsyncFloor of 3 seats and 2 sessions: nil error")
	}
}

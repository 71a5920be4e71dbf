package claimstore

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// stress multiplies the hard-coded iteration counts of the randomized
// tests that are not rapid properties (those take -rapid.checks and
// -rapid.steps): the rounds of each concurrent-acquire race, and the claim
// ids TestClaimIDs draws. CI runs the default.
var stress = flag.Int("stress", 1, "multiply the rounds of the concurrent-acquire races and the claim ids TestClaimIDs draws")

// rounds returns n scaled by -stress (at least 1).
func rounds(n int) int { return n * max(*stress, 1) }

// raceAcquire has n goroutines acquire the pair at once, each through the
// store storeFor(i) returns, released together by a closed channel. It
// returns the winning claims and fails on anything but a refusal.
func raceAcquire(t *testing.T, n int, storeFor func(i int) *Store, seat, session func(i int) Key) []*Claim {
	t.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []*Claim
	errs := make([]error, n)
	for i := range n {
		s := storeFor(i)
		f := fields(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := s.Acquire(context.Background(), seat(i), session(i), f)
			if err == nil {
				mu.Lock()
				won = append(won, c)
				mu.Unlock()
				return
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.As(err, new(*Refusal)) {
			t.Errorf("goroutine %d: %v, want a win or a refusal", i, err)
		}
	}
	return won
}

// TestConcurrentAcquire: 16 goroutines race for one pair, in one store and
// in 16 stores on the same root, 5 rounds each (5N with -stress N); exactly
// one wins every time, and the losers leave nothing behind but the
// winner's revisions.
func TestConcurrentAcquire(t *testing.T) {
	const n = 16
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("sharedStore=%v", shared), func(t *testing.T) {
			for round := range rounds(5) {
				root := newRoot(t)
				one := openStore(t, root, nil)
				stores := func(int) *Store { return one }
				if !shared {
					stores = func(int) *Store { return openStore(t, root, nil) }
				}
				seat, session := seatKey(t, "s"), sessionKey(t, "x")
				won := raceAcquire(t, n, stores, func(int) Key { return seat }, func(int) Key { return session })
				if len(won) != 1 {
					t.Fatalf("round %d: %d winners, want exactly 1", round, len(won))
				}
				p, err := one.Pair(context.Background(), seat, session)
				if err != nil {
					t.Fatal(err)
				}
				if p.State() != Reserved || p.Seat.Record.ClaimID != won[0].ID || p.Session.Record.ClaimID != won[0].ID {
					t.Errorf("round %d: pair %s held by %s/%s; want reserved by the winner %s", round, p.State(), p.Seat.Record.ClaimID, p.Session.Record.ClaimID, won[0].ID)
				}
				for _, k := range []Key{seat, session} {
					if names := dirNames(t, one, k); len(names) != 1 {
						t.Errorf("round %d: %v holds %v; want only the winner's revision", round, k, names)
					}
				}
			}
		})
	}
}

// TestConcurrentAcquireOverlappingSeats: goroutines on different seats race
// for one session. At most one may hold the session; every loser that got
// its seat closed it again, so no seat is left held by a loser.
func TestConcurrentAcquireOverlappingSeats(t *testing.T) {
	const n = 8
	for round := range rounds(5) {
		root := newRoot(t)
		session := sessionKey(t, "x")
		seats := make([]Key, n)
		for i := range seats {
			seats[i] = seatKey(t, fmt.Sprint("seat-", i))
		}
		won := raceAcquire(t, n, func(int) *Store { return openStore(t, root, nil) }, func(i int) Key { return seats[i] }, func(int) Key { return session })
		if len(won) != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, len(won))
		}
		s := openStore(t, root, nil)
		for _, seat := range seats {
			h, err := s.Head(context.Background(), seat)
			if err != nil {
				t.Fatal(err)
			}
			if h.Held() != (seat == won[0].Seat) {
				t.Errorf("round %d: %v held %v (state %s); only the winner's seat should be", round, seat, h.Held(), h.State())
			}
		}
	}
}

// helperEnv gates TestHelperProcess: set only in the children that
// TestMultiProcessAcquire starts.
const helperEnv = "CLAIMSTORE_TEST_HELPER_ROOT"

// TestHelperProcess is not a test: it is the child of
// TestMultiProcessAcquire. It says "ready", waits for "go" on stdin, races
// for the pair and prints "won <claim>" or "refused <code>".
func TestHelperProcess(t *testing.T) {
	root := os.Getenv(helperEnv)
	if root == "" {
		t.Skip("helper process for TestMultiProcessAcquire; runs only as its child")
	}
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	f := fields(t, s)
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		fmt.Println("error no go:", line, err)
		os.Exit(3)
	}
	c, err := s.Acquire(context.Background(), seat, session, f)
	var r *Refusal
	switch {
	case err == nil:
		fmt.Println("won", c.ID)
	case errors.As(err, &r):
		fmt.Println("refused", r.Code)
	default:
		fmt.Println("error", err)
	}
	os.Exit(0)
}

// TestMultiProcessAcquire: separate processes, started together, race for
// one pair on a shared root; exactly one wins.
func TestMultiProcessAcquire(t *testing.T) {
	const n = 6
	root := newRoot(t)
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	children := make([]child, n)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+root)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		children[i] = child{cmd, stdin, bufio.NewReader(stdout)}
	}
	for i, c := range children {
		if line, err := c.out.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("child %d: %q, %v; want ready", i, line, err)
		}
	}
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var won []string
	for i, c := range children {
		line, err := c.out.ReadString('\n')
		if err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		switch f := strings.Fields(line); {
		case len(f) == 2 && f[0] == "won":
			won = append(won, f[1])
		case len(f) == 2 && f[0] == "refused" && (f[1] == string(AlreadyActive) || f[1] == string(UnsafeReplacement)):
		default:
			t.Errorf("child %d: %q; want won or refused", i, line)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d processes won (%v), want exactly 1", len(won), won)
	}
	s := openStore(t, root, nil)
	p, err := s.Pair(context.Background(), seatKey(t, "s"), sessionKey(t, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if p.State() != Reserved || p.Seat.Record.ClaimID != won[0] || p.Session.Record.ClaimID != won[0] {
		t.Errorf("pair after the race: %s, seat claim %v; want reserved by %s", p.State(), p.Seat.Record, won[0])
	}
}

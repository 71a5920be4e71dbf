package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// TestWaitFreeEndsInARead: the wait's deadline or a signal that ends it
// while the watch is armed or the pair is read (an etcd read cut by its
// context) is a timeout (exit 8) or an interruption (exit 1), never a
// failure of the store; and a wait that never read the pair held does not
// say it is "still held". CI met the deadline inside an etcd read under
// load: `wait --timeout 100ms` exited 1 with "read head …: context
// deadline exceeded".
func TestWaitFreeEndsInARead(t *testing.T) {
	c := etcdtest.Start(t, 1)
	root := "etcd://" + c.Hosts()[0] + "/waitread"
	code, out, errs := runEtcd(t, testOptions, nil, nil, "acquire", "--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x", "--claim-id", "c0000000000000000000000e1", "--owner-pid", "parent")
	if code != exitOK {
		t.Fatalf("acquire: exit %d\n%s%s", code, out, errs)
	}
	be, err := etcdbackend.Open(context.Background(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := claimstore.New(be, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	seat, err := claimstore.SeatKey("s", "p", "/w")
	if err != nil {
		t.Fatal(err)
	}
	session, err := claimstore.SessionKey("x")
	if err != nil {
		t.Fatal(err)
	}

	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = waitFree(past, s, seat, session)
	var xe exitErr
	if !errors.As(err, &xe) || xe.code != exitTimeout || !strings.Contains(xe.msg, "before") || strings.Contains(xe.msg, "still held") {
		t.Errorf("deadline before the first read: %v; want exit 8, saying the pair was not read", err)
	}

	gone, cancel2 := context.WithCancel(context.Background())
	cancel2()
	_, err = waitFree(gone, s, seat, session)
	if !errors.As(err, &xe) || xe.code != exitError || !strings.Contains(xe.msg, "interrupted") {
		t.Errorf("interrupted before the first read: %v; want exit 1, interrupted", err)
	}

	soon, cancel3 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel3()
	_, err = waitFree(soon, s, seat, session)
	if !errors.As(err, &xe) || xe.code != exitTimeout || !strings.Contains(xe.msg, "still held after") {
		t.Errorf("deadline in the wait, the pair read held: %v; want exit 8, still held", err)
	}
}

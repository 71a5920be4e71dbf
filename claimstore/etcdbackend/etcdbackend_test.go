package etcdbackend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

var loc = storage.Loc{Kind: storage.KindSession, Hash: "0123456789abcdef0123456789abcdef"}

func newBackend(t *testing.T, cli *clientv3.Client, opts *etcdbackend.Options) *etcdbackend.Backend {
	t.Helper()
	b, err := etcdbackend.New(cli, etcdtest.Prefix(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestContract: exclusivity of each number, Head by one descending range,
// List, Locs and Proofs, on a real single-member etcd.
func TestContract(t *testing.T) {
	c := etcdtest.Start(t, 1)
	b := newBackend(t, c.Client(t), nil)
	if n, data, err := b.Head(context.Background(), loc); n != 0 || data != nil || err != nil {
		t.Fatalf("Head of an empty key = %d, %q, %v", n, data, err)
	}
	var seen []storage.Barrier
	hook := func(bar storage.Barrier) error { seen = append(seen, bar); return nil }
	for n := uint64(1); n <= 3; n++ {
		if err := b.Publish(context.Background(), loc, n, fmt.Appendf(nil, "rec %d\n", n), hook); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]storage.Barrier{"temp-written", "temp-synced", "linked", "dir-synced"}, seen[:4]); diff != "" {
		t.Errorf("barriers (-want +got):\n%s", diff)
	}
	err := b.Publish(context.Background(), loc, 2, []byte("other\n"), nil)
	var pe *fs.PathError
	if !errors.Is(err, storage.ErrRevisionExists) || !errors.As(err, &pe) || pe.Path != b.RevisionKey(loc, 2) {
		t.Fatalf("second publish of 2: %v, want ErrRevisionExists naming %s", err, b.RevisionKey(loc, 2))
	}
	if got, _ := b.Read(context.Background(), loc, 2); !bytes.Equal(got, []byte("rec 2\n")) {
		t.Errorf("revision 2 = %q after a lost race", got)
	}
	for _, n := range []uint64{0, storage.MaxRevision + 1} {
		if err := b.Publish(context.Background(), loc, n, []byte("x"), nil); err == nil {
			t.Errorf("Publish of revision %d succeeded; it is out of range", n)
		}
	}
	// Hand-written keys that are not revisions, some sorting among them.
	cli := b.Client()
	for _, name := range []string{"notes.txt", "r0000000003.json.bak", "r1.json", "zz/sub", "r0000000000.json"} {
		if _, err := cli.Put(context.Background(), b.KeyDir(loc)+name, "junk"); err != nil {
			t.Fatal(err)
		}
	}
	n, data, err := b.Head(context.Background(), loc)
	if n != 3 || string(data) != "rec 3\n" || err != nil {
		t.Errorf("Head = %d, %q, %v; want 3", n, data, err)
	}
	revs, other, err := b.List(context.Background(), loc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{1, 2, 3}, revs); diff != "" {
		t.Errorf("List revs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"notes.txt", "r0000000000.json", "r0000000003.json.bak", "r1.json", "zz"}, other); diff != "" {
		t.Errorf("List other (-want +got):\n%s", diff)
	}
	if _, err := b.Read(context.Background(), loc, 9); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing revision: %v, want fs.ErrNotExist", err)
	}
	// Locs: many keys, long histories, small pages.
	small := newBackend(t, cli, &etcdbackend.Options{PageSize: 2})
	var want []storage.Loc
	for i := range 5 {
		l := storage.Loc{Kind: storage.KindSeat, Hash: fmt.Sprintf("%032x", i)}
		want = append(want, l)
		for n := uint64(1); n <= 3; n++ {
			if err := small.Publish(context.Background(), l, n, []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := cli.Put(context.Background(), small.Prefix()+"/seat/not-a-hash/r0000000001.json", "x"); err != nil {
		t.Fatal(err)
	}
	got, err := small.Locs(context.Background(), storage.KindSeat)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Locs (-want +got):\n%s", diff)
	}
	if revs, _, _ := small.List(context.Background(), want[4]); len(revs) != 3 {
		t.Errorf("List with pages of 2: %v", revs)
	}
	// Proofs: create-if-absent, fs.ErrExist on a second write.
	if err := b.WriteProof(context.Background(), "boot-1", []byte("p1\n")); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteProof(context.Background(), "boot-1", []byte("p2\n")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second WriteProof: %v, want fs.ErrExist", err)
	}
	if got, err := b.ReadProof(context.Background(), "boot-1"); err != nil || string(got) != "p1\n" {
		t.Errorf("ReadProof = %q, %v", got, err)
	}
	if _, err := b.ReadProof(context.Background(), "boot-2"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadProof of a missing proof: %v", err)
	}
	if ids, err := b.Proofs(context.Background()); err != nil || !cmp.Equal(ids, []string{"boot-1"}) {
		t.Errorf("Proofs = %v, %v", ids, err)
	}
	if _, err := etcdbackend.New(cli, "", nil); err == nil {
		t.Error("New with an empty prefix succeeded")
	}
}

// TestRacingPublishers: of many publishers of one number over separate
// clients, exactly one wins, and the revision holds the winner's bytes.
func TestRacingPublishers(t *testing.T) {
	c := etcdtest.Start(t, 1)
	prefix := etcdtest.Prefix(t)
	const writers = 8
	for n := uint64(1); n <= 5; n++ {
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := range writers {
			b, err := etcdbackend.New(c.Client(t), prefix, nil)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = b.Publish(context.Background(), loc, n, fmt.Appendf(nil, "writer %d\n", i), nil)
			}()
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("revision %d: writers %d and %d both won", n, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, storage.ErrRevisionExists):
				t.Fatalf("revision %d, writer %d: %v", n, i, err)
			}
		}
		b, _ := etcdbackend.New(c.Client(t), prefix, nil)
		if got, err := b.Read(context.Background(), loc, n); err != nil || string(got) != fmt.Sprintf("writer %d\n", winner) {
			t.Fatalf("revision %d = %q, %v; winner was %d", n, got, err, winner)
		}
	}
}

// TestLostReply cuts the client's connection at every point of a
// publish's transaction (before the request reaches the server, after it
// reached it with the reply dropped, and holding it until after the client
// gave up) with and without a competing writer, and checks the read-back's
// decision against what the cluster holds afterwards, and still holds once
// every request in flight has landed.
func TestLostReply(t *testing.T) {
	c := etcdtest.Start(t, 1)
	direct := c.Client(t)
	for _, cut := range []etcdtest.Cut{etcdtest.CutBeforeRequest, etcdtest.CutAfterRequest, etcdtest.CutHoldRequest} {
		for _, rival := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/rival=%v", cut, rival), func(t *testing.T) {
				p, b, other := proxied(t, c, direct)
				// Warm the connection so that the next bytes the client
				// sends are the transaction.
				if _, _, err := b.Head(context.Background(), loc); err != nil {
					t.Fatal(err)
				}
				mine, theirs := []byte("mine\n"), []byte("theirs\n")
				fired := p.Arm(cut)
				if rival && cut != etcdtest.CutAfterRequest {
					// The rival publishes while ours is lost or held.
					go func() {
						<-fired
						_ = other.Publish(context.Background(), loc, 1, theirs, nil)
					}()
				}
				err := b.Publish(context.Background(), loc, 1, mine, nil)
				if rival && cut == etcdtest.CutAfterRequest {
					// Ours reached the server first: the rival loses.
					if rerr := other.Publish(context.Background(), loc, 1, theirs, nil); !errors.Is(rerr, storage.ErrRevisionExists) {
						t.Errorf("rival after ours: %v", rerr)
					}
				}
				select {
				case <-fired:
				case <-time.After(5 * time.Second):
					t.Fatalf("the proxy never cut (publish returned %v)", err)
				}
				check := func(when string) {
					got, rerr := other.Read(context.Background(), loc, 1)
					switch {
					case err == nil:
						if !bytes.Equal(got, mine) {
							t.Errorf("%s: Publish said published, revision 1 = %q, %v", when, got, rerr)
						}
					case errors.Is(err, storage.ErrRevisionExists):
						if rerr != nil || bytes.Equal(got, mine) {
							t.Errorf("%s: Publish said lost race (%v), revision 1 = %q, %v", when, err, got, rerr)
						}
					case errors.Is(err, etcdbackend.ErrNotPublished):
						if bytes.Equal(got, mine) {
							t.Errorf("%s: Publish said not published (%v), revision 1 = %q", when, err, got)
						}
					default:
						t.Errorf("%s: Publish: %v", when, err)
					}
				}
				check("at once")
				// Every request held or in flight lands by now.
				time.Sleep(p.Hold + time.Second)
				check("after the held request landed")
				t.Logf("%v, rival %v: Publish returned %v", cut, rival, err)
				if !rival && cut == etcdtest.CutAfterRequest && err != nil {
					t.Errorf("the server applied the request; the read-back must find it ours, got %v", err)
				}
			})
		}
	}
}

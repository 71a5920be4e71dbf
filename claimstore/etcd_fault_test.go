package claimstore

// Faults on a real 3-member etcd cluster, checked for linearizability.
//
// Workers acquire, advance and release claims on a few pairs, concurrently,
// through stores on the etcd backend, while the test kills and restarts a
// follower, kills the leader, and partitions one worker from the whole
// cluster (a proxy it controls between that worker and every member). Every
// operation is recorded with its call and return times and its outcome: ok
// (with the seat revision it published), refused, or unknown (any other
// error: the write may or may not have happened, and may still happen). The
// history of each pair's seat key is then checked with porcupine against a
// model of a key's revision sequence: a number and a holder, where only a
// free key can be acquired (at the next number), only the holder can step it
// and only with the head it fenced on, and an unknown operation may have
// taken effect or not. After the faults the test also checks, directly,
// that every acknowledged revision is there with its claim, that no two
// acknowledged operations published the same revision, and that no
// revision reads stopped (free) without a proof.
//
// Issue 23's proof kind runs through the same history: the workers that
// take claims run as another machine, an operator decommissions that
// machine and lifts the record again, in turns, throughout the faults, and
// a classifier on this machine classifies the pairs all the while. Its
// classify publishes the seat's next revision, stopped on the
// decommission record, only over a held head (a third party's release);
// while the machine is lifted it frees nothing, and while it is
// decommissioned the machine's acquires are refused (quarantine) and its
// steps on a freed claim are refused (fencing).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

type lzInput struct {
	pair  int
	op    string // acquire, advance, release, read, classify
	id    string
	fence uint64 // the seat revision an advance or release fenced on
}

type lzOutput struct {
	res    string // ok, refused, unknown; for read: ok
	rev    uint64 // ok: the seat revision published; read: the head
	holder string // read: the claim holding the seat, or ""
}

type lzState struct {
	n      uint64
	holder string
}

// lzModel is a key's revision sequence: see the file comment.
var lzModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, op := range h {
			p := op.Input.(lzInput).pair
			by[p] = append(by[p], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() []any { return []any{lzState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(lzState), input.(lzInput), output.(lzOutput)
		next := lzState{n: s.n + 1, holder: in.id}
		if in.op == "release" {
			next.holder = ""
		}
		can := false
		switch in.op {
		case "classify":
			// A classification frees a held seat at the next number, or
			// publishes nothing on it (rev 0: free already). A refused one
			// may have freed the seat before a fault cut it between the
			// keys (its refusal names the command that finishes it), so it
			// is judged as an unknown one is.
			freed := lzState{n: s.n + 1}
			switch {
			case out.res == "ok" && out.rev == 0:
				return []any{s}
			case out.res == "ok":
				if s.holder != "" && out.rev == s.n+1 {
					return []any{freed}
				}
				return nil
			case s.holder != "":
				return []any{s, freed}
			}
			return []any{s}
		case "read":
			if out.rev == s.n && out.holder == s.holder {
				return []any{s}
			}
			return nil
		case "acquire":
			can = s.holder == ""
		default:
			can = s.holder == in.id && s.n == in.fence
		}
		switch out.res {
		case "ok":
			if can && out.rev == s.n+1 {
				return []any{next}
			}
			return nil
		case "refused":
			return []any{s}
		default: // unknown: it took effect, or it did not
			if can {
				return []any{s, next}
			}
			return []any{s}
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(lzInput), output.(lzOutput)
		return fmt.Sprintf("pair %d %s(%s, fence %d) -> %s r%d %s", in.pair, in.op, in.id, in.fence, out.res, out.rev, out.holder)
	},
}

type lzHistory struct {
	mu    sync.Mutex
	ops   []porcupine.Operation
	start time.Time
}

func (h *lzHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *lzHistory) add(client int, in lzInput, call int64, out lzOutput) {
	ret := h.now()
	if out.res == "unknown" {
		// It may still take effect at any later time.
		ret = 1 << 62
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func outcome(err error) string {
	var r *Refusal
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &r), errors.Is(err, ErrReleased), errors.Is(err, ErrQuarantined):
		return "refused"
	}
	return "unknown"
}

func TestEtcdFaultsLinearizable(t *testing.T) {
	if why := etcdLeftOut(); why != "" {
		t.Skip(why)
	}
	c := etcdtest.Start(t, 3)
	c.WaitLeader()
	prefix := etcdtest.Prefix(t)
	root := "etcd://" + strings.Join(c.Hosts(), ",") + prefix
	const workers, pairs = 4, 3
	// Worker 0 reaches the cluster through proxies the test controls.
	var proxies []*etcdtest.Proxy
	var proxied []string
	for _, m := range c.Members {
		p := etcdtest.NewProxy(t, m.ClientURL.Host)
		proxies = append(proxies, p)
		proxied = append(proxied, p.URL())
	}
	open := func(i int, host hostid.Host) *Store {
		eps := c.Endpoints()
		if i == 0 {
			eps = proxied
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		be, err := etcdbackend.New(cli, prefix, &etcdbackend.Options{RequestTimeout: time.Second, ResolveTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenRoot(root, &TOpts{Host: host, Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var seats, sessions []Key
	for p := range pairs {
		seats = append(seats, seatKey(t, fmt.Sprint("seat-", p)))
		sessions = append(sessions, sessionKey(t, fmt.Sprint("session-", p)))
	}
	h := &lzHistory{start: time.Now()}
	var stop atomic.Bool
	var acked sync.Map // "pair/rev" -> claim id, for every ok operation
	var ackedDup atomic.Int64
	ack := func(pair int, rev uint64, id string) {
		if _, dup := acked.LoadOrStore(fmt.Sprintf("%d/%d", pair, rev), id); dup {
			ackedDup.Add(1)
		}
	}
	var firstErr sync.Map
	var counts sync.Map
	count := func(k string) {
		v, _ := counts.LoadOrStore(k, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	var wg sync.WaitGroup
	// The classifier, on this machine.
	classifier := open(1, thisHost)
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(99, 7))
		for !stop.Load() {
			p := rng.IntN(pairs)
			call := h.now()
			res, err := classifier.Classify(context.Background(), seats[p], sessions[p], nil)
			out := lzOutput{res: outcome(err)}
			if err == nil {
				for _, pub := range res.Published {
					if pub.Key.Kind == KindSeat {
						out.rev = pub.Revision
						ack(p, pub.Revision, res.ClaimID)
					}
				}
				if out.rev != 0 && res.Proof != nil && res.Proof.Kind == ProofDecommissioned {
					count("classify-freed")
				}
			} else {
				firstErr.LoadOrStore("classify-"+out.res, err.Error())
			}
			h.add(workers, lzInput{pair: p, op: "classify"}, call, out)
			count("classify-" + out.res)
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		}
	}()
	// The operator: the claim-taking machine decommissioned and lifted in
	// turns (each write retried through the faults).
	operator := open(1, thisHost)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for lift := false; !stop.Load(); lift = !lift {
			for !stop.Load() {
				var err error
				if lift {
					_, err = operator.LiftDecommission(context.Background(), otherMachine, "fault test", nil)
				} else {
					_, err = operator.Decommission(context.Background(), DecommissionOptions{Machine: otherMachine, Evidence: EvidencePoweredOff, Reason: "fault test"})
				}
				if err == nil {
					count(map[bool]string{false: "decommissioned", true: "lifted"}[lift])
					break
				}
				firstErr.LoadOrStore(map[bool]string{false: "decommission", true: "lift"}[lift], err.Error())
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(400 * time.Millisecond)
		}
	}()
	for w := range workers {
		// The claims are taken on another machine, which the operator
		// decommissions; the reader's host does not matter.
		s := open(w, foreignHost)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			owner, err := s.Self(w)
			if err != nil {
				t.Error(err)
				return
			}
			for !stop.Load() {
				p := rng.IntN(pairs)
				if w == workers-1 {
					// A reader: the seat's head as it reads.
					call := h.now()
					hd, err := s.Head(context.Background(), seats[p])
					if err != nil {
						count("read-error")
						continue
					}
					out := lzOutput{res: "ok", rev: hd.N}
					if hd.Held() && hd.Record != nil {
						out.holder = hd.Record.ClaimID
					}
					h.add(w, lzInput{pair: p, op: "read"}, call, out)
					continue
				}
				id := NewClaimID()
				call := h.now()
				cl, err := s.Acquire(context.Background(), seats[p], sessions[p], AcquireFields{ClaimID: id, Owner: owner})
				out := lzOutput{res: outcome(err)}
				if err == nil {
					out.rev = cl.SeatRev
					ack(p, cl.SeatRev, id)
				}
				h.add(w, lzInput{pair: p, op: "acquire", id: id}, call, out)
				if out.res == "unknown" {
					firstErr.LoadOrStore("acquire-unknown", err.Error())
				}
				count("acquire-" + out.res)
				if err != nil {
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
					continue
				}
				for _, step := range []string{"advance", "release"} {
					if step == "release" {
						// A writer's life: long enough, now and then,
						// for the classifier to free the claim under it.
						// One in four lives past a decommission's turn
						// (400 ms, longer on a loaded machine): with
						// short lives only, a run on a loaded machine
						// freed none in a minute.
						life := rng.IntN(150)
						if rng.IntN(4) == 0 {
							life = 300 + rng.IntN(700)
						}
						time.Sleep(time.Duration(life) * time.Millisecond)
					}
					fence := cl.SeatRev
					call := h.now()
					if step == "advance" {
						err = s.Advance(context.Background(), cl, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}})
					} else {
						err = s.Release(context.Background(), cl, NewProof(ProofCohort, "fault-test"))
					}
					out := lzOutput{res: outcome(err)}
					if err == nil {
						out.rev = cl.SeatRev
						ack(p, cl.SeatRev, id)
					}
					h.add(w, lzInput{pair: p, op: step, id: id, fence: fence}, call, out)
					if err != nil {
						firstErr.LoadOrStore(step+"-"+out.res, err.Error())
					}
					count(step + "-" + out.res)
					if err != nil {
						break // the claim is left as it is: held, never freed on a guess
					}
				}
			}
		}()
	}
	// The faults, one after the other.
	time.Sleep(800 * time.Millisecond)
	leader := c.WaitLeader()
	follower := (leader + 1) % 3
	t.Logf("killing follower m%d", follower)
	c.Kill(follower)
	time.Sleep(time.Second)
	c.Restart(follower)
	time.Sleep(500 * time.Millisecond)
	leader = c.WaitLeader()
	t.Logf("killing leader m%d", leader)
	c.Kill(leader)
	time.Sleep(time.Second)
	c.Restart(leader)
	c.WaitLeader()
	time.Sleep(500 * time.Millisecond)
	t.Log("partitioning worker 0 from the cluster")
	for _, p := range proxies {
		p.Partition(true)
	}
	time.Sleep(1500 * time.Millisecond)
	for _, p := range proxies {
		p.Partition(false)
	}
	time.Sleep(800 * time.Millisecond)
	// The faults are over; the run goes on, healed, until it has exercised
	// what the checks below need (a loaded machine gets through fewer
	// operations in the same time), or a minute has passed and they fail.
	exercised := func() bool {
		v, ok := counts.Load("acquire-ok")
		if !ok || v.(*atomic.Int64).Load() < 5 {
			return false
		}
		for _, k := range []string{"classify-freed", "decommissioned", "lifted"} {
			if _, ok := counts.Load(k); !ok {
				return false
			}
		}
		return true
	}
	for until := time.Now().Add(time.Minute); !exercised() && time.Now().Before(until); {
		time.Sleep(100 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	var summary []string
	counts.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%s=%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d operations: %s", len(h.ops), strings.Join(summary, " "))
	firstErr.Range(func(k, v any) bool { t.Logf("first %s: %v", k, v); return true })
	if v, ok := counts.Load("acquire-ok"); !ok || v.(*atomic.Int64).Load() < 5 {
		t.Errorf("too few acquires succeeded to check anything")
	}
	for _, k := range []string{"classify-freed", "decommissioned", "lifted"} {
		if _, ok := counts.Load(k); !ok {
			t.Errorf("no %s in the run: the decommission proof kind was not exercised", k)
		}
	}
	res, info := porcupine.CheckOperationsVerbose(lzModel.ToModel(), h.ops, time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Errorf("porcupine could not decide within a minute")
	default:
		f, err := os.CreateTemp("", "claimstore-lz-*.html")
		if err == nil {
			_ = porcupine.Visualize(lzModel.ToModel(), info, f)
			f.Close()
		}
		t.Errorf("the history is not linearizable against the revision-sequence model (visualization: %s)", f.Name())
	}
	if n := ackedDup.Load(); n != 0 {
		t.Errorf("%d revisions were acknowledged to two operations", n)
	}
	// Every acknowledged revision is there, with its claim; no revision
	// is stopped (free) without a proof.
	s := open(1, thisHost)
	acked.Range(func(k, v any) bool {
		var p int
		var rev uint64
		fmt.Sscanf(k.(string), "%d/%d", &p, &rev)
		data, err := s.Backend().Read(context.Background(), seats[p].Loc(), rev)
		if err != nil {
			t.Errorf("acknowledged revision %d of pair %d: %v", rev, p, err)
			return true
		}
		rec, err := DecodeRecord(data, seats[p], rev)
		if err != nil || rec.ClaimID != v.(string) {
			t.Errorf("acknowledged revision %d of pair %d: %v, claim %v; want claim %s", rev, p, err, rec, v)
		}
		return true
	})
	for p := range pairs {
		for _, k := range []Key{seats[p], sessions[p]} {
			revs, err := s.Revisions(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range revs {
				if r.Damage != nil {
					t.Errorf("%v r%d damaged: %v", k, r.N, r.Damage)
				} else if r.Record.State == Stopped && r.Record.Proof == nil {
					t.Errorf("%v r%d is stopped without a proof", k, r.N)
				}
			}
		}
	}
}

// TestLinearizabilityModelRejects: the model is not vacuous: it rejects two
// acknowledged holders, a step on a stale fence, a skipped number and a
// read of a state no order explains, and accepts an unknown acquire either
// way.
func TestLinearizabilityModelRejects(t *testing.T) {
	op := func(call, ret int64, in lzInput, out lzOutput) porcupine.Operation {
		return porcupine.Operation{Input: in, Call: call, Output: out, Return: ret}
	}
	ok := func(rev uint64) lzOutput { return lzOutput{res: "ok", rev: rev} }
	for _, tt := range []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"acquire, step, release, acquire", []porcupine.Operation{
			op(0, 1, lzInput{op: "acquire", id: "a"}, ok(1)),
			op(2, 3, lzInput{op: "advance", id: "a", fence: 1}, ok(2)),
			op(4, 5, lzInput{op: "release", id: "a", fence: 2}, ok(3)),
			op(6, 7, lzInput{op: "acquire", id: "b"}, ok(4)),
		}, true},
		{"two acknowledged holders", []porcupine.Operation{
			op(0, 1, lzInput{op: "acquire", id: "a"}, ok(1)),
			op(2, 3, lzInput{op: "acquire", id: "b"}, ok(2)),
		}, false},
		{"a step on a stale fence", []porcupine.Operation{
			op(0, 1, lzInput{op: "acquire", id: "a"}, ok(1)),
			op(2, 3, lzInput{op: "advance", id: "a", fence: 1}, ok(2)),
			op(4, 5, lzInput{op: "advance", id: "a", fence: 1}, ok(3)),
		}, false},
		{"a skipped number", []porcupine.Operation{
			op(0, 1, lzInput{op: "acquire", id: "a"}, ok(2)),
		}, false},
		{"a read no order explains", []porcupine.Operation{
			op(0, 1, lzInput{op: "acquire", id: "a"}, ok(1)),
			op(2, 3, lzInput{op: "read"}, lzOutput{res: "ok", rev: 0}),
		}, false},
		{"an unknown acquire that took effect", []porcupine.Operation{
			op(0, 1<<62, lzInput{op: "acquire", id: "a"}, lzOutput{res: "unknown"}),
			op(2, 3, lzInput{op: "read"}, lzOutput{res: "ok", rev: 1, holder: "a"}),
		}, true},
		{"a classification frees the holder", []porcupine.Operation{
			op(0, 1, lzInput{op: "acquire", id: "a"}, ok(1)),
			op(2, 3, lzInput{op: "classify"}, ok(2)),
			op(4, 5, lzInput{op: "acquire", id: "b"}, ok(3)),
		}, true},
		{"a classification publishes over a free key", []porcupine.Operation{
			op(0, 1, lzInput{op: "classify"}, ok(1)),
		}, false},
		{"the freed holder steps on", []porcupine.Operation{
			op(0, 1, lzInput{op: "acquire", id: "a"}, ok(1)),
			op(2, 3, lzInput{op: "classify"}, ok(2)),
			op(4, 5, lzInput{op: "advance", id: "a", fence: 2}, ok(3)),
		}, false},
		{"an unknown acquire that did not", []porcupine.Operation{
			op(0, 1<<62, lzInput{op: "acquire", id: "a"}, lzOutput{res: "unknown"}),
			op(2, 3, lzInput{op: "acquire", id: "b"}, ok(1)),
		}, true},
	} {
		if got := porcupine.CheckOperations(lzModel.ToModel(), tt.h); got != tt.want {
			t.Errorf("%s: linearizable = %v, want %v", tt.name, got, tt.want)
		}
	}
}

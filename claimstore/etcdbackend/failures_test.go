package etcdbackend_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// wantErr fails unless err wraps sentinel, is an *fs.PathError, and says
// every one of words.
func wantErr(t *testing.T, what string, err, sentinel error, words ...string) {
	t.Helper()
	var pe *fs.PathError
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: %v, want an error wrapping %q", what, err, sentinel)
		return
	}
	if !errors.As(err, &pe) {
		t.Errorf("%s: %v is no *fs.PathError", what, err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v\ndoes not say %q", what, err, w)
		}
	}
}

// TestNoSpace: on a member whose quota is exhausted (the NOSPACE alarm
// raised), a publish is decided at once — not published, said so with what
// to do — instead of waiting out the resolve timeout as an indeterminate
// lost reply; reads go on working; once an operator compacts, defragments
// and disarms, publishing works again.
func TestNoSpace(t *testing.T) {
	c := etcdtest.StartQuota(t, 4<<20)
	b := newBackend(t, c.Client(t), &etcdbackend.Options{ResolveTimeout: time.Minute})
	ctx := context.Background()
	if err := b.Publish(ctx, loc, 1, []byte("one\n"), nil); err != nil {
		t.Fatal(err)
	}
	c.Fill(t)
	start := time.Now()
	err := b.Publish(ctx, loc, 2, []byte("two\n"), nil)
	t.Logf("publish on a full cluster failed after %v", time.Since(start))
	wantErr(t, "publish on a full cluster", err, etcdbackend.ErrNoSpace, b.RevisionKey(loc, 2), "not published", "etcdctl compact", "etcdctl defrag", "etcdctl alarm disarm", "claimctl prune")
	var ie *etcdbackend.IndeterminateError
	if errors.As(err, &ie) {
		t.Errorf("publish on a full cluster is indeterminate: %v", err)
	}
	if err := b.WriteProof(ctx, "p1", []byte("{}\n")); !errors.Is(err, etcdbackend.ErrNoSpace) {
		t.Errorf("WriteProof on a full cluster: %v, want ErrNoSpace", err)
	}
	if n, data, err := b.Head(ctx, loc); n != 1 || string(data) != "one\n" || err != nil {
		t.Errorf("Head under the alarm = %d, %q, %v; want 1, the record, nil", n, data, err)
	}
	c.Free(t)
	if err := b.Publish(ctx, loc, 2, []byte("two\n"), nil); err != nil {
		t.Errorf("publish after the operator freed space: %v", err)
	}
}

// TestAccessControl: with etcd's access control enabled, a user whose
// role may only read the prefix reads and is refused a write at once
// (definite: nothing written, no read-back stall), naming the user, the
// prefix and the role it needs; a user with no role is refused reads; no
// user at all is told to give one; a wrong password fails Open.
func TestAccessControl(t *testing.T) {
	c := etcdtest.Start(t, 1)
	prefix := "/claims"
	root := "etcd://" + c.Hosts()[0] + prefix
	ctx := context.Background()
	pre, err := etcdbackend.Open(ctx, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pre.Publish(ctx, loc, 1, []byte("one\n"), nil); err != nil {
		t.Fatal(err)
	}
	pre.Close()
	u := etcdtest.EnableAuth(t, c, prefix)
	open := func(user etcdtest.User) *etcdbackend.Backend {
		t.Helper()
		b, err := etcdbackend.Open(ctx, root, &etcdbackend.Config{User: user.Name, Password: user.Password, RequestTimeout: 2 * time.Second, DialTimeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("Open as %s: %v", user.Name, err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}

	w := open(u.Writer)
	if err := w.Publish(ctx, loc, 2, []byte("two\n"), nil); err != nil {
		t.Errorf("publish as the writer: %v", err)
	}

	r := open(u.Reader)
	if n, _, err := r.Head(ctx, loc); n != 2 || err != nil {
		t.Errorf("Head as the reader = %d, %v", n, err)
	}
	err = r.Publish(ctx, loc, 3, []byte("three\n"), nil)
	wantErr(t, "publish as the reader", err, etcdbackend.ErrAccessDenied, "user auditor may not write under /claims/", "nothing was written", "readwrite", "permission denied")
	var ie *etcdbackend.IndeterminateError
	if errors.As(err, &ie) {
		t.Errorf("a refused publish is indeterminate: %v", err)
	}

	s := open(u.Stranger)
	_, _, err = s.Head(ctx, loc)
	wantErr(t, "Head as a user with no role", err, etcdbackend.ErrAccessDenied, "user stranger may not read /claims/")

	anon, err := etcdbackend.Open(ctx, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	_, _, err = anon.Head(ctx, loc)
	wantErr(t, "Head without a user", err, etcdbackend.ErrAccessDenied, "no user was given", "--user NAME")

	_, err = etcdbackend.Open(ctx, root, &etcdbackend.Config{User: u.Writer.Name, Password: "wrong"})
	if !errors.Is(err, etcdbackend.ErrAccessDenied) || !strings.Contains(err.Error(), "authenticating as user supervisor failed: wrong user name or password") {
		t.Errorf("Open with a wrong password: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "wrong\"") {
		t.Errorf("the error shows the password: %v", err)
	}
	if _, err := etcdbackend.Open(ctx, root, &etcdbackend.Config{Password: "x"}); err == nil || !strings.Contains(err.Error(), "without a user") {
		t.Errorf("Open with a password and no user: %v", err)
	}
}

// TestClientCertificates: a client certificate the cluster's CA did not
// sign is refused with words that say so; an expired one is refused
// before connecting, naming when it expired.
func TestClientCertificates(t *testing.T) {
	c, f := etcdtest.StartTLS(t)
	root := "etcd://" + c.Hosts()[0] + "/tls"
	_, err := etcdbackend.Open(context.Background(), root, &etcdbackend.Config{CACert: f.CACert, Cert: f.StrangerCert, Key: f.StrangerKey, DialTimeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "the cluster refused the client certificate "+f.StrangerCert) {
		t.Errorf("Open with a certificate of another CA: %v", err)
	}
	_, err = etcdbackend.Open(context.Background(), root, &etcdbackend.Config{CACert: f.CACert, Cert: f.ExpiredCert, Key: f.ExpiredKey, DialTimeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "--cert "+f.ExpiredCert+" expired at ") || !strings.Contains(err.Error(), "renew it") {
		t.Errorf("Open with an expired certificate: %v", err)
	}
}

// TestQuorumLost: with two of three members stopped, a read and a publish
// fail with ErrUnavailable naming every endpoint and what it answered —
// the publish not published (refused for want of a leader, never
// proposed), nothing guessed; with every member stopped, the words say no
// member answers.
func TestQuorumLost(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := context.Background()
	b, err := etcdbackend.Open(ctx, "etcd://"+strings.Join(c.Hosts(), ",")+"/q", &etcdbackend.Config{RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Publish(ctx, loc, 1, []byte("one\n"), nil); err != nil {
		t.Fatal(err)
	}
	c.Kill(0)
	c.Kill(1)
	c.WaitNoLeader(2)
	start := time.Now()
	_, _, err = b.Head(ctx, loc)
	t.Logf("read without a quorum failed after %v", time.Since(start))
	wantErr(t, "Head without a quorum", err, etcdbackend.ErrUnavailable, "have no leader", "a quorum", c.Hosts()[0]+": unreachable", c.Hosts()[1]+": unreachable", c.Hosts()[2]+": up, no leader")
	start = time.Now()
	err = b.Publish(ctx, loc, 2, []byte("two\n"), nil)
	t.Logf("publish without a quorum failed after %v", time.Since(start))
	var ie *etcdbackend.IndeterminateError
	if !errors.As(err, &ie) {
		wantErr(t, "publish without a quorum", err, etcdbackend.ErrUnavailable, "not published", c.Hosts()[2]+": up, no leader")
	} else if !errors.Is(ie.Last, etcdbackend.ErrUnavailable) {
		// The member may have held the transaction as its leader went:
		// then it is a lost reply, undecided, and says why at once.
		t.Errorf("publish without a quorum: %v", err)
	}
	c.Kill(2)
	_, _, err = b.Head(ctx, loc)
	wantErr(t, "Head with every member stopped", err, etcdbackend.ErrUnavailable, "no member answers", c.Hosts()[2]+": unreachable")

	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != b.KeyDir(loc) {
		t.Errorf("the error names %s, want %s", pe.Path, b.KeyDir(loc))
	}
}

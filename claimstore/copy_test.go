package claimstore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// treeFiles returns every regular file under root with its contents, by
// path relative to root.
func treeFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCopyRoundTrip copies a root the reference implementation wrote
// (claims acquired, advanced and released by claim.mjs, plus a boot proof
// and this implementation's steps) from its directory to etcd and back to
// a new directory: every file comes back byte for byte, the etcd root reads
// every key as the directory does, and a second copy into the non-empty
// etcd root is refused without overwriting anything.
func TestCopyRoundTrip(t *testing.T) {
	if why := etcdLeftOut(); why != "" {
		t.Skip(why)
	}
	src := filepath.Join(t.TempDir(), "root")
	host := &hostidtest.Host{Machine: compatMachine, Boot: compatBoot, Procs: map[int]string{4100: "88001"}}
	var keys []Key
	for _, name := range []string{"a", "b", "c"} {
		seat, _ := SeatKey("seat-"+name, "proj", "/ws/"+name)
		session, _ := SessionKey("sess-" + name)
		keys = append(keys, seat, session)
		refSeat := map[string]string{"seat": seat.Seat, "project": seat.Project, "workspace": seat.Workspace}
		res := refDriver(t, compatRequest(src,
			map[string]any{"op": "acquire", "seat": refSeat, "session": session.Session, "fields": map[string]any{"claimId": "c0123456789abcdef0123456" + name, "owner": map[string]any{"pid": 4100, "start": "88001", "incarnation": 1}}},
			map[string]any{"op": "advance", "claimId": "c0123456789abcdef0123456" + name, "patch": map[string]any{"state": "active", "spawnMarker": true}}))
		for _, r := range res {
			if r["ok"] != true {
				t.Fatalf("reference: %v", r)
			}
		}
		if name == "b" {
			res := refDriver(t, compatRequest(src, map[string]any{"op": "release", "claimId": "c0123456789abcdef0123456b", "seat": refSeat, "session": session.Session, "proof": map[string]any{"kind": "cohortProof", "ref": "r-1"}}))
			if res[0]["ok"] != true {
				t.Fatalf("reference release: %v", res[0])
			}
		}
	}
	// A boot proof of this implementation's, so that proofs/ is copied too.
	ds, err := OpenRoot(src, &TOpts{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Backend().WriteProof(context.Background(), "boot-0123456789abcdef01234567", []byte("{\"kind\":\"boot-proof\"}\n")); err != nil {
		t.Fatal(err)
	}
	want := treeFiles(t, src)
	if len(want) < 12 {
		t.Fatalf("the reference wrote only %d files: %v", len(want), want)
	}

	c := etcdtest.Start(t, 1)
	eb, err := etcdbackend.New(c.Client(t), etcdtest.Prefix(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Copy(context.Background(), eb, ds.Backend())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Keys != 6 || rep.Proofs != 1 || len(rep.Skipped) != 0 {
		t.Errorf("copy to etcd: %+v", rep)
	}
	es, err := OpenRoot("etcd://"+c.Hosts()[0]+eb.Prefix(), &TOpts{Host: host, Backend: eb})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if diff := cmp.Diff(goView(t, ds, k), goView(t, es, k)); diff != "" {
			t.Errorf("%v reads differently on etcd (-dir +etcd):\n%s", k, diff)
		}
	}
	// Refuses to overwrite: nothing on etcd changes.
	if _, err := Copy(context.Background(), eb, ds.Backend()); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("second copy into etcd: %v, want ErrNotEmpty (copy never overwrites)", err)
	}

	back := filepath.Join(t.TempDir(), "back")
	bs, err := OpenRoot(back, &TOpts{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(context.Background(), bs.Backend(), eb); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, treeFiles(t, back)); diff != "" {
		t.Errorf("file -> etcd -> file (-reference's root +round trip):\n%s", diff)
	}
}

//go:build linux

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/dirbackend"
)

func main() {
	root := flag.String("root", "", "the claim root to write (must not exist)")
	sessions := flag.Int("sessions", 10000, "finished sessions")
	seats := flag.Int("seats", 20, "seats they are spread over")
	perDay := flag.Int("per-day", 2000, "sessions a day")
	held := flag.Float64("held", 0, "share of the newest sessions left held")
	active := flag.Int("active", 0, "instead: this many pairs active with a spawn marker, owned by a process of an earlier boot")
	flag.Parse()
	if *root == "" || *sessions < 1 || *seats < 1 || *perDay < 1 || *active < 0 {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	if *active > 0 {
		err = runActive(*root, *active)
	} else {
		err = run(*root, *sessions, *seats, *perDay, *held)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rootgen:", err)
		os.Exit(1)
	}
}

func run(root string, sessions, seats, perDay int, held float64) error {
	if _, err := os.Lstat(root); err == nil {
		return fmt.Errorf("%s exists; give a new directory", root)
	}
	tmpl, err := templates()
	if err != nil {
		return err
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		return err
	}
	seatKeys := make([]claimstore.Key, seats)
	seatRev := make([]uint64, seats)
	for i := range seatKeys {
		if seatKeys[i], err = claimstore.SeatKey(fmt.Sprintf("seat-%03d", i), "project", "/workspace"); err != nil {
			return err
		}
	}
	step := 24 * time.Hour / time.Duration(perDay)
	start := time.Now().UTC().Add(-time.Duration(sessions) * step)
	firstHeld := sessions - int(float64(sessions)*held)
	made := map[string]bool{}
	for i := range sessions {
		seat := seatKeys[i%seats]
		session, err := claimstore.SessionKey(fmt.Sprintf("session-%08d", i))
		if err != nil {
			return err
		}
		id := fmt.Sprintf("c%024x", i+1)
		at := start.Add(time.Duration(i) * step)
		n := 4
		if i >= firstHeld {
			n = 1
		}
		for r := 0; r < n; r++ {
			seatRev[i%seats]++
			when := at.Add(time.Duration(r) * time.Second)
			for _, kv := range []struct {
				k Key
				n uint64
			}{{seat, seatRev[i%seats]}, {session, uint64(r + 1)}} {
				rec, err := claimstore.DecodeRecord(tmpl[r], tmpl0Key, uint64(r+1))
				if err != nil {
					return err
				}
				rec.Key, rec.Revision, rec.ClaimID = kv.k, kv.n, id
				rec.WrittenAt = when.Format("2006-01-02T15:04:05.000Z")
				rec.Fields.Set("pair", pairJSON(seat, session))
				rec.Fields.Set("unitName", []byte(fmt.Sprintf("%q", "mosaic-chat-"+id)))
				data, err := rec.Marshal()
				if err != nil {
					return err
				}
				dir := filepath.Join(root, string(kv.k.Kind), kv.k.Hash())
				if !made[dir] {
					if err := os.MkdirAll(dir, 0o700); err != nil {
						return err
					}
					made[dir] = true
				}
				if err := os.WriteFile(filepath.Join(dir, claimstore.RevisionName(kv.n)), data, 0o400); err != nil {
					return err
				}
			}
		}
	}
	return syncfs(root)
}

// syncfs makes everything written under root durable with one syncfs(2).
func syncfs(root string) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// earlierBoot is the boot the -active root's owners ran under: a
// well-formed boot id that is not this one, so that this machine judges
// them gone by the boot alone, as it would after a reboot.
const earlierBoot = "00000000-0000-4000-8000-000000000001"

// runActive writes pairs pairs active with a spawn marker (see -active).
// The records are a real acquire's and spawn-marked advance's, taken from
// a scratch root, with this boot's id replaced by earlierBoot (the owner
// and the record's host both name it), and each pair's keys, claim and
// pair member.
func runActive(root string, pairs int) error {
	if _, err := os.Lstat(root); err == nil {
		return fmt.Errorf("%s exists; give a new directory", root)
	}
	tmpl, boot, err := activeTemplates()
	if err != nil {
		return err
	}
	for i := range tmpl {
		if !bytes.Contains(tmpl[i], []byte(boot)) {
			return fmt.Errorf("template %d does not name this boot %s", i+1, boot)
		}
		tmpl[i] = bytes.ReplaceAll(tmpl[i], []byte(boot), []byte(earlierBoot))
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		return err
	}
	for _, kind := range []claimstore.Kind{claimstore.KindSeat, claimstore.KindSession} {
		if err := os.Mkdir(filepath.Join(root, string(kind)), 0o700); err != nil {
			return err
		}
	}
	for i := range pairs {
		seat, err := claimstore.SeatKey(fmt.Sprintf("seat-%08d", i), "project", "/workspace")
		if err != nil {
			return err
		}
		session, err := claimstore.SessionKey(fmt.Sprintf("session-%08d", i))
		if err != nil {
			return err
		}
		id := fmt.Sprintf("c%024x", i+1)
		for _, k := range []claimstore.Key{seat, session} {
			dir := filepath.Join(root, string(k.Kind), k.Hash())
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			for r, t := range tmpl {
				rec, err := claimstore.DecodeRecord(t, tmpl0Key, uint64(r+1))
				if err != nil {
					return err
				}
				rec.Key, rec.Revision, rec.ClaimID = k, uint64(r+1), id
				rec.Fields.Set("pair", pairJSON(seat, session))
				rec.Fields.Set("unitName", []byte(fmt.Sprintf("%q", "mosaic-chat-"+id)))
				data, err := rec.Marshal()
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, claimstore.RevisionName(uint64(r+1))), data, 0o400); err != nil {
					return err
				}
			}
		}
	}
	return syncfs(root)
}

// activeTemplates runs an acquire and a spawn-marked advance to active
// through the store in a scratch root and returns the session's two
// revisions and the boot id they name.
func activeTemplates() ([2][]byte, string, error) {
	var out [2][]byte
	dir, err := os.MkdirTemp("", "rootgen-")
	if err != nil {
		return out, "", err
	}
	defer os.RemoveAll(dir)
	be, err := dirbackend.Open(filepath.Join(dir, "root"), nil)
	if err != nil {
		return out, "", err
	}
	s, err := claimstore.New(be, nil)
	if err != nil {
		return out, "", err
	}
	ctx := context.Background()
	seat, _ := claimstore.SeatKey("t", "project", "/workspace")
	session, _ := claimstore.SessionKey("t")
	tmpl0Key = session
	owner, err := s.Self(1)
	if err != nil {
		return out, "", err
	}
	c, err := s.Acquire(ctx, seat, session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		return out, "", err
	}
	if err := s.Advance(ctx, c, claimstore.Patch{State: claimstore.Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
		return out, "", err
	}
	revs, err := s.Revisions(ctx, session)
	if err != nil {
		return out, "", err
	}
	if len(revs) != 2 {
		return out, "", fmt.Errorf("an acquire and an advance left %d revisions", len(revs))
	}
	for i := range out {
		out[i] = revs[i].Data
	}
	return out, owner.Boot, nil
}

type Key = claimstore.Key

var tmpl0Key Key

func pairJSON(seat, session Key) []byte {
	return []byte(`{"seat":` + string(seat.JSON()) + `,"session":` + string(session.JSON()) + `}`)
}

// templates runs one real lifecycle through the store in a scratch root
// and returns its session revisions: the records every generated session
// copies, as this store writes them. The owner is this process, which is
// gone by the time the root is read.
func templates() ([4][]byte, error) {
	var out [4][]byte
	dir, err := os.MkdirTemp("", "rootgen-")
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(dir)
	be, err := dirbackend.Open(filepath.Join(dir, "root"), nil)
	if err != nil {
		return out, err
	}
	s, err := claimstore.New(be, nil)
	if err != nil {
		return out, err
	}
	ctx := context.Background()
	seat, _ := claimstore.SeatKey("t", "project", "/workspace")
	session, _ := claimstore.SessionKey("t")
	tmpl0Key = session
	owner, err := s.Self(1)
	if err != nil {
		return out, err
	}
	c, err := s.Acquire(ctx, seat, session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		return out, err
	}
	for _, st := range []claimstore.State{claimstore.Active, claimstore.Stopping} {
		if err := s.Advance(ctx, c, claimstore.Patch{State: st}); err != nil {
			return out, err
		}
	}
	if err := s.Release(ctx, c, claimstore.NewProof(claimstore.ProofCohort, "done")); err != nil {
		return out, err
	}
	revs, err := s.Revisions(ctx, session)
	if err != nil {
		return out, err
	}
	if len(revs) != 4 {
		return out, fmt.Errorf("a lifecycle left %d revisions", len(revs))
	}
	for i := range out {
		out[i] = revs[i].Data
	}
	return out, nil
}

package fuzz

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/storetest"
)

// keyFrom builds a key from fuzz input; ok is false for an invalid one.
func keyFrom(session bool, a, b, c string) (claimstore.Key, bool) {
	var k claimstore.Key
	var err error
	if session {
		k, err = claimstore.SessionKey(a)
	} else {
		k, err = claimstore.SeatKey(a, b, c)
	}
	return k, err == nil
}

var recordCmp = []cmp.Option{
	cmp.AllowUnexported(claimstore.Host{}, claimstore.Proof{}),
	// Marshal writes the reference's members in its order, then the
	// others: the order of Fields may change, their contents may not.
	cmpopts.SortSlices(func(a, b claimstore.Field) bool { return a.Name < b.Name }),
	cmp.Comparer(func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }),
}

func FuzzDecodeRecord(f *testing.F) {
	for _, s := range storeRecords(f) {
		f.Add(s.data, s.session, s.a, s.b, s.c, s.n)
	}
	f.Add([]byte(`{}`), true, "s", "", "", uint64(1))
	f.Add([]byte(`{"version":1,"kind":"writer-claim","revision":1e0,"key":{"kind":"session","session":"s"},"claimId":"c000000000000000000000000","state":"stopped","host":[],"proof":{"kind":"boot"},"x":1,"x":2}`), true, "s", "", "", uint64(1))
	f.Fuzz(func(t *testing.T, data []byte, session bool, a, b, c string, n uint64) {
		k, ok := keyFrom(session, a, b, c)
		if !ok {
			k, _ = claimstore.SessionKey("s")
		}
		rec, err := claimstore.DecodeRecord(data, k, n)
		if err != nil {
			var d *claimstore.DamageError
			if !errors.As(err, &d) {
				t.Fatalf("DecodeRecord error %T %v, want a *DamageError", err, err)
			}
			return
		}
		// The accessors never panic either.
		_, _ = rec.Owner()
		_, _, _ = rec.SpawnMarker(), rec.UnitName(), rec.StopRequested()
		if !rec.State.Valid() || !claimstore.ValidClaimID(rec.ClaimID) {
			t.Fatalf("accepted a record with state %q and claim id %q", rec.State, rec.ClaimID)
		}
		out, err := rec.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a decoded record: %v", err)
		}
		again, err := claimstore.DecodeRecord(out, k, n)
		if err != nil {
			t.Fatalf("the re-marshalled record does not decode: %v\n%s", err, out)
		}
		if diff := cmp.Diff(rec, again, recordCmp...); diff != "" {
			t.Fatalf("decode → marshal → decode changed the record (-first +second):\n%s", diff)
		}
		out2, err := again.Marshal()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("marshal is not stable: %v\n%s\n%s", err, out, out2)
		}
	})
}

// jsStringify quotes s as ECMAScript's JSON.stringify does (QuoteJSONString,
// ES2019 and later), working on UTF-16 code units as the specification
// does: the short escapes for \b \t \n \f \r " and \, \u escapes with
// lowercase hex for the other code units below 0x20 and for lone
// surrogates, everything else literal.
func jsStringify(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	units := utf16.Encode([]rune(s))
	for i := 0; i < len(units); i++ {
		u := units[i]
		switch {
		case u == 0x08:
			b.WriteString(`\b`)
		case u == 0x09:
			b.WriteString(`\t`)
		case u == 0x0a:
			b.WriteString(`\n`)
		case u == 0x0c:
			b.WriteString(`\f`)
		case u == 0x0d:
			b.WriteString(`\r`)
		case u == 0x22:
			b.WriteString(`\"`)
		case u == 0x5c:
			b.WriteString(`\\`)
		case u < 0x20:
			fmt.Fprintf(&b, `\u%04x`, u)
		case u >= 0xd800 && u <= 0xdbff && i+1 < len(units) && units[i+1] >= 0xdc00 && units[i+1] <= 0xdfff:
			b.WriteString(string(utf16.Decode(units[i : i+2])))
			i++
		case u >= 0xd800 && u <= 0xdfff:
			fmt.Fprintf(&b, `\u%04x`, u)
		default:
			b.WriteString(string(rune(u)))
		}
	}
	b.WriteByte('"')
	return b.String()
}

func jsObject(members ...[2]string) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = jsStringify(m[0]) + ":" + jsStringify(m[1])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func validValue(v string) bool {
	return v != "" && len(v) <= claimstore.MaxKeyValueLen && utf8.ValidString(v) && !strings.ContainsRune(v, 0)
}

func FuzzKeyJSON(f *testing.F) {
	for _, s := range []string{"seat-1", "<a&b>", "é\u2028\u2029", "\x00", "\x7f\x1f\"\\/", "\xff", "", "😀", strings.Repeat("x", claimstore.MaxKeyValueLen+1)} {
		f.Add(false, s, "proj", "/ws")
		f.Add(true, s, "", "")
	}
	f.Fuzz(func(t *testing.T, session bool, a, b, c string) {
		var k claimstore.Key
		var want string
		var valid bool
		if session {
			k = claimstore.Key{Kind: claimstore.KindSession, Session: a}
			valid = validValue(a)
			want = jsObject([2]string{"kind", "session"}, [2]string{"session", a})
		} else {
			k = claimstore.Key{Kind: claimstore.KindSeat, Seat: a, Project: b, Workspace: c}
			valid = validValue(a) && validValue(b) && validValue(c)
			want = jsObject([2]string{"kind", "seat"}, [2]string{"seat", a}, [2]string{"project", b}, [2]string{"workspace", c})
		}
		err := k.Validate()
		if (err == nil) != valid {
			t.Fatalf("Validate(%+q) = %v, want valid=%v", k, err, valid)
		}
		if err != nil {
			var ke *claimstore.KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("Validate error %T, want *KeyError", err)
			}
			return
		}
		if got := string(k.JSON()); got != want {
			t.Fatalf("Key.JSON() = %q, JSON.stringify gives %q", got, want)
		}
		sum := sha256.Sum256([]byte(want))
		if got := k.Hash(); got != hex.EncodeToString(sum[:16]) {
			t.Fatalf("Key.Hash() = %s, want %x", got, sum[:16])
		}
		// And it is JSON that reads back to the same values.
		var m map[string]string
		if err := json.Unmarshal(k.JSON(), &m); err != nil || m["kind"] != string(k.Kind) || m["seat"] != k.Seat || m["session"] != k.Session {
			t.Fatalf("Key.JSON() %s does not read back: %v %v", k.JSON(), m, err)
		}
	})
}

const fuzzRoot = "/claims"

var (
	fuzzSeat, _    = claimstore.SeatKey("seat-1", "proj", "/ws")
	fuzzSession, _ = claimstore.SessionKey("sess-1")
	otherSeat, _   = claimstore.SeatKey("seat-2", "proj", "/ws")
)

// record returns a valid revision n of k for claim id, in state st.
func record(k claimstore.Key, n uint64, id string, st claimstore.State, proof bool) []byte {
	var p any
	if proof {
		p = map[string]any{"kind": "cohortProof", "ref": "r"}
	}
	m := map[string]any{
		"version": 1, "kind": "writer-claim", "claimId": id, "state": st, "proof": p,
		"host":  map[string]string{"machineId": "0123456789abcdef0123456789abcdef", "bootId": "b"},
		"owner": map[string]any{"pid": 7, "start": "1"},
		"key":   json.RawMessage(k.JSON()), "revision": n, "writtenAt": "2025-01-01T00:00:00.000Z",
	}
	b, _ := json.Marshal(m)
	return append(b, '\n')
}

// entry is one name in a fuzzed key directory.
type entry struct {
	name    string
	typ     string // "file", "dir", "symlink"
	data    []byte
	heldAs  claimstore.State // what a valid record here reads as; "" when it is not one
	isValid bool
}

// buildDir decodes fuzz input into a key directory's entries.
func buildDir(in []byte) []entry {
	next := func() byte {
		if len(in) == 0 {
			return 0
		}
		b := in[0]
		in = in[1:]
		return b
	}
	var out []entry
	seen := map[string]bool{}
	ids := []string{"c" + strings.Repeat("a", 24), "c" + strings.Repeat("b", 24)}
	for count := 0; len(in) > 0 && count < 24; count++ {
		sel, typ, content := next(), next(), next()
		var e entry
		var n uint64
		switch s := sel % 24; {
		case s < 14:
			n = uint64(s) + 1
			e.name = claimstore.RevisionName(n)
		case s == 14:
			e.name = "r0000000000.json"
		case s == 15:
			e.name = fmt.Sprintf("%sfuzz.%d", vfs.TempPrefix, count)
		case s == 16:
			e.name = "r000000001.json"
		case s == 17:
			e.name = "R0000000001.json"
		case s == 18:
			e.name = "r0000000001.json.tmp"
		case s == 19:
			e.name = "r00000000x1.json"
		case s == 20:
			n = uint64(next())*1000 + 1 // a far revision: a gap
			e.name = claimstore.RevisionName(n)
		default:
			e.name = fmt.Sprintf("junk-%d", sel)
		}
		if seen[e.name] {
			continue
		}
		seen[e.name] = true
		switch typ % 10 {
		case 7:
			e.typ = "dir"
		case 8:
			e.typ = "symlink"
			e.data = []byte(path.Join(fuzzRoot, "elsewhere"))
		default:
			e.typ = "file"
			id := ids[content>>7]
			st := claimstore.States[int(content>>4)%len(claimstore.States)]
			proof := content&0x08 != 0
			good := record(fuzzSeat, n, id, st, proof)
			switch content % 8 {
			case 0, 1:
				e.data, e.isValid = good, n > 0
			case 2:
				e.data = record(otherSeat, n, id, st, proof) // another key's record
			case 3:
				e.data = record(fuzzSeat, n+1, id, st, proof) // another revision's
			case 4:
				e.data = good[:int(next())%len(good)] // torn
			case 5:
				l := int(next()) % (len(in) + 1)
				e.data, in = in[:l], in[l:]
			case 6:
				e.data = nil
			case 7:
				e.data = []byte("{\"version\":1}\n")
			}
			if e.isValid {
				e.heldAs = st
				if st == claimstore.Stopped && !proof {
					e.heldAs = claimstore.Uncertain
				}
			}
		}
		out = append(out, e)
	}
	return out
}

func FuzzHead(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0x10})                                 // r1 reserved
	f.Add([]byte{0, 0, 0x40, 1, 0, 0x48})                     // r1 stopped, r2 stopped with proof
	f.Add([]byte{0, 0, 0x10, 1, 0, 0x34})                     // r1, r2 torn
	f.Add([]byte{0, 0, 0x10, 1, 7, 0})                        // r2 a directory
	f.Add([]byte{0, 0, 0x10, 1, 8, 0, 15, 0, 0})              // r2 a symlink, a temporary
	f.Add([]byte{0, 0, 0x10, 1, 0, 0x92, 21, 0, 0, 14, 0, 0}) // foreign key's record, junk, r0
	f.Add([]byte{0, 0, 0x10, 20, 3, 0, 0x20})                 // a far revision
	f.Fuzz(func(t *testing.T, in []byte) {
		fsys := crashfs.New(nil)
		dir := path.Join(fuzzRoot, string(fuzzSeat.Kind), fuzzSeat.Hash())
		if err := fsys.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		entries := buildDir(in)
		var max uint64
		byN := map[uint64]entry{}
		for _, e := range entries {
			p := path.Join(dir, e.name)
			var err error
			switch e.typ {
			case "dir":
				err = fsys.MkdirAll(p, 0o700)
			case "symlink":
				err = fsys.Symlink(string(e.data), p)
			default:
				err = fsys.WriteFile(p, e.data, 0o400)
			}
			if err != nil {
				t.Fatal(err)
			}
			if n, ok := claimstore.ParseRevisionName(e.name); ok {
				byN[n] = e
				if n > max {
					max = n
				}
			}
		}
		dense := uint64(len(byN)) == max
		s, err := storetest.Open(fuzzRoot, &storetest.Options{FS: fsys, Now: func() time.Time { return time.Time{} }, Sequential: true})
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.Head(context.Background(), fuzzSeat)
		if err != nil {
			return // an error is an answer that frees nothing
		}
		top, hasTop := byN[max]
		if !dense {
			// Below a gap Head may stop short, but only on a held
			// revision; a head that reads free is confirmed by a listing,
			// so it is the directory's highest revision, and free.
			if !h.Held() && (h.N != max || !hasTop || top.heldAs != claimstore.Stopped) {
				t.Fatalf("Head reads revision %d free in a gapped directory whose highest is %d: %v", h.N, max, names(entries))
			}
		}
		if dense {
			if h.N != max {
				t.Fatalf("Head says revision %d, the directory's highest is %d (dense=%v): %v", h.N, max, dense, names(entries))
			}
			switch {
			case max == 0:
				if h.Held() {
					t.Fatalf("an empty history reads held")
				}
			case !top.isValid:
				if h.Record != nil || h.Damage == nil || !h.Held() || h.State() != claimstore.Uncertain {
					t.Fatalf("highest revision %s (%s) is not valid, but Head reads it as %s, damage %v", top.name, top.typ, h.State(), h.Damage)
				}
			default:
				if h.Record == nil || h.State() != top.heldAs {
					t.Fatalf("highest revision reads %s (damage %v), want %s", h.State(), h.Damage, top.heldAs)
				}
			}
		}
		// Whatever the directory holds, Head never frees a key whose
		// highest revision it has not read as stopped with a proof.
		if !h.Held() && h.N != 0 && (h.Record == nil || h.Record.Proof == nil) {
			t.Fatalf("Head reads revision %d as free without a proof", h.N)
		}
		revs, err := s.Revisions(context.Background(), fuzzSeat)
		if err == nil {
			if len(revs) != len(byN) {
				t.Fatalf("Revisions lists %d, the directory has %d revision names", len(revs), len(byN))
			}
			for _, r := range revs {
				e := byN[r.N]
				if (r.Damage == nil) != e.isValid {
					t.Fatalf("revision %d (%s): damage %v, valid %v", r.N, e.typ, r.Damage, e.isValid)
				}
			}
		}
		p, err := s.Pair(context.Background(), fuzzSeat, fuzzSession)
		if err == nil && rankOf(p.State()) > rankOf(p.Seat.State()) {
			t.Fatalf("pair reads %s, less conservative than the seat's %s", p.State(), p.Seat.State())
		}
		_ = hasTop
	})
}

func names(es []entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.name+"("+e.typ+")")
	}
	return out
}

func rankOf(s claimstore.State) int {
	for i, x := range claimstore.States {
		if x == s {
			return i
		}
	}
	return -1
}

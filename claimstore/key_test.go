package claimstore

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKeyValidation(t *testing.T) {
	long := strings.Repeat("x", MaxKeyValueLen+1)
	tests := []struct {
		name      string
		key       Key
		wantField string
	}{
		{"empty seat", Key{Kind: KindSeat, Seat: "", Project: "p", Workspace: "w"}, "seat"},
		{"empty project", Key{Kind: KindSeat, Seat: "s", Project: "", Workspace: "w"}, "project"},
		{"empty workspace", Key{Kind: KindSeat, Seat: "s", Project: "p", Workspace: ""}, "workspace"},
		{"empty session", Key{Kind: KindSession}, "session"},
		{"invalid UTF-8", Key{Kind: KindSession, Session: "a\xffb"}, "session"},
		{"encoded surrogate", Key{Kind: KindSeat, Seat: "s", Project: "\xed\xa0\x80", Workspace: "w"}, "project"},
		{"NUL", Key{Kind: KindSeat, Seat: "s", Project: "p", Workspace: "w\x00"}, "workspace"},
		{"oversized", Key{Kind: KindSession, Session: long}, "session"},
		{"zero key", Key{}, "kind"},
		{"unknown kind", Key{Kind: "lock", Session: "x"}, "kind"},
		{"seat key with a session", Key{Kind: KindSeat, Seat: "s", Project: "p", Workspace: "w", Session: "x"}, "session"},
		{"session key with a seat", Key{Kind: KindSession, Session: "x", Seat: "s"}, "seat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.key.Validate()
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("Validate() = %v, want a *KeyError", err)
			}
			if ke.Field != tt.wantField {
				t.Errorf("KeyError.Field = %q, want %q (%v)", ke.Field, tt.wantField, err)
			}
		})
	}

	// The constructors validate as Validate does.
	if _, err := SeatKey("s", "", "w"); !errors.As(err, new(*KeyError)) {
		t.Errorf("SeatKey with an empty project: %v, want a *KeyError", err)
	}
	if _, err := SessionKey("a\x00"); !errors.As(err, new(*KeyError)) {
		t.Errorf("SessionKey with NUL: %v, want a *KeyError", err)
	}
	// The bound is inclusive.
	if _, err := SessionKey(long[1:]); err != nil {
		t.Errorf("SessionKey of exactly MaxKeyValueLen bytes: %v", err)
	}
}

// TestBadKeysTouchNothing checks that every operation rejects a malformed
// key with a *KeyError before it touches the disk: the root is not even
// created.
func TestBadKeysTouchNothing(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	bad := Key{Kind: KindSession, Session: "a\xff"}
	f := fields(t, s)
	ops := map[string]func() error{
		"Acquire bad session": func() error { _, err := s.Acquire(context.Background(), seat, bad, f); return err },
		"Acquire bad seat":    func() error { _, err := s.Acquire(context.Background(), Key{Kind: KindSeat}, session, f); return err },
		"Acquire swapped":     func() error { _, err := s.Acquire(context.Background(), session, seat, f); return err },
		"Acquire two seats":   func() error { _, err := s.Acquire(context.Background(), seat, seat, f); return err },
		"Head":                func() error { _, err := s.Head(context.Background(), bad); return err },
		"Revisions":           func() error { _, err := s.Revisions(context.Background(), bad); return err },
		"Pair":                func() error { _, err := s.Pair(context.Background(), seat, bad); return err },
		"Pair swapped":        func() error { _, err := s.Pair(context.Background(), session, seat); return err },
	}
	for name, op := range ops {
		err := op()
		var ke *KeyError
		if !errors.As(err, &ke) {
			t.Errorf("%s: %v, want a *KeyError", name, err)
		}
	}
	if _, err := os.Lstat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after rejected keys, the root exists (Lstat: %v); nothing should be touched", err)
	}
}

// TestKeyJSON checks Key.JSON against JSON.stringify. The expected texts and
// hashes were produced by Node (JSON.stringify, then sha256 sliced to 32
// hex digits): encoding/json would escape <, >, &, U+2028 and U+2029.
func TestKeyJSON(t *testing.T) {
	tests := []struct {
		name     string
		key      Key
		wantJSON string
		wantHash string
	}{
		{"HTML characters stay literal", Key{Kind: KindSession, Session: "a<b>&c"},
			`{"kind":"session","session":"a<b>&c"}`, "c5dd44037b2917fbe5d9b24a81e08747"},
		{"non-ASCII literal", Key{Kind: KindSession, Session: "é日本🙂"},
			`{"kind":"session","session":"é日本🙂"}`, "e41746f4226b1e436622d832be4bee3e"},
		{"short escapes", Key{Kind: KindSession, Session: "\b\f\n\r\t"},
			`{"kind":"session","session":"\b\f\n\r\t"}`, "9621b70f2565dd5024f318dc7c1c1079"},
		{"U+2028 and U+2029 literal", Key{Kind: KindSession, Session: "\u2028\u2029"},
			"{\"kind\":\"session\",\"session\":\"\u2028\u2029\"}", "307d3e31fd94ec02521353cbd0cdc470"},
		{"DEL literal", Key{Kind: KindSession, Session: "\x7f"},
			"{\"kind\":\"session\",\"session\":\"\x7f\"}", "59290035bb819019273125026eff6825"},
		{"quote, backslash, slash", Key{Kind: KindSession, Session: `q"b\s/`},
			`{"kind":"session","session":"q\"b\\s/"}`, "a7ad4187a54b315e57a6248747ff167f"},
		{"C1 controls literal", Key{Kind: KindSession, Session: "\u0080\u00a0"},
			"{\"kind\":\"session\",\"session\":\"\u0080\u00a0\"}", "d3f0a17f7a903b219c8a6dea1658c1d0"},
		{"seat member order, lowercase \\u00XX", Key{Kind: KindSeat, Seat: "s<1>", Project: "p&\u2028", Workspace: "w\x01é"},
			"{\"kind\":\"seat\",\"seat\":\"s<1>\",\"project\":\"p&\u2028\",\"workspace\":\"w\\u0001é\"}", "5a1f6959c0aa585f8c7dc4de8c969fed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.key.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if diff := cmp.Diff(tt.wantJSON, string(tt.key.JSON())); diff != "" {
				t.Errorf("JSON() (-want +got):\n%s", diff)
			}
			if got := tt.key.Hash(); got != tt.wantHash {
				t.Errorf("Hash() = %s, want %s", got, tt.wantHash)
			}
			// Whatever the escaping, the text must parse back to the key.
			var back map[string]string
			if err := json.Unmarshal(tt.key.JSON(), &back); err != nil {
				t.Fatalf("JSON() does not parse: %v", err)
			}
			for _, m := range tt.key.members() {
				if back[m[0]] != m[1] {
					t.Errorf("member %s parses back as %q, want %q", m[0], back[m[0]], m[1])
				}
			}
		})
	}
}

// TestAppendJSStringControls covers every control character, which
// JSON.stringify escapes as \b \f \n \r \t or \u00xx in lowercase hex.
func TestAppendJSStringControls(t *testing.T) {
	short := map[byte]string{'\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}
	const hexDigits = "0123456789abcdef"
	for c := byte(0); c < 0x20; c++ {
		want, ok := short[c]
		if !ok {
			want = `\u00` + string(hexDigits[c>>4]) + string(hexDigits[c&0xf])
		}
		if got := string(appendJSString(nil, string([]byte{c}))); got != `"`+want+`"` {
			t.Errorf("control 0x%02x: got %s, want %q", c, got, `"`+want+`"`)
		}
	}
}

func TestKeyDirectory(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	k := Key{Kind: KindSeat, Seat: "s<1>", Project: "p&\u2028", Workspace: "w\x01é"}
	want := filepath.Join(root, "seat", "5a1f6959c0aa585f8c7dc4de8c969fed")
	if got := s.KeyDir(k); got != want {
		t.Errorf("KeyDir = %s, want %s", got, want)
	}
	if got := k.Loc(); got != (Loc{Kind: KindSeat, Hash: "5a1f6959c0aa585f8c7dc4de8c969fed"}) {
		t.Errorf("Loc = %v", got)
	}
}

func TestRevisionNames(t *testing.T) {
	for _, tt := range []struct {
		n    uint64
		name string
	}{{1, "r0000000001.json"}, {42, "r0000000042.json"}, {MaxRevision, "r9999999999.json"}} {
		if got := RevisionName(tt.n); got != tt.name {
			t.Errorf("RevisionName(%d) = %s, want %s", tt.n, got, tt.name)
		}
		if n, ok := ParseRevisionName(tt.name); !ok || n != tt.n {
			t.Errorf("ParseRevisionName(%s) = %d, %v; want %d, true", tt.name, n, ok, tt.n)
		}
	}
	for _, name := range []string{
		"r0000000000.json", // numbering starts at 1
		"r000000001.json", "r00000000001.json", "r0000000001.JSON", "R0000000001.json",
		"r00000000x1.json", "r+000000001.json", "r-000000001.json", "r0000000001.json.tmp",
		".tmp-r0000000001.json", "r0000000001.jso", "",
	} {
		if n, ok := ParseRevisionName(name); ok {
			t.Errorf("ParseRevisionName(%q) = %d, true; want not a revision", name, n)
		}
	}
}

// Keys that a terminal draws alike print differently: a precomposed letter
// and a letter plus a combining mark, a no-break space and a space, a
// zero-width joiner and nothing. ASCII keys print as before; nothing is
// normalised (the two café seats are two keys, as in the reference).
func TestKeysThatLookAlikePrintDifferently(t *testing.T) {
	for _, pair := range [][2]string{
		{"caf\u00e9", "cafe\u0301"},
		{"a b", "a\u00a0b"},
		{"ab", "a\u200db"},
		{"x", "x\u202e"},
	} {
		a, err1 := SeatKey(pair[0], "p", "/w")
		b, err2 := SeatKey(pair[1], "p", "/w")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if a.Hash() == b.Hash() {
			t.Fatalf("%q and %q are one key", pair[0], pair[1])
		}
		if a.String() == b.String() {
			t.Errorf("%q and %q both print as %s", pair[0], pair[1], a.String())
		}
		for _, k := range []Key{a, b} {
			if !isASCII(k.Seat) && !strings.Contains(k.String(), "[h:"+k.Hash()[:8]+"]") {
				t.Errorf("%s: a non-ASCII key does not show its hash", k)
			}
		}
	}
	k, _ := SeatKey("s1", "demo", "/srv/ws")
	if got, want := k.String(), `seat "s1" (project "demo", workspace "/srv/ws")`; got != want {
		t.Errorf("ASCII key prints %s, want %s", got, want)
	}
	if got := seatKeyOrDie(t, "cafe\u0301").String(); !strings.Contains(got, `"cafe\u0301"`) {
		t.Errorf("combining mark not escaped: %s", got)
	}
}

func seatKeyOrDie(t *testing.T, s string) Key {
	t.Helper()
	k, err := SeatKey(s, "p", "/w")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

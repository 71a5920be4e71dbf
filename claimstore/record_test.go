package claimstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// TestRecordRoundTrip decodes a record holding every field of the
// reference record, as the reference writes it, and checks that each field
// reads right and that Marshal writes the very same bytes back.
func TestRecordRoundTrip(t *testing.T) {
	k := sessionKey(t, "sess-1")
	for _, proof := range []string{
		"null",
		`{"kind":"cohortProof","ref":"cohort-7"}`,
		`{"kind":"boot","ref":"bp-1","effects":null}`, // classify's boot proof carries effects
		`{"kind":"no-unit","ref":null}`,
	} {
		t.Run(proof, func(t *testing.T) {
			in := refRecord(k, 3, testClaimID, "stopping").set("proof", proof).set("stop", `{"requestedAt":"x","reason":"user"}`).bytes()
			r, err := DecodeRecord(in, k, 3)
			if err != nil {
				t.Fatalf("DecodeRecord: %v", err)
			}
			out, err := r.Marshal()
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if diff := cmp.Diff(string(in), string(out)); diff != "" {
				t.Errorf("Marshal(DecodeRecord(x)) != x (-want +got):\n%s", diff)
			}
		})
	}

	in := refRecord(k, 3, testClaimID, "active").set("spawnMarker", `"marker-1"`).bytes()
	r, err := DecodeRecord(in, k, 3)
	if err != nil {
		t.Fatalf("DecodeRecord: %v", err)
	}
	got := map[string]any{
		"claimId": r.ClaimID, "state": r.State, "proof": r.Proof, "machineId": r.Host.MachineID, "bootId": r.Host.BootID,
		"key": r.Key, "revision": r.Revision, "writtenAt": r.WrittenAt, "unitName": r.UnitName(),
		"spawnMarker": r.SpawnMarker(), "stop": r.StopRequested(), "held": r.held(),
	}
	want := map[string]any{
		"claimId": testClaimID, "state": Active, "proof": (*Proof)(nil), "machineId": testMachine, "bootId": testBoot,
		"key": k, "revision": uint64(3), "writtenAt": "2024-01-02T03:04:05.678Z", "unitName": UnitNameFor(testClaimID),
		"spawnMarker": true, "stop": false, "held": true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded fields (-want +got):\n%s", diff)
	}
	o, err := r.Owner()
	if err != nil {
		t.Fatalf("Owner: %v", err)
	}
	if diff := cmp.Diff(Owner{PID: 4242, Start: "123456", Boot: testBoot, Incarnation: json.RawMessage("3")}, o); diff != "" {
		t.Errorf("Owner (-want +got):\n%s", diff)
	}
	// The members the store does not interpret are kept as written.
	for name, want := range map[string]string{
		"bindingId": `"b-1"`, "harness": `"claude"`, "conversation": `"conv-1"`, "branch": `"main"`, "leaf": `"leaf-9"`,
		"pins": `{"model":"m","tools":["a","b"]}`, "generation": "7", "invocationId": "null", "engine": "null",
		"shim": "null", "prior": "null", "execution": "null", "cohortRef": "null",
	} {
		if v, ok := r.Fields.Get(name); !ok || string(v) != want {
			t.Errorf("Fields[%s] = %s, %v; want %s", name, v, ok, want)
		}
	}
}

// TestDecodeRecordDamaged: anything the reference's valid() rejects is a
// *DamageError, never a panic and never a record.
func TestDecodeRecordDamaged(t *testing.T) {
	k := seatKey(t, "seat-1")
	base := refRecord(k, 2, testClaimID, "active")
	otherKey := seatKey(t, "seat-2")
	tests := []struct {
		name string
		data []byte
	}{
		{"empty file", nil},
		{"not JSON", []byte("hello\n")},
		{"truncated", base.bytes()[:100]},
		{"array", []byte("[1,2]\n")},
		{"null", []byte("null\n")},
		{"two objects", append(base.bytes(), base.bytes()...)},
		{"trailing garbage", append(base.bytes(), 'x')},
		{"version missing", base.del("version").bytes()},
		{"version 2", base.set("version", "2").bytes()},
		{"version as string", base.set("version", `"1"`).bytes()},
		{"kind missing", base.del("kind").bytes()},
		{"kind wrong", base.set("kind", `"reader-claim"`).bytes()},
		{"revision missing", base.del("revision").bytes()},
		{"revision differs from the file name", base.set("revision", "3").bytes()},
		{"revision as string", base.set("revision", `"2"`).bytes()},
		{"key missing", base.del("key").bytes()},
		{"key of another seat", base.set("key", string(otherKey.JSON())).bytes()},
		{"key member order differs", base.set("key", `{"kind":"seat","project":"project","seat":"seat-1","workspace":"workspace"}`).bytes()},
		{"key with an extra member", base.set("key", `{"kind":"seat","seat":"seat-1","project":"project","workspace":"workspace","x":"y"}`).bytes()},
		{"key missing a member", base.set("key", `{"kind":"seat","seat":"seat-1","project":"project"}`).bytes()},
		{"key value a number", base.set("key", `{"kind":"seat","seat":1,"project":"project","workspace":"workspace"}`).bytes()},
		{"key as string", base.set("key", strings.ReplaceAll(`"`+string(k.JSON())+`"`, `"k`, `\"k`)).bytes()},
		{"claimId missing", base.del("claimId").bytes()},
		{"claimId uppercase", base.set("claimId", `"C0123456789ABCDEF01234567"`).bytes()},
		{"claimId short", base.set("claimId", `"c0123"`).bytes()},
		{"claimId number", base.set("claimId", `12`).bytes()},
		{"state missing", base.del("state").bytes()},
		{"state unknown", base.set("state", `"running"`).bytes()},
		{"state uppercase", base.set("state", `"ACTIVE"`).bytes()},
		{"host missing", base.del("host").bytes()},
		{"host null", base.set("host", "null").bytes()},
		{"host string", base.set("host", `"machine"`).bytes()},
		{"host number", base.set("host", `1`).bytes()},
		{"proof missing", base.del("proof").bytes()},
		{"proof a string", base.set("proof", `"boot"`).bytes()},
		{"proof false", base.set("proof", `false`).bytes()},
		{"proof an array", base.set("proof", `["boot"]`).bytes()},
		{"proof without kind", base.set("proof", `{"ref":"x"}`).bytes()},
		{"proof of unknown kind", base.set("proof", `{"kind":"trust-me","ref":"x"}`).bytes()},
		{"proof kind not a string", base.set("proof", `{"kind":1,"ref":"x"}`).bytes()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRecord(tt.data, k, 2)
			var de *DamageError
			if !errors.As(err, &de) || r != nil {
				t.Fatalf("DecodeRecord = %v, %v; want nil and a *DamageError", r, err)
			}
			if de.Reason == "" {
				t.Error("DamageError has no reason")
			}
		})
	}
}

// TestDecodeRecordAccepts: what JSON.parse and the reference's valid()
// accept must be valid here too, or a root the reference wrote would read as
// damaged.
func TestDecodeRecordAccepts(t *testing.T) {
	k := sessionKey(t, "x<y>")
	base := refRecord(k, 5, testClaimID, "reserved")
	// JSON.parse keeps the first position and the last value of a
	// duplicated member.
	dup := strings.Replace(string(base.bytes()), `"version":1,`, `"state":"bogus","version":1,`, 1)
	tests := []struct {
		name      string
		data      []byte
		wantState State
	}{
		{"reference record", base.bytes(), Reserved},
		{"no trailing newline", []byte(strings.TrimSuffix(string(base.bytes()), "\n")), Reserved},
		{"white space", []byte(" \n" + strings.ReplaceAll(string(base.bytes()), `":`, `" : `) + " \n"), Reserved},
		{"revision 5.0", base.set("revision", "5.0").bytes(), Reserved},
		{"version 1e0", base.set("version", "1e0").bytes(), Reserved},
		{"key with escaped characters", base.set("key", `{"kind":"session","session":"\u0078\u003cy>"}`).bytes(), Reserved},
		{"host with extra members", base.set("host", `{"machineId":"m","bootId":"b","arch":"x86"}`).bytes(), Reserved},
		{"host an array (typeof [] is object)", base.set("host", `[]`).bytes(), Reserved},
		{"duplicate member: the last value counts", []byte(dup), Reserved},
		{"members in another order", append(obj{{"state", `"active"`}}, base.del("state")...).bytes(), Active},
		{"proof with extra members", base.set("state", `"stopped"`).set("proof", `{"kind":"no-unit","ref":null,"note":[1]}`).bytes(), Stopped},
		{"no writtenAt", base.del("writtenAt").bytes(), Reserved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRecord(tt.data, k, 5)
			if err != nil {
				t.Fatalf("DecodeRecord: %v", err)
			}
			if r.State != tt.wantState {
				t.Errorf("State = %s, want %s", r.State, tt.wantState)
			}
		})
	}
}

// TestDecodeRecordNeverPanics feeds every prefix of a record, and a few
// odd inputs, to DecodeRecord: it must return a record or a *DamageError.
// Only the full record (with or without its newline) is valid.
func TestDecodeRecordNeverPanics(t *testing.T) {
	k := sessionKey(t, "s")
	full := refRecord(k, 1, testClaimID, "reserved").set("proof", `{"kind":"boot","ref":"r"}`).bytes()
	inputs := [][]byte{[]byte("{"), []byte("}"), []byte(`{"version":1e999}`), []byte(`{"host":{`), []byte("\xff\xfe"), []byte(`{"proof":{"kind":`)}
	for i := range full {
		inputs = append(inputs, full[:i])
	}
	for _, in := range inputs {
		r, err := DecodeRecord(in, k, 1)
		valid := len(in) == len(full)-1
		switch {
		case valid && err != nil:
			t.Errorf("DecodeRecord(%q): %v, want valid", in, err)
		case !valid && (r != nil || !errors.As(err, new(*DamageError))):
			t.Errorf("DecodeRecord(%q) = %v, %v; want a *DamageError", in, r, err)
		}
	}
}

func TestConservative(t *testing.T) {
	// States is ordered most conservative first; Conservative picks the
	// lower index, and anything invalid reads as Uncertain.
	for i, a := range States {
		for j, b := range States {
			want := States[min(i, j)]
			if got := Conservative(a, b); got != want {
				t.Errorf("Conservative(%s, %s) = %s, want %s", a, b, got, want)
			}
		}
		if got := Conservative(a, "bogus"); got != Uncertain {
			t.Errorf("Conservative(%s, bogus) = %s, want uncertain", a, got)
		}
		if got := Conservative("", a); got != Uncertain {
			t.Errorf("Conservative(\"\", %s) = %s, want uncertain", a, got)
		}
	}
	if diff := cmp.Diff([]State{Uncertain, Stopping, Active, Reserved, Stopped}, States); diff != "" {
		t.Errorf("States (-want +got):\n%s", diff)
	}
}

func TestClaimIDs(t *testing.T) {
	seen := map[string]bool{}
	for range rounds(100) {
		id := NewClaimID()
		if !ValidClaimID(id) || seen[id] {
			t.Fatalf("NewClaimID() = %q: invalid or repeated", id)
		}
		seen[id] = true
	}
	for _, id := range []string{"", "c", "c0123456789abcdef0123456", "c0123456789abcdef012345678", "d0123456789abcdef01234567", "c0123456789abcdeF01234567", "c0123456789abcdef01234567\n"} {
		if ValidClaimID(id) {
			t.Errorf("ValidClaimID(%q) = true", id)
		}
	}
}

func TestTimestamp(t *testing.T) {
	if got := timestamp(fixedNow()); got != "2024-05-06T07:08:09.010Z" {
		t.Errorf("timestamp = %s", got)
	}
	// Written digit by digit, it is Format of the layout for any time: in
	// any zone, at the years' edges and beyond them (where Format's own
	// form is kept), to the millisecond, truncated.
	edges := []time.Time{
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 12, 5, 23, 30, 0, 1_999_999, time.FixedZone("east", 5*3600+1800)),
		{},
	}
	for _, tm := range edges {
		if got, want := timestamp(tm), tm.UTC().Format(timestampLayout); got != want {
			t.Errorf("timestamp(%v) = %s, want %s", tm, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		tm := time.Unix(rapid.Int64Range(-70_000_000_000, 300_000_000_000).Draw(t, "sec"), rapid.Int64Range(0, 999_999_999).Draw(t, "nsec"))
		tm = tm.In(time.FixedZone("z", rapid.IntRange(-14*3600, 14*3600).Draw(t, "offset")))
		if got, want := timestamp(tm), tm.UTC().Format(timestampLayout); got != want {
			t.Fatalf("timestamp(%v) = %s, want %s", tm, got, want)
		}
	})
}

// TestEncodeStringIsJSJSON pins encodeString to jsJSON byte for byte,
// whichever path it takes: every control character, the two separators
// jsJSON escapes, invalid UTF-8, and random strings.
func TestEncodeStringIsJSJSON(t *testing.T) {
	cases := []string{"", "plain", `q"uote`, `back\slash`, "<&>", "\u007f", "caf\u00e9", "\u2028", "a\u2029b", "\xff", "a\xc3", "\U0001f600"}
	for c := range 0x20 {
		cases = append(cases, "x"+string(rune(c))+"y")
	}
	check := func(t interface {
		Helper()
		Fatalf(string, ...any)
	}, s string) {
		t.Helper()
		want, err := jsJSON(s)
		if err != nil {
			t.Fatalf("jsJSON(%q): %v", s, err)
		}
		if got := encodeString(s); !bytes.Equal(got, want) {
			t.Fatalf("encodeString(%q) = %s, jsJSON gives %s", s, got, want)
		}
	}
	for _, s := range cases {
		check(t, s)
	}
	rapid.Check(t, func(t *rapid.T) {
		check(t, rapid.String().Draw(t, "s"))
		check(t, string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")))
	})
}

// TestCompactFastPath pins compact to json.Compact: a value without
// whitespace comes back as it is, and so does anything json.Compact refuses.
func TestCompactFastPath(t *testing.T) {
	for _, v := range []string{`{"a":1}`, `{ "a" : [1, 2] }`, "\"a b\"", "\"a\tb\"", "[1,\n2]", `{"a":`, "{\"a\": ", `"x"`, "null", "  null  "} {
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(v)); err != nil {
			want.Reset()
			want.WriteString(v)
		}
		if got := compact([]byte(v)); string(got) != want.String() {
			t.Errorf("compact(%q) = %q, want %q", v, got, want.String())
		}
	}
}

// TestProofJSON pins the proof objects classify and decommission write:
// members in this order, effects null, the ref always a string.
func TestProofJSON(t *testing.T) {
	for _, c := range []struct {
		got  json.RawMessage
		want string
	}{
		{bootProofJSON("p-1"), `{"kind":"boot","ref":"p-1","effects":null}`},
		{bootProofJSON(""), `{"kind":"boot","ref":"","effects":null}`},
		{decommissionProofJSON("d\"1\u2028"), `{"kind":"decommissioned","ref":"d\"1\u2028","effects":null}`},
	} {
		if string(c.got) != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}

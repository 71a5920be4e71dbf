package claimstore

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/claimstore/claimstore/hostid"
)

// RecordVersion is the version of the record format, and RecordKind its kind.
const (
	RecordVersion = 1
	RecordKind    = "writer-claim"
	// TombstoneKind is the kind of a tombstone: the revision prune
	// publishes above a free session's head before it removes the key
	// (docs/PROTOCOL.md, "Prune against a publish, edge by edge"). It is
	// stopped, with a "pruned" proof: this store reads it as free (the key
	// being pruned); the reference implementation, which reads only
	// writer-claim records, as damaged (held), so that it never links above
	// it.
	TombstoneKind = "claimstore-prune"
)

// State is the state of one revision. The order of conservatism is
// Uncertain > Stopping > Active > Reserved > Stopped.
type State string

const (
	Uncertain State = "uncertain"
	Stopping  State = "stopping"
	Active    State = "active"
	Reserved  State = "reserved"
	Stopped   State = "stopped"
)

// States lists the states, most conservative first.
var States = []State{Uncertain, Stopping, Active, Reserved, Stopped}

func (s State) rank() int {
	for i, x := range States {
		if x == s {
			return i
		}
	}
	return -1
}

// Valid reports whether s is one of the five states.
func (s State) Valid() bool { return s.rank() >= 0 }

// Conservative returns the more conservative of a and b. An invalid state is
// treated as Uncertain: nothing unknown is ever read as less held.
func Conservative(a, b State) State {
	ra, rb := a.rank(), b.rank()
	if ra < 0 || rb < 0 {
		return Uncertain
	}
	if ra <= rb {
		return a
	}
	return b
}

// ProofKind is the kind of a proof that a claim is over.
type ProofKind string

const (
	// ProofCohort is a supervisor's proof that its writer cohort stopped.
	ProofCohort ProofKind = "cohortProof"
	// ProofBoot names a boot proof: the claim's boot has ended on this machine.
	ProofBoot ProofKind = "boot"
	// ProofNoUnit says nothing was ever spawned for the claim.
	ProofNoUnit ProofKind = "no-unit"
	// ProofPruned is a tombstone's proof (TombstoneKind): the key's
	// history was free and old, and is being removed. Only a tombstone
	// carries it.
	ProofPruned ProofKind = "pruned"
)

func (k ProofKind) valid() bool {
	return k == ProofCohort || k == ProofBoot || k == ProofNoUnit || k == ProofPruned || k == ProofDecommissioned
}

// Proof is the proof a stopped revision carries. Members beyond kind and ref
// are kept as read and written back unchanged.
type Proof struct {
	Kind ProofKind
	Ref  string // "" is written as null
	raw  json.RawMessage
}

// NewProof returns a proof of kind k referring to ref ("" for none).
func NewProof(k ProofKind, ref string) *Proof { return &Proof{Kind: k, Ref: ref} }

// MarshalJSON writes the proof as read, or {kind, ref} for a new one.
func (p *Proof) MarshalJSON() ([]byte, error) { return p.appendJSON(nil), nil }

// appendJSON appends the proof's JSON: the bytes it was read from, or
// {"kind":…,"ref":…} with an empty ref as null.
func (p *Proof) appendJSON(b []byte) []byte {
	if p.raw != nil {
		return append(b, p.raw...)
	}
	b = append(b, `{"kind":`...)
	b = append(b, encodeString(string(p.Kind))...)
	b = append(b, `,"ref":`...)
	if p.Ref == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, encodeString(p.Ref)...)
	}
	return append(b, '}')
}

func (p *Proof) equal(q *Proof) bool {
	if p == nil || q == nil {
		return p == q
	}
	a, _ := p.MarshalJSON()
	b, _ := q.MarshalJSON()
	return bytes.Equal(compact(a), compact(b))
}

// Host is the machine a claim was taken on.
type Host struct {
	MachineID string
	BootID    string
	raw       json.RawMessage
}

// MarshalJSON writes the host as read, or {machineId, bootId} for a new one.
func (h Host) MarshalJSON() ([]byte, error) { return h.appendJSON(nil), nil }

// appendJSON appends the host's JSON: the bytes it was read from, or
// {"machineId":…,"bootId":…}.
func (h Host) appendJSON(b []byte) []byte {
	if h.raw != nil {
		return append(b, h.raw...)
	}
	b = append(b, `{"machineId":`...)
	b = append(b, encodeString(h.MachineID)...)
	b = append(b, `,"bootId":`...)
	b = append(b, encodeString(h.BootID)...)
	return append(b, '}')
}

// Owner is the process that owns a claim, as the record keeps it.
// Incarnation is the caller's own counter (any JSON value). PIDNS is the
// PID namespace PID counts in ("<dev>:<ino>", see hostid.Host.PIDNamespace);
// "" (absent from the record, as the reference writes it) is judged as the
// initial namespace. It is written last, after the members the reference
// knows, so their order and bytes do not change; the reference carries it
// forward with the rest of the owner object.
type Owner struct {
	PID         int             `json:"pid"`
	Start       string          `json:"start"`
	Boot        string          `json:"boot,omitempty"`
	Incarnation json.RawMessage `json:"incarnation,omitempty"`
	PIDNS       string          `json:"pidns,omitempty"`
}

// Identity returns the process identity hostid judges.
func (o Owner) Identity() hostid.Owner {
	return hostid.Owner{PID: o.PID, Start: o.Start, Boot: o.Boot, PIDNS: o.PIDNS}
}

// Field is one member of a record that the store carries without
// interpreting: a binding field, or a member a newer writer added.
type Field struct {
	Name  string
	Value json.RawMessage
}

// Fields is an ordered list of record members.
type Fields []Field

// Get returns the value of the named member.
func (fs Fields) Get(name string) (json.RawMessage, bool) {
	for _, f := range fs {
		if f.Name == name {
			return f.Value, true
		}
	}
	return nil, false
}

// Set replaces the named member's value in place, or appends it.
func (fs *Fields) Set(name string, v json.RawMessage) {
	for i := range *fs {
		if (*fs)[i].Name == name {
			(*fs)[i].Value = v
			return
		}
	}
	*fs = append(*fs, Field{name, v})
}

func (fs Fields) clone() Fields {
	out := make(Fields, len(fs))
	copy(out, fs)
	return out
}

// Record is one revision of a key: the writer claim as it stood when the
// revision was published.
//
// The store interprets only the members it needs (claim id, state, proof,
// host, and the owner, unit name, spawn marker and stop request in Fields);
// every other member is kept in Fields as raw JSON and carried forward
// unchanged into the next revision the store publishes for the claim.
type Record struct {
	ClaimID   string
	State     State
	Proof     *Proof
	Host      Host
	Fields    Fields
	Key       Key    // publication: the key the revision was published on
	Revision  uint64 // publication: the revision number
	WrittenAt string // publication: RFC 3339 UTC with milliseconds; informational only
	// Tombstone marks a tombstone (TombstoneKind): written with that kind,
	// stopped with a ProofPruned proof.
	Tombstone bool
}

// Member names the store interprets inside Fields.
const (
	fieldOwner       = "owner"
	fieldUnitName    = "unitName"
	fieldSpawnMarker = "spawnMarker"
	fieldStop        = "stop"
)

// recordOrder is the order of the reference record's members; records are
// written in this order, with members it does not name before "key".
var recordOrder = []string{
	"version", "kind", "claimId", "bindingId", "harness", "conversation", "branch", "leaf", "pins",
	"host", "owner", "unitName", "spawnMarker", "invocationId", "engine", "shim", "generation",
	"state", "proof", "stop", "prior", "execution", "cohortRef",
}

// inRecordOrder is recordOrder as a set.
var inRecordOrder = func() map[string]bool {
	m := make(map[string]bool, len(recordOrder))
	for _, name := range recordOrder {
		m[name] = true
	}
	return m
}()

// reserved are the members a patch may not set: the store owns them.
var reserved = map[string]bool{"version": true, "kind": true, "claimId": true, "key": true, "revision": true, "writtenAt": true, "host": true}

// Owner decodes the record's owner. A missing or malformed owner is an
// error: callers judge such an owner invalid, which holds the claim.
func (r *Record) Owner() (Owner, error) {
	raw, ok := r.Fields.Get(fieldOwner)
	if !ok || isNull(raw) {
		return Owner{}, errors.New("no owner recorded")
	}
	var o struct {
		PID         json.RawMessage `json:"pid"`
		Start       json.RawMessage `json:"start"`
		Boot        json.RawMessage `json:"boot"`
		Incarnation json.RawMessage `json:"incarnation"`
		PIDNS       json.RawMessage `json:"pidns"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return Owner{}, fmt.Errorf("owner %s: %v", raw, err)
	}
	// pid must be a JSON integer, as the reference's Number.isInteger says:
	// a quoted pid fails ParseInt.
	pid, err := strconv.ParseInt(string(bytes.TrimSpace(o.PID)), 10, 32)
	if err != nil || pid <= 0 {
		return Owner{}, fmt.Errorf("owner pid %s is not a process id", show(o.PID))
	}
	out := Owner{PID: int(pid), Incarnation: o.Incarnation}
	if out.Start, err = optString(o.Start); err != nil {
		return Owner{}, fmt.Errorf("owner start: %v", err)
	}
	if out.Boot, err = optString(o.Boot); err != nil {
		return Owner{}, fmt.Errorf("owner boot: %v", err)
	}
	// pidns is only ever written as a string; its form is hostid's to
	// judge (a malformed one is an invalid owner, which holds the claim).
	if len(o.PIDNS) > 0 && !isNull(o.PIDNS) {
		if err := json.Unmarshal(o.PIDNS, &out.PIDNS); err != nil {
			return Owner{}, fmt.Errorf("owner pidns %s is not a string", show(o.PIDNS))
		}
	}
	return out, nil
}

// optString decodes a string or a number (the start time may be written as
// either), with null or absent as "".
func optString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), nil
	}
	return "", fmt.Errorf("%s is neither a string nor a number", raw)
}

// UnitName returns the systemd unit the claim's writer runs in, or "".
func (r *Record) UnitName() string {
	raw, _ := r.Fields.Get(fieldUnitName)
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// ProcessGroup returns the process group the record says its writer runs
// in (the processGroup member a supervisor without a service manager
// records, lifecycle.GroupStarter's), or 0: such a writer has no unit to
// look up, and messages name its group instead.
func (r *Record) ProcessGroup() int {
	raw, ok := r.Fields.Get("processGroup")
	if !ok {
		return 0
	}
	var n int
	if json.Unmarshal(raw, &n) != nil || n <= 0 {
		return 0
	}
	return n
}

// SpawnMarker reports whether the record says a writer may have been spawned.
func (r *Record) SpawnMarker() bool {
	raw, _ := r.Fields.Get(fieldSpawnMarker)
	return truthy(raw)
}

// StopRequested reports whether the record carries a stop request.
func (r *Record) StopRequested() bool {
	raw, _ := r.Fields.Get(fieldStop)
	return truthy(raw)
}

// held reports whether a valid record holds its key: anything but stopped
// with a proof.
func (r *Record) held() bool { return !(r.State == Stopped && r.Proof != nil) }

// clone returns a copy that shares no mutable state with r.
func (r *Record) clone() *Record {
	c := *r
	c.Fields = r.Fields.clone()
	if r.Proof != nil {
		p := *r.Proof
		c.Proof = &p
	}
	return &c
}

// Marshal returns the record as it is stored: one JSON object and a newline.
func (r *Record) Marshal() ([]byte, error) {
	return appendTail(r.appendBody(make([]byte, 0, 1024)), r.Key, r.Revision, r.WrittenAt), nil
}

// appendBody appends to b the start of r's encoding: every member but the
// three that end each record (key, revision, writtenAt; appendTail), which
// are all that tell a step's two revisions apart. A step encodes the body
// once for both of its keys.
//
// Every step encodes its record before its first fsync, so the encoding
// is on the step's critical path: one buffer, sized for a usual record,
// and no member re-validated that is already compact.
func (r *Record) appendBody(b []byte) []byte {
	b = append(b, '{')
	first := true
	member := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSString(b, name)
		b = append(b, ':')
	}
	for _, name := range recordOrder {
		switch name {
		case "version":
			member(name)
			b = strconv.AppendInt(b, RecordVersion, 10)
		case "kind":
			kind := RecordKind
			if r.Tombstone {
				kind = TombstoneKind
			}
			member(name)
			b = appendJSString(b, kind)
		case "claimId":
			member(name)
			b = appendJSString(b, r.ClaimID)
		case "host":
			member(name)
			b = r.Host.appendJSON(b)
		case "state":
			member(name)
			b = appendJSString(b, string(r.State))
		case "proof":
			member(name)
			if r.Proof == nil {
				b = append(b, "null"...)
			} else {
				b = r.Proof.appendJSON(b)
			}
		default:
			if v, ok := r.Fields.Get(name); ok {
				member(name)
				b = append(b, compact(v)...)
			}
		}
	}
	for _, f := range r.Fields {
		if !inRecordOrder[f.Name] && !reserved[f.Name] {
			member(f.Name)
			b = append(b, compact(f.Value)...)
		}
	}
	return b
}

// appendTail appends to a record's body (appendBody) the members that end
// it, its key k, its revision n and writtenAt, and closes it.
func appendTail(b []byte, k Key, n uint64, writtenAt string) []byte {
	b = append(b, `,"key":`...)
	b = append(b, k.JSON()...)
	b = append(b, `,"revision":`...)
	b = strconv.AppendUint(b, n, 10)
	b = append(b, `,"writtenAt":`...)
	b = appendJSString(b, writtenAt)
	return append(b, "}\n"...)
}

// isLowerHex reports whether s is n lowercase hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidClaimID reports whether id is a claim id: "c" and 24 lowercase hex digits.
func ValidClaimID(id string) bool { return len(id) == 25 && id[0] == 'c' && isLowerHex(id[1:], 24) }

// NewClaimID returns a fresh random claim id.
func NewClaimID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("claimstore: crypto/rand failed: " + err.Error())
	}
	return "c" + hex.EncodeToString(b[:])
}

// DecodeRecord decodes the contents of revision n of key. It accepts exactly
// what the reference implementation accepts as a valid revision; anything
// else is a *DamageError. It never panics, whatever data holds.
func DecodeRecord(data []byte, key Key, n uint64) (*Record, error) {
	members, err := decodeObject(data)
	if err != nil {
		return nil, &DamageError{Reason: "not a JSON object: " + err.Error()}
	}
	get := func(name string) (json.RawMessage, bool) { return members.Get(name) }
	if v, _ := get("version"); !numberIs(v, RecordVersion) {
		return nil, &DamageError{Reason: fmt.Sprintf("version is %s, want %d", show(v), RecordVersion)}
	}
	tomb := false
	if v, _ := get("kind"); !stringIs(v, RecordKind) {
		if !stringIs(v, TombstoneKind) {
			return nil, &DamageError{Reason: fmt.Sprintf("kind is %s, want %q", show(v), RecordKind)}
		}
		tomb = true
	}
	if v, _ := get("revision"); !numberIs(v, float64(n)) {
		return nil, &DamageError{Reason: fmt.Sprintf("revision is %s, but the file name says %d", show(v), n)}
	}
	if v, _ := get("key"); !keyIs(v, key) {
		return nil, &DamageError{Reason: fmt.Sprintf("key is %s, but the directory belongs to %s", show(v), key.JSON())}
	}
	r := &Record{Key: key, Revision: n}
	if v, _ := get("claimId"); !decodeString(v, &r.ClaimID) || !ValidClaimID(r.ClaimID) {
		return nil, &DamageError{Reason: fmt.Sprintf("claimId %s is not a claim id", show(v))}
	}
	var state string
	if v, _ := get("state"); !decodeString(v, &state) || !State(state).Valid() {
		return nil, &DamageError{Reason: fmt.Sprintf("state %s is not a state", show(v))}
	}
	r.State = State(state)
	hv, _ := get("host")
	hv = bytes.TrimSpace(hv)
	if len(hv) == 0 || (hv[0] != '{' && hv[0] != '[') {
		return nil, &DamageError{Reason: fmt.Sprintf("host %s is not an object", show(hv))}
	}
	r.Host.raw = compact(hv)
	var h struct {
		MachineID any `json:"machineId"`
		BootID    any `json:"bootId"`
	}
	if json.Unmarshal(hv, &h) == nil {
		r.Host.MachineID, _ = h.MachineID.(string)
		r.Host.BootID, _ = h.BootID.(string)
	}
	pv, ok := get("proof")
	if !ok {
		return nil, &DamageError{Reason: "proof is missing"}
	}
	if !isNull(pv) {
		var p struct {
			Kind any `json:"kind"`
			Ref  any `json:"ref"`
		}
		pv = bytes.TrimSpace(pv)
		if len(pv) == 0 || pv[0] != '{' || json.Unmarshal(pv, &p) != nil {
			return nil, &DamageError{Reason: fmt.Sprintf("proof %s is not an object", show(pv))}
		}
		kind, _ := p.Kind.(string)
		if !ProofKind(kind).valid() {
			return nil, &DamageError{Reason: fmt.Sprintf("proof kind %s is not a proof kind", show(pv))}
		}
		r.Proof = &Proof{Kind: ProofKind(kind), raw: compact(pv)}
		r.Proof.Ref, _ = p.Ref.(string)
	}
	if v, ok := get("writtenAt"); ok {
		_ = json.Unmarshal(v, &r.WrittenAt)
	}
	// A tombstone is stopped with a pruned proof, and only a tombstone
	// has one: anything else claiming either is damaged, never free.
	r.Tombstone = tomb
	pruned := r.Proof != nil && r.Proof.Kind == ProofPruned
	switch {
	case tomb && (r.State != Stopped || !pruned):
		return nil, &DamageError{Reason: fmt.Sprintf("a %s record must be stopped with a %q proof", TombstoneKind, ProofPruned)}
	case !tomb && pruned:
		return nil, &DamageError{Reason: fmt.Sprintf("proof kind %q belongs to %s records only", ProofPruned, TombstoneKind)}
	}
	for _, m := range members {
		switch m.Name {
		case "version", "kind", "claimId", "state", "host", "proof", "key", "revision", "writtenAt":
		default:
			// Kept as written, but for insignificant white space: Marshal
			// writes members compact, so a record read back after it is
			// the record it wrote.
			r.Fields = append(r.Fields, Field{m.Name, compact(m.Value)})
		}
	}
	return r, nil
}

// decodeObject decodes one JSON object into its members in order. A member
// named twice keeps its first position and its last value, as JSON.parse
// does. Anything but one object, with white space around it, is an error.
//
// It validates with json.Valid and then walks the top level by hand: the
// token-by-token json.Decoder costs several times more, and every head
// read pays for this.
func decodeObject(data []byte) (Fields, error) {
	if !json.Valid(data) {
		// Let encoding/json say what is wrong.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, err
		}
		return nil, errors.New("invalid JSON")
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return nil, fmt.Errorf("starts with %q, not an object", data[i])
	}
	fs := make(Fields, 0, 32)
	i = skipSpace(data, i+1)
	for data[i] != '}' {
		end := skipValue(data, i)
		name, ok := jsonString(data[i:end])
		if !ok {
			return nil, fmt.Errorf("member name %s", data[i:end])
		}
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // the colon
		end = skipValue(data, i)
		fs.Set(name, json.RawMessage(data[i:end]))
		i = skipSpace(data, end)
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return fs, nil
}

// jsonString decodes a JSON string, quickly when it has no escapes.
func jsonString(raw []byte) (string, bool) {
	// Invalid UTF-8 takes the slow path, which replaces it with U+FFFD as
	// Node's UTF-8 decoding of the file does.
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the valid JSON value starting at data[i].
func skipValue(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			for i++; data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing container
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// keyIs reports whether raw serialises, as JSON.stringify would, to the
// same text as k: the same members in the same order with the same values.
func keyIs(raw json.RawMessage, k Key) bool {
	ms, err := decodeObject(raw)
	want := k.members()
	if err != nil || len(ms) != len(want) {
		return false
	}
	for i, m := range ms {
		if m.Name != want[i][0] || !stringIs(m.Value, want[i][1]) {
			return false
		}
	}
	return true
}

func numberIs(raw json.RawMessage, want float64) bool {
	s := strings.TrimSpace(string(raw))
	if s == "" || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		return false
	}
	f, err := strconv.ParseFloat(s, 64)
	return err == nil && f == want
}

func stringIs(raw json.RawMessage, want string) bool {
	s, ok := jsonString(bytes.TrimSpace(raw))
	return ok && s == want
}

func decodeString(raw json.RawMessage, dst *string) bool {
	s, ok := jsonString(bytes.TrimSpace(raw))
	*dst = s
	return ok
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// truthy reports whether raw is a truthy JavaScript value.
func truthy(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	switch s {
	case "", "null", "false", `""`:
		return false
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f != 0
	}
	return true
}

func compact(raw []byte) []byte {
	// JSON without a byte of whitespace is already compact (and
	// json.Compact would return it unchanged, or fail and return it as
	// it is): most values a record carries, which need no second scan.
	if !bytes.ContainsAny(raw, " \t\n\r") {
		return raw
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

func show(raw json.RawMessage) string {
	if raw == nil {
		return "missing"
	}
	s := string(compact(raw))
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}

// proofJSON is the proof object classify and decommission publish:
// {"kind":…,"ref":…,"effects":null}, its strings encoded as jsJSON would.
func proofJSON(kind ProofKind, ref string) json.RawMessage {
	b := append([]byte(`{"kind":`), encodeString(string(kind))...)
	b = append(b, `,"ref":`...)
	b = append(b, encodeString(ref)...)
	return append(b, `,"effects":null}`...)
}

// jsJSON encodes v without HTML escaping. It may escape U+2028 and U+2029
// where JSON.stringify would not; both parse to the same value, and only key
// serialisation (Key.JSON) must match byte for byte.
func jsJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// encodeString is jsJSON of the string s, byte for byte: where s is valid
// UTF-8 without U+2028 or U+2029, the two encoders agree on every byte
// (the same escapes, lowercase hex for the other control characters, no
// HTML escaping), and appendJSString needs no encoder, buffer or
// reflection; anything else goes through jsJSON.
func encodeString(s string) []byte {
	if utf8.ValidString(s) && !strings.ContainsAny(s, "\u2028\u2029") {
		return appendJSString(nil, s)
	}
	v, _ := jsJSON(s) // a string always encodes
	return v
}

// timestampLayout is the layout of every time a record or proof holds:
// UTC, to the millisecond.
const timestampLayout = "2006-01-02T15:04:05.000Z"

// timestamp formats t as the record's writtenAt does (timestampLayout).
// Every step formats its time, so the digits are written directly, without
// Format's reading of its layout; a year outside 0..9999, which that
// layout writes differently, goes through Format.
func timestamp(t time.Time) string {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.Format(timestampLayout)
	}
	b := appendDigits(make([]byte, 0, len(timestampLayout)), year, 4)
	b = appendDigits(append(b, '-'), int(month), 2)
	b = appendDigits(append(b, '-'), day, 2)
	b = appendDigits(append(b, 'T'), t.Hour(), 2)
	b = appendDigits(append(b, ':'), t.Minute(), 2)
	b = appendDigits(append(b, ':'), t.Second(), 2)
	b = appendDigits(append(b, '.'), t.Nanosecond()/int(time.Millisecond), 3)
	return string(append(b, 'Z'))
}

// appendDigits appends v, 0 <= v < 10^n, as n decimal digits (n <= 4).
func appendDigits(b []byte, v, n int) []byte {
	at := len(b)
	b = append(b, "0000"[:n]...)
	for i := len(b) - 1; i >= at; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

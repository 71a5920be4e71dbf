package claimstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/internal/quote"
)

// A machine that will never run again holds its claims forever: every other
// machine reads them as foreign-host, and only that machine, after its own
// reboot, could free them on a boot proof. A decommission record is an
// operator's durable, attributable assertion that it will not
// (docs/DECOMMISSION.md, "What the operator asserts"): classify on any other
// machine then frees that machine's claims of the boots the record names.
//
// A machine's records form one history, numbered densely from 1 like a key's
// revisions and created exclusively like a boot proof (WriteProof): exactly
// one operator wins each number, and the machine's state is its highest
// record — a decommission (quarantined, its covered boots freeable) or a lift
// (in service again). "Later" is that numbering, never a wall clock.

// Evidence is what the operator checked before asserting that a machine will
// never run again: the closed set the operator chooses from.
type Evidence string

const (
	// EvidencePoweredOff: the machine is powered off and will not be
	// powered on again with this identity (its fence, as Pacemaker's
	// stonith_admin --confirm asks for).
	EvidencePoweredOff Evidence = "powered-off"
	// EvidenceWiped: its disks were erased or destroyed.
	EvidenceWiped Evidence = "wiped"
	// EvidenceInstanceDeleted: the cloud instance or virtual machine was
	// deleted.
	EvidenceInstanceDeleted Evidence = "instance-deleted"
)

// Evidences lists every evidence kind, in the order help shows them.
var Evidences = []Evidence{EvidencePoweredOff, EvidenceWiped, EvidenceInstanceDeleted}

// ParseEvidence returns the evidence kind s names, or an error listing the
// kinds.
func ParseEvidence(s string) (Evidence, error) {
	for _, e := range Evidences {
		if string(e) == s {
			return e, nil
		}
	}
	names := make([]string, len(Evidences))
	for i, e := range Evidences {
		names[i] = string(e)
	}
	return "", fmt.Errorf("%w: %q is not one of %s", ErrBadDecommission, s, strings.Join(names, ", "))
}

// ProofDecommissioned is the proof of a stopped revision that classify
// published on the strength of a decommission record; its ref is the
// record's id.
const ProofDecommissioned ProofKind = "decommissioned"

// The kinds of a machine's records.
const (
	DecommissionKind     = "decommission"
	DecommissionLiftKind = "decommission-lift"
)

// MaxDecommissionReason bounds the operator's reason, in bytes.
const MaxDecommissionReason = 4096

// maxDecommissionSeq bounds the probe for a machine's newest record: a
// machine decommissioned and lifted thousands of times is a root to look at,
// not to act on.
const maxDecommissionSeq = 10000

// Asserter is who asserted a record: the user (uid and name), and the host
// and machine they ran on.
type Asserter struct {
	UID       int    `json:"uid"`
	User      string `json:"user"`
	Hostname  string `json:"hostname"`
	MachineID string `json:"machineId"`
}

// DecommissionRecord is one record of a machine's decommission history: a
// decommission (Kind DecommissionKind) or the lift of one
// (DecommissionLiftKind). It is written once, exclusively, and never
// rewritten.
type DecommissionRecord struct {
	Version   int    `json:"version"`
	Kind      string `json:"kind"`
	ID        string `json:"id"`
	MachineID string `json:"machineId"`
	Seq       uint64 `json:"seq"`
	// LastBootID is the boot of the machine's newest record (by writtenAt:
	// informational only) among the heads the store held when the record
	// was written; BootIDs are every boot of the machine seen there, and
	// exactly the boots whose claims the record frees. A boot not in
	// BootIDs (a later boot) is never freed by it.
	LastBootID string   `json:"lastBootId,omitempty"`
	BootIDs    []string `json:"bootIds"`
	// HeldClaims counts the machine's claims that were held when the
	// record was written (informational).
	HeldClaims int      `json:"heldClaims"`
	Evidence   Evidence `json:"evidence,omitempty"`
	Reason     string   `json:"reason"`
	// Lifts is, for a lift, the id of the decommission record it ends.
	Lifts      string   `json:"lifts,omitempty"`
	AssertedBy Asserter `json:"assertedBy"`
	AssertedAt string   `json:"assertedAt"`
}

// Lift reports whether the record lifts a decommission.
func (r *DecommissionRecord) Lift() bool { return r.Kind == DecommissionLiftKind }

// Covers reports whether the record frees claims of machine taken under
// boot: a decommission (not a lift) of that machine naming that boot.
func (r *DecommissionRecord) Covers(machine, boot string) bool {
	if r == nil || r.Lift() || r.MachineID != machine || !hostid.ValidBootID(boot) {
		return false
	}
	for _, b := range r.BootIDs {
		if b == boot {
			return true
		}
	}
	return false
}

// decommissionPrefix begins every decommission record's id; a proof id
// with it is judged as a record, never as a boot proof.
const decommissionPrefix = "decommission-"

// DecommissionID is the id of machine's record number seq:
// "decommission-<machine id>-<seq, 10 digits>".
func DecommissionID(machine string, seq uint64) string {
	return fmt.Sprintf("%s%s-%010d", decommissionPrefix, machine, seq)
}

// parseDecommissionID returns the machine and number of a record id, or
// ok false when id is not one.
func parseDecommissionID(id string) (machine string, seq uint64, ok bool) {
	rest, ok := strings.CutPrefix(id, decommissionPrefix)
	if !ok || len(rest) != 32+1+10 || rest[32] != '-' || !hostid.ValidMachineID(rest[:32]) {
		return "", 0, false
	}
	n, err := strconv.ParseUint(rest[33:], 10, 64)
	if err != nil || n == 0 || DecommissionID(rest[:32], n) != id {
		return "", 0, false
	}
	return rest[:32], n, true
}

// isDecommissionID reports whether id names a decommission record.
func isDecommissionID(id string) bool {
	_, _, ok := parseDecommissionID(id)
	return ok
}

// DecommissionStateError is returned by Decommission when the machine is
// already decommissioned, and by LiftDecommission when it is not (never
// decommissioned, or lifted already): Current is its newest record (nil
// when it has none). It is also what an operator who lost the race to write
// the same record gets. Nothing is written.
type DecommissionStateError struct {
	Machine string
	Current *DecommissionRecord
	Lifting bool // the operation refused was a lift
}

func (e *DecommissionStateError) Error() string {
	c := e.Current
	switch {
	case !e.Lifting:
		return fmt.Sprintf("machine %s is already decommissioned by record %s (%s, asserted by %s at %s): its claims of the boots it names are freed by classify; to record new evidence, lift it first (claimctl decommission --lift --machine %s --reason TEXT)",
			e.Machine, c.ID, c.Evidence, c.AssertedBy, c.AssertedAt, e.Machine)
	case c == nil:
		return fmt.Sprintf("machine %s was never decommissioned: there is no quarantine to lift", e.Machine)
	default:
		return fmt.Sprintf("machine %s is not decommissioned: record %s lifted its last decommission (asserted by %s at %s)", e.Machine, c.ID, c.AssertedBy, c.AssertedAt)
	}
}

func (a Asserter) String() string {
	return fmt.Sprintf("%s (uid %d) on %s, machine %s", a.User, a.UID, a.Hostname, a.MachineID)
}

// QuarantinedError is returned by Acquire on a machine whose newest
// decommission record is a decommission: an operator asserted that this
// machine will never run again, and other machines free its claims of the
// boots the record names, so a claim taken here could be freed under a
// running writer. Nothing is published. Record says who asserted it and
// why; Lift is the command that ends the quarantine (a lift record, as
// attributable as the decommission). Test for it with errors.As, or with
// errors.Is(err, ErrQuarantined).
type QuarantinedError struct {
	Machine string
	Record  *DecommissionRecord
	Lift    string
}

func (e *QuarantinedError) Error() string {
	r := e.Record
	return fmt.Sprintf("this machine (%s) is decommissioned by record %s (%s: %q, asserted by %s at %s), so it takes no claims: other machines free its claims of the boots the record names; if this machine is in service again, lift the quarantine with %s",
		e.Machine, r.ID, r.Evidence, r.Reason, r.AssertedBy, r.AssertedAt, e.Lift)
}

func (e *QuarantinedError) Is(target error) bool { return target == ErrQuarantined }

// LiftCommand is the command that lifts machine's quarantine.
func LiftCommand(machine string) string {
	return "claimctl decommission --lift --machine " + machine + " --reason TEXT"
}

// DecommissionOptions are the operator's assertion.
type DecommissionOptions struct {
	Machine  string
	Evidence Evidence
	Reason   string
	// Asserter is who asserts it. Nil: this process's user and host
	// (CurrentAsserter).
	Asserter *Asserter
}

// CurrentAsserter returns who this process asserts as: its real uid and
// that user's name (empty when the user database has no entry), the host
// name, and the store's machine id.
func (s *Store) CurrentAsserter() (*Asserter, error) {
	machine, err := s.machineID()
	if err != nil {
		return nil, fmt.Errorf("this machine's id cannot be read, so the record could not say where it was asserted: %w", err)
	}
	a := &Asserter{UID: os.Getuid(), MachineID: machine}
	if u, err := user.LookupId(strconv.Itoa(a.UID)); err == nil {
		a.User = u.Username
	}
	a.Hostname, _ = os.Hostname()
	return a, nil
}

func checkReason(reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return fmt.Errorf("%w: the reason is empty: say what was checked, where it is recorded (a ticket), and by whom", ErrBadDecommission)
	case len(reason) > MaxDecommissionReason:
		return fmt.Errorf("%w: the reason is %d bytes, more than %d", ErrBadDecommission, len(reason), MaxDecommissionReason)
	case !utf8.ValidString(reason) || strings.ContainsRune(reason, 0):
		return fmt.Errorf("%w: the reason is not valid UTF-8 text", ErrBadDecommission)
	}
	return nil
}

func checkMachine(machine string) error {
	if !hostid.ValidMachineID(machine) {
		return fmt.Errorf("%w: machine id %s is not 32 lowercase hex digits (the machine's /etc/machine-id; claimctl show and list print it)", ErrBadDecommission, quote.Prefix(machine))
	}
	return nil
}

// DecommissionPlan is what a decommission of a machine would record, read
// from the root now: for an operator to confirm before Decommission writes
// it.
type DecommissionPlan struct {
	Machine    string
	LastBootID string
	BootIDs    []string
	HeldClaims int
	// Current is the machine's newest record, nil when it has none.
	Current *DecommissionRecord
}

// PlanDecommission reads the whole root (one Walk) and returns what a
// decommission of machine would name: the machine's boots in every head,
// the newest, and how many of its claims are held. It returns
// ErrUnknownMachine when no head names the machine, ErrOwnMachine for this
// store's own machine, and ErrBadDecommission for a malformed id.
func (s *Store) PlanDecommission(ctx context.Context, machine string) (*DecommissionPlan, error) {
	if err := checkMachine(machine); err != nil {
		return nil, err
	}
	mine, err := s.machineID()
	if err != nil {
		return nil, fmt.Errorf("this machine's id cannot be read, so it cannot be told apart from the machine to decommission: %w", err)
	}
	if machine == mine {
		return nil, fmt.Errorf("%w: %s is the machine this command runs on; decommission it from another machine, once it is off for good", ErrOwnMachine, machine)
	}
	w, err := s.Walk(ctx, &WalkOptions{KeepIdle: true})
	if err != nil {
		return nil, err
	}
	var infos []*KeyInfo
	for _, p := range w.Pairs {
		infos = append(infos, p.SeatInfo, p.SessionInfo)
	}
	for _, o := range w.Orphans {
		infos = append(infos, o.Info)
	}
	infos = append(infos, w.IdleKeys...)
	plan := &DecommissionPlan{Machine: machine}
	boots := map[string]bool{}
	held := map[string]bool{}
	seen, newest := false, ""
	for _, in := range infos {
		if in == nil || in.Head == nil || in.Head.Record == nil || in.Head.Record.Host.MachineID != machine || in.Head.Record.Tombstone {
			continue
		}
		rec := in.Head.Record
		seen = true
		if in.Head.Held() {
			held[rec.ClaimID] = true
		}
		// Only a boot id is a boot: a malformed one covers nothing, and
		// its claim stays held (fail closed).
		if hostid.ValidBootID(rec.Host.BootID) {
			boots[rec.Host.BootID] = true
			if at := rec.WrittenAt; plan.LastBootID == "" || at > newest {
				plan.LastBootID, newest = rec.Host.BootID, at
			}
		}
	}
	if !seen {
		return nil, fmt.Errorf("%w: no key under %s was ever taken by machine %s; check the id (claimctl list and show print each claim's machine)", ErrUnknownMachine, s.Root(), machine)
	}
	for b := range boots {
		plan.BootIDs = append(plan.BootIDs, b)
	}
	sort.Strings(plan.BootIDs)
	plan.HeldClaims = len(held)
	if plan.Current, _, err = s.currentDecommission(ctx, machine); err != nil {
		return nil, err
	}
	return plan, nil
}

// Decommission records, durably and exclusively, the operator's assertion
// that machine will never again run any writer of the boots the store has
// seen it run: the machine id, every boot of it in the root's heads (and
// the newest), the evidence, the reason, who asserted it and when. From
// then on classify, on any other machine, frees the machine's claims of
// those boots (stopped, with a ProofDecommissioned proof naming the
// record), and Acquire on that machine refuses (QuarantinedError) until a
// lift record follows it.
//
// It refuses, writing nothing: malformed input (ErrBadDecommission); this
// store's own machine (ErrOwnMachine); a machine no head names
// (ErrUnknownMachine); a machine already decommissioned, or another
// operator's record written first (*DecommissionStateError).
func (s *Store) Decommission(ctx context.Context, opts DecommissionOptions) (*DecommissionRecord, error) {
	if err := checkMachine(opts.Machine); err != nil {
		return nil, err
	}
	if _, err := ParseEvidence(string(opts.Evidence)); err != nil {
		return nil, err
	}
	if err := checkReason(opts.Reason); err != nil {
		return nil, err
	}
	plan, err := s.PlanDecommission(ctx, opts.Machine)
	if err != nil {
		return nil, err
	}
	if plan.Current != nil && !plan.Current.Lift() {
		return nil, &DecommissionStateError{Machine: opts.Machine, Current: plan.Current}
	}
	r := &DecommissionRecord{Kind: DecommissionKind, MachineID: opts.Machine, LastBootID: plan.LastBootID,
		BootIDs: plan.BootIDs, HeldClaims: plan.HeldClaims, Evidence: opts.Evidence, Reason: opts.Reason}
	if r.BootIDs == nil {
		r.BootIDs = []string{}
	}
	return s.writeDecommission(ctx, r, plan.Current, opts.Asserter)
}

// LiftDecommission records, durably and exclusively, that machine is in
// service again: its quarantine ends (Acquire there works again) and
// classify no longer frees its claims on the lifted record (revisions
// already stopped on it stay free: the record stays, and still proves
// them). It refuses, writing nothing, malformed input (ErrBadDecommission)
// and a machine that is not decommissioned (*DecommissionStateError). A
// machine may lift its own quarantine.
func (s *Store) LiftDecommission(ctx context.Context, machine, reason string, asserter *Asserter) (*DecommissionRecord, error) {
	if err := checkMachine(machine); err != nil {
		return nil, err
	}
	if err := checkReason(reason); err != nil {
		return nil, err
	}
	cur, _, err := s.currentDecommission(ctx, machine)
	if err != nil {
		return nil, err
	}
	if cur == nil || cur.Lift() {
		return nil, &DecommissionStateError{Machine: machine, Current: cur, Lifting: true}
	}
	r := &DecommissionRecord{Kind: DecommissionLiftKind, MachineID: machine, BootIDs: []string{}, Reason: reason, Lifts: cur.ID}
	return s.writeDecommission(ctx, r, cur, asserter)
}

// writeDecommission writes r as the record after cur, exclusively: losing
// the number to another operator is reported as the state that operator
// left, never overwritten.
func (s *Store) writeDecommission(ctx context.Context, r, cur *DecommissionRecord, asserter *Asserter) (*DecommissionRecord, error) {
	if asserter == nil {
		a, err := s.CurrentAsserter()
		if err != nil {
			return nil, err
		}
		asserter = a
	}
	r.Version, r.AssertedBy, r.AssertedAt = 1, *asserter, timestamp(s.now())
	r.Seq = 1
	if cur != nil {
		r.Seq = cur.Seq + 1
	}
	r.ID = DecommissionID(r.MachineID, r.Seq)
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(data) >= MaxFileSize {
		return nil, fmt.Errorf("%w: the record would be %d bytes, more than %d", ErrRecordTooLarge, len(data), MaxFileSize)
	}
	data = append(data, '\n')
	err = s.be.WriteProof(ctx, r.ID, data)
	if errors.Is(err, fs.ErrExist) {
		// Our own write, whose reply was lost and which a retry then
		// found, has our exact bytes. Another operator's identical bytes
		// (same assertion, asserter and millisecond) are the same
		// assertion: reporting it written is true either way.
		if have, rerr := s.be.ReadProof(ctx, r.ID); rerr == nil && bytes.Equal(have, data) {
			return r, nil
		}
		now, _, rerr := s.currentDecommission(ctx, r.MachineID)
		if rerr != nil {
			return nil, fmt.Errorf("record %s was written by another operator first, and cannot be read: %w", r.ID, rerr)
		}
		return nil, &DecommissionStateError{Machine: r.MachineID, Current: now, Lifting: r.Lift()}
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// ReadDecommission reads and validates the record with the given id.
func (s *Store) ReadDecommission(ctx context.Context, id string) (*DecommissionRecord, error) {
	machine, seq, ok := parseDecommissionID(id)
	if !ok {
		return nil, fmt.Errorf("%q is not a decommission record id (decommission-<machine id>-<10 digits>)", id)
	}
	data, err := s.be.ReadProof(ctx, id)
	if err != nil {
		return nil, err
	}
	var r DecommissionRecord
	bad := func(why string) error {
		return &fs.PathError{Op: "decode decommission record", Path: s.proofPath(id), Err: &DamageError{Reason: why}}
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, bad(err.Error())
	}
	switch {
	case r.Version != 1 || (r.Kind != DecommissionKind && r.Kind != DecommissionLiftKind):
		return nil, bad("not a decommission record")
	case r.ID != id || r.MachineID != machine || r.Seq != seq:
		return nil, bad(fmt.Sprintf("its id, machine or number (%s, %s, %d) is not its name's", r.ID, r.MachineID, r.Seq))
	case r.Kind == DecommissionKind && r.Evidence == "":
		return nil, bad("a decommission names no evidence")
	}
	for _, b := range r.BootIDs {
		if !hostid.ValidBootID(b) {
			return nil, bad(fmt.Sprintf("%q is not a boot id", b))
		}
	}
	return &r, nil
}

// Decommissioned returns machine's newest decommission record — a
// decommission, or the lift of one — or nil when the machine has none. It
// is what list and show name a machine's claims by, and what classify and
// Acquire decide on.
func (s *Store) Decommissioned(ctx context.Context, machine string) (*DecommissionRecord, error) {
	if !hostid.ValidMachineID(machine) {
		return nil, nil // no record can name it
	}
	r, _, err := s.currentDecommission(ctx, machine)
	return r, err
}

// currentDecommission finds machine's newest record by probing its numbers
// from 1: a machine has a handful. An unreadable record is an error, never
// skipped: the history above it could say anything.
func (s *Store) currentDecommission(ctx context.Context, machine string) (*DecommissionRecord, uint64, error) {
	var cur *DecommissionRecord
	for n := uint64(1); n <= maxDecommissionSeq; n++ {
		r, err := s.ReadDecommission(ctx, DecommissionID(machine, n))
		if errors.Is(err, fs.ErrNotExist) {
			return cur, n - 1, nil
		}
		if err != nil {
			return nil, 0, err
		}
		cur = r
	}
	return nil, 0, fmt.Errorf("machine %s has more than %d decommission records under %s; look at them with claimctl fsck", machine, maxDecommissionSeq, s.Path(ProofDir))
}

// checkQuarantine refuses a claim on a machine that is decommissioned.
func (s *Store) checkQuarantine(ctx context.Context, machine string) error {
	if !hostid.ValidMachineID(machine) {
		return nil
	}
	r, _, err := s.currentDecommission(ctx, machine)
	if err != nil {
		return fmt.Errorf("cannot tell whether this machine is decommissioned, so no claim is taken: %w", err)
	}
	if r != nil && !r.Lift() {
		return &QuarantinedError{Machine: machine, Record: r, Lift: LiftCommand(machine)}
	}
	return nil
}

// verifyDecommissionProof checks that a stopped revision's decommission
// record exists and covers the record's machine and boot.
func (s *Store) verifyDecommissionProof(ctx context.Context, rec *Record) error {
	d, err := s.ReadDecommission(ctx, rec.Proof.Ref)
	if err != nil {
		return err
	}
	if !d.Covers(rec.Host.MachineID, rec.Host.BootID) {
		return fmt.Errorf("decommission record %s (%s of machine %s, boots %s) does not cover claim %s of machine %s, boot %s",
			d.ID, d.Kind, d.MachineID, strings.Join(d.BootIDs, ", "), rec.ClaimID, rec.Host.MachineID, rec.Host.BootID)
	}
	return nil
}

func decommissionProofJSON(ref string) json.RawMessage { return proofJSON(ProofDecommissioned, ref) }

// Decommission states of a record, as DecommissionView says them.
const (
	// DecommissionFreed: the revision is stopped on a decommission record.
	DecommissionFreed = "freed"
	// DecommissionCovered: another machine's held claim, of a boot its
	// newest record covers: classify frees it.
	DecommissionCovered = "covered"
	// DecommissionNotCovered: another machine's held claim whose machine
	// is decommissioned, of a boot the record does not name: nothing
	// frees it but that machine.
	DecommissionNotCovered = "not-covered"
	// DecommissionLifted: another machine's held claim whose machine's
	// decommission was lifted.
	DecommissionLifted = "lifted"
)

// DecommissionView is what a decommission record says of one record.
type DecommissionView struct {
	State  string // DecommissionFreed, Covered, NotCovered or Lifted
	Record string // the record's id
}

// ViewDecommission says what decommission records mean for rec, a key's
// head: newest is rec's machine's newest record (Decommissioned), nil when
// it has none. It returns nil when no record bears on rec: this machine's
// claims (classify never frees them on a record), and machines never
// decommissioned. It applies row 1a's rule of machines and boots, so that
// list and show say what classify will do with a plain pair; classify
// alone decides, on the whole pair (damage, two claims, the claim's own
// pair, the owner's boot), and may still hold a pair marked covered.
func (s *Store) ViewDecommission(rec *Record, newest *DecommissionRecord) *DecommissionView {
	if rec == nil {
		return nil
	}
	if rec.State == Stopped && rec.Proof != nil && rec.Proof.Kind == ProofDecommissioned {
		return &DecommissionView{State: DecommissionFreed, Record: rec.Proof.Ref}
	}
	mine, err := s.machineID()
	if err != nil || !rec.held() || rec.Host.MachineID == mine || newest == nil || newest.MachineID != rec.Host.MachineID {
		return nil
	}
	switch {
	case newest.Lift():
		return &DecommissionView{State: DecommissionLifted, Record: newest.ID}
	case newest.Covers(rec.Host.MachineID, rec.Host.BootID):
		return &DecommissionView{State: DecommissionCovered, Record: newest.ID}
	}
	return &DecommissionView{State: DecommissionNotCovered, Record: newest.ID}
}

// CheckDecommission checks an operator's input before anything is read:
// machine, reason and, for a decommission (not a lift), the evidence kind.
// Its errors wrap ErrBadDecommission.
func CheckDecommission(machine string, evidence string, reason string, lift bool) error {
	if err := checkMachine(machine); err != nil {
		return err
	}
	if !lift {
		if _, err := ParseEvidence(evidence); err != nil {
			return err
		}
	}
	return checkReason(reason)
}

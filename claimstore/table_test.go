package claimstore

// The whole decision table (issue 10): classify's inputs enumerated as a
// cross product, each combination written as a root in the reference's
// format, classified here, and checked three ways:
//
//   - against modelClassify, a small executable model of the table written
//     from ARCHITECTURE.md ("Recovery: the decision table") and
//     docs/PROTOCOL.md ("Classify: where it differs from the reference"), not
//     from classify.go, which encodes the documented differences from the
//     reference;
//   - against the reference implementation (claim.mjs, via
//     testdata/refdriver.mjs) on an identical root, wherever its behaviour
//     is defined; where this store deliberately differs, the model names
//     the difference, and the difference must hold more (or free only on a
//     proof the inputs carry);
//   - against invariants that need neither: a free or stopped outcome
//     carries a proof the inputs justify.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// keyState is one key's head: its state and proof, or no revision, or a
// torn revision.
type keyState string

const (
	ksNone        keyState = "none"
	ksReserved    keyState = "reserved"
	ksActive      keyState = "active"
	ksStopping    keyState = "stopping" // with a stop request in flight
	ksUncertain   keyState = "uncertain"
	ksStoppedBare keyState = "stopped-noproof"
	ksCohort      keyState = "stopped-cohort"
	ksBootOK      keyState = "stopped-boot-present"     // this store's proof file, verifying
	ksBootMissing keyState = "stopped-boot-missing"     // this store's format, no file
	ksBootBad     keyState = "stopped-boot-unverified"  // this store's format, another claim's proof
	ksBootForeign keyState = "stopped-boot-foreign-ref" // another issuer's ref, taken as written
	ksNoUnit      keyState = "stopped-no-unit"
	ksTorn        keyState = "torn"
)

var allKeyStates = []keyState{ksNone, ksReserved, ksActive, ksStopping, ksUncertain, ksStoppedBare, ksCohort, ksBootOK, ksBootMissing, ksBootBad, ksBootForeign, ksNoUnit, ksTorn}

func (k keyState) record() bool { return k != ksNone && k != ksTorn }

// stoppedProof: a stopped head with a proof (free to the reference).
func (k keyState) stoppedProof() bool {
	switch k {
	case ksCohort, ksBootOK, ksBootMissing, ksBootBad, ksBootForeign, ksNoUnit:
		return true
	}
	return false
}

// damagedHere: how this store reads the head (a boot proof of its own
// format that is missing or does not verify reads as damaged).
func (k keyState) damagedHere() bool { return k == ksTorn || k == ksBootMissing || k == ksBootBad }

func (k keyState) state() State {
	switch k {
	case ksReserved:
		return Reserved
	case ksActive:
		return Active
	case ksStopping:
		return Stopping
	case ksUncertain:
		return Uncertain
	}
	return Stopped
}

func (k keyState) proofKind() ProofKind {
	switch k {
	case ksCohort:
		return ProofCohort
	case ksBootOK, ksBootMissing, ksBootBad, ksBootForeign:
		return ProofBoot
	case ksNoUnit:
		return ProofNoUnit
	}
	return ""
}

// ownerDim is how the recorded owner's pid judges on the classifying host.
type ownerDim string

const (
	ownLive      ownerDim = "live"            // pid 4100 runs, same start
	ownGone      ownerDim = "gone"            // pid 4200 reused (another start)
	ownNoStart   ownerDim = "unknown-nostart" // pid 4100 runs, no start recorded
	ownEPERM     ownerDim = "unknown-eperm"   // pid 1: /proc unreadable, signal 0 says EPERM
	ownInvalid   ownerDim = "invalid"         // pid 0
	ownOtherNS   ownerDim = "another-pidns"   // recorded in another PID namespace
	ownZombie    ownerDim = "zombie"          // pid 4400, same start, not yet reaped
	ownAdoptLive ownerDim = "adopted"         // live, and the caller adopts this very owner
)

var allOwners = []ownerDim{ownLive, ownGone, ownNoStart, ownEPERM, ownInvalid, ownOtherNS, ownZombie, ownAdoptLive}

type unitDim string

const (
	unitAbsent  unitDim = "absent"
	unitAlive   unitDim = "alive"
	unitUnknown unitDim = "unknown"
)

var allUnits = []unitDim{unitAbsent, unitAlive, unitUnknown}

// bootDim is the record's host (machine, boot) against the classifying
// host, and the owner's recorded boot.
type bootDim string

const (
	bootSame          bootDim = "same"                  // host boot = this boot = owner.boot
	bootSameNoOwner   bootDim = "same-owner-unrecorded" // host boot = this boot, no owner.boot
	bootEarlier       bootDim = "earlier"               // well-formed earlier boot, owner.boot agrees
	bootEarlierNoOwn  bootDim = "earlier-owner-unrecorded"
	bootMalformed     bootDim = "malformed"     // host boot not a boot id
	bootContradictory bootDim = "contradictory" // host boot earlier, owner.boot this boot
	bootForeignHost   bootDim = "foreign-machine"
	// Issue 23: another machine with a decommission record. Covered: the
	// record (tableDecomMachine's newest) names the claim's boot. Later:
	// the claim is of a boot the record does not name. Lifted: the record
	// naming the boot was lifted (tableLiftedMachine).
	bootDecomCovered bootDim = "decommissioned-covered"
	bootDecomLater   bootDim = "decommissioned-later-boot"
	bootDecomLifted  bootDim = "decommissioned-lifted"
)

var allBoots = []bootDim{bootSame, bootSameNoOwner, bootEarlier, bootEarlierNoOwn, bootMalformed, bootContradictory, bootForeignHost, bootDecomCovered, bootDecomLater, bootDecomLifted}

// The machines of the decommissioned boot dimensions. The table's root
// also holds a decommission record naming this machine (testMachine) and
// both its boots, written by the operator of another machine: every case
// of this machine is classified with it there, and none may be freed by it.
const (
	tableDecomMachine  = "d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0"
	tableLiftedMachine = "1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f"
)

type pairDim string

const (
	pairSame  pairDim = "same-claim"
	pairTwo   pairDim = "two-claims"    // seat claim A, session claim B
	pairMoved pairDim = "moved-release" // A released on the seat (cohortProof), seat then taken by B; session still A
)

// hrec is one revision of a key's history, as the case describes it.
type hrec struct {
	claim  byte // 'A' or 'B'
	state  keyState
	marker bool
}

// tableGroup is the process group the group stages record. No process
// of the table's host has it: classify must not look (a group gone is a
// supervisor's proof, made by lifecycle, never the table's; see
// lifecycle's TestGroupCrash* for that decision).
const tableGroup = 4500

// tcase is one combination of classify's inputs.
type tcase struct {
	idx                int
	family             string // "product" or "supervisor"
	seat, session      keyState
	markSeat, markSess bool
	owner              ownerDim
	unit               unitDim
	boot               bootDim
	pair               pairDim
	seatHist, sessHist []hrec // built from the above
	stage              string // supervisor family: which step was reached
	// group: its active and stopping records name the writer's process
	// group (processGroup, tableGroup), as a run without a service
	// manager records it.
	group bool
}

func (c *tcase) name() string {
	if c.family == "supervisor" {
		return fmt.Sprintf("supervisor/%s/owner=%s/unit=%s/boot=%s", c.stage, c.owner, c.unit, c.boot)
	}
	return fmt.Sprintf("%s/seat=%s%s/session=%s%s/owner=%s/unit=%s/boot=%s", c.pair, c.seat, mk(c.markSeat), c.session, mk(c.markSess), c.owner, c.unit, c.boot)
}

func mk(b bool) string {
	if b {
		return "+marker"
	}
	return ""
}

func (c *tcase) seatHead() (hrec, bool) { return last(c.seatHist) }
func (c *tcase) sessHead() (hrec, bool) { return last(c.sessHist) }

func last(h []hrec) (hrec, bool) {
	if len(h) == 0 {
		return hrec{state: ksNone}, false
	}
	return h[len(h)-1], true
}

// tableCases enumerates the product. Markers vary only on keys with a
// record (a marker on no revision or a torn one is not an input); two
// claims need a record on both keys; a moved release needs the session
// key still to hold claim A.
func tableCases() []*tcase {
	var out []*tcase
	add := func(c *tcase) {
		c.idx = len(out)
		out = append(out, c)
	}
	markers := func(k keyState) []bool {
		if k.record() {
			return []bool{false, true}
		}
		return []bool{false}
	}
	for _, pair := range []pairDim{pairSame, pairTwo, pairMoved} {
		for _, ss := range allKeyStates {
			for _, xs := range allKeyStates {
				if pair == pairTwo && (!ss.record() || !xs.record()) {
					continue
				}
				if pair == pairMoved && (ss == ksNone || !xs.record()) {
					continue
				}
				for _, ms := range markers(ss) {
					for _, mx := range markers(xs) {
						for _, o := range allOwners {
							for _, u := range allUnits {
								for _, b := range allBoots {
									c := &tcase{family: "product", seat: ss, session: xs, markSeat: ms, markSess: mx, owner: o, unit: u, boot: b, pair: pair}
									sa, xb := byte('A'), byte('A')
									if pair == pairTwo {
										xb = 'B'
									}
									if ss != ksNone {
										if pair == pairMoved {
											c.seatHist = []hrec{{'A', ksReserved, false}, {'A', ksCohort, false}}
											sa = 'B'
										}
										c.seatHist = append(c.seatHist, hrec{sa, ss, ms})
									}
									if xs != ksNone {
										c.sessHist = []hrec{{xb, xs, mx}}
									}
									add(c)
								}
							}
						}
					}
				}
			}
		}
	}
	// The supervisor's own sequence: r1 reserved, r2 reserved with the
	// spawn marker, r3 active, each its own revision, cut after each
	// revision of either key (seat first, as every step publishes).
	seq := []hrec{{'A', ksReserved, false}, {'A', ksReserved, true}, {'A', ksActive, true}}
	type stage struct {
		name       string
		seat, sess int
	}
	stages := []stage{{"r1-seat-only", 1, 0}, {"r1", 1, 1}, {"r2-seat-only", 2, 1}, {"r2-marked", 2, 2}, {"r3-seat-only", 3, 2}, {"r3-active", 3, 3}}
	// A run without a service manager (claimctl run --no-unit, issue 20)
	// records its process group when it advances to active, and a stop
	// request before the group's settle wait. Its crash states are r1 (a
	// StartChecker's refusal, before the marker), r2-marked (an exec that
	// failed, before its release), and these: killed while the group ran,
	// or during the settle wait after the stop. The model is the one
	// above, unchanged: classify reads processGroup only to name the
	// writer in its refusal, so a recorded group frees nothing on this
	// boot whether it lives or not (run --adopt judges the group), and an
	// earlier boot frees it on a boot proof as any run.
	groupSeq := append(seq[:3:3], hrec{'A', ksStopping, true})
	groupStages := []stage{{"group-r3-seat-only", 3, 2}, {"group-r3-active", 3, 3}, {"group-stopping-seat-only", 4, 3}, {"group-stopping", 4, 4}}
	for i, st := range append(stages, groupStages...) {
		hist := seq
		if i >= len(stages) {
			hist = groupSeq
		}
		for _, o := range allOwners {
			for _, u := range allUnits {
				for _, b := range allBoots {
					c := &tcase{family: "supervisor", stage: st.name, owner: o, unit: u, boot: b, pair: pairSame, group: i >= len(stages)}
					c.seatHist = append([]hrec(nil), hist[:st.seat]...)
					c.sessHist = append([]hrec(nil), hist[:st.sess]...)
					h, _ := c.seatHead()
					c.seat, c.markSeat = h.state, h.marker
					c.session = ksNone
					if h, ok := c.sessHead(); ok {
						c.session, c.markSess = h.state, h.marker
					}
					add(c)
				}
			}
		}
	}
	return out
}

// The classifying host: this machine in its current boot (the real boot
// id where it can be read, because the reference judges a recorded
// owner.boot against the real machine's boot, not the host it is given),
// a fixed process table, judged from the initial PID namespace.
func tableHost(boot string) *hostidtest.Host {
	return &hostidtest.Host{
		Machine: testMachine,
		Boot:    boot,
		Procs:   tableProcs,
		Zombies: map[int]bool{4400: true},
		Hidden:  map[int]bool{1: true}, // pid 1 exists, its /proc entry unreadable
	}
}

const (
	tableOtherNS   = "4:4026532301"
	tableMalformed = "not-a-boot-id"
)

var tableProcs = map[int]string{4100: "500", 4200: "999", 4400: "500"}

// tableWorld is what every case shares: the current boot and an earlier
// one.
type tableWorld struct {
	cur, earlier string
	realBoot     bool // cur is this machine's real boot id
}

func newTableWorld() tableWorld {
	w := tableWorld{cur: bootB, earlier: bootA}
	if data, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if b := strings.TrimSpace(string(data)); hostid.ValidBootID(b) {
			w.cur, w.realBoot = b, true
		}
	}
	if w.earlier == w.cur {
		w.earlier = bootB
	}
	return w
}

func (w tableWorld) machine(c *tcase) string {
	switch c.boot {
	case bootForeignHost:
		return otherMachine
	case bootDecomCovered, bootDecomLater:
		return tableDecomMachine
	case bootDecomLifted:
		return tableLiftedMachine
	}
	return testMachine
}

// decommissions are the decommission records the table's root holds.
func (w tableWorld) decommissions() []*DecommissionRecord {
	by := Asserter{UID: 1000, User: "operator", Hostname: "ops", MachineID: thirdMachine}
	rec := func(machine string, seq uint64, kind string, boots ...string) *DecommissionRecord {
		r := &DecommissionRecord{Version: 1, Kind: kind, ID: DecommissionID(machine, seq), MachineID: machine, Seq: seq,
			BootIDs: boots, Reason: "table", AssertedBy: by, AssertedAt: "2024-01-02T03:04:05.678Z"}
		if kind == DecommissionKind {
			r.Evidence, r.LastBootID = EvidencePoweredOff, boots[0]
		} else {
			r.BootIDs, r.Lifts = []string{}, DecommissionID(machine, seq-1)
		}
		return r
	}
	return []*DecommissionRecord{
		rec(tableDecomMachine, 1, DecommissionKind, w.cur),
		rec(tableLiftedMachine, 1, DecommissionKind, w.cur),
		rec(tableLiftedMachine, 2, DecommissionLiftKind),
		rec(testMachine, 1, DecommissionKind, w.cur, w.earlier),
	}
}

// hostBoot is the record's host.bootId; ownerBoot its owner.boot ("" for
// none recorded).
func (w tableWorld) hostBoot(c *tcase) string {
	switch c.boot {
	case bootEarlier, bootEarlierNoOwn, bootContradictory:
		return w.earlier
	case bootMalformed:
		return tableMalformed
	case bootDecomLater:
		return bootLater
	}
	return w.cur
}

func (w tableWorld) ownerBoot(c *tcase) string {
	switch c.boot {
	case bootDecomLater:
		return bootLater
	case bootSame, bootForeignHost, bootContradictory, bootDecomCovered, bootDecomLifted:
		return w.cur
	case bootEarlier:
		return w.earlier
	}
	return ""
}

func tableKeys(i int) (Key, Key) {
	seat, err := SeatKey(fmt.Sprintf("seat-%d", i), "proj", "/ws")
	if err != nil {
		panic(err)
	}
	session, err := SessionKey(fmt.Sprintf("sess-%d", i))
	if err != nil {
		panic(err)
	}
	return seat, session
}

func (c *tcase) claimID(which byte) string {
	return fmt.Sprintf("c%012x%012x", c.idx, int(which))
}

// ownerJSON is the owner member as the reference writes it (plus pidns for
// an owner recorded in another namespace, as this store writes it).
func (w tableWorld) ownerJSON(c *tcase) string {
	pid, start := 4100, `"500"`
	switch c.owner {
	case ownGone:
		pid = 4200
	case ownNoStart:
		start = ""
	case ownEPERM:
		pid, start = 1, `"1"`
	case ownInvalid:
		pid = 0
	case ownOtherNS:
		pid = 4300
	case ownZombie:
		pid = 4400
	}
	s := `{"pid":` + strconv.Itoa(pid)
	if start != "" {
		s += `,"start":` + start
	}
	if b := w.ownerBoot(c); b != "" {
		s += `,"boot":"` + b + `"`
	}
	s += `,"incarnation":3`
	if c.owner == ownOtherNS {
		s += `,"pidns":"` + tableOtherNS + `"`
	}
	return s + "}"
}

// proofID is the ref a boot-proofed head of claim id names: each kind of
// head its own, so that a missing proof is not another head's present one.
func (w tableWorld) proofID(c *tcase, id string, k keyState) string {
	hb := w.hostBoot(c)
	return BootProofID(w.machine(c), hb, w.proofCurrent(hb), id+"/"+string(k))
}

func (w tableWorld) proofCurrent(hb string) string {
	if hb == w.cur {
		return w.earlier
	}
	return w.cur
}

// revision returns revision n of k in the reference's format.
func (w tableWorld) revision(c *tcase, k Key, n int, r hrec) []byte {
	if r.state == ksTorn {
		return []byte(`{"version":1,"kind":"writer-cl` + "\n")
	}
	id := c.claimID(r.claim)
	o := refRecord(k, uint64(n), id, string(r.state.state())).
		set("host", `{"machineId":"`+w.machine(c)+`","bootId":"`+w.hostBoot(c)+`"}`).
		set("owner", w.ownerJSON(c)).
		set("spawnMarker", strconv.FormatBool(r.marker))
	if c.group && (r.state == ksActive || r.state == ksStopping) {
		o = o.set("processGroup", strconv.Itoa(tableGroup))
	}
	switch r.state {
	case ksStopping:
		o = o.set("stop", `{"by":"table","reason":"stop requested"}`)
	case ksCohort:
		o = o.set("proof", `{"kind":"cohortProof","ref":"cohort-`+id+`"}`)
	case ksNoUnit:
		o = o.set("proof", `{"kind":"no-unit","ref":null}`)
	case ksBootOK, ksBootMissing, ksBootBad:
		o = o.set("proof", `{"kind":"boot","ref":"`+w.proofID(c, id, r.state)+`","effects":null}`)
	case ksBootForeign:
		o = o.set("proof", `{"kind":"boot","ref":"bp-ext-`+id+`","effects":null}`)
	}
	return o.bytes()
}

// build writes every case into root (directories 0700, files 0400), each
// case on keys of its own.
func (w tableWorld) build(root string, cases []*tcase) (err error) {
	mkdir := func(p string) {
		if e := os.MkdirAll(p, 0o700); e != nil && err == nil {
			err = e
		}
	}
	mkdir(filepath.Join(root, ProofDir))
	mkdir(filepath.Join(root, string(KindSeat)))
	mkdir(filepath.Join(root, string(KindSession)))
	write := func(p string, data []byte) {
		if e := os.WriteFile(p, data, 0o400); e != nil && err == nil {
			err = e
		}
	}
	for _, d := range w.decommissions() {
		data, _ := json.Marshal(d)
		write(filepath.Join(root, ProofDir, d.ID+".json"), append(data, '\n'))
	}
	for _, c := range cases {
		seat, session := tableKeys(c.idx)
		for _, kh := range []struct {
			k    Key
			hist []hrec
		}{{seat, c.seatHist}, {session, c.sessHist}} {
			if len(kh.hist) == 0 {
				continue
			}
			dir := filepath.Join(root, string(kh.k.Kind), kh.k.Hash())
			mkdir(dir)
			for i, r := range kh.hist {
				write(filepath.Join(dir, RevisionName(uint64(i+1))), w.revision(c, kh.k, i+1, r))
				id := c.claimID(r.claim)
				switch r.state {
				case ksBootOK, ksBootBad:
					pid := w.proofID(c, id, r.state)
					hb := w.hostBoot(c)
					p := BootProof{Version: 1, Kind: BootProofKind, ID: pid, ClaimID: id, MachineID: w.machine(c),
						RecordedBootID: hb, CurrentBootID: w.proofCurrent(hb), ObservedAt: "2024-01-02T03:04:05.678Z"}
					if r.state == ksBootBad {
						p.ClaimID = c.claimID('Z') // proves another claim over
					}
					data, _ := json.Marshal(p)
					write(filepath.Join(root, ProofDir, pid+".json"), append(data, '\n'))
				}
			}
		}
	}
	return err
}

// expect is what classify answers, as the model and the reference are
// compared with it.
type expect struct {
	Outcome    Outcome
	Refusal    Code
	Proof      ProofKind
	PubSeat    bool
	PubSession bool
	Completed  bool
	Damaged    bool
	// Owner is the owner's judgement, where the table reaches step 6 (or
	// completes a moved release); compared with the model only.
	Owner hostid.State
}

// modelOut is the model's answer for this store, the step of the table
// that decides it, and the named differences from the reference that the
// case exercises.
type modelOut struct {
	want  expect
	step  string
	diffs []string
	// skipRef says why the reference cannot be asked ("" if it can).
	skipRef string
}

// The documented differences from the reference (docs/PROTOCOL.md,
// "Classify: where it differs from the reference"), each in the direction of
// holding more, publishing less, or freeing only on a proof.
const (
	// A stopped head naming one of this store's boot proofs that is
	// missing or does not verify reads as damaged (trust model, "A restored
	// root"); the reference reads any proof ref as free.
	diffUnverifiedProof = "unverified-boot-proof"
	// Only a well-formed host boot consistent with the owner's recorded
	// boot is evidence of an earlier boot (trust model; bootEvidence).
	diffMalformedBoot     = "malformed-boot-proves-nothing"
	diffContradictoryBoot = "contradictory-boot-proves-nothing"
	// Step 6 judges an owner with no recorded boot under the record's host
	// boot: after a reboot it is gone, where the reference judges its pid
	// in the new boot's process table. This frees where the reference
	// holds, on a boot proof.
	diffOwnerBootFromHost = "owner-boot-from-host-boot"
	// Step 7 reuses the boot proof one key already carries.
	diffBootProofReuse = "boot-proof-reused"
	// A release cut between the keys whose freed key was taken by another
	// claim is completed on the held key, with the claim's own proof.
	diffMovedRelease = "moved-release-completed"
	// An already-active pair reports the pair's state; the reference the
	// state of its first held head.
	diffPairState = "already-active-reports-pair-state"
	// Step 1a frees another machine's claim on a decommission record
	// (issue 23) that the reference does not know.
	diffDecommissioned = "decommission-record-frees"
)

// freesOnProof are the differences that may free where the reference
// holds: each frees only on a proof the inputs carry.
var freesOnProof = map[string]bool{diffOwnerBootFromHost: true, diffMovedRelease: true, diffDecommissioned: true}

type mhead struct {
	present bool // a revision exists
	rec     *hrec
	held    bool
	damaged bool
	state   State
}

// modelHeadHere is a key's head as this store reads it.
func modelHeadHere(hist []hrec) mhead {
	r, ok := last(hist)
	if !ok {
		return mhead{state: Stopped}
	}
	h := mhead{present: true}
	switch {
	case r.state.damagedHere():
		h.held, h.damaged, h.state = true, true, Uncertain
	case r.state.stoppedProof():
		h.rec, h.state = &r, Stopped
	case r.state == ksStoppedBare:
		h.rec, h.held, h.state = &r, true, Uncertain
	default:
		h.rec, h.held, h.state = &r, true, r.state.state()
	}
	return h
}

// modelHeadRef is a key's head as the reference reads it: any proof frees.
func modelHeadRef(hist []hrec) mhead {
	r, ok := last(hist)
	if ok && (r.state == ksBootMissing || r.state == ksBootBad) {
		return mhead{present: true, rec: &r, state: Stopped}
	}
	return modelHeadHere(hist)
}

// judgeHere is hostid's verdict on the recorded owner, as hostid/doc.go
// and docs/PROTOCOL.md ("The trust model in detail") describe it: invalid
// when malformed; gone after another boot (the owner's own boot, or the
// record's host boot when it recorded none); unknown from another PID
// namespace, for a zombie, without a start, or when only EPERM answers;
// else the pid decides.
func (w tableWorld) judgeHere(c *tcase) hostid.State {
	if c.owner == ownInvalid {
		return hostid.Invalid
	}
	b := w.ownerBoot(c)
	if b == "" {
		b = w.hostBoot(c)
	}
	switch {
	case !hostid.ValidBootID(b):
		return hostid.Invalid
	case b != w.cur:
		return hostid.Gone
	}
	switch c.owner {
	case ownLive, ownAdoptLive:
		return hostid.Live
	case ownGone:
		return hostid.Gone
	}
	return hostid.Unknown
}

// judgeRef is the reference's ownerState on the same inputs: owner.boot
// against this boot, then the process table only (no namespaces, no
// zombies: a zombie still has its start time, so it is live).
func (w tableWorld) judgeRef(c *tcase) hostid.State {
	if c.owner == ownInvalid {
		return hostid.Invalid
	}
	if b := w.ownerBoot(c); b != "" && b != w.cur {
		return hostid.Gone
	}
	switch c.owner {
	case ownLive, ownAdoptLive, ownZombie:
		return hostid.Live
	case ownGone:
		return hostid.Gone
	}
	return hostid.Unknown
}

func conservativeOf(states ...State) State {
	out := Stopped
	for _, s := range states {
		out = Conservative(out, s)
	}
	return out
}

// modelClassify is the decision table, step by step.
func (w tableWorld) modelClassify(c *tcase) modelOut {
	var m modelOut
	if c.owner == ownOtherNS {
		m.skipRef = "the reference cannot express a PID namespace (its process table has no namespaces; pid 4300 would reach the real kill(2))"
	}
	for _, k := range []keyState{c.seat, c.session} {
		if k == ksBootMissing || k == ksBootBad {
			m.diffs = append(m.diffs, diffUnverifiedProof)
			break
		}
	}
	sh, xh := modelHeadHere(c.seatHist), modelHeadHere(c.sessHist)
	heads := []mhead{sh, xh}
	pairState := conservativeOf(sh.state, xh.state)
	var held []mhead
	for _, h := range heads {
		if h.held {
			held = append(held, h)
		}
	}
	done := func(step string, e expect) modelOut {
		switch step {
		case "1-free", "1a-decommissioned", "2-foreign", "3-damaged", "4-two-claims", "5-owned":
		default:
			e.Owner = w.judgeHere(c)
		}
		m.step, m.want = step, e
		return m
	}
	// 1. Neither key held.
	if len(held) == 0 {
		return done("1-free", expect{Outcome: OutcomeFree})
	}
	// 1a. Another machine's claim, one claim holding, no damaged head,
	// of a boot the machine's newest decommission record names (only
	// bootDecomCovered: a later boot is not named, a lifted record frees
	// nothing, and this machine's record is never used here).
	if c.boot == bootDecomCovered {
		plain := true
		for _, h := range held {
			plain = plain && h.rec != nil && !h.damaged && h.rec.claim == held[0].rec.claim
		}
		if plain {
			m.diffs = append(m.diffs, diffDecommissioned)
			id := held[0].rec.claim
			marker := false
			var reuse *hrec
			for _, h := range heads {
				if h.rec != nil && h.rec.claim == id {
					marker = marker || h.rec.marker
					if h.rec.state.stoppedProof() {
						reuse = h.rec
					}
				}
			}
			e := expect{Outcome: OutcomeStopped, Proof: ProofDecommissioned, PubSeat: true, PubSession: true}
			if reuse != nil {
				same := func(h mhead) bool { return h.rec == reuse && h.rec.marker == marker }
				e.Proof, e.Completed = reuse.state.proofKind(), true
				e.PubSeat, e.PubSession = !same(sh), !same(xh)
			}
			return done("1a-decommissioned", e)
		}
	}
	// 2. A held head from another machine.
	for _, h := range held {
		if h.rec != nil && w.machine(c) != testMachine {
			return done("2-foreign", expect{Outcome: OutcomeUncertain, Refusal: ForeignHost})
		}
	}
	// 3. A damaged head.
	for _, h := range held {
		if h.damaged {
			return done("3-damaged", expect{Outcome: OutcomeUncertain, Refusal: UnsafeReplacement, Damaged: true})
		}
	}
	judge := w.judgeHere(c)
	// Before 4: a moved release. The session still holds A; the seat's
	// history ends A stopped with a proof (cohortProof), and B holds the
	// seat's head. A's owner proven gone completes the session key.
	if c.pair == pairMoved && xh.held && judge == hostid.Gone {
		m.diffs = append(m.diffs, diffMovedRelease)
		e := expect{Outcome: OutcomeStopped, Proof: ProofCohort, PubSession: true, Completed: true}
		if sh.held {
			e.Outcome, e.Refusal = Outcome(sh.state), UnsafeReplacement
		}
		return done("4-moved-release", e)
	}
	// 4. Held by two claims.
	if len(held) == 2 && held[0].rec.claim != held[1].rec.claim {
		return done("4-two-claims", expect{Outcome: OutcomeUncertain, Refusal: UnsafeReplacement})
	}
	id := held[0].rec.claim
	var ours []mhead
	for _, h := range heads {
		if h.rec != nil && h.rec.claim == id {
			ours = append(ours, h)
		}
	}
	latest := ours[0].rec
	// 5. The caller adopts the recorded owner.
	if c.owner == ownAdoptLive {
		return done("5-owned", expect{Outcome: OutcomeOwned})
	}
	// 6. Only a proven-gone owner goes further.
	if judge != hostid.Gone {
		if w.judgeRef(c) == hostid.Gone && c.boot == bootMalformed {
			m.diffs = append(m.diffs, diffMalformedBoot)
		}
		if c.boot == bootEarlierNoOwn && w.judgeRef(c) != hostid.Gone {
			m.diffs = append(m.diffs, diffOwnerBootFromHost) // not reached: judge is gone there
		}
		refHeld := []State{}
		for _, h := range []mhead{modelHeadRef(c.seatHist), modelHeadRef(c.sessHist)} {
			if h.held {
				refHeld = append(refHeld, h.state)
			}
		}
		if len(refHeld) > 0 && refHeld[0] != pairState {
			m.diffs = append(m.diffs, diffPairState)
		}
		return done("6-owner-"+string(judge), expect{Outcome: Outcome(pairState), Refusal: AlreadyActive})
	}
	marker := false
	for _, h := range ours {
		marker = marker || h.rec.marker
	}
	// publishedOn: a key is published unless its head is already the
	// claim's record in the outcome's state, proof and marker.
	same := func(h mhead, st keyState, proofFrom *hrec) bool {
		if h.rec == nil || h.rec.claim != id || h.rec.marker != marker {
			return false
		}
		if proofFrom != nil {
			return h.rec == proofFrom
		}
		return h.rec.state == st
	}
	// 7. An earlier boot of this machine.
	if w.hostBoot(c) != w.cur {
		if c.boot == bootMalformed || c.boot == bootContradictory {
			if c.boot == bootContradictory {
				m.diffs = append(m.diffs, diffContradictoryBoot)
			} else {
				m.diffs = append(m.diffs, diffMalformedBoot)
			}
			return done("7-no-evidence", expect{Outcome: OutcomeUncertain, Refusal: UnsafeReplacement})
		}
		if c.boot == bootEarlierNoOwn && w.judgeRef(c) != hostid.Gone {
			m.diffs = append(m.diffs, diffOwnerBootFromHost)
		}
		var reuse *hrec
		for _, h := range ours {
			if h.rec.state == ksBootOK || h.rec.state == ksBootForeign {
				reuse = h.rec
			}
		}
		e := expect{Outcome: OutcomeStopped, Proof: ProofBoot, PubSeat: true, PubSession: true}
		if reuse != nil {
			m.diffs = append(m.diffs, diffBootProofReuse)
			e.Completed = true
			e.PubSeat, e.PubSession = !same(sh, "", reuse), !same(xh, "", reuse)
		}
		return done("7-boot-proof", e)
	}
	// 8. One key already stopped with a proof.
	for _, h := range ours {
		if h.rec.state.stoppedProof() {
			e := expect{Outcome: OutcomeStopped, Proof: h.rec.state.proofKind(), Completed: true}
			e.PubSeat, e.PubSession = !same(sh, "", h.rec), !same(xh, "", h.rec)
			return done("8-completed", e)
		}
	}
	// 9. Reserved, no spawn marker, unit absent.
	if pairState == Reserved && !marker && c.unit == unitAbsent {
		return done("9-no-unit", expect{Outcome: OutcomeStopped, Proof: ProofNoUnit, PubSeat: !same(sh, ksNoUnit, nil), PubSession: !same(xh, ksNoUnit, nil)})
	}
	// 10. Anything else may still run.
	next := ksUncertain
	if latest.state == ksStopping {
		next = ksStopping
	}
	return done("10-held", expect{Outcome: Outcome(next.state()), Refusal: UnsafeReplacement, PubSeat: !same(sh, next, nil), PubSession: !same(xh, next, nil)})
}

// groupNamed checks what the refusal of a held run names as its writer:
// the process group a group run recorded (the only thing classify reads
// of it: a group live or gone is not the table's to judge), and never a
// process group for a run that recorded none.
func groupNamed(c *tcase, m modelOut, res *Result) string {
	if m.step != "10-held" || res.Refusal == nil {
		return ""
	}
	want := fmt.Sprintf("process group %d, run without a service manager", tableGroup)
	named := strings.Contains(res.Refusal.Reason, want)
	switch {
	case c.group && !named:
		return fmt.Sprintf("refusal %q does not name the recorded process group (%q)", res.Refusal.Reason, want)
	case !c.group && strings.Contains(res.Refusal.Reason, "process group"):
		return fmt.Sprintf("refusal %q names a process group the run never recorded", res.Refusal.Reason)
	}
	return ""
}

// gotHere turns this store's result into an expect.
func gotHere(res *Result) expect {
	e := expect{Outcome: res.Outcome, Completed: res.Completed, Damaged: res.Damaged, Owner: res.Owner}
	if res.Refusal != nil {
		e.Refusal = res.Refusal.Code
	}
	if res.Proof != nil {
		e.Proof = res.Proof.Kind
	}
	for _, p := range res.Published {
		if p.Key.Kind == KindSeat {
			e.PubSeat = true
		} else {
			e.PubSession = true
		}
	}
	return e
}

// refResult is the part of the reference's classify result compared.
type refResult struct {
	OK        bool   `json:"ok"`
	Message   string `json:"message"`
	State     string `json:"state"`
	Refusal   string `json:"refusal"`
	ProofKind string `json:"proofKind"`
	Completed bool   `json:"completed"`
	Damaged   bool   `json:"damaged"`
}

// checkInvariants: a free or stopped outcome carries a proof that the
// inputs justify, read from the case alone (not from the model).
func (w tableWorld) checkInvariants(c *tcase, got expect) []string {
	var bad []string
	sh, xh := modelHeadHere(c.seatHist), modelHeadHere(c.sessHist)
	if got.Outcome == OutcomeFree && (sh.held || xh.held || got.PubSeat || got.PubSession) {
		bad = append(bad, "free with a held key, or publishing")
	}
	if got.Outcome != OutcomeStopped && got.Outcome != OutcomeFree {
		return bad
	}
	if got.Outcome == OutcomeStopped && got.Proof == "" {
		bad = append(bad, "stopped without a proof")
	}
	stoppedKey := func(kinds ...ProofKind) bool {
		for _, h := range [][]hrec{c.seatHist, c.sessHist} {
			for i, r := range h {
				// a head, or (a moved release) the claim's own earlier revision
				if (i == len(h)-1 || c.pair == pairMoved) && r.state.stoppedProof() && !r.state.damagedHere() {
					for _, k := range kinds {
						if r.state.proofKind() == k {
							return true
						}
					}
				}
			}
		}
		return false
	}
	switch got.Proof {
	case ProofDecommissioned:
		if c.boot != bootDecomCovered || w.machine(c) == testMachine {
			bad = append(bad, "a decommission proof for a claim no decommission record covers (this machine's, a later boot's, a lifted record's)")
		}
	case ProofBoot:
		earlier := (c.boot == bootEarlier || c.boot == bootEarlierNoOwn) && w.machine(c) == testMachine
		if !earlier && !(got.Completed && stoppedKey(ProofBoot)) {
			bad = append(bad, "boot proof without an earlier, well-formed, consistent boot of this machine")
		}
	case ProofNoUnit:
		if !got.Completed {
			// the freed claim is the one holding a key; a marker on its
			// heads (not on another claim's) forbids no-unit
			var id byte
			for _, h := range []mhead{xh, sh} {
				if h.held && h.rec != nil {
					id = h.rec.claim
				}
			}
			markers := false
			for _, h := range [][]hrec{c.seatHist, c.sessHist} {
				if r, ok := last(h); ok && r.marker && r.claim == id {
					markers = true
				}
			}
			if conservativeOf(sh.state, xh.state) != Reserved || markers || w.judgeHere(c) != hostid.Gone || c.unit != unitAbsent || w.hostBoot(c) != w.cur {
				bad = append(bad, "no-unit proof without: reserved, no spawn marker on either key, owner gone, unit absent, same boot")
			}
		} else if !stoppedKey(ProofNoUnit) {
			bad = append(bad, "no-unit completion without a key stopped no-unit")
		}
	case ProofCohort:
		if !got.Completed || !stoppedKey(ProofCohort) {
			bad = append(bad, "a cohortProof classify invented")
		}
	}
	if got.Completed && !stoppedKey(ProofCohort, ProofBoot, ProofNoUnit) {
		bad = append(bad, "completed without a key already stopped with a proof")
	}
	return bad
}

// tableBase is where the table's roots go: tmpfs when there is one (the
// fsyncs are the cost), else the test's temporary directory.
func tableBase(t *testing.T) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "claimstore-table-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// refRunner says whether the reference can run, and why not.
func refRunner(t *testing.T) (node, ref string, ok bool) {
	node, err := exec.LookPath("node")
	ref = os.Getenv("CLAIMSTORE_REFERENCE")
	if ref == "" {
		ref, _ = filepath.Abs("../../shared/reference")
	}
	_, rerr := os.Stat(filepath.Join(ref, "stack/packages/conversation/src/claim.mjs"))
	if err != nil || rerr != nil {
		msg := fmt.Sprintf("the reference implementation cannot run here: need node on PATH and the reference at $CLAIMSTORE_REFERENCE or ../shared/reference (node: %v, reference: %v)", err, rerr)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Log("skipping the reference comparison: " + msg)
		return "", "", false
	}
	return node, ref, true
}

// runReference classifies every case on root in one driver request per
// shard, shards running concurrently.
func (w tableWorld) runReference(t *testing.T, node, ref, root string, cases []*tcase) (map[int]refResult, error) {
	const shard = 4000
	var (
		mu  sync.Mutex
		out = map[int]refResult{}
		wg  sync.WaitGroup
		sem = make(chan struct{}, 2)
		ers []error
	)
	for lo := 0; lo < len(cases); lo += shard {
		hi := min(lo+shard, len(cases))
		batch := cases[lo:hi]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var ops []map[string]any
			for _, c := range batch {
				seat, session := tableKeys(c.idx)
				op := map[string]any{
					"op": "classify", "seat": map[string]string{"seat": seat.Seat, "project": seat.Project, "workspace": seat.Workspace},
					"session":   session.Session,
					"units":     map[string]string{UnitNameFor(c.claimID('A')): string(c.unit), UnitNameFor(c.claimID('B')): string(c.unit)},
					"bootProof": map[string]string{"id": "bp-" + c.claimID('A')},
				}
				if c.owner == ownAdoptLive {
					op["adopt"] = map[string]any{"pid": 4100, "incarnation": 3}
				}
				ops = append(ops, op)
			}
			procs := map[string]string{}
			for pid, st := range tableProcs {
				procs[strconv.Itoa(pid)] = st
			}
			body, err := json.Marshal(map[string]any{
				"root": root, "host": map[string]string{"machineId": testMachine, "bootId": w.cur},
				"processes": procs, "now": "2026-01-02T00:00:00.000Z", "ops": ops,
			})
			if err != nil {
				panic(err)
			}
			cmd := exec.Command(node, "../testdata/refdriver.mjs")
			cmd.Env = append(os.Environ(), "CLAIMSTORE_REFERENCE="+ref)
			cmd.Stdin = bytes.NewReader(body)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			data, err := cmd.Output()
			var resp struct {
				Results []refResult `json:"results"`
			}
			if err == nil {
				err = json.Unmarshal(data, &resp)
			}
			if err == nil && len(resp.Results) != len(batch) {
				err = fmt.Errorf("%d results for %d ops", len(resp.Results), len(batch))
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ers = append(ers, fmt.Errorf("refdriver: %v\n%s", err, stderr.Bytes()))
				return
			}
			for i, c := range batch {
				out[c.idx] = resp.Results[i]
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(ers...)
}

// revCount counts the revisions of k under root.
func revCount(root string, k Key) int {
	ents, _ := os.ReadDir(filepath.Join(root, string(k.Kind), k.Hash()))
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "r") && strings.HasSuffix(e.Name(), ".json") {
			n++
		}
	}
	return n
}

// TestDecisionTable is issue 10: the whole decision table, not examples of
// it. See the file comment; docs/TESTING.md ("What the crash model is
// checked by") gives the dimensions and counts.
func TestDecisionTable(t *testing.T) {
	start := time.Now()
	w := newTableWorld()
	cases := tableCases()
	cases, slice := tableSlice(t, cases)
	base := tableBase(t)
	hereRoot, refRoot := filepath.Join(base, "here"), filepath.Join(base, "ref")
	var bwg sync.WaitGroup
	var berr [2]error
	for i, root := range []string{hereRoot, refRoot} {
		bwg.Add(1)
		go func() { defer bwg.Done(); berr[i] = w.build(root, cases) }()
	}
	bwg.Wait()
	if err := errors.Join(berr[:]...); err != nil {
		t.Fatal(err)
	}
	built := time.Since(start)

	node, ref, refOK := refRunner(t)
	if refOK && !w.realBoot {
		if os.Getenv("CI") != "" {
			t.Fatal("the reference judges owner.boot against the real boot id, which cannot be read here")
		}
		t.Log("skipping the reference comparison: the real boot id cannot be read, and the reference judges owner.boot against it")
		refOK = false
	}
	var refCases []*tcase
	models := make([]modelOut, len(cases))
	for i, c := range cases {
		models[i] = w.modelClassify(c)
		if refOK && models[i].skipRef == "" {
			refCases = append(refCases, c)
		}
	}
	var (
		refRes  map[int]refResult
		refErr  error
		refDone = make(chan struct{})
		refTime time.Duration
	)
	go func() {
		defer close(refDone)
		if len(refCases) > 0 {
			t0 := time.Now()
			refRes, refErr = w.runReference(t, node, ref, refRoot, refCases)
			refTime = time.Since(t0)
		}
	}()

	// This store, on its own copy of the roots, two workers.
	s, err := OpenRoot(hereRoot, &TOpts{Host: tableHost(w.cur), Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	results := make([]*Result, len(cases))
	errs := make([]error, len(cases))
	t0 := time.Now()
	var wg sync.WaitGroup
	const workers = 2
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := wk; i < len(cases); i += workers {
				c := cases[i]
				seat, session := tableKeys(c.idx)
				opts := &ClassifyOptions{Units: mapUnits{UnitNameFor(c.claimID('A')): string(c.unit), UnitNameFor(c.claimID('B')): string(c.unit)}}
				if c.owner == ownAdoptLive {
					opts.Adopt = &Owner{PID: 4100, Incarnation: json.RawMessage("3")}
				}
				results[i], errs[i] = s.Classify(context.Background(), seat, session, opts)
			}
		}()
	}
	wg.Wait()
	hereTime := time.Since(t0)
	<-refDone
	if refErr != nil {
		t.Fatal(refErr)
	}

	failures := 0
	fail := func(c *tcase, format string, args ...any) {
		t.Helper()
		failures++
		if failures <= 40 {
			t.Errorf("case %d %s: %s", c.idx, c.name(), fmt.Sprintf(format, args...))
		}
	}
	steps := map[string]int{}
	diffNamed, diffSeen := map[string]int{}, map[string]int{}
	compared := 0
	for i, c := range cases {
		m := models[i]
		steps[m.step]++
		if errs[i] != nil {
			fail(c, "Classify: %v", errs[i])
			continue
		}
		got := gotHere(results[i])
		if got != m.want {
			fail(c, "this store %+v, the model %+v (step %s)", got, m.want, m.step)
		}
		for _, why := range w.checkInvariants(c, got) {
			fail(c, "invariant: %s (got %+v)", why, got)
		}
		if got.Outcome == OutcomeStopped && results[i].Proof != nil && results[i].Proof.Kind == ProofBoot && !results[i].Completed && results[i].BootProof == nil {
			fail(c, "a boot proof was issued but not reported")
		}
		if why := groupNamed(c, m, results[i]); why != "" {
			fail(c, "%s", why)
		}
		if d := results[i].Decommission; (d != nil) != (m.step == "1a-decommissioned") || d != nil && d.ID != DecommissionID(tableDecomMachine, 1) {
			fail(c, "decommission record %+v reported at step %s", d, m.step)
		}
		r, ok := refRes[c.idx]
		if !ok {
			continue
		}
		compared++
		if !r.OK {
			fail(c, "the reference failed: %s", r.Message)
			continue
		}
		seat, session := tableKeys(c.idx)
		refGot := expect{Outcome: Outcome(r.State), Refusal: Code(r.Refusal), Proof: ProofKind(r.ProofKind), Completed: r.Completed, Damaged: r.Damaged,
			PubSeat: revCount(refRoot, seat) > len(c.seatHist), PubSession: revCount(refRoot, session) > len(c.sessHist)}
		cmpHere := got
		refGot.Owner = got.Owner // the reference does not report it
		if refGot.Refusal == "" {
			// The reference names a refusal only where it publishes
			// nothing; this store always says why a pair stays held.
			cmpHere.Refusal = ""
		}
		for _, d := range m.diffs {
			diffNamed[d]++
		}
		if cmpHere == refGot {
			continue
		}
		if len(m.diffs) == 0 {
			fail(c, "this store %+v, the reference %+v, and no difference is named (step %s)", got, refGot, m.step)
			continue
		}
		for _, d := range m.diffs {
			diffSeen[d]++
		}
		// The difference holds more: free or stopped here only where the
		// reference is too, or on a proof the difference names.
		hereFree := got.Outcome == OutcomeFree || got.Outcome == OutcomeStopped
		refFree := refGot.Outcome == OutcomeFree || refGot.Outcome == OutcomeStopped
		if hereFree && !refFree {
			proofNamed := false
			for _, d := range m.diffs {
				proofNamed = proofNamed || freesOnProof[d]
			}
			if !proofNamed {
				fail(c, "frees (%+v) where the reference holds (%+v); differences %v do not free", got, refGot, m.diffs)
			}
		}
	}
	if failures > 40 {
		t.Errorf("... and %d more failures", failures-40)
	}
	var stepNames []string
	for s := range steps {
		stepNames = append(stepNames, s)
	}
	sort.Strings(stepNames)
	var sb strings.Builder
	for _, s := range stepNames {
		fmt.Fprintf(&sb, " %s=%d", s, steps[s])
	}
	t.Logf("%s: %d cases: %d compared with the reference, %d with the model only; build %v, this store %v, reference %v, total %v",
		slice, len(cases), compared, len(cases)-compared, built.Round(time.Millisecond), hereTime.Round(time.Millisecond), refTime.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	t.Logf("steps:%s", sb.String())
	var dn []string
	for d := range diffNamed {
		dn = append(dn, d)
	}
	sort.Strings(dn)
	for _, d := range dn {
		t.Logf("difference %s: named in %d compared cases, the reference answered differently in %d", d, diffNamed[d], diffSeen[d])
	}
	// Every step of the table is reached.
	for _, want := range []string{"1-free", "1a-decommissioned", "2-foreign", "3-damaged", "4-two-claims", "4-moved-release", "5-owned", "6-owner-live", "6-owner-unknown", "6-owner-invalid", "7-no-evidence", "7-boot-proof", "8-completed", "9-no-unit", "10-held"} {
		if steps[want] == 0 {
			t.Errorf("no case reaches step %s", want)
		}
	}
	// The group stages reach, on this boot, only step 10 (held) or an
	// owner's refusal, and step 7's boot proof on an earlier boot.
	groupSteps := map[string]int{}
	for i, c := range cases {
		if c.group {
			groupSteps[models[i].step]++
		}
	}
	for _, want := range []string{"7-boot-proof", "10-held"} {
		if groupSteps[want] == 0 {
			t.Errorf("no process-group case reaches step %s (group steps %v)", want, groupSteps)
		}
	}
}

// tableSlices is how many slices the product is cut into for an ordinary
// run; tableShortSlices for -short.
const (
	tableSlices      = 24
	tableShortSlices = 120
)

// tableSlice picks the cases a run checks. The product (about 376,000
// cases) takes minutes, so an ordinary run checks one twelfth of it, every
// case whose name hashes to slice TABLE_SLICE (default 0), plus the whole
// supervisor family; -short a 120th. The slice is a hash, not a stride,
// so every slice meets every combination of the inner dimensions.
// TABLE_FULL=1 checks all of it.
func tableSlice(t *testing.T, cases []*tcase) ([]*tcase, string) {
	if os.Getenv("TABLE_FULL") != "" {
		return cases, fmt.Sprintf("the full product of %d", len(cases))
	}
	n := tableSlices
	if testing.Short() {
		n = tableShortSlices
	}
	k := 0
	if v := os.Getenv("TABLE_SLICE"); v != "" {
		var err error
		if k, err = strconv.Atoi(v); err != nil || k < 0 || k >= n {
			t.Fatalf("TABLE_SLICE=%q: want 0..%d", v, n-1)
		}
	}
	var out []*tcase
	for _, c := range cases {
		h := fnv.New32a()
		h.Write([]byte(c.name()))
		if c.family == "supervisor" || int(h.Sum32()%uint32(n)) == k {
			out = append(out, c)
		}
	}
	return out, fmt.Sprintf("slice %d of %d of the product of %d (TABLE_FULL=1 for all, TABLE_SLICE=k for another)", k, n, len(cases))
}

// TestRepairLeavesUnjudgeableTemporaries: fsck --repair removes a named
// temporary only when its writer is proven gone. One whose writer can be
// judged neither live nor gone (its /proc entry unreadable, signal 0
// answering EPERM: the pid exists, its identity cannot be checked) stays,
// reported as a warning, beside one of a gone writer that is removed.
func TestRepairLeavesUnjudgeableTemporaries(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	host := &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{4100: "500"}}
	s := openOn(t, root, host)
	seat, session := testKeys(t)
	claim4100(t, s, seat, session)
	dir := s.KeyDir(seat)
	unjudged := filepath.Join(dir, ".tmp-4100.500."+bootA+"."+initialPIDNS+".0a")
	gone := filepath.Join(dir, ".tmp-999999.1."+bootA+"."+initialPIDNS+".0b")
	for _, p := range []string{unjudged, gone} {
		if err := os.WriteFile(p, []byte("x"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	// The judge cannot read /proc/4100 and signal 0 says EPERM; pid
	// 999999 does not exist.
	s.host = epermFor{unreadableProc{host}, 4100}
	rep, err := s.Check(context.Background(), &CheckOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]Finding{}
	for _, f := range rep.Findings {
		seen[f.Path] = f
	}
	f, ok := seen[unjudged]
	switch {
	case !ok:
		t.Fatalf("no finding for %s: %+v", unjudged, rep.Findings)
	case f.Kind != FindingTemporary || f.Severity != SeverityWarning || f.Repaired || f.Repairable:
		t.Errorf("unjudgeable temporary: %+v; want a warning, not repairable, not repaired", f)
	case !strings.Contains(f.Message, string(hostid.Unknown)):
		t.Errorf("unjudgeable temporary's message %q does not say its writer is unknown", f.Message)
	}
	if _, err := os.Lstat(unjudged); err != nil {
		t.Errorf("repair removed the temporary of a writer it cannot judge: %v", err)
	}
	if g := seen[gone]; !g.Repaired {
		t.Errorf("gone writer's temporary: %+v; want repaired", g)
	}
	if _, err := os.Lstat(gone); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone writer's temporary still there: %v", err)
	}
}

// epermFor is a host on which pid's /proc entry is unreadable and signal 0
// says EPERM, and every other pid is absent.
type epermFor struct {
	unreadableProc
	pid int
}

func (e epermFor) Signal0(pid int) error {
	if pid == e.pid {
		return unix.EPERM
	}
	return unix.ESRCH
}

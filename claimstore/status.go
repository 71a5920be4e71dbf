package claimstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// A classify --all walk leaves a status record of its outcome in the root,
// <root>/status/classify-all-<machine id>.json, replaced by each walk: so
// that monitoring (claimctl metrics, run by a timer; node_exporter's
// textfile collector reads what it writes) can say when the claims of
// this boot were last judged and how that went, long after the walk's own
// output scrolled out of the journal. It lives with the root rather than
// beside the collector because it is a fact about the root: a second root
// on the machine has its own; metrics finds it wherever and however often
// it runs, without being told where; it has the root's owner, modes and
// durability (or the etcd prefix's access control), and on an etcd root
// shared by machines each machine's walk has its own record. It is written
// durably (a power cut must not bring back an older walk as the last one
// after the reboot whose walk matters most) and atomically (a reader never
// sees half of one). It decides nothing: no operation of the store reads
// it.

// ClassifyAllOutcome is how a classify --all walk ended.
type ClassifyAllOutcome string

const (
	// ClassifyAllClean: every pair free or stopped with a proof
	// (Summary.Clean).
	ClassifyAllClean ClassifyAllOutcome = "clean"
	// ClassifyAllHeld: the walk ended, and some pair or orphan key stays
	// held (refused, uncertain, owned).
	ClassifyAllHeld ClassifyAllOutcome = "held"
	// ClassifyAllError: the walk stopped (an unreadable root, a
	// cancellation), or some pair could not be classified.
	ClassifyAllError ClassifyAllOutcome = "error"
)

// ClassifyAllOutcomes lists the outcomes.
var ClassifyAllOutcomes = []ClassifyAllOutcome{ClassifyAllClean, ClassifyAllHeld, ClassifyAllError}

// ClassifyAllStatus is the record a classify --all walk leaves
// (RecordClassifyAll): who walked (machine and boot), when, how it ended
// and its summary's counts.
type ClassifyAllStatus struct {
	MachineID  string    `json:"machineId"`
	BootID     string    `json:"bootId"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	// Duration is how long the walk took, by the monotonic clock (the two
	// times above are wall-clock readings, which a clock stepped at boot
	// can put in any order).
	Duration time.Duration      `json:"durationNanoseconds"`
	Outcome  ClassifyAllOutcome `json:"outcome"`
	// Error is why the walk stopped or failed ("" when it did not).
	Error string `json:"error,omitempty"`
	// The summary's counts (Summary): Uncertain and Refused summed over
	// their reasons and codes.
	Pairs     int `json:"pairs"`
	Free      int `json:"free"`
	Stopped   int `json:"stopped"`
	Uncertain int `json:"uncertain"`
	Refused   int `json:"refused"`
	Owned     int `json:"owned"`
	Errors    int `json:"errors"`
	Orphans   int `json:"orphans"`
	Idle      int `json:"idle"`
}

// classifyAllStatusKind is the record's kind member, and version its
// version: a record of another kind or version is not read as this one.
const (
	classifyAllStatusKind    = "classify-all-status"
	classifyAllStatusVersion = 1
)

func classifyAllStatusName(machine string) string { return "classify-all-" + machine }

// RecordClassifyAll records a classify --all walk that started at started
// and ends now (Options.Now), with the summary and error ClassifyAll
// returned, as this machine's last walk of the root, replacing the one
// before; it returns the record. A dry run should not be recorded: it
// published nothing, so the claims it judged are as they were.
func (s *Store) RecordClassifyAll(ctx context.Context, sum *Summary, walkErr error, started time.Time) (*ClassifyAllStatus, error) {
	sk, ok := s.be.(storage.StatusKeeper)
	if !ok {
		return nil, ErrNoStatus
	}
	machine, err := s.machineID()
	if err != nil {
		return nil, err
	}
	boot, err := s.host.BootID()
	if err != nil {
		return nil, err
	}
	if sum == nil {
		sum = &Summary{}
	}
	now := s.now()
	st := &ClassifyAllStatus{MachineID: machine, BootID: boot, StartedAt: started.UTC(), FinishedAt: now.UTC(), Duration: max(now.Sub(started), 0),
		Pairs: sum.Pairs, Free: sum.Free, Stopped: sum.Stopped, Owned: sum.Owned, Errors: sum.Errors, Orphans: sum.Orphans, Idle: sum.Idle}
	for _, n := range sum.Uncertain {
		st.Uncertain += n
	}
	for _, n := range sum.Refused {
		st.Refused += n
	}
	switch {
	case walkErr != nil:
		st.Outcome, st.Error = ClassifyAllError, walkErr.Error()
	case sum.Errors > 0:
		st.Outcome, st.Error = ClassifyAllError, fmt.Sprintf("%d pairs could not be classified", sum.Errors)
	case sum.Clean():
		st.Outcome = ClassifyAllClean
	default:
		st.Outcome = ClassifyAllHeld
	}
	data, err := marshalStatus(st)
	if err != nil {
		return nil, err
	}
	if err := sk.WriteStatus(ctx, classifyAllStatusName(machine), data); err != nil {
		return nil, err
	}
	return st, nil
}

// LastClassifyAll returns this machine's last recorded classify --all walk
// of the root, or nil and no error when there is none (never walked here,
// or a backend that keeps no status). A record that cannot be read is an
// error naming its path; one that does not decode as a record is a
// *DamageError in a *fs.PathError.
func (s *Store) LastClassifyAll(ctx context.Context) (*ClassifyAllStatus, error) {
	sk, ok := s.be.(storage.StatusKeeper)
	if !ok {
		return nil, nil
	}
	machine, err := s.machineID()
	if err != nil {
		return nil, err
	}
	name := classifyAllStatusName(machine)
	data, err := sk.ReadStatus(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st, err := decodeStatus(data)
	if err != nil {
		return nil, &fs.PathError{Op: "read status", Path: s.Path(storage.StatusDir, name+".json"), Err: &DamageError{Reason: err.Error()}}
	}
	if st.MachineID != machine {
		return nil, &fs.PathError{Op: "read status", Path: s.Path(storage.StatusDir, name+".json"), Err: &DamageError{Reason: fmt.Sprintf("it names machine %q, not this one (%s)", st.MachineID, machine)}}
	}
	return st, nil
}

// statusJSON is the record on disk: the status with its kind and version
// first, one line.
type statusJSON struct {
	Version int    `json:"version"`
	Kind    string `json:"kind"`
	*ClassifyAllStatus
}

func marshalStatus(st *ClassifyAllStatus) ([]byte, error) {
	data, err := json.Marshal(statusJSON{Version: classifyAllStatusVersion, Kind: classifyAllStatusKind, ClassifyAllStatus: st})
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

func decodeStatus(data []byte) (*ClassifyAllStatus, error) {
	var j statusJSON
	j.ClassifyAllStatus = &ClassifyAllStatus{}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&j); err != nil {
		return nil, fmt.Errorf("not a status record: %v", err)
	}
	if j.Kind != classifyAllStatusKind || j.Version != classifyAllStatusVersion {
		return nil, fmt.Errorf("kind %q version %d, not a %s version %d record", j.Kind, j.Version, classifyAllStatusKind, classifyAllStatusVersion)
	}
	st := j.ClassifyAllStatus
	known := false
	for _, o := range ClassifyAllOutcomes {
		known = known || st.Outcome == o
	}
	if !known {
		return nil, fmt.Errorf("outcome %q is none of clean, held, error", st.Outcome)
	}
	if st.FinishedAt.IsZero() || st.Duration < 0 {
		return nil, fmt.Errorf("no finishedAt, or a negative duration (%d ns)", st.Duration)
	}
	return st, nil
}

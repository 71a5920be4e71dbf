package claimstore

import (
	"github.com/claimstore/claimstore/claimstore/storage"
)

// The seam's types live in package storage, so that a backend on another
// engine (claimstore/etcdbackend) implements it without importing this
// package, and this package's tests can run their suite over it. They are
// aliased here so that the store's API is unchanged.
type (
	Loc      = storage.Loc
	Barrier  = storage.Barrier
	Backend  = storage.Backend
	Prepared = storage.Prepared
)

const (
	BarrierTempWritten = storage.BarrierTempWritten
	BarrierTempSynced  = storage.BarrierTempSynced
	BarrierLinked      = storage.BarrierLinked
	BarrierDirSynced   = storage.BarrierDirSynced
	BarrierBetweenKeys = storage.BarrierBetweenKeys
	// MaxRevision is the highest revision number the file name can carry.
	MaxRevision = storage.MaxRevision
)

// Barriers lists the barrier points in the order an operation meets them.
var Barriers = storage.Barriers

// Prune's own barrier points, met besides those of the tombstones it
// publishes: after its tombstones, before it reads every seat again
// (Point names no key); and before each removal or compaction (Point names
// the key and its head).
const (
	BarrierTombstoned   Barrier = "tombstoned"
	BarrierBeforeRemove Barrier = "before-remove"
)

// Loc returns where k's history lives.
func (k Key) Loc() Loc { return Loc{Kind: k.Kind, Hash: k.Hash()} }

// Point is where a barrier hook is called: the barrier, the key and the
// revision being published (for between-keys, the seat key and its new
// revision), and the claim.
type Point struct {
	Barrier  Barrier
	Key      Key
	Revision uint64
	ClaimID  string
}

// BarrierFunc is called at every barrier point. An error stops the
// operation right there and is returned from it, leaving the disk as a
// crash at that point would. A store that overlaps a step's work (see
// Options.Sequential) calls it from more than one goroutine at once, in an
// order that varies within the protocol's constraints: seat linked and
// dir-synced, between-keys, then session linked.
type BarrierFunc func(Point) error

// RevisionName returns the file name of revision n: "r" and ten digits.
func RevisionName(n uint64) string { return storage.RevisionName(n) }

// ParseRevisionName returns the number in a revision file name.
func ParseRevisionName(name string) (uint64, bool) { return storage.ParseRevisionName(name) }

// Package storage is the seam between the claim store and the engine that
// keeps its records: the Backend interface, the revision-location types it
// speaks (Kind, Loc), the barrier points a publish passes, and the revision
// naming shared by every backend.
//
// It imports nothing of the store. The directory backend lives in package
// claimstore (which aliases these types, so its API is unchanged); a backend
// on another engine (claimstore/etcdbackend) imports only this package, so
// that adding one is a folder added, a program that uses only the
// filesystem store does not link another engine's client, and the store's
// own tests can run their behavioural suite over every backend without an
// import cycle.
//
// Contract (every backend): revision n of a key is published exclusively
// (exactly one writer wins each number; the others get an error wrapping
// ErrRevisionExists) and is durable when Publish returns nil; revisions are
// immutable and never removed; Head returns the highest revision by a cost
// independent of the history's length; names under a key that are not
// revisions are reported by List, never taken as revisions. A history is
// dense (1..n) by construction of the protocol; a gap can only come from
// outside it, and the store reads such a key as damaged.
package storage

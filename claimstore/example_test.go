package claimstore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/claimstore/claimstore/claimstore"
)

// A supervisor's whole life with one writer: claim both keys, mark the
// spawn, release with its own proof; then what an operator's classify
// says of the pair.
func Example() {
	dir, err := os.MkdirTemp("", "claimstore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := claimstore.OpenRoot(filepath.Join(dir, "claims"), nil)
	if err != nil {
		log.Fatal(err)
	}
	seat, _ := claimstore.SeatKey("s1", "demo", "/srv/ws")
	session, _ := claimstore.SessionKey("sess-42")
	owner, err := s.Self(1)
	if err != nil {
		log.Fatal(err)
	}

	c, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		log.Fatal(err)
	}
	// A second supervisor is refused while the first one lives.
	_, err = s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: owner})
	if r, ok := err.(*claimstore.Refusal); ok {
		fmt.Println("second acquire:", r.Code)
	}
	// Mark the spawn before spawning the writer.
	if err := s.Advance(context.Background(), c, claimstore.Patch{State: claimstore.Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
		log.Fatal(err)
	}
	p, _ := s.Pair(context.Background(), seat, session)
	fmt.Println("pair:", p.State())
	// The writer stopped; the supervisor knows it and says so.
	if err := s.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "cohort-7")); err != nil {
		log.Fatal(err)
	}
	res, err := s.Classify(context.Background(), seat, session, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("classify:", res.Outcome)
	// Output:
	// second acquire: already-active
	// pair: active
	// classify: free
}

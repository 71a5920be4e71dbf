package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/claimstore/claimstore/claimstore"
)

// keyFlags are --seat, --project, --workspace and --session.
type keyFlags struct {
	seat, project, workspace, session string
}

func (k *keyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.seat, "seat", "", "the seat of the seat key")
	fs.StringVar(&k.project, "project", "", "the project of the seat key")
	fs.StringVar(&k.workspace, "workspace", "", "the workspace of the seat key")
	fs.StringVar(&k.session, "session", "", "the session of the session key")
}

// keyErr turns a *claimstore.KeyError into a usage error naming the flag.
func keyErr(err error) error {
	var ke *claimstore.KeyError
	if errors.As(err, &ke) {
		return usagef("--%s %q: %s", ke.Field, ke.Value, ke.Reason)
	}
	return usageErr{err.Error()}
}

// seatGiven reports whether any seat flag was given; seatKey validates all
// three.
func (k *keyFlags) seatGiven(c *common) bool {
	return c.set["seat"] || c.set["project"] || c.set["workspace"]
}

func (k *keyFlags) seatKey(c *common) (claimstore.Key, error) {
	for _, n := range []string{"seat", "project", "workspace"} {
		if !c.set[n] {
			return claimstore.Key{}, usagef("a seat key needs --seat, --project and --workspace; --%s is missing", n)
		}
	}
	k2, err := claimstore.SeatKey(k.seat, k.project, k.workspace)
	if err != nil {
		return claimstore.Key{}, keyErr(err)
	}
	return k2, nil
}

func (k *keyFlags) sessionKey(c *common) (claimstore.Key, error) {
	if !c.set["session"] {
		return claimstore.Key{}, usagef("--session is missing")
	}
	k2, err := claimstore.SessionKey(k.session)
	if err != nil {
		return claimstore.Key{}, keyErr(err)
	}
	return k2, nil
}

// pair returns both keys; all four flags are required.
func (k *keyFlags) pair(c *common) (seat, session claimstore.Key, err error) {
	if !k.seatGiven(c) && !c.set["session"] {
		return seat, session, usagef("name the pair: --seat S --project P --workspace W --session ID")
	}
	if seat, err = k.seatKey(c); err != nil {
		return
	}
	session, err = k.sessionKey(c)
	return
}

// oneKey returns exactly one key: the seat (three flags) or the session.
func (k *keyFlags) oneKey(c *common) (claimstore.Key, error) {
	switch {
	case k.seatGiven(c) && c.set["session"]:
		return claimstore.Key{}, usagef("name one key: either --seat/--project/--workspace or --session, not both")
	case k.seatGiven(c):
		return k.seatKey(c)
	case c.set["session"]:
		return k.sessionKey(c)
	}
	return claimstore.Key{}, usagef("name a key: --seat S --project P --workspace W, or --session ID")
}

// claimIDFlag validates a --claim value.
func claimIDFlag(flagName, id string) error {
	if !claimstore.ValidClaimID(id) {
		return usagef("--%s %q is not a claim id (\"c\" and 24 lowercase hex digits, as acquire prints)", flagName, id)
	}
	return nil
}

// setFlags collects repeatable --set name=JSONVALUE flags.
type setFlags map[string]any

func (s setFlags) String() string { return "" }

// reservedMembers are the record members the store owns; a --set naming
// one is a usage error before anything is touched. (claimstore checks the
// same, unexported, list when it applies a patch.)
var reservedMembers = map[string]bool{
	"version": true, "kind": true, "claimId": true, "key": true, "revision": true,
	"writtenAt": true, "host": true, "state": true, "proof": true,
}

func (s setFlags) Set(v string) error {
	name, val, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want name=JSONVALUE, e.g. leaf='\"abc\"' or generation=3")
	}
	if reservedMembers[name] {
		return fmt.Errorf("member %q is the store's own and cannot be set", name)
	}
	if strings.ContainsAny(name, "\x00") {
		return fmt.Errorf("member name %q contains NUL", name)
	}
	if !json.Valid([]byte(val)) {
		return fmt.Errorf("value of %q is not JSON: %q (quote strings: %s='\"text\"')", name, val, name)
	}
	if _, dup := s[name]; dup {
		return fmt.Errorf("member %q is set twice", name)
	}
	s[name] = json.RawMessage(val)
	return nil
}

// parseProof parses --proof KIND[:REF].
func parseProof(v string) (*claimstore.Proof, error) {
	kind, ref, _ := strings.Cut(v, ":")
	switch claimstore.ProofKind(kind) {
	case claimstore.ProofCohort, claimstore.ProofBoot, claimstore.ProofNoUnit:
	default:
		return nil, usagef("--proof %q: the kind must be cohortProof, boot or no-unit (KIND or KIND:REF)", v)
	}
	if strings.Contains(v, ":") && ref == "" {
		return nil, usagef("--proof %q: REF after ':' is empty; omit the ':' for a proof without a reference", v)
	}
	return claimstore.NewProof(claimstore.ProofKind(kind), ref), nil
}

package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/quote"
)

// keyFlags are --seat, --project, --workspace and --session.
type keyFlags struct {
	seat, project, workspace, session string
}

func (k *keyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.seat, "seat", "", "the seat `S` of the seat key")
	fs.StringVar(&k.project, "project", "", "the project `P` of the seat key")
	fs.StringVar(&k.workspace, "workspace", "", "the workspace `W` of the seat key")
	fs.StringVar(&k.session, "session", "", "the session `ID` of the session key")
}

// keyErr turns a *claimstore.KeyError into a usage error naming the flag.
func keyErr(err error) error {
	var ke *claimstore.KeyError
	if errors.As(err, &ke) {
		return usagef("--%s %s: %s", ke.Field, quotePrefix(ke.Value), ke.Reason)
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
		return usagef("--%s %s is not a claim id (\"c\" and 24 lowercase hex digits, as acquire prints)", flagName, quotePrefix(id))
	}
	return nil
}

// setFlags collects repeatable --set name=JSONVALUE flags.
type setFlags map[string]any

func (s setFlags) String() string { return "" }

// flagMembers are the record members a dedicated flag sets and validates
// (or the store derives from the keys): a --set naming one would record it
// unchecked — a malformed owner reads as invalid and holds the claim
// forever, a unit name systemd cannot look up is unknown forever, a pair
// naming other keys makes classify refuse the claim's own pair.
var flagMembers = map[string]string{
	"owner":       "use --owner-pid and --incarnation (acquire), which read the owner's start time, boot and PID namespace",
	"unitName":    "use --unit (acquire), which checks it is a systemd unit name",
	"pair":        "the store records it from --seat, --project, --workspace and --session",
	"spawnMarker": "use --spawn-marker (advance), which records it as true; it can never be cleared",
}

func (s setFlags) Set(v string) error {
	name, val, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want name=JSONVALUE, e.g. leaf='\"abc\"' or generation=3")
	}
	if claimstore.ReservedMember(name) {
		return fmt.Errorf("member %q is the store's own and cannot be set", name)
	}
	if use := flagMembers[name]; use != "" {
		return fmt.Errorf("member %q cannot be set with --set: %s", name, use)
	}
	if strings.ContainsAny(name, "\x00") {
		return fmt.Errorf("member name %q contains NUL", name)
	}
	if err := jsonValue(val); err != nil {
		return fmt.Errorf("value of %q: %v (quote strings: %s='\"text\"')", name, err, name)
	}
	if err := exactJSON(val); err != nil {
		return fmt.Errorf("value of %q: %v", name, err)
	}
	if _, dup := s[name]; dup {
		return fmt.Errorf("member %q is set twice", name)
	}
	s[name] = json.RawMessage(val)
	return nil
}

// maxJSONDepth is how deeply a value given on the command line may nest:
// encoding/json, which reads every record back, refuses more than 10,000
// levels.
const maxJSONDepth = 10000

// jsonValue says why val is not a JSON value a record can carry, quoting
// at most a bounded prefix of it: a value may be megabytes long.
func jsonValue(val string) error {
	if d := jsonDepth(val); d > maxJSONDepth {
		return fmt.Errorf("%s nests %d levels deep; at most %d are allowed", quotePrefix(val), d, maxJSONDepth)
	}
	if !json.Valid([]byte(val)) {
		return fmt.Errorf("%s is not a JSON value", quotePrefix(val))
	}
	return nil
}

// jsonDepth is the deepest nesting of arrays and objects in val, strings
// skipped; meaningful only for valid JSON.
func jsonDepth(val string) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(val); i++ {
		c := val[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// quotePrefix quotes a value the user gave for a message: quote.Prefix, the
// one bounded quoting every message of claimctl and its library uses (at
// most a short prefix of the value, and its length).
func quotePrefix(v string) string { return quote.Prefix(v) }

// exactJSON refuses a JSON value that a record cannot carry exactly: the
// reference reads records with JSON.parse, whose numbers are IEEE doubles,
// so 12345678901234567891 would be read back as 12345678901234567000 and
// written back rounded; and text that is not UTF-8 would be read back with
// U+FFFD in place of its bytes.
func exactJSON(val string) error {
	if !utf8.ValidString(val) {
		return fmt.Errorf("%s is not valid UTF-8", quotePrefix(val))
	}
	d := json.NewDecoder(strings.NewReader(val))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err != nil {
			return nil // the end; json.Valid said it is JSON
		}
		if n, ok := tok.(json.Number); ok && !exactNumber(string(n)) {
			return fmt.Errorf("the number %s cannot be carried exactly (the reference reads a record's numbers as IEEE doubles: integers are exact up to 2^53); quote it as a string: '\"%s\"'", n, n)
		}
	}
}

// exactNumber reports whether a JSON number literal survives JSON.parse and
// JSON.stringify with its value: the double nearest to it, written the
// shortest way that reads back as that double (what JSON.stringify and
// strconv's 'g', -1 both write), must be the same decimal number. 0.1 and
// 1e300 survive; 12345678901234567891 (read back as 12345678901234567000)
// and 1e400 (Infinity, written null) do not.
func exactNumber(lit string) bool {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		return false
	}
	mant, exp, _ := strings.Cut(strings.ToLower(lit), "e")
	if e, err := strconv.Atoi(exp); exp != "" && (err != nil || e > 400 || e < -400) {
		// Far outside a double's range: exact only as a zero (and big.Rat
		// would build a huge number to say so).
		return f == 0 && strings.Trim(mant, "-+0.") == ""
	}
	want, ok := new(big.Rat).SetString(lit)
	if !ok {
		return false
	}
	got, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return ok && want.Cmp(got) == 0
}

// parseProof parses --proof KIND[:REF].
func parseProof(v string) (*claimstore.Proof, error) {
	kind, ref, _ := strings.Cut(v, ":")
	switch claimstore.ProofKind(kind) {
	case claimstore.ProofCohort, claimstore.ProofBoot, claimstore.ProofNoUnit:
	default:
		return nil, usagef("--proof %s: the kind must be cohortProof, boot or no-unit (KIND or KIND:REF)", quotePrefix(v))
	}
	switch {
	case strings.Contains(v, ":") && ref == "" && kind == string(claimstore.ProofNoUnit):
		return nil, usagef("--proof %s: REF after ':' is empty; omit the ':' for a proof without a reference", quotePrefix(v))
	case ref == "" && kind != string(claimstore.ProofNoUnit):
		// A cohort proof names the supervisor's evidence and a boot proof
		// names its file: without the reference nothing can be checked.
		what := "the supervisor's cohort proof"
		if kind == string(claimstore.ProofBoot) {
			what = "the boot proof id (boot-<24 hex>, as classify printed it)"
		}
		return nil, usagef("--proof %s: a %s proof needs its REF, %s: --proof %s:REF", quotePrefix(v), kind, what, kind)
	}
	if err := checkProofRef(v, ref); err != nil {
		return nil, err
	}
	return claimstore.NewProof(claimstore.ProofKind(kind), ref), nil
}

package cli

import (
	"encoding/json"

	"github.com/claimstore/claimstore/claimstore"
)

// The JSON documents claimctl writes. Field names are stable: each struct
// here is listed in jsonTypes with a description of every field, the
// lockstep test checks the descriptions against the json tags, and
// REFERENCE.md and `claimctl help json` against both.

type keyJSON struct {
	Kind      string `json:"kind"`
	Seat      string `json:"seat,omitempty"`
	Project   string `json:"project,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	Session   string `json:"session,omitempty"`
	Hash      string `json:"hash"`
	Dir       string `json:"dir,omitempty"`
}

func keyOut(k claimstore.Key, root string) keyJSON {
	j := keyJSON{Kind: string(k.Kind), Seat: k.Seat, Project: k.Project, Workspace: k.Workspace, Session: k.Session, Hash: k.Hash()}
	if root != "" {
		j.Dir = rootJoin(root, string(k.Kind), k.Hash())
	}
	return j
}

type proofJSON struct {
	Kind string  `json:"kind"`
	Ref  *string `json:"ref"`
}

func proofOut(p *claimstore.Proof) *proofJSON {
	if p == nil {
		return nil
	}
	j := &proofJSON{Kind: string(p.Kind)}
	if p.Ref != "" {
		ref := p.Ref
		j.Ref = &ref
	}
	return j
}

type ownerJSON struct {
	PID         int             `json:"pid"`
	Start       string          `json:"start,omitempty"`
	Boot        string          `json:"boot,omitempty"`
	Incarnation json.RawMessage `json:"incarnation,omitempty"`
	PIDNS       string          `json:"pidns,omitempty"`
	State       string          `json:"state"`
	Reason      string          `json:"reason"`
}

type hostJSON struct {
	MachineID   string `json:"machineId"`
	BootID      string `json:"bootId"`
	ThisMachine bool   `json:"thisMachine"`
	ThisBoot    bool   `json:"thisBoot"`
}

type headJSON struct {
	Key           keyJSON    `json:"key"`
	Revision      uint64     `json:"revision"`
	Path          string     `json:"path,omitempty"`
	State         string     `json:"state"`
	RecordedState string     `json:"recordedState,omitempty"`
	Held          bool       `json:"held"`
	ClaimID       string     `json:"claimId,omitempty"`
	WrittenAt     string     `json:"writtenAt,omitempty"`
	Proof         *proofJSON `json:"proof"`
	Host          *hostJSON  `json:"host,omitempty"`
	Owner         *ownerJSON `json:"owner,omitempty"`
	UnitName      string     `json:"unitName,omitempty"`
	SpawnMarker   bool       `json:"spawnMarker"`
	Damage        string     `json:"damage,omitempty"`
	// Decommission: what a decommission record says of the head.
	Decommission *decommissionViewJSON `json:"decommission,omitempty"`
}

type refusalJSON struct {
	Code    string `json:"code"`
	Exit    int    `json:"exit"`
	Reason  string `json:"reason"`
	Hint    string `json:"hint,omitempty"`
	ClaimID string `json:"claimId,omitempty"`
	Cause   string `json:"cause,omitempty"`
}

func refusalOut(r *claimstore.Refusal) *refusalJSON {
	if r == nil {
		return nil
	}
	j := &refusalJSON{Code: string(r.Code), Exit: int(refusalExit[r.Code]), Reason: r.Reason, Hint: r.Hint, ClaimID: r.ClaimID}
	if r.Err != nil {
		j.Cause = r.Err.Error()
	}
	return j
}

type pairJSON struct {
	State   string       `json:"state"`
	Held    bool         `json:"held"`
	ClaimID string       `json:"claimId,omitempty"`
	Why     string       `json:"why"`
	Next    string       `json:"next,omitempty"`
	Refusal *refusalJSON `json:"refusal,omitempty"`
}

type showJSON struct {
	Root    string    `json:"root"`
	Seat    *headJSON `json:"seat,omitempty"`
	Session *headJSON `json:"session,omitempty"`
	Pair    *pairJSON `json:"pair,omitempty"`
}

type revisionJSON struct {
	Revision  uint64          `json:"revision"`
	Path      string          `json:"path"`
	WrittenAt string          `json:"writtenAt,omitempty"`
	State     string          `json:"state"`
	ClaimID   string          `json:"claimId,omitempty"`
	Proof     *proofJSON      `json:"proof"`
	Damage    string          `json:"damage,omitempty"`
	Record    json.RawMessage `json:"record,omitempty"`
}

type logJSON struct {
	Root      string         `json:"root"`
	Key       keyJSON        `json:"key"`
	Revisions []revisionJSON `json:"revisions"`
	Archived  []revisionJSON `json:"archived,omitempty"`
}

type seatJSON struct {
	Seat      string `json:"seat"`
	Project   string `json:"project"`
	Workspace string `json:"workspace"`
}

type claimJSON struct {
	Root        string     `json:"root"`
	ClaimID     string     `json:"claimId"`
	Seat        seatJSON   `json:"seat"`
	Session     string     `json:"session"`
	SeatRev     uint64     `json:"seatRev"`
	SessionRev  uint64     `json:"sessionRev"`
	State       string     `json:"state"`
	Proof       *proofJSON `json:"proof"`
	UnitName    string     `json:"unitName"`
	SpawnMarker bool       `json:"spawnMarker"`
	Owner       *ownerJSON `json:"owner,omitempty"`
}

type unitJSON struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

type bootProofJSON struct {
	ID             string `json:"id"`
	Path           string `json:"path"`
	MachineID      string `json:"machineId"`
	RecordedBootID string `json:"recordedBootId"`
	CurrentBootID  string `json:"currentBootId"`
	ObservedAt     string `json:"observedAt"`
}

type publishedJSON struct {
	Key      keyJSON `json:"key"`
	Revision uint64  `json:"revision"`
	State    string  `json:"state"`
	Path     string  `json:"path"`
}

type classifyJSON struct {
	// processGroup is the writer's process group for text output (a run
	// without a service manager has no unit to name); not in the JSON.
	processGroup int

	Type      string         `json:"type"` // "pair"
	Seat      keyJSON        `json:"seat"`
	Session   keyJSON        `json:"session"`
	ClaimID   string         `json:"claimId,omitempty"`
	Outcome   string         `json:"outcome"`
	Free      bool           `json:"free"`
	DryRun    bool           `json:"dryRun"`
	Owner     *ownerJSON     `json:"owner,omitempty"`
	Unit      *unitJSON      `json:"unit,omitempty"`
	Proof     *proofJSON     `json:"proof"`
	BootProof *bootProofJSON `json:"bootProof,omitempty"`
	// Decommission is the record the claim was freed on (row 1a).
	Decommission *decommissionJSON `json:"decommission,omitempty"`
	Published    []publishedJSON   `json:"published"`
	Completed    bool              `json:"completed"`
	Damaged      bool              `json:"damaged"`
	Needs        string            `json:"needs,omitempty"`
	Why          string            `json:"why"`
	Refusal      *refusalJSON      `json:"refusal,omitempty"`
	Exit         int               `json:"exit"`
}

type orphanJSON struct {
	Type   string   `json:"type"` // "orphan"
	Kind   string   `json:"kind"`
	Dir    string   `json:"dir"`
	Key    *keyJSON `json:"key,omitempty"`
	Reason string   `json:"reason"`
}

type pairErrorJSON struct {
	Type    string  `json:"type"` // "error"
	Seat    keyJSON `json:"seat"`
	Session keyJSON `json:"session"`
	Error   string  `json:"error"`
}

type summaryJSON struct {
	Type           string         `json:"type"` // "summary"
	Root           string         `json:"root"`
	DryRun         bool           `json:"dryRun"`
	Pairs          int            `json:"pairs"`
	Free           int            `json:"free"`
	Stopped        int            `json:"stopped"`
	StoppedByProof map[string]int `json:"stoppedByProof"`
	Uncertain      map[string]int `json:"uncertain"`
	Refused        map[string]int `json:"refused"`
	Owned          int            `json:"owned"`
	Idle           int            `json:"idle"`
	Orphans        int            `json:"orphans"`
	Errors         int            `json:"errors"`
	Clean          bool           `json:"clean"`
	Exit           int            `json:"exit"`
}

type findingJSON struct {
	Path       string `json:"path"`
	Kind       string `json:"kind"`
	Severity   string `json:"severity"`
	Message    string `json:"message"`
	Repairable bool   `json:"repairable"`
	Repaired   bool   `json:"repaired"`
	// RepairFailed: --repair tried and could not; Message says why.
	RepairFailed bool `json:"repairFailed"`
}

type fsckJSON struct {
	Root      string `json:"root"`
	Repair    bool   `json:"repair"`
	Keys      int    `json:"keys"`
	Revisions int    `json:"revisions"`
	Proofs    int    `json:"proofs"`
	Errors    int    `json:"errors"`
	Warnings  int    `json:"warnings"`
	Repaired  int    `json:"repaired"`
	// RepairFailed counts the repairs tried and not done.
	RepairFailed int           `json:"repairFailed"`
	Findings     []findingJSON `json:"findings"`
}

type pruneJSON struct {
	Root            string            `json:"root"`
	DryRun          bool              `json:"dryRun"`
	OlderThan       string            `json:"olderThan"`
	Actions         []pruneActionJSON `json:"actions"`
	Keys            int               `json:"keys"`
	Removed         int               `json:"removed"`
	Compacted       int               `json:"compacted"`
	Revisions       int               `json:"revisions"`
	Kept            int               `json:"kept"`
	Young           int               `json:"young"`
	Archives        []string          `json:"archives"`
	ArchivesRemoved int               `json:"archivesRemoved"`
	Swept           int               `json:"swept"`
	Blocked         string            `json:"blocked,omitempty"`
	FencesCollected int               `json:"fencesCollected"`
	FencesKept      int               `json:"fencesKept"`
	FencesKeptWhy   string            `json:"fencesKeptWhy,omitempty"`
	Error           string            `json:"error,omitempty"`
}

type pruneActionJSON struct {
	Action string  `json:"action"`
	Kind   string  `json:"kind"`
	Key    keyJSON `json:"key"`
	Dir    string  `json:"dir"`
	From   uint64  `json:"from,omitempty"`
	To     uint64  `json:"to,omitempty"`
	Reason string  `json:"reason,omitempty"`
}

type versionJSON struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Module  string `json:"module"`
	Go      string `json:"go"`
}

type listJSON struct {
	Root    string          `json:"root"`
	Entries []listEntryJSON `json:"entries"`
	Pairs   int             `json:"pairs"`
	Orphans int             `json:"orphans"`
	Free    int             `json:"free"`
	Keys    int             `json:"keys"`
}

type listEntryJSON struct {
	Type      string     `json:"type"` // pair, orphan, free
	State     string     `json:"state"`
	Held      bool       `json:"held"`
	ClaimID   string     `json:"claimId,omitempty"`
	Owner     *ownerJSON `json:"owner,omitempty"`
	UnitName  string     `json:"unitName,omitempty"`
	WrittenAt string     `json:"writtenAt,omitempty"`
	Age       *float64   `json:"age,omitempty"`
	Seat      *keyJSON   `json:"seat,omitempty"`
	Session   *keyJSON   `json:"session,omitempty"`
	Dir       string     `json:"dir,omitempty"`
	Why       string     `json:"why"`
	// Decommission: what a decommission record says of the claim.
	Decommission *decommissionViewJSON `json:"decommission,omitempty"`
}

// jsonType is one JSON document or object type, for the docs.
type jsonType struct {
	Name   string // as REFERENCE.md and `claimctl help json` title it
	Value  any    // a zero value of the struct
	Where  string // where it appears
	Fields map[string]string
}

// jsonTypes documents every field of every JSON document claimctl writes.
var jsonTypes = []jsonType{
	{"show", showJSON{}, "`show --json`", map[string]string{
		"root":    "the claim root read",
		"seat":    "the seat key's head (a `head`), absent when only a session was asked for",
		"session": "the session key's head (a `head`), absent when only a seat was asked for",
		"pair":    "the pair (a `pair`), when both keys were asked for",
	}},
	{"head", headJSON{}, "`show`: one key's head revision", map[string]string{
		"key":           "the key (a `key`)",
		"revision":      "the head revision number; 0 when the key has no revisions",
		"path":          "the head revision's file",
		"state":         "the state the key reads as: `stopped` when free, `uncertain` when damaged or stopped without a proof",
		"recordedState": "the state the head revision records, when it is valid",
		"held":          "whether the key is held (anything but absent or stopped with a proof)",
		"claimId":       "the claim at the head",
		"writtenAt":     "when the head was written (RFC 3339 UTC; informational)",
		"proof":         "the head's proof (a `proof`), or null",
		"host":          "the machine and boot the claim was taken on (a `host`)",
		"decommission":  "what a decommission record says of the head (a `decommissionState`): freed on one, or its machine decommissioned",
		"owner":         "the recorded owner and its state now (an `owner`)",
		"unitName":      "the systemd unit the claim's writer runs in",
		"spawnMarker":   "whether the record says a writer may have been spawned",
		"damage":        "why the head revision is damaged; the key then reads as uncertain",
	}},
	{"key", keyJSON{}, "keys everywhere", map[string]string{
		"kind":      "`seat` or `session`",
		"seat":      "the seat (seat keys)",
		"project":   "the project (seat keys)",
		"workspace": "the workspace (seat keys)",
		"session":   "the session id (session keys)",
		"hash":      "the key directory's name: 32 hex digits of SHA-256 over the key",
		"dir":       "the key directory under the root",
	}},
	{"proof", proofJSON{}, "revisions and classify results", map[string]string{
		"kind": "`cohortProof`, `boot`, `no-unit`, or `decommissioned` (classify only: `ref` is the decommission record's id)",
		"ref":  "what the proof names (a boot proof id for `boot`), or null",
	}},
	{"owner", ownerJSON{}, "`show`, `classify`, `acquire`", map[string]string{
		"pid":         "the owner's pid",
		"start":       "its start time in clock ticks since boot (field 22 of /proc/PID/stat)",
		"boot":        "the boot id it ran under",
		"incarnation": "the supervisor's own counter, any JSON value",
		"pidns":       "the PID namespace the pid counts in, `\"<dev>:<ino>\"` of `/proc/PID/ns/pid`; absent for owners recorded without one (judged as the initial namespace's)",
		"state":       "`live`, `gone`, `unknown` or `invalid` (hostid); only `gone` lets classify go on",
		"reason":      "why, in words",
	}},
	{"host", hostJSON{}, "`show`", map[string]string{
		"machineId":   "the machine id the claim was taken on",
		"bootId":      "the boot id it was taken under",
		"thisMachine": "whether that is this machine",
		"thisBoot":    "whether that is this boot",
	}},
	{"pair", pairJSON{}, "`show`", map[string]string{
		"state":   "the pair state: the more conservative of the two keys' states",
		"held":    "whether either key is held",
		"claimId": "the claim holding the pair, when one does",
		"why":     "why the pair is held (or that it is free), in words",
		"next":    "what an operator can do next",
		"refusal": "the refusal a new acquire would get (a `refusal`)",
	}},
	{"refusal", refusalJSON{}, "`show`, `classify`", map[string]string{
		"code":    "the refusal code: `already-active`, `unsafe-replacement` or `foreign-host`",
		"exit":    "the exit code of that refusal",
		"reason":  "what the store saw",
		"hint":    "what to do",
		"claimId": "the claim holding the keys, when known",
		"cause":   "the underlying error (a damaged revision, an I/O error)",
	}},
	{"log", logJSON{}, "`log --json` (with --follow, the first line)", map[string]string{
		"root":      "the claim root read",
		"key":       "the key (a `key`)",
		"revisions": "the revisions selected (every one without -n, --since, --until), oldest first, newest first with --reverse (each a `revision`)",
		"archived":  "present when the root's archive holds any of the key's history: the revisions `claimctl prune` removed, in the same order (each a `revision` whose path is its archive segment); --since and --until select them too",
	}},
	{"revision", revisionJSON{}, "`log`; with --follow --json, each line after the first", map[string]string{
		"revision":  "the revision number",
		"path":      "its file (an archived revision's: its archive segment)",
		"writtenAt": "when it was written (RFC 3339 UTC; informational)",
		"state":     "the state it records, or `damaged`",
		"claimId":   "its claim",
		"proof":     "its proof (a `proof`), or null",
		"damage":    "why it is damaged",
		"record":    "with `--full`: the whole record as stored (or null when unreadable)",
	}},
	{"claim", claimJSON{}, "`acquire`, `advance`, `release`", map[string]string{
		"root":        "the claim root written",
		"claimId":     "the claim id; pass it as `--claim`",
		"seat":        "the seat key (a `claimSeat`)",
		"session":     "the session id",
		"seatRev":     "the claim's revision on the seat key; pass it as `--seat-rev`",
		"sessionRev":  "the claim's revision on the session key; pass it as `--session-rev`",
		"state":       "the state published",
		"proof":       "the proof published (a `proof`), or null",
		"unitName":    "the systemd unit the claim's writer runs in",
		"spawnMarker": "whether the record says a writer may have been spawned",
		"owner":       "the recorded owner (an `owner`; `state` and `reason` judged now)",
	}},
	{"claimSeat", seatJSON{}, "`claim`: the seat key of a claim", map[string]string{
		"seat":      "the seat",
		"project":   "the project",
		"workspace": "the workspace",
	}},
	{"classify", classifyJSON{}, "`classify --json`; one NDJSON line per pair with `--all`", map[string]string{
		"type":         "`pair`",
		"seat":         "the seat key (a `key`)",
		"session":      "the session key (a `key`)",
		"claimId":      "the claim judged",
		"outcome":      "`free`, `stopped`, `uncertain`, `stopping`, `active` or `reserved`: what the pair is after classification",
		"free":         "whether the pair is provably free now (`free` or `stopped`)",
		"dryRun":       "whether nothing was published (`--dry-run`)",
		"owner":        "the recorded owner's state (an `owner`)",
		"unit":         "the claim's unit as the service manager answered (a `unit`)",
		"proof":        "the proof of a `stopped` outcome (a `proof`), or null",
		"bootProof":    "the boot proof issued (a `bootProof`)",
		"decommission": "the decommission record the claim was freed on (a `decommission`)",
		"published":    "the revisions published, or with `--dry-run` that would be (each a `published`)",
		"completed":    "a release cut between the keys was completed",
		"damaged":      "a head is damaged",
		"needs":        "`boot-proof` when a claim from an earlier boot needs a boot proof that was not issued",
		"why":          "the outcome in words, with what to do next",
		"refusal":      "why the pair stays held (a `refusal`)",
		"exit":         "the exit code this pair alone gives",
	}},
	{"decommission", decommissionJSON{}, "`decommission --json`; `classify` (the record a pair was freed on)", map[string]string{
		"id":         "the record's id, `decommission-<machine id>-<n>`: a `decommissioned` proof's `ref`",
		"path":       "the record's file (on etcd, its key under the prefix)",
		"kind":       "`decommission`, or `decommission-lift` for a lift",
		"machineId":  "the machine decommissioned",
		"seq":        "the record's number in the machine's history (1, 2, …); the highest is the machine's state",
		"lastBootId": "the boot of the machine's newest head when the record was written (informational)",
		"bootIds":    "every boot of the machine in the root's heads then: exactly the boots whose claims it frees (empty for a lift)",
		"heldClaims": "how many of the machine's claims were held then",
		"evidence":   "`powered-off`, `wiped` or `instance-deleted` (a decommission)",
		"reason":     "the operator's reason",
		"lifts":      "for a lift, the decommission record it ends",
		"assertedBy": "who asserted it (an `asserter`)",
		"assertedAt": "when (RFC 3339 UTC)",
	}},
	{"asserter", asserterJSON{}, "`decommission`", map[string]string{
		"uid":       "the real uid of the process that wrote the record",
		"user":      "that uid's user name, empty when the user database has none",
		"hostname":  "the host name of the machine it ran on",
		"machineId": "that machine's id",
	}},
	{"decommissionState", decommissionViewJSON{}, "`show` (`head`), `list` (`listEntry`)", map[string]string{
		"state":  "`freed` (stopped on the record), `covered` (held; classify frees it), `not-covered` (held; its machine is decommissioned, but not for this boot) or `lifted` (held; its machine's decommission was lifted)",
		"record": "the record's id",
	}},
	{"unit", unitJSON{}, "`classify`", map[string]string{
		"name":   "the unit name as recorded",
		"state":  "`absent`, `present` or `unknown` (no answer: treated as present)",
		"detail": "the manager's states, or why there was no answer",
	}},
	{"bootProof", bootProofJSON{}, "`classify`", map[string]string{
		"id":             "the proof id a `boot` proof's `ref` names",
		"path":           "the proof file",
		"machineId":      "this machine",
		"recordedBootId": "the boot the claim was taken under",
		"currentBootId":  "the boot observed now",
		"observedAt":     "when (RFC 3339 UTC)",
	}},
	{"published", publishedJSON{}, "`classify`", map[string]string{
		"key":      "the key (a `key`)",
		"revision": "the revision number",
		"state":    "the state published",
		"path":     "the revision file",
	}},
	{"orphan", orphanJSON{}, "`classify --all`: a held key whose partner cannot be found", map[string]string{
		"type":   "`orphan`",
		"kind":   "the key's kind",
		"dir":    "the key directory",
		"key":    "the key (a `key`), when readable",
		"reason": "why it could not be paired, and what to do",
	}},
	{"pairError", pairErrorJSON{}, "`classify --all`: a pair that could not be classified", map[string]string{
		"type":    "`error`",
		"seat":    "the seat key (a `key`)",
		"session": "the session key (a `key`)",
		"error":   "the error, with its path",
	}},
	{"summary", summaryJSON{}, "`classify --all`: the last NDJSON line", map[string]string{
		"type":           "`summary`",
		"root":           "the claim root walked",
		"dryRun":         "whether nothing was published",
		"pairs":          "pairs classified",
		"free":           "pairs free before and after",
		"stopped":        "pairs stopped with a proof by this walk",
		"stoppedByProof": "those, by proof kind",
		"uncertain":      "pairs left uncertain or stopping, by reason",
		"refused":        "pairs left held by a refusal, by code",
		"owned":          "pairs owned by the caller (never set by claimctl)",
		"idle":           "free keys that belong to no pair (released history)",
		"orphans":        "held keys whose partner cannot be found",
		"errors":         "pairs that could not be classified",
		"clean":          "whether every pair ended free or stopped with a proof",
		"exit":           "the exit code of the walk",
	}},
	{"fsck", fsckJSON{}, "`fsck --json`", map[string]string{
		"root":         "the claim root checked",
		"repair":       "whether `--repair` was given",
		"keys":         "key directories checked",
		"revisions":    "revisions checked",
		"proofs":       "proof files checked",
		"errors":       "findings of severity error",
		"warnings":     "findings of severity warning",
		"repaired":     "findings repaired",
		"repairFailed": "repairs tried and not done (each finding says why; exit 1)",
		"findings":     "every finding (each a `finding`)",
	}},
	{"finding", findingJSON{}, "`fsck`", map[string]string{
		"path":         "the file or directory",
		"kind":         "`damaged-revision`, `gap`, `key-mismatch`, `foreign-file`, `unsafe-path`, `temporary`, `proof` or `unreadable`",
		"severity":     "`error` (the root breaks the format; exit 7) or `warning`",
		"message":      "what is wrong and what to do",
		"repairable":   "whether `--repair` may act (temporaries of writers proven gone)",
		"repaired":     "whether `--repair` did",
		"repairFailed": "whether `--repair` tried and could not (the message says why; exit 1)",
	}},
	{"prune", pruneJSON{}, "`prune --json`", map[string]string{
		"root":            "the claim root pruned",
		"dryRun":          "whether nothing was changed (`--dry-run`)",
		"olderThan":       "the retention time, as given",
		"keys":            "keys walked",
		"removed":         "keys removed whole (sessions)",
		"compacted":       "keys compacted below a base (seats)",
		"revisions":       "revisions removed, by both",
		"kept":            "keys old enough but kept (each a `kept` action with its reason)",
		"young":           "free keys not yet old enough",
		"archives":        "the archive segments written",
		"archivesRemoved": "archive segments removed by their retention",
		"swept":           "key directories an earlier, interrupted prune left half removed, finished",
		"blocked":         "why no session was removed, when none could be",
		"fencesCollected": "etcd: fence keys of lost requests removed (with `--dry-run`: that would be), none of which a request still in flight can need",
		"fencesKept":      "etcd: fence keys left (an older claimstore's; the current epoch's while the cluster is out of space)",
		"fencesKeptWhy":   "why they are left, when any are",
		"actions":         "every action (each a `pruneAction`), in the order taken; written as each is taken, so that a prune of a year's history holds none of them",
		"error":           "why the prune stopped before it finished (exit 1), when it had already acted: the actions and counts are what it did",
	}},
	{"pruneAction", pruneActionJSON{}, "`prune --json`", map[string]string{
		"action": "`removed`, `compacted` or `kept`",
		"kind":   "`seat` or `session`",
		"key":    "the key (a `key`)",
		"dir":    "its directory (or key prefix)",
		"from":   "the lowest revision removed",
		"to":     "the highest revision removed (a compacted key keeps those above)",
		"reason": "why a key was kept",
	}},
	{"version", versionJSON{}, "`version --json`", map[string]string{
		"version": "claimctl's version",
		"commit":  "the commit it was built from (`+dirty` when the checkout had changes; empty when unknown)",
		"module":  "the Go module",
		"go":      "the Go version it was built with",
	}},
	{"error", errorJSON{}, "`--json`: the document a failing command writes to standard output", map[string]string{
		"error": "the failure (an `errorBody`)",
	}},
	{"list", listJSON{}, "`list --json`", map[string]string{
		"root":    "the claim root read",
		"entries": "the lines, sorted as the text is (each a `listEntry`); only those in `--state` when given",
		"pairs":   "held pairs listed",
		"orphans": "held keys listed without a partner (or unreadable)",
		"free":    "free keys listed (`--all`)",
		"keys":    "key directories read",
	}},
	{"listEntry", listEntryJSON{}, "`list`: one held pair, orphan key or (with `--all`) free key", map[string]string{
		"type":         "`pair`, `orphan` or `free`",
		"state":        "the state it reads as (a pair: the more conservative key's), or `damaged`",
		"held":         "whether it is held",
		"claimId":      "the claim at the head",
		"owner":        "the recorded owner, judged now (an `owner`)",
		"unitName":     "the claim's systemd unit",
		"writtenAt":    "when the head (the seat's, for a pair) was written (informational)",
		"age":          "seconds since `writtenAt`, when it parses (informational)",
		"seat":         "the seat key (a `key`)",
		"session":      "the session key (a `key`)",
		"dir":          "the key directory, for an orphan or free key",
		"why":          "why it is held, and what to do",
		"decommission": "what a decommission record says of the claim (a `decommissionState`)",
	}},
	{"errorBody", errorBodyJSON{}, "`error`", map[string]string{
		"exit":        "the exit code",
		"kind":        "`usage`, `refusal` or `error`",
		"code":        "the refusal code, for a refusal",
		"message":     "the whole message",
		"reason":      "what the store saw, for a refusal",
		"hint":        "what to do, for a refusal",
		"claimId":     "the claim holding the keys, when known",
		"keys":        "the keys involved (each a `key`)",
		"command":     "the command that failed",
		"root":        "the claim root, when known",
		"cause":       "the underlying error, for a refusal that has one",
		"published":   "a step cut between its keys: the revision it published (a `published`: the seat's)",
		"unpublished": "a step cut between its keys: the revision it did not publish (a `published`: the session's, with the number it will have)",
		"finish":      "a step cut between its keys: the command that finishes it",
	}},
}

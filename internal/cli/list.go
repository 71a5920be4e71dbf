package cli

import (
	"flag"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid"
)

var listCmd = &command{
	name:    "list",
	aliases: []string{"ls"},
	args:    "[--root DIR|URL] " + connSyn + " [--json] [--all] [--state STATE]",
	summary: "List what is held under the root: every held pair and orphan key, one line each.",
	doc: `
One line per held pair (both keys' heads belong to one claim) and per held
key whose partner cannot be found (orphan): the state the pair reads as, the
claim, its owner judged now (live, gone, unknown, invalid), its unit, the age
of its head revision (from writtenAt, informational), and why it is held.
Lines are sorted by state, most conservative first, then by key; a count line
ends the list. --all lists free keys too; --state shows only lines in that
state (uncertain, stopping, active, reserved or, with --all, stopped).

list reads each key's head revision, never a whole history: a gap below a
held head is fsck's to find. It only reads. Exit 0, or 1 when the root
cannot be read.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		all := fs.Bool("all", false, "list free keys too")
		state := fs.String("state", "", "show only lines in `STATE`")
		return func(e *env) error {
			if c.set["state"] {
				st := claimstore.State(*state)
				if !st.Valid() {
					return usagef("--state %s: want uncertain, stopping, active, reserved or stopped", quotePrefix(*state))
				}
				if st == claimstore.Stopped && !*all {
					return usagef("--state stopped lists free keys: add --all")
				}
			}
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			if err := e.checkMachineID(); err != nil {
				return err
			}
			e.rootMissing("list", rc)
			if err := checkClaimRoot(rc); err != nil {
				return err
			}
			s, err := e.openStore(rc, false)
			if err != nil {
				return err
			}
			out, err := listRoot(e, s, *all, time.Now())
			if err != nil {
				return err
			}
			if c.set["state"] {
				kept := []listEntryJSON{}
				for _, x := range out.Entries {
					if x.State == *state {
						kept = append(kept, x)
					}
				}
				out.Entries = kept
			}
			if c.json {
				writeJSON(e.stdout, out)
				return nil
			}
			printList(e, out)
			return nil
		}
	},
}

// listRoot reads every key's head and pairs them as the store pairs them
// (Store.Walk: by the pair member a record names, else by claim id).
func listRoot(e *env, s *claimstore.Store, all bool, now time.Time) (*listJSON, error) {
	out := &listJSON{Root: s.Root(), Entries: []listEntryJSON{}}
	// Without --all only held keys are shown: a free key's record is not
	// kept (a held pair's free partner is shown by its key alone).
	w, err := s.Walk(e.ctx, &claimstore.WalkOptions{KeepIdle: all, SlimFree: !all, Progress: func(done, total int) {
		e.progress("list", "keys read", done, total)
	}})
	e.progressDone()
	if err != nil {
		return nil, err
	}
	out.Keys = w.Keys
	judge := ownerCache{s: s, seen: map[string]ownerJSON{}, decom: newDecomCache(e.ctx, s)}
	for _, p := range w.Pairs {
		switch {
		case p.SeatInfo.Held() || p.SessionInfo.Held():
			out.add(pairEntry(s, &judge, p.SeatInfo.Head, p.SessionInfo.Head, now))
		case all:
			for _, in := range []*claimstore.KeyInfo{p.SeatInfo, p.SessionInfo} {
				out.add(idleEntry(s, in, now))
			}
		}
	}
	for _, o := range w.Orphans {
		if o.Info.Head != nil {
			out.add(heldKeyEntry(s, &judge, o.Info.Head, now))
			continue
		}
		out.add(listEntryJSON{Type: "orphan", State: "damaged", Held: true, Dir: s.Path(string(o.Info.Loc.Kind), o.Info.Loc.Hash), Why: o.Reason})
	}
	for _, in := range w.IdleKeys {
		out.add(idleEntry(s, in, now))
	}
	sort.SliceStable(out.Entries, func(i, j int) bool {
		a, b := out.Entries[i], out.Entries[j]
		if ra, rb := stateRank(a.State), stateRank(b.State); ra != rb {
			return ra < rb
		}
		return a.sortKey() < b.sortKey()
	})
	return out, nil
}

// idleEntry is a free key of --all.
func idleEntry(s *claimstore.Store, in *claimstore.KeyInfo, now time.Time) listEntryJSON {
	if in.Head == nil || in.Head.N == 0 {
		// An empty key directory (a writer stopped before its first
		// revision): free, with no key to name.
		return listEntryJSON{Type: "free", State: string(claimstore.Stopped), Dir: s.Path(string(in.Loc.Kind), in.Loc.Hash), Why: "free: no revisions"}
	}
	return freeEntry(s, in.Head, now)
}

func (l *listJSON) add(x listEntryJSON) {
	l.Entries = append(l.Entries, x)
	switch x.Type {
	case "pair":
		l.Pairs++
	case "orphan":
		l.Orphans++
	default:
		l.Free++
	}
}

func (x listEntryJSON) sortKey() string {
	var b strings.Builder
	for _, k := range []*keyJSON{x.Seat, x.Session} {
		if k != nil {
			b.WriteString(describeKeyJSON(*k))
		}
		b.WriteByte(0)
	}
	return b.String() + x.Dir
}

// stateRank orders states most conservative first.
func stateRank(s string) int {
	for i, st := range claimstore.States {
		if string(st) == s {
			return i
		}
	}
	return -1 // damaged, unreadable: first
}

// ownerCache judges each recorded owner once per listing: 10,000 claims of
// one supervisor are one /proc lookup.
type ownerCache struct {
	s     *claimstore.Store
	seen  map[string]ownerJSON
	decom *decomCache // each machine's decommission record, read once
}

func (c *ownerCache) judge(r *claimstore.Record) ownerJSON {
	raw, _ := r.Fields.Get("owner")
	key := string(raw) + "\x00" + r.Host.MachineID + "\x00" + r.Host.BootID
	if o, ok := c.seen[key]; ok {
		return o
	}
	o := judgeOwner(c.s, r)
	c.seen[key] = o
	return o
}

func age(writtenAt string, now time.Time) (float64, bool) {
	t, err := time.Parse(time.RFC3339Nano, writtenAt)
	if err != nil {
		return 0, false
	}
	return now.Sub(t).Seconds(), true
}

func entryFrom(s *claimstore.Store, judge *ownerCache, h *claimstore.Head, now time.Time) listEntryJSON {
	x := listEntryJSON{State: string(h.State()), Held: h.Held()}
	if h.Record == nil {
		x.State = "damaged"
		if h.Damage != nil {
			x.Why = "damaged: " + h.Damage.Error() + "; run `claimctl fsck`"
		}
		return x
	}
	r := h.Record
	x.ClaimID, x.UnitName, x.WrittenAt = r.ClaimID, r.UnitName(), r.WrittenAt
	if a, ok := age(r.WrittenAt, now); ok {
		x.Age = &a
	}
	if judge != nil {
		o := judge.judge(r)
		x.Owner = &o
		x.Why = heldWhy(s, r, h.State(), o)
		x.Decommission = judge.decom.view(r)
		if x.Decommission != nil {
			x.Why = decommissionWords(x.Decommission, r.Host.MachineID)
		}
	} else if v := (&decomCache{s: s}).view(r); v != nil && v.State == claimstore.DecommissionFreed {
		// Freed on a record: no record need be read to say so.
		x.Decommission = v
	}
	return x
}

// heldWhy says in a few words why a claim holds its keys.
func heldWhy(s *claimstore.Store, r *claimstore.Record, st claimstore.State, o ownerJSON) string {
	mine, err := s.Host().MachineID()
	switch {
	case err != nil || mine != r.Host.MachineID:
		return fmt.Sprintf("taken on another machine (%s): classify or release it there", r.Host.MachineID)
	case st == claimstore.Stopped:
		return "stopped without a proof: release it with one"
	case st == claimstore.Uncertain || st == claimstore.Stopping:
		return "writer may still run: stop it, then release with a proof"
	case o.State == string(hostid.Live):
		return "owner live"
	case o.State == string(hostid.Gone):
		return "owner gone: run `claimctl classify` on the pair"
	}
	return fmt.Sprintf("owner %s: %s", o.State, o.Reason)
}

func pairEntry(s *claimstore.Store, judge *ownerCache, seat, session *claimstore.Head, now time.Time) listEntryJSON {
	// The claim's latest record: the seat's, unless only the session holds
	// (every step publishes on the seat first).
	latest := seat
	if !seat.Held() && session.Held() {
		latest = session
	}
	x := entryFrom(s, judge, latest, now)
	x.Type = "pair"
	x.State = string(claimstore.Conservative(seat.State(), session.State()))
	sk, ss := keyOut(seat.Key, s.Root()), keyOut(session.Key, s.Root())
	x.Seat, x.Session = &sk, &ss
	if latest.Record != nil {
		o := judge.judge(latest.Record)
		x.Why = heldWhy(s, latest.Record, claimstore.State(x.State), o)
		if x.Decommission != nil {
			x.Why = decommissionWords(x.Decommission, latest.Record.Host.MachineID)
		}
		if other := map[bool]*claimstore.Head{true: session, false: seat}[latest == seat]; !other.Held() {
			// One key holds, its partner does not: the claim's acquire
			// reached only the seat, or its release only the seat.
			what := "a half-done acquire: " + other.Key.String() + " has not received the claim"
			if latest != seat {
				what = "a half-done release: " + seat.Key.String() + " is released, " + session.Key.String() + " not yet"
			}
			x.Why = what + "; " + x.Why
		}
	}
	return x
}

func heldKeyEntry(s *claimstore.Store, judge *ownerCache, h *claimstore.Head, now time.Time) listEntryJSON {
	x := entryFrom(s, judge, h, now)
	x.Type = "orphan"
	k := keyOut(h.Key, s.Root())
	if h.Key.Kind == claimstore.KindSeat {
		x.Seat = &k
	} else {
		x.Session = &k
	}
	x.Dir = k.Dir
	if h.Record != nil {
		x.Why = "no partner key holds claim " + h.Record.ClaimID + " (a half-done acquire or release): " + x.Why + "; `claimctl show --claim " + h.Record.ClaimID + "` shows its pair"
	}
	return x
}

func freeEntry(s *claimstore.Store, h *claimstore.Head, now time.Time) listEntryJSON {
	x := entryFrom(s, nil, h, now)
	x.Type, x.Why = "free", "free"
	if x.Decommission != nil {
		x.Why = "free: " + decommissionWords(x.Decommission, "")
	}
	k := keyOut(h.Key, s.Root())
	if h.Key.Kind == claimstore.KindSeat {
		x.Seat = &k
	} else {
		x.Session = &k
	}
	x.Dir = k.Dir
	return x
}

func printList(e *env, out *listJSON) {
	if len(out.Entries) == 0 {
		// No table to head: say so in words.
		fmt.Fprintf(e.stdout, "nothing held: 0 held pairs, 0 orphan keys")
		if out.Free > 0 {
			fmt.Fprintf(e.stdout, ", %d free keys", out.Free)
		}
		fmt.Fprintf(e.stdout, " listed (%d keys under %s)\n", out.Keys, esc(out.Root))
		return
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tCLAIM\tOWNER\tUNIT\tAGE\tKEYS\tWHY")
	for _, x := range out.Entries {
		owner := "-"
		if x.Owner != nil {
			owner = fmt.Sprintf("%d %s", x.Owner.PID, x.Owner.State)
		}
		ageS := "-"
		if x.Age != nil {
			ageS = humanAge(*x.Age)
		}
		var keys []string
		for _, k := range []*keyJSON{x.Seat, x.Session} {
			if k != nil {
				keys = append(keys, describeKeyJSON(*k))
			}
		}
		if len(keys) == 0 {
			keys = append(keys, esc(x.Dir))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.State, orDash(x.ClaimID), owner, orDash(esc(x.UnitName)), ageS, strings.Join(keys, " + "), escText(x.Why))
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "\n%d held pairs, %d orphan keys", out.Pairs, out.Orphans)
	if out.Free > 0 {
		fmt.Fprintf(e.stdout, ", %d free keys", out.Free)
	}
	fmt.Fprintf(e.stdout, " listed (%d keys under %s)\n", out.Keys, esc(out.Root))
}

// humanAge is a duration in its largest unit: 45s, 12m, 3h, 9d.
func humanAge(sec float64) string {
	switch {
	case sec < 0:
		return "future"
	case sec < 120:
		return fmt.Sprintf("%ds", int(sec))
	case sec < 2*3600:
		return fmt.Sprintf("%dm", int(sec/60))
	case sec < 2*86400:
		return fmt.Sprintf("%dh", int(sec/3600))
	}
	return fmt.Sprintf("%dd", int(sec/86400))
}

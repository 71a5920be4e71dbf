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
					return usagef("--state %q: want uncertain, stopping, active, reserved or stopped", *state)
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

// listRoot reads every key's head and pairs them by claim.
func listRoot(e *env, s *claimstore.Store, all bool, now time.Time) (*listJSON, error) {
	out := &listJSON{Root: s.Root(), Entries: []listEntryJSON{}}
	be := s.Backend()
	type keyHead struct {
		loc   claimstore.Loc
		head  *claimstore.Head // nil when the key cannot be read
		err   string
		empty bool
	}
	var heads [2][]keyHead
	// Both kinds are listed first: the total is then known, and progress
	// shows done/total and a rate.
	var allLocs [2][]claimstore.Loc
	total := 0
	for i, kind := range []claimstore.Kind{claimstore.KindSeat, claimstore.KindSession} {
		locs, err := be.Locs(bg, kind)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", s.Path(string(kind)), err)
		}
		allLocs[i] = locs
		total += len(locs)
	}
	for i := range allLocs {
		for _, loc := range allLocs[i] {
			kh := keyHead{loc: loc}
			n, data, err := be.Head(bg, loc)
			var k claimstore.Key
			ok := false
			switch {
			case err != nil:
				kh.err = err.Error()
			case n == 0:
				// An empty key directory (a writer stopped before its first
				// revision): free, with no key to name.
				kh.empty = true
			default:
				if k, ok = keyOfData(data, loc); !ok {
					kh.err = fmt.Sprintf("its head revision %d does not name the key its directory is named after", n)
				}
			}
			if ok {
				h, err := s.Head(bg, k)
				if err != nil {
					kh.err = err.Error()
				} else {
					kh.head = h
				}
			}
			heads[i] = append(heads[i], kh)
			out.Keys++
			e.progress("list", "keys read", out.Keys, total)
		}
	}
	e.progressDone()
	judge := ownerCache{host: s.Host(), seen: map[string]ownerJSON{}}
	sessions := map[string]*claimstore.Head{} // held session heads by claim
	used := map[claimstore.Loc]bool{}
	for _, kh := range heads[1] {
		if h := kh.head; h != nil && h.Held() && h.Record != nil {
			sessions[h.Record.ClaimID] = h
		}
	}
	for _, kh := range heads[0] {
		h := kh.head
		switch {
		case kh.empty:
			if all {
				out.add(listEntryJSON{Type: "free", State: string(claimstore.Stopped), Dir: s.Path(string(kh.loc.Kind), kh.loc.Hash), Why: "free: no revisions"})
			}
		case h == nil:
			out.add(orphanEntry(s, kh.loc, kh.err))
		case !h.Held():
			if all {
				out.add(freeEntry(s, h, now))
			}
		case h.Record != nil && sessions[h.Record.ClaimID] != nil:
			p := sessions[h.Record.ClaimID]
			used[p.Key.Loc()] = true
			out.add(pairEntry(s, &judge, h, p, now))
		default:
			out.add(heldKeyEntry(s, &judge, h, now))
		}
	}
	for _, kh := range heads[1] {
		h := kh.head
		switch {
		case kh.empty:
			if all {
				out.add(listEntryJSON{Type: "free", State: string(claimstore.Stopped), Dir: s.Path(string(kh.loc.Kind), kh.loc.Hash), Why: "free: no revisions"})
			}
		case h == nil:
			out.add(orphanEntry(s, kh.loc, kh.err))
		case used[h.Key.Loc()]:
		case !h.Held():
			if all {
				out.add(freeEntry(s, h, now))
			}
		default:
			out.add(heldKeyEntry(s, &judge, h, now))
		}
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
	host hostid.Host
	seen map[string]ownerJSON
}

func (c *ownerCache) judge(r *claimstore.Record) ownerJSON {
	raw, _ := r.Fields.Get("owner")
	key := string(raw) + "\x00" + r.Host.MachineID + "\x00" + r.Host.BootID
	if o, ok := c.seen[key]; ok {
		return o
	}
	o := judgeOwner(c.host, r)
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
	x := entryFrom(s, judge, seat, now)
	x.Type = "pair"
	x.State = string(claimstore.Conservative(seat.State(), session.State()))
	sk, ss := keyOut(seat.Key, s.Root()), keyOut(session.Key, s.Root())
	x.Seat, x.Session = &sk, &ss
	if session.Record != nil {
		o := judge.judge(seat.Record)
		x.Why = heldWhy(s, seat.Record, claimstore.State(x.State), o)
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
	k := keyOut(h.Key, s.Root())
	if h.Key.Kind == claimstore.KindSeat {
		x.Seat = &k
	} else {
		x.Session = &k
	}
	x.Dir = k.Dir
	return x
}

func orphanEntry(s *claimstore.Store, loc claimstore.Loc, why string) listEntryJSON {
	dir := s.Path(string(loc.Kind), loc.Hash)
	return listEntryJSON{Type: "orphan", State: "damaged", Held: true, Dir: dir,
		Why: "the key cannot be read (" + why + "); it stays held: run `claimctl fsck`"}
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

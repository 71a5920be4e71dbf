package claimstore

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// The archive: what prune removes, kept as the audit trail it is. One
// segment per batch of a prune run, a gzip-compressed NDJSON file named
// <UTC time>-<random>.ndjson.gz, read-only (0400), written under a
// temporary name, fsynced, linked to its name and its directory fsynced
// before the first removal of its batch. Its first line is the header
// (type "segment": version, createdAt, root, and the keys it holds with
// the revisions of each), then one line per revision (type "revision":
// kind, hash, revision and data, the revision's bytes as they were
// stored).

// ArchiveSegmentVersion is the version of an archive segment's format.
const ArchiveSegmentVersion = 1

const archiveSuffix = ".ndjson.gz"

// ArchivedKey is a key an archive segment holds, and which of its
// revisions.
type ArchivedKey struct {
	Kind     Kind            `json:"kind"`
	Hash     string          `json:"hash"`
	Key      json.RawMessage `json:"key"`
	From     uint64          `json:"from"`
	To       uint64          `json:"to"`
	Action   string          `json:"action"`
	Segment  string          `json:"-"`
	Archived time.Time       `json:"-"`
}

type segmentHeader struct {
	Type      string        `json:"type"`
	Version   int           `json:"version"`
	CreatedAt string        `json:"createdAt"`
	Root      string        `json:"root"`
	Keys      []ArchivedKey `json:"keys"`
}

type segmentRevision struct {
	Type     string `json:"type"`
	Kind     Kind   `json:"kind"`
	Hash     string `json:"hash"`
	Revision uint64 `json:"revision"`
	Data     string `json:"data"`
}

type archiver struct {
	dir  string
	root string
	now  time.Time
}

// segment is one batch's archive segment, planned: its header and what it
// reads, fixed when planned. A batch's tombstones are published while its
// segment is written, and each raises its candidate's top; the segment
// holds the history each key had when its batch was read, as it did when
// the archive came first.
type segment struct {
	a     *archiver
	hdr   segmentHeader
	items []archiveItem
}

// archiveItem is one key a segment holds: the revisions from..to of loc,
// and revision to's bytes when its batch read them already (a removal's
// head, read again for its batch: the archive holds those very bytes).
type archiveItem struct {
	key      *Key
	loc      Loc
	from, to uint64
	top      []byte
}

// plan sorts batch (by kind and hash, for a stable archive) and plans its
// segment: nil when nothing of it is to be archived.
func (a *archiver) plan(batch []*candidate) *segment {
	sortCandidates(batch)
	g := &segment{a: a, hdr: segmentHeader{Type: "segment", Version: ArchiveSegmentVersion, CreatedAt: timestamp(a.now), Root: a.root}}
	for _, c := range batch {
		if c.finish {
			continue // archived by the prune whose compaction it finishes
		}
		action := string(PruneRemoved)
		if c.base > 0 {
			action = string(PruneCompacted)
		}
		g.hdr.Keys = append(g.hdr.Keys, ArchivedKey{Kind: c.in.Loc.Kind, Hash: c.in.Loc.Hash, Key: c.in.Key.JSON(), From: c.from, To: c.to, Action: action})
		it := archiveItem{key: c.in.Key, loc: c.in.Loc, from: c.from, to: c.to}
		if c.head != nil && c.head.N == c.to {
			it.top = c.head.raw
		}
		g.items = append(g.items, it)
	}
	if len(g.items) == 0 {
		return nil
	}
	return g
}

// write writes the segment durably through its temporary tmp and returns
// its path; tmp is gone when it returns. It reads the revisions it holds
// and nothing of the batch's candidates, so it may run beside the batch's
// tombstones.
func (g *segment) write(ctx context.Context, s *Store, tmp *os.File) (string, error) {
	a := g.a
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}()
	bw := bufio.NewWriterSize(tmp, 1<<16)
	zw := gzip.NewWriter(bw)
	enc := json.NewEncoder(zw)
	if err := enc.Encode(g.hdr); err != nil {
		return "", err
	}
	if err := g.encodeRevisions(ctx, s, enc); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if err := bw.Flush(); err != nil {
		return "", err
	}
	if err := tmp.Chmod(0o400); err != nil {
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		return "", &fs.PathError{Op: "fsync", Path: tmp.Name(), Err: err}
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := filepath.Join(a.dir, a.now.UTC().Format("20060102T150405Z")+"-"+hex.EncodeToString(r[:])+archiveSuffix)
	if err := os.Link(tmp.Name(), name); err != nil {
		return "", err
	}
	if err := syncDir(a.dir); err != nil {
		return "", err
	}
	return name, nil
}

// archiving is a segment being written beside its batch's tombstones.
type archiving struct {
	cancel context.CancelFunc
	done   chan struct{}
	name   string
	err    error
}

// start makes the archive directory and the segment's temporary, then
// writes the segment on a goroutine of its own; wait returns what came of
// it. An archive that cannot be written at all fails start, before its
// batch's tombstones change any key.
func (g *segment) start(ctx context.Context, s *Store) (*archiving, error) {
	if err := mkdirDurable(g.a.dir); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(g.a.dir, ".tmp-segment-*")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &archiving{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.name, w.err = g.write(ctx, s, tmp)
	}()
	return w, nil
}

// wait returns the segment's path once it is durable (and linked), or why
// it is not; after it returns, the segment's writer reads nothing more.
func (w *archiving) wait() (string, error) {
	<-w.done
	w.cancel()
	return w.name, w.err
}

// archiveReaders is how many revisions the archive reads at once, and
// archiveWindow how many it reads ahead of the encoder: the reads are
// system calls that overlap each other and the compression.
const (
	archiveReaders = 8
	archiveWindow  = 256
)

// archived is a window of revisions read for the archive, in order.
type archived struct {
	items []*archiveItem
	ns    []uint64
	data  [][]byte
	errs  []error
}

// encodeRevisions writes every revision the segment holds to enc, in
// order (key by key, each from its lowest revision up): a reader goroutine
// reads them a window at a time, archiveReaders at once, while the encoder
// compresses the window before.
func (g *segment) encodeRevisions(ctx context.Context, s *Store, enc *json.Encoder) error {
	ctx, cancel := context.WithCancel(ctx)
	windows := make(chan *archived, 1)
	defer func() {
		// The reader is done, and reads nothing more, before this returns.
		cancel()
		for range windows {
		}
	}()
	go func() {
		defer close(windows)
		w := &archived{}
		// Every revision is sent, whatever the context: a read after a
		// cancel fails with it at once, so the encoder stops at or before
		// the first revision not read, and it cannot end without error
		// short of the last one.
		send := func() {
			w.data, w.errs = make([][]byte, len(w.ns)), make([]error, len(w.ns))
			inParallel(len(w.ns), archiveReaders, func(i int) {
				it := w.items[i]
				switch w.errs[i] = ctx.Err(); {
				case w.errs[i] != nil:
				case w.ns[i] == it.to && it.top != nil:
					w.data[i] = it.top
				default:
					w.data[i], w.errs[i] = s.be.Read(ctx, it.loc, w.ns[i])
				}
			})
			windows <- w
			w = &archived{}
		}
		for k := range g.items {
			it := &g.items[k]
			for n := it.from; n <= it.to; n++ {
				w.items, w.ns = append(w.items, it), append(w.ns, n)
				if len(w.ns) == archiveWindow {
					send()
				}
			}
		}
		if len(w.ns) > 0 {
			send()
		}
	}()
	for w := range windows {
		for i, it := range w.items {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := w.ns[i]
			if err := w.errs[i]; err != nil {
				// Prune only removes keys it read whole: a revision
				// that cannot be read now stops it before it removes.
				return fmt.Errorf("archiving %s before removing it: %w", s.RevisionPath(*it.key, n), err)
			}
			if err := enc.Encode(segmentRevision{Type: "revision", Kind: it.loc.Kind, Hash: it.loc.Hash, Revision: n, Data: string(w.data[i])}); err != nil {
				return err
			}
		}
	}
	return nil
}

// expire removes the segments created before t.
func (a *archiver) expire(t time.Time) (int, error) {
	names, err := segmentNames(a.dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		at, ok := segmentTime(name)
		if !ok || !at.Before(t) {
			continue
		}
		if err := os.Remove(filepath.Join(a.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
	if n > 0 {
		return n, syncDir(a.dir)
	}
	return n, nil
}

func segmentNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), archiveSuffix) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

func segmentTime(name string) (time.Time, bool) {
	stamp, _, ok := strings.Cut(name, "-")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse("20060102T150405Z", stamp)
	return t, err == nil
}

// Archived returns what the store's archive (the backend's own, see
// storage.ArchiveLocator; none without one) holds of k's history, as
// ArchivedRevisions.
func (s *Store) Archived(ctx context.Context, k Key) ([]Revision, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	l, ok := s.be.(storage.ArchiveLocator)
	if !ok {
		return nil, nil
	}
	return ArchivedRevisions(l.ArchiveDir(), k)
}

// ArchivedRevisions returns what the archive in dir holds of k's history,
// oldest first: the revisions prune removed, from every segment that has
// them, each with the segment it came from. A segment that cannot be read
// is an error naming it.
func ArchivedRevisions(dir string, k Key) ([]Revision, error) {
	names, err := segmentNames(dir)
	if err != nil {
		return nil, err
	}
	loc := k.Loc()
	var out []Revision
	for _, name := range names {
		path := filepath.Join(dir, name)
		revs, err := readSegment(path, loc, k)
		if err != nil {
			return nil, fmt.Errorf("reading archive segment %s: %w", path, err)
		}
		out = append(out, revs...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].N < out[j].N })
	return out, nil
}

func readSegment(path string, loc Loc, k Key) ([]Revision, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(zr)
	var hdr segmentHeader
	if err := dec.Decode(&hdr); err != nil || hdr.Type != "segment" || hdr.Version != ArchiveSegmentVersion {
		return nil, fmt.Errorf("not an archive segment of version %d", ArchiveSegmentVersion)
	}
	has := false
	for _, ak := range hdr.Keys {
		if ak.Kind == loc.Kind && ak.Hash == loc.Hash {
			has = true
		}
	}
	if !has {
		return nil, nil
	}
	var out []Revision
	for {
		var r segmentRevision
		err := dec.Decode(&r)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if r.Type != "revision" || r.Kind != loc.Kind || r.Hash != loc.Hash {
			continue
		}
		rev := Revision{N: r.Revision, Data: []byte(r.Data), Segment: path}
		rev.Record, rev.Damage = DecodeRecord(rev.Data, k, r.Revision)
		if rev.Damage != nil {
			rev.Record = nil
		}
		out = append(out, rev)
	}
}

// mkdirDurable makes dir (0700) if it is missing, and its entry durable.
func mkdirDurable(dir string) error {
	fi, err := os.Lstat(dir)
	if err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "archive into", Path: dir, Err: errors.New("not a directory (a symlink is never followed)")}
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

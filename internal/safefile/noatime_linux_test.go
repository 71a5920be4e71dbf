package safefile

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/internal/testbin"
)

// The helper run as another user by TestNoAtimeRefusedFallsBack: it reads
// the file named by noAtimeHelperEnv with NoAtime and prints what it got.
const noAtimeHelperEnv = "SAFEFILE_NOATIME_HELPER"

type noAtimeReport struct {
	UID     int
	Data    string
	Err     string
	Refused bool
	// MineMoved: whether a later NoAtime read of the helper's own file
	// (which O_NOATIME would leave alone) moved its access time: once
	// refused, the process no longer asks.
	MineMoved bool
}

// noAtimeMineEnv names the helper's own file, aged by the test.
const noAtimeMineEnv = "SAFEFILE_NOATIME_MINE"

func TestMain(m *testing.M) {
	if name := os.Getenv(noAtimeHelperEnv); name != "" {
		data, err := ReadFile(name, 1<<10, &Options{NoAtime: true})
		r := noAtimeReport{UID: os.Geteuid(), Data: string(data), Refused: noAtimeRefused.Load()}
		if err != nil {
			r.Err = err.Error()
		}
		mine := os.Getenv(noAtimeMineEnv)
		var before, after syscall.Stat_t
		if err := syscall.Lstat(mine, &before); err != nil {
			r.Err += " " + err.Error()
		}
		if _, err := ReadFile(mine, 1<<10, &Options{NoAtime: true}); err != nil {
			r.Err += " " + err.Error()
		}
		if err := syscall.Lstat(mine, &after); err != nil {
			r.Err += " " + err.Error()
		}
		r.MineMoved = after.Atim != before.Atim
		_ = json.NewEncoder(os.Stdout).Encode(r)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// agedFile makes a file (or, with dir, a directory) at path whose access
// time relatime would update on its next read: a day and more old, and
// older than its change time.
func agedFile(t *testing.T, path string, dir bool) time.Time {
	t.Helper()
	var err error
	if dir {
		err = os.Mkdir(path, 0o755)
	} else {
		err = os.WriteFile(path, []byte("revision\n"), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return old
}

func atime(t *testing.T, path string) time.Time {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return time.Unix(st.Atim.Unix())
}

// atimesUpdated says whether a plain read (os.ReadFile) of a file aged by
// agedFile updates its access time on this filesystem; a test that wants
// to see one left alone needs one that would not have been.
func atimesUpdated(t *testing.T, dir string) {
	t.Helper()
	control := filepath.Join(dir, "control")
	old := agedFile(t, control, false)
	if _, err := os.ReadFile(control); err != nil {
		t.Fatal(err)
	}
	if atime(t, control).Equal(old) {
		msg := dir + "'s filesystem updates no access time on a read (noatime?): nothing here could show one left alone"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI's does (relatime)")
		}
		t.Skip(msg)
	}
}

// TestNoAtime: with NoAtime, neither reading a file nor listing a
// directory opened by OpenRead updates its access time, where the same
// read without it does; the process is the files' owner, so O_NOATIME is
// never refused.
func TestNoAtime(t *testing.T) {
	dir := t.TempDir()
	atimesUpdated(t, dir)
	file, sub := filepath.Join(dir, "r1"), filepath.Join(dir, "key")
	oldFile, oldDir := agedFile(t, file, false), agedFile(t, sub, true)
	if data, err := ReadFile(file, 1<<10, &Options{NoAtime: true}); err != nil || string(data) != "revision\n" {
		t.Fatalf("ReadFile = %q, %v", data, err)
	}
	if got := atime(t, file); !got.Equal(oldFile) {
		t.Errorf("reading with NoAtime moved the access time from %v to %v", oldFile, got)
	}
	fd, err := OpenRead(sub, syscall.O_DIRECTORY, &Options{NoAtime: true})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if n, err := syscall.ReadDirent(fd, buf); err != nil || n == 0 {
		t.Fatalf("getdents = %d, %v", n, err)
	}
	syscall.Close(fd)
	if got := atime(t, sub); !got.Equal(oldDir) {
		t.Errorf("listing with NoAtime moved the directory's access time from %v to %v", oldDir, got)
	}
	if noAtimeRefused.Load() {
		t.Error("O_NOATIME refused to the files' owner")
	}
	// Without NoAtime a read is a plain one: the access time moves.
	for i, opts := range []*Options{nil, {}} {
		p := filepath.Join(dir, fmt.Sprint("plain", i))
		old := agedFile(t, p, false)
		if _, err := ReadFile(p, 1<<10, opts); err != nil {
			t.Fatal(err)
		}
		if atime(t, p).Equal(old) {
			t.Errorf("a read with %+v left the access time: O_NOATIME asked for where it was not", opts)
		}
	}
	if _, err := OpenRead(filepath.Join(dir, "missing"), 0, &Options{NoAtime: true}); !os.IsNotExist(err) {
		t.Errorf("OpenRead of a missing file: %v, want ENOENT", err)
	}
}

// TestNoAtimeRefusalRemembered: an open refused O_NOATIME (EPERM, as the
// kernel answers for another user's file) is made again without it, and
// no later open of the process asks for it. The kernel's answer is a
// test's here, so that the process's own coverage sees the fallback;
// TestNoAtimeRefusedFallsBack has the kernel refuse for real.
func TestNoAtimeRefusalRemembered(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r1")
	agedFile(t, file, false)
	var asked []bool
	t.Cleanup(func() { openFile = openFD; noAtimeRefused.Store(false) })
	openFile = func(name string, flags int) (int, error) {
		asked = append(asked, flags&oNoAtime != 0)
		if flags&oNoAtime != 0 {
			return -1, &fs.PathError{Op: "open", Path: name, Err: syscall.EPERM}
		}
		return openFD(name, flags)
	}
	for range 2 {
		if data, err := ReadFile(file, 1<<10, &Options{NoAtime: true}); err != nil || string(data) != "revision\n" {
			t.Fatalf("ReadFile = %q, %v", data, err)
		}
	}
	if d := cmp.Diff([]bool{true, false, false}, asked); d != "" {
		t.Errorf("O_NOATIME asked for, open by open (-want +got):\n%s", d)
	}
	if !noAtimeRefused.Load() {
		t.Error("the refusal was not remembered")
	}
}

// TestNoAtimeRefusedFallsBack: a user who does not own the file (and has
// no CAP_FOWNER) is refused O_NOATIME; the read is made without it, and
// the process stops asking. Run for real as uid nobody.
func TestNoAtimeRefusedFallsBack(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root to start a helper as another user, and CI is set")
		}
		t.Skip("needs root to start a helper as another user")
	}
	const nobody = 65534
	dir := testbin.SharedDir(t)
	atimesUpdated(t, dir)
	file, mine := filepath.Join(dir, "r1"), filepath.Join(dir, "mine")
	old := agedFile(t, file, false)
	agedFile(t, mine, false)
	if err := os.Chown(mine, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(mine, old, old); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testbin.ForOtherUser(t))
	cmd.Env = append(os.Environ(), noAtimeHelperEnv+"="+file, noAtimeMineEnv+"="+mine)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper as uid %d: %v\n%s", nobody, err, out)
	}
	var got noAtimeReport
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	want := noAtimeReport{UID: nobody, Data: "revision\n", Refused: true, MineMoved: true}
	if got != want {
		t.Errorf("helper read as another user: %+v, want %+v", got, want)
	}
	if atime(t, file).Equal(old) {
		t.Error("the read made without O_NOATIME left the access time: was it made at all?")
	}
}

package cli

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimstore/claimstore/hostid"
)

// runIn runs claimctl in-process with the given environment.
func runIn(t *testing.T, env map[string]string, args ...string) (exitCode, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(testOptions, args, nil, &stdout, &stderr, func(k string) string { return env[k] }, false)
	return code, stdout.String(), stderr.String()
}

// Key values the shell cannot easily pass: too long, not UTF-8, NUL. Each is
// a usage error naming the flag, and nothing is created.
func TestBadKeyValues(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	long := strings.Repeat("x", 4097)
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"--session", long, `--session "xxxx`},
		{"--session", "\xff\xfe", `--session "\xff\xfe": is not valid UTF-8`},
		{"--session", "a\x00b", `--session "a\x00b": contains a NUL byte`},
		{"--seat", long, `--seat "xxxx`},
		{"--workspace", "\xc3", `is not valid UTF-8`},
	} {
		args := []string{"acquire", "--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x", "--owner-pid", "parent"}
		for i := range args {
			if args[i] == tc.flag {
				args[i+1] = tc.value
			}
		}
		code, _, stderr := runIn(t, nil, args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s %.10q: exit %d, stderr %q; want exit 2 and %q", tc.flag, tc.value, code, stderr, tc.want)
		}
		if len(stderr) > 400 {
			t.Errorf("%s: message not bounded (%d bytes)", tc.flag, len(stderr))
		}
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Errorf("root %s exists after usage errors: %v", root, err)
	}
}

// The default root of a user who is not root is $XDG_STATE_HOME/claimstore
// (else ~/.local/state/claimstore); a write creates its missing parents
// 0700, and a read creates nothing.
func TestDefaultRoot(t *testing.T) {
	defer func(f func() int) { geteuid = f }(geteuid)
	geteuid = func() int { return 1000 }
	dir := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(dir, "home")}
	pair := []string{"--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x"}

	want := filepath.Join(dir, "home", ".local", "state", "claimstore")
	code, out, stderr := runIn(t, env, append([]string{"show", "--json"}, pair...)...)
	if code != exitOK || !strings.Contains(out, `"root":"`+want+`"`) {
		t.Fatalf("show: exit %d, %s %s; want root %s", code, out, stderr, want)
	}
	if _, err := os.Lstat(filepath.Join(dir, "home")); !os.IsNotExist(err) {
		t.Fatalf("show created %s", filepath.Join(dir, "home"))
	}

	env["XDG_STATE_HOME"] = filepath.Join(dir, "state", "deep")
	want = filepath.Join(dir, "state", "deep", "claimstore")
	code, out, stderr = runIn(t, env, append([]string{"acquire", "--json", "--owner-pid", "parent"}, pair...)...)
	if code != exitOK || !strings.Contains(out, `"root":"`+want+`"`) {
		t.Fatalf("acquire: exit %d, %s %s; want root %s", code, out, stderr, want)
	}
	for _, p := range []string{filepath.Join(dir, "state"), filepath.Join(dir, "state", "deep"), want} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, mode %v; want 0700", p, err, fi.Mode().Perm())
		}
	}

	// CLAIMSTORE_ROOT and --root win, in that order.
	env[envRoot] = filepath.Join(dir, "envroot")
	code, out, _ = runIn(t, env, append([]string{"show", "--json"}, pair...)...)
	if code != exitOK || !strings.Contains(out, `"root":"`+env[envRoot]+`"`) {
		t.Errorf("show with %s: exit %d, %s", envRoot, code, out)
	}
	code, out, _ = runIn(t, env, append([]string{"show", "--json", "--root", want}, pair...)...)
	if code != exitOK || !strings.Contains(out, `"held":true`) {
		t.Errorf("show --root: exit %d, %s", code, out)
	}
}

// Proof refs given on the command line are printable and bounded: they
// are printed on one line wherever the revision is shown.
func TestProofRefValidation(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	for _, tc := range []struct{ proof, want string }{
		{"cohortProof:a\x1b[2Jb", "REF must be printable text"},
		{"cohortProof:a\nr9 forged", "REF must be printable text"},
		{"cohortProof:a\u202eb", "REF must be printable text"},
		{"cohortProof:\xff", "REF is not valid UTF-8"},
		{"cohortProof:" + strings.Repeat("x", 257), "REF is 257 bytes; at most 256"},
	} {
		code, _, stderr := runIn(t, nil, "release", "--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x",
			"--claim", "c0000000000000000000000a1", "--proof", tc.proof)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.ContainsAny(stderr, "\x1b\u202e") {
			t.Errorf("--proof %q: exit %d, stderr %q; want exit 2 and %q, escaped", tc.proof, code, stderr, tc.want)
		}
	}
}

// Human output escapes recorded strings; --json is valid UTF-8.
func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"supervisor-7": "supervisor-7",
		"a b":          "a b",
		"a\nb":         `"a\nb"`,
		"\x1b[2J":      `"\x1b[2J"`,
		"\u202e":       `"\u202e"`,
		"\xff":         `"\xff"`,
		`a"b`:          `"a\"b"`,
	} {
		if got := esc(in); got != want {
			t.Errorf("esc(%q) = %s, want %s", in, got, want)
		}
	}
	if got := escText("x\ty\n\x1b\xffé"); got != `x\ty\n\x1b\xffé` {
		t.Errorf("escText: %s", got)
	}
	if got := string(validJSON([]byte("{\"a\":\"\xff\"}"))); got != "{\"a\":\"\uFFFD\"}" {
		t.Errorf("validJSON: %q", got)
	}
	if got := escJSONText([]byte("{\"a\":\"\u202e\U0001F600\",\n\"b\":\"\xff\"}")); got != `{"a":"\u202e`+"\U0001F600"+`", "b":"\xff"}` {
		t.Errorf("escJSONText: %s", got)
	}
}

// Progress shows done/total, and a rate once the total is known.
func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		done, total int
		el          time.Duration
		want        string
	}{
		{1200, 0, 2 * time.Second, "list: 1200 keys read"},
		{1200, 20000, 100 * time.Millisecond, "list: 1200/20000 keys read"},
		{1200, 20000, 2 * time.Second, "list: 1200/20000 keys read, 600/s"},
	} {
		if got := progressLine("list", "keys read", tc.done, tc.total, tc.el); got != tc.want {
			t.Errorf("%d/%d after %v: %q, want %q", tc.done, tc.total, tc.el, got, tc.want)
		}
	}
}

// nsDenied is the real host, except that no PID namespace can be read, as
// root finds /proc/1/ns/pid when PID 1 belongs to another user namespace.
type nsDenied struct{ hostid.Host }

func (nsDenied) PIDNamespace(pid int) (string, error) {
	return "", &fs.PathError{Op: "stat", Path: "/proc/" + strconv.Itoa(pid) + "/ns/pid", Err: syscall.EACCES}
}

// An owner whose PID namespace root cannot read is in another user
// namespace: the message says so and what to pass, not "run as root".
func TestOwnerInAnotherUserNamespace(t *testing.T) {
	defer func(f func() int) { geteuid = f }(geteuid)
	geteuid = func() int { return 0 }
	_, err := ownerOf(nsDenied{hostid.System}, os.Getpid())
	if err == nil || !strings.Contains(err.Error(), "belongs to another user namespace") || strings.Contains(err.Error(), "run claimctl as root") {
		t.Fatalf("ownerOf as root, namespace unreadable: %v", err)
	}
	geteuid = func() int { return 1000 }
	if _, err := ownerOf(nsDenied{hostid.System}, os.Getpid()); err == nil || !strings.Contains(err.Error(), "run claimctl as the owner's user, or as root") {
		t.Fatalf("ownerOf as a user, namespace unreadable: %v", err)
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runIn runs claimctl in-process with the given environment.
func runIn(t *testing.T, env map[string]string, args ...string) (exitCode, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, nil, &stdout, &stderr, func(k string) string { return env[k] })
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
		args := []string{"acquire", "--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x"}
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
	code, out, stderr = runIn(t, env, append([]string{"acquire", "--json"}, pair...)...)
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

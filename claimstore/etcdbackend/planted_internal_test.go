package etcdbackend

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimstore/claimstore/internal/safefile"
)

// A FIFO given as --cacert, --cert or --key is refused at once, naming it:
// reading it as a file would wait for a writer forever.
func TestTLSFilesNeverBlock(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []*Config{{CACert: fifo}, {Cert: fifo, Key: fifo}} {
		done := make(chan error, 1)
		go func() {
			_, err := tlsConfig(cfg)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, safefile.ErrWrongType) || !strings.Contains(err.Error(), fifo) {
				t.Errorf("tlsConfig(%+v): %v, want a wrong-type error naming %s", cfg, err, fifo)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("tlsConfig(%+v) blocks on a FIFO", cfg)
		}
	}
}

package cli

import (
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

func isTerminalFd(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// terminalColumns returns the width of the terminal on fd, or 0.
func terminalColumns(fd int) int {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// readPassword reads one line from the terminal f with its echo turned
// off, and restores the terminal's settings after it (also when a signal
// ends the wait: the settings are restored before the signal is passed
// on). The line's end is not part of the password.
func readPassword(f *os.File) (string, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return "", err
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON | unix.ISIG
	quiet.Iflag |= unix.ICRNL
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return "", err
	}
	var once sync.Once
	restore := func() { once.Do(func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }) }
	defer restore()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case sig := <-sigs:
			restore()
			signal.Stop(sigs)
			syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		case <-done:
			signal.Stop(sigs)
		}
	}()
	var line []byte
	var b [1]byte
	for {
		n, err := f.Read(b[:])
		if n == 1 {
			if b[0] == '\n' {
				return string(line), nil
			}
			if len(line) >= 4096 {
				return "", errors.New("the line is longer than 4096 bytes: not a password")
			}
			line = append(line, b[0])
			continue
		}
		if err == io.EOF {
			if len(line) > 0 {
				return string(line), nil
			}
			return "", errors.New("end of input before a password was typed")
		}
		if err != nil {
			return "", err
		}
	}
}

package main

import "golang.org/x/sys/unix"

func isTerminalFd(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// stdoutClosedAtStart reports whether file descriptor 1 is the /dev/null
// the Go runtime opens (read-write, runtime.checkfds) in place of a
// descriptor that was closed when the process started. A shell's
// `>/dev/null` opens it write-only, and so does systemd's
// StandardOutput=null, so neither is mistaken for a closed descriptor;
// only an explicit read-write redirect (`1<>/dev/null`) would be.
func stdoutClosedAtStart() bool {
	var st, null unix.Stat_t
	if unix.Fstat(1, &st) != nil || unix.Stat("/dev/null", &null) != nil {
		return false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != null.Rdev {
		return false
	}
	fl, err := unix.FcntlInt(1, unix.F_GETFL, 0)
	return err == nil && fl&unix.O_ACCMODE == unix.O_RDWR
}

// terminalColumns returns the width of the terminal on fd, or 0.
func terminalColumns(fd int) int {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// Package systemdtest starts a real systemd user manager for tests, in a
// private mount namespace, so that tests can create real units with
// systemd-run and look them up over a real D-Bus, even on a machine whose
// PID 1 is not systemd.
//
// The manager runs as
//
//	unshare -m sh -c 'mount -t tmpfs tmpfs /run/systemd &&
//	    mkdir /run/systemd/system && exec /lib/systemd/systemd --user'
//
// with XDG_RUNTIME_DIR and HOME set to fresh private directories. The tmpfs
// with /run/systemd/system is what makes systemd believe it was booted with
// systemd; it exists only in the manager's namespace. The manager's bus
// (a dbus-daemon it socket-activates) answers at Manager.Address.
//
// A package's tests share one manager, started by the first test that asks
// (Shared) and stopped after the last (Main, as the package's TestMain),
// rather than a manager per test, each started and waited for. A test that
// stops, kills or replaces its manager starts its own with Start, stopped
// in its Cleanup.
//
// Starting needs root (for the mount namespace), unshare and
// /lib/systemd/systemd. Where they are missing, tests skip with the reason;
// when the environment variable CI is non-empty they fail instead, so that
// CI never silently skips the real-systemd tests.
//
// Each manager runs in a cgroup of its own (sdt-<pid>, created under the
// test process's cgroup in the name=systemd and unified hierarchies), because
// a user manager roots its units' cgroups at its own: two managers sharing a
// cgroup would share /app.slice/<unit> and /session.slice/dbus.service, and
// stopping one would kill the other's bus and units. Where that cgroup
// cannot be made, the manager starts without it and a warning is logged.
// Unit names should still be unique per test process: see Manager.UnitName.
package systemdtest

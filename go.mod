module github.com/claimstore/claimstore

go 1.26.0

require (
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/godbus/dbus/v5 v5.2.4
	github.com/google/go-cmp v0.7.0
	github.com/rogpeppe/go-internal v1.16.0
	golang.org/x/sys v0.50.0
	pgregory.net/rapid v1.3.0
)

require golang.org/x/tools v0.51.0 // indirect

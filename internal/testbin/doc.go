// Package testbin gives a test a copy of its own binary that another local
// user can run, for tests that act as that user for real (kill(2) answering
// EPERM, O_NOATIME refused): go test builds the binary under a 0700
// directory nobody else can enter. The test starts the copy with its own
// credentials and a helper switch in the environment (its TestMain reads
// it). Tests only.
package testbin

// Package diskimage gives tests a real ext4 filesystem on a loop device,
// and images of its disk as a crash at a chosen instant leaves it.
//
// The crash suites (internal/crashfs) check the store against a model of
// what a filesystem promises; this package checks the model's promises
// against the kernel. An image (FS.Crash) is the device's contents read
// as it reached the device: every block the filesystem has written
// to the device, and nothing that is still only in memory — dirty pages,
// an inode changed since its last write, a directory block not yet
// written, a journal transaction not yet committed. It is mounted as a
// boot would mount it: the journal, if any, replayed, and no fsck. So a
// durability rule the store relies on and the filesystem does not keep
// (a missing fsync, a link count left in memory) shows as a revision
// missing or unreadable in the image.
//
// What an image is not: it keeps writes the device has taken but not yet
// flushed from a volatile cache of its own, which a power cut on such a
// disk may lose. It is the state a kernel crash, or a power cut on a disk
// that acknowledges only what is stable, leaves; the ordering of flushes is
// the crash model's (crashfs), not checked here.
//
// An image is only a state a crash could leave if nothing writes to the
// device while it is read: take it where the code under test is stopped
// (a barrier), and note that Make mounts with a journal commit interval
// of 300 s, so that the journal's periodic commit does not run during a
// test.
//
// Needs root, mkfs.ext4 (e2fsprogs), losetup and mount (util-linux) and
// loop devices. Where any is missing, Make skips the test with the reason;
// when the environment variable CI is non-empty it fails instead, so that
// CI never silently skips these tests.
package diskimage

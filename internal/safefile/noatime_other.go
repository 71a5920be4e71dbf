//go:build !linux

package safefile

// oNoAtime is O_NOATIME, which only Linux has.
const oNoAtime = 0

package safefile

import "syscall"

// oNoAtime is O_NOATIME: Linux's, and nothing elsewhere.
const oNoAtime = syscall.O_NOATIME

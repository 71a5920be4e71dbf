// Package safefile opens files and directories that someone else may have
// replaced: another local user, a restored backup, a damaged disk. It never
// blocks on what it finds (a FIFO, a device or a socket where a file or a
// directory belongs) and refuses the wrong type of file with its path.
//
// os.Open on a FIFO waits for a writer, forever; os.ReadFile of a character
// device may never end. Every open here is non-blocking (O_NONBLOCK), the
// type is checked on the open descriptor (fstat, so that the answer is about
// the file that was opened, not one put in its place since), and reads are
// bounded. A read may leave the file's access time alone (Options.NoAtime:
// O_NOATIME where the kernel grants it); where the kernel refuses, the read
// is made without it, and the process stops asking.
package safefile

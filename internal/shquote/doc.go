// Package shquote quotes words for a POSIX shell, so that the commands the
// store and the command line print can be pasted back as they are.
package shquote

// Package quote quotes values given by a user (a flag, an environment
// variable, an argument) for a message, bounded: a message never echoes
// more than a short prefix of what it was given, whatever its length (a
// 100 KB flag value, a file pasted on the command line), so that an error
// stays one readable line and a terminal or log is not flooded.
package quote

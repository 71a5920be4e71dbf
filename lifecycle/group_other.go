//go:build !linux

package lifecycle

import "errors"

func setSubreaper() error {
	return errors.New("a child subreaper needs Linux (PR_SET_CHILD_SUBREAPER)")
}

func groupMembers(int) []string { return nil }

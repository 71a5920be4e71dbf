// Package storetest opens claim stores for the tests of other packages,
// as a program opens one (dirbackend.Open and claimstore.New), with the
// directory backend's options and the store's in one struct.
package storetest

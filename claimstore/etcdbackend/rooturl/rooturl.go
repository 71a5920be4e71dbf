package rooturl

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/claimstore/claimstore/internal/quote"
)

// Scheme is the URL scheme of an etcd claim root: etcd://host:port[,host:port...]/prefix.
const Scheme = "etcd://"

// Is reports whether root names an etcd claim root (etcd://...), well
// formed or not: Parse says which.
func Is(root string) bool { return strings.HasPrefix(root, Scheme) }

// Error is a malformed etcd root URL.
type Error struct {
	Root   string
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("etcd root %s: %s (want etcd://host:2379[,host:2379...]/prefix)", quote.Prefix(e.Root), e.Reason)
}

// Parse splits an etcd root, etcd://host1:2379,host2:2379/prefix, into its
// endpoints (host:port) and its key prefix ("/prefix"). Every endpoint
// needs a port, and the prefix must name something: a claim root never
// takes the whole keyspace. A malformed root is an *Error.
func Parse(root string) (endpoints []string, prefix string, err error) {
	rest, ok := strings.CutPrefix(root, Scheme)
	if !ok {
		return nil, "", &Error{root, "it does not start with " + Scheme}
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if hosts == "" {
		return nil, "", &Error{root, "it names no endpoint"}
	}
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" || port == "" {
			return nil, "", &Error{root, fmt.Sprintf("endpoint %s is not host:port", quote.Prefix(h))}
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			// Caught here, not by a dial that would time out.
			return nil, "", &Error{root, fmt.Sprintf("endpoint %s: port %s is not a port number (1-65535)", quote.Prefix(h), quote.Prefix(port))}
		}
		endpoints = append(endpoints, h)
	}
	prefix = "/" + strings.TrimRight(path, "/")
	if prefix == "/" || strings.Contains(prefix, "//") || strings.ContainsAny(prefix, "?#\x00") {
		return nil, "", &Error{root, fmt.Sprintf("key prefix %s must name something, such as /claims, without empty components, ? or #", quote.Prefix(prefix))}
	}
	return endpoints, prefix, nil
}

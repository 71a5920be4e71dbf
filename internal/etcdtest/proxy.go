package etcdtest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Cut is where the proxy cuts the next request a client sends after Arm.
type Cut int

const (
	// CutNone forwards everything.
	CutNone Cut = iota
	// CutBeforeRequest closes the connection instead of forwarding the
	// request: the server never sees it.
	CutBeforeRequest
	// CutAfterRequest forwards the request, then drops whatever the
	// server answers and closes the connection once the answer starts:
	// the server applied it, the client never learns.
	CutAfterRequest
	// CutHoldRequest holds the request (and everything after it on that
	// connection) for Hold, then forwards it: it reaches the server after
	// the client gave up on it.
	CutHoldRequest
)

func (c Cut) String() string {
	return [...]string{"none", "before-request", "after-request", "hold-request"}[c]
}

// Proxy forwards TCP connections from its address to a target.
type Proxy struct {
	l      net.Listener
	target string
	// Hold is how long CutHoldRequest holds a request.
	Hold time.Duration

	mu          sync.Mutex
	armed       Cut
	partitioned bool
	conns       map[net.Conn]bool
	fired       chan struct{}
}

// NewProxy listens on a free loopback port and forwards to target; it is
// closed in t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: proxy: %v", err)
	}
	p := &Proxy{l: l, target: target, Hold: 2 * time.Second, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// URL is the proxy's address as an endpoint.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Close stops the proxy and every connection through it.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Arm makes the proxy cut the next chunk a client sends, at cut; the
// returned channel is closed once the cut was made.
func (p *Proxy) Arm(cut Cut) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = cut
	p.fired = make(chan struct{})
	return p.fired
}

// Partition cuts every connection and refuses new ones (on) or lets them
// through again (off).
func (p *Proxy) Partition(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partitioned = on
	if on {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.partitioned {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *Proxy) serve() {
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			client.Close()
			server.Close()
			continue
		}
		go p.pipe(client, server)
	}
}

// take returns the armed cut, disarming it.
func (p *Proxy) take() (Cut, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, f := p.armed, p.fired
	p.armed = CutNone
	return c, f
}

func (p *Proxy) pipe(client, server net.Conn) {
	closeBoth := func() { client.Close(); server.Close() }
	replyDropped := false // set by CutAfterRequest: the next reply byte closes both
	var replyMu sync.Mutex
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				replyMu.Lock()
				drop := replyDropped
				replyMu.Unlock()
				if drop {
					closeBoth()
					return
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					closeBoth()
					return
				}
			}
			if err != nil {
				closeBoth()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			cut, fired := p.take()
			switch cut {
			case CutBeforeRequest:
				closeBoth()
				close(fired)
				return
			case CutAfterRequest:
				replyMu.Lock()
				replyDropped = true
				replyMu.Unlock()
				_, _ = server.Write(buf[:n])
				close(fired)
				// Keep forwarding the client's bytes (the rest of
				// the request); the first reply byte closes both.
			case CutHoldRequest:
				held := append([]byte(nil), buf[:n]...)
				time.Sleep(p.Hold)
				_, _ = server.Write(held)
				close(fired)
				continue
			}
			if cut == CutNone {
				if _, werr := server.Write(buf[:n]); werr != nil {
					closeBoth()
					return
				}
			}
		}
		if err != nil {
			closeBoth()
			return
		}
	}
}
